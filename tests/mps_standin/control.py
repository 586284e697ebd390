"""A stand-in ``nvidia-cuda-mps-control`` for tests without a GPU (standard library only).

It speaks the control commands NVIDIA documents, the way the real command is used:

* ``-d`` starts the control daemon in the background (double fork; the command returns once the
  daemon's PID file ``$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid`` exists); ``-f`` runs it
  in the foreground;
* without arguments it is the control client: each line on stdin is one command, sent to the daemon
  of ``$CUDA_MPS_PIPE_DIRECTORY`` (a unix socket ``control`` there), its answer printed; it exits 1
  if no daemon answers or the daemon refuses a command;
* the daemon knows ``set_default_active_thread_percentage``, ``get_default_active_thread_percentage``,
  ``set_default_device_pinned_mem_limit <dev> <value>``, ``get_default_device_pinned_mem_limit <dev>``,
  ``get_server_list`` (no servers: nothing) and ``quit``; it writes ``control.log`` lines into
  ``$CUDA_MPS_LOG_DIRECTORY`` as the real one does (startup, each command, exit).

For the tests: every daemon start, command and exit is appended as a JSON line to
``$KUBEGPU_MPS_STANDIN_RECORD`` (when set) with the daemon's PID, its ``CUDA_*`` environment and the
client's; while the file ``$KUBEGPU_MPS_STANDIN_HOLD`` exists, ``-d`` fails (exit 1), so a test can
keep a killed daemon down for as long as it looks.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from pathlib import Path

PID_FILE = "nvidia-cuda-mps-control.pid"
SOCKET = "control"
WATCHED = ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")
_VALUE = re.compile(r"^\d+(\.\d+)?[MG]?$")


def _pipe_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")


def _log_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps")


def _env() -> dict[str, str]:
    return {k: os.environ[k] for k in WATCHED if k in os.environ}


def _record(entry: dict[str, object]) -> None:
    path = os.environ.get("KUBEGPU_MPS_STANDIN_RECORD")
    if path:
        entry = {**entry, "at": time.monotonic()}  # system-wide on Linux: comparable across processes
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")


def _log(line: str) -> None:
    with open(_log_dir() / "control.log", "a", encoding="utf-8") as f:
        f.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {line}\n")


class Daemon:
    def __init__(self) -> None:
        self.percentage = "100.0"
        self.pinned: dict[str, str] = {}

    def answer(self, command: str) -> tuple[bool, str]:
        words = command.split()
        if not words:
            return False, "empty command"
        name, args = words[0], words[1:]
        if name == "set_default_active_thread_percentage" and len(args) == 1:
            try:
                percentage = float(args[0])
            except ValueError:
                return False, f"Invalid percentage {args[0]}"
            if not 0 < percentage <= 100:
                return False, f"Invalid percentage {args[0]}"
            self.percentage = f"{percentage:.1f}"
            return True, self.percentage
        if name == "get_default_active_thread_percentage" and not args:
            return True, self.percentage
        if name == "set_default_device_pinned_mem_limit" and len(args) == 2:
            dev, value = args
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            count = len(visible.split(",")) if visible else 8
            if not dev.isdigit() or int(dev) >= count or not _VALUE.match(value):
                return False, f"Invalid device or limit: {dev} {value}"
            self.pinned[dev] = value
            return True, ""
        if name == "get_default_device_pinned_mem_limit" and len(args) == 1:
            return True, self.pinned.get(args[0], "0")
        if name == "get_server_list" and not args:
            return True, ""
        if name == "quit" and not args:
            return True, ""
        return False, f"Unknown command {command!r}"

    def serve(self) -> None:
        pipe = _pipe_dir()
        path = pipe / SOCKET
        if path.exists():
            path.unlink()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(8)
        (pipe / PID_FILE).write_text(f"{os.getpid()}\n")
        _log(f"Starting control daemon using socket {path}")
        _record({"event": "start", "pid": os.getpid(), "env": _env()})
        while True:
            conn, _ = server.accept()
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                try:
                    message = json.loads(data.decode())
                except ValueError:
                    conn.sendall(json.dumps({"ok": False, "text": "bad request"}).encode())
                    continue
                command = str(message.get("command", "")).strip()
                ok, text = self.answer(command)
                _log(f"Accepting connection... {command}" if ok else f"Refused: {command}: {text}")
                _record(
                    {
                        "event": "command",
                        "command": command,
                        "ok": ok,
                        "pid": os.getpid(),
                        "env": _env(),
                        "client_env": message.get("env", {}),
                    }
                )
                conn.sendall(json.dumps({"ok": ok, "text": text}).encode())
            if command == "quit" and ok:
                break
        server.close()
        path.unlink(missing_ok=True)
        (pipe / PID_FILE).unlink(missing_ok=True)
        _log("Exit")
        _record({"event": "exit", "pid": os.getpid(), "env": _env()})


def client(lines: list[str]) -> int:
    path = _pipe_dir() / SOCKET
    for line in lines:
        if not line.strip():
            continue
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(str(path))
                conn.sendall((json.dumps({"command": line.strip(), "env": _env()}) + "\n").encode())
                conn.shutdown(socket.SHUT_WR)
                reply = b""
                while chunk := conn.recv(4096):
                    reply += chunk
        except OSError:
            print("Cannot find MPS control daemon process", file=sys.stderr)
            return 1
        answer = json.loads(reply.decode())
        if answer["text"]:
            print(answer["text"])
        if not answer["ok"]:
            return 1
    return 0


def daemonize() -> int:
    hold = os.environ.get("KUBEGPU_MPS_STANDIN_HOLD")
    if hold and os.path.exists(hold):
        print("stand-in: held by the test", file=sys.stderr)
        return 1
    _pipe_dir().mkdir(parents=True, exist_ok=True)
    _log_dir().mkdir(parents=True, exist_ok=True)
    pid_file = _pipe_dir() / PID_FILE
    pid_file.unlink(missing_ok=True)
    if os.fork() > 0:
        deadline = time.monotonic() + 10
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return 0 if pid_file.exists() else 1
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the caller reads our stdout/stderr to the end: let go of them
        os.dup2(devnull, fd)
    try:
        Daemon().serve()
    finally:
        os._exit(0)


def main(argv: list[str]) -> int:
    if argv == ["-d"]:
        return daemonize()
    if argv == ["-f"]:
        _pipe_dir().mkdir(parents=True, exist_ok=True)
        _log_dir().mkdir(parents=True, exist_ok=True)
        Daemon().serve()
        return 0
    if not argv:
        return client(sys.stdin.read().splitlines())
    print("usage: nvidia-cuda-mps-control [-d | -f]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

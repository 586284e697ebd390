"""Peak memory of the extender's HTTP server for the largest requests it accepts, one table.

Each shape runs in a fresh child process serving ``ExtenderServer`` (the verbs a stand-in that keeps
every node, so what is measured is the server: read, parse, answer) on a loopback port; the parent
POSTs the request(s) and reads the child's ``VmHWM`` (peak resident set) from ``/proc``. Shapes:

* ``kube-scheduler max``: a filter call for 15,000 node names of 253 characters and a 1.4 MiB Pod
  whose ``<``, ``&`` and ``>`` arrive escaped as Go writes them (6 bytes each), about 13 MiB;
* ``{} x values``: an array of empty objects up to ``MAX_JSON_VALUES`` (the most objects per byte);
* ``strings``: a body at ``MAX_BODY_BYTES`` of distinct strings, as many as ``MAX_JSON_VALUES`` allows;
* ``4 x ... at once``: four concurrently (``BODY_BUDGET_BYTES`` holds two, the others wait).

Target: every peak under the chart's 1 GiB limit with room (issue 55: one 48 MB request peaked at
1,084 MiB before the caps). Run: ``.venv/bin/python bench/extender_http_memory.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from kubegpu.extender.server import MAX_BODY_BYTES, MAX_JSON_VALUES

CHILD = """
import sys, time
from kubegpu.extender.server import ExtenderServer

class Ledger:
    def node_count(self): return 0

class Echo:
    ready = alive = True
    ledger = Ledger()
    def filter(self, args): return {"NodeNames": args.get("NodeNames"), "FailedNodes": {}, "Error": ""}
    def prioritize(self, args): return []
    def bind(self, args): return {"Error": ""}

server = ExtenderServer(Echo(), "127.0.0.1:0")
server.start()
print(server.port, flush=True)
sys.stdin.read()
"""


def kube_scheduler_max() -> bytes:
    names = [f"{i:05d}-" + "n" * 247 for i in range(15_000)]
    env = [{"name": f"VAR_{i}", "value": "v" * 40} for i in range(10_000)]
    pod = {
        "metadata": {"name": "big", "annotations": {"note": "<&>" * 480_000}},
        "spec": {"containers": [{"name": "c", "env": env}]},
    }
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
    for char in b"<&>":
        body = body.replace(bytes([char]), f"\\u{char:04x}".encode())
    return body


def empty_objects() -> bytes:
    n = MAX_JSON_VALUES // 2 - 10  # each "{}," counts twice: its "{" and its ","
    return b'{"NodeNames": [' + b"{}," * n + b"{}]}"


def strings() -> bytes:
    n = MAX_JSON_VALUES - 10  # as many distinct strings as allowed, as long as fill the cap
    per = (MAX_BODY_BYTES - 64) // n - 3
    return b'{"NodeNames": [' + b",".join(f'"{i:0{per}x}"'.encode() for i in range(n)) + b"]}"


def post(port: int, body: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        head = f"POST /kubegpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        status = int(data.split(b" ", 2)[1])
        head_end = data.index(b"\r\n\r\n") + 4
        length = int(
            next(h for h in data[:head_end].split(b"\r\n") if h.lower().startswith(b"content-length")).split(
                b":"
            )[1]
        )
        got = len(data) - head_end
        while got < length:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        return status


def vm(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(name: str, bodies: list[bytes]) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        time.sleep(0.2)
        before = vm(child.pid, "VmRSS")
        statuses: list[int] = []
        threads = [threading.Thread(target=lambda b=b: statuses.append(post(port, b))) for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        peak = vm(child.pid, "VmHWM")
        size = sum(len(b) for b in bodies) / (1 << 20)
        print(f"| {name:<32} | {size:8.1f} | {sorted(statuses)!s:<22} | {before:9.0f} | {peak:9.0f} |")
    finally:
        child.kill()
        child.wait(timeout=10)


def main() -> None:
    print(f"MAX_BODY_BYTES {MAX_BODY_BYTES >> 20} MiB, MAX_JSON_VALUES {MAX_JSON_VALUES}")
    print("| shape                            | body MiB | statuses               | idle MiB  | peak MiB  |")
    print("|---|---|---|---|---|")
    big = kube_scheduler_max()
    measure("kube-scheduler max", [big])
    measure("{} x values", [empty_objects()])
    measure("strings", [strings()])
    measure("4 x kube-scheduler max at once", [big] * 4)
    measure("4 x strings at once", [strings()] * 4)


if __name__ == "__main__":
    main()

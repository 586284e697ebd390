"""Runs the MPS control daemons that ``deviceplugin/mps.py`` plans, keeps them running, stops them.

``ControlDaemon`` is one ``nvidia-cuda-mps-control -d`` (the command forks the daemon and returns; the
daemon writes its PID into ``<pipe dir>/nvidia-cuda-mps-control.pid``). Its limits, and ``quit``,
are sent as NVIDIA documents and its plugin does: the command run without arguments, with the
daemon's environment, reading the control command on stdin. ``MpsSupervisor`` owns the daemons of
the running configuration:

* ``apply(plans)`` starts every daemon that is new or whose plan changed (an old one with that
  resource is quit first), synchronously, so the agent advertises a resource only after its daemon
  runs; a daemon that fails to start leaves its resource's devices Unhealthy and is retried;
* a thread checks every ``check_s`` that each daemon's process is alive (``/proc``, so a zombie
  counts as dead); a dead one makes its devices Unhealthy (``unavailable``) and is started again
  with exponential backoff (``kubegpu.backoff``), its devices Healthy once it runs with its limits;
* every new line of a daemon's ``control.log`` is logged by the agent (``MPS control daemon log``);
* ``retire(plans)`` and ``stop()`` quit daemons with ``quit`` (SIGTERM to the recorded PID only if
  ``quit`` does not end it), when a reload removes them or the agent stops.

A daemon an earlier agent run left behind (its PID file names a live process) is quit before a new
one starts, so the limits are always the ones this run set. The agent never changes a GPU's compute
mode (NVIDIA's daemon sets EXCLUSIVE_PROCESS; docs/agent.md says what that leaves open).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubegpu.backoff import Backoff, describe
from kubegpu.deviceplugin.config import AgentConfig
from kubegpu.deviceplugin.mps import CONTROL_BINARY, CONTROL_LOG, PID_FILE, DaemonPlan
from kubegpu.echo import clip
from kubegpu.errors import ConfigError, MpsDaemonError

__all__ = ["ControlDaemon", "MpsSupervisor", "find_control"]

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 10.0  # one control command, or ``-d`` returning
START_WAIT_S = 10.0  # for the daemon's PID file after ``-d`` returned
QUIT_WAIT_S = 2.0  # for the daemon to exit after ``quit`` (then SIGTERM, as long again)
POLL_S = 0.02
STOP_WAIT_S = 1.0  # for a check in flight when the agent stops
LOG_LINES_PER_CHECK = 200  # a flood of log lines is logged over several checks


def find_control(config: AgentConfig, path: str | None) -> str:
    """The ``nvidia-cuda-mps-control`` to run: ``kubegpu.mps.control`` if given, else the first on
    ``path`` (a PATH value), else under the driver root as the agent sees it (``usr/bin``, ``bin``).
    Raises ``ConfigError`` saying how to give it, or how to leave the daemon to another tool."""
    if config.mps_control:
        given = Path(config.mps_control)
        if given.is_file() and os.access(given, os.X_OK):
            return str(given)
        raise ConfigError(f"kubegpu.mps.control: {config.mps_control} is not an executable file")
    found = shutil.which(CONTROL_BINARY, path=path)
    if found:
        return found
    root = Path(config.container_driver_root or config.nvidia_driver_root)
    candidates = [root / sub / CONTROL_BINARY for sub in ("usr/bin", "bin")]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise ConfigError(
        f"kubegpu.mps.daemon: the agent runs NVIDIA's MPS control daemon but finds no {CONTROL_BINARY} "
        f"on PATH or at {', '.join(map(str, candidates))}; give its path (kubegpu.mps.control, "
        "KUBEGPU_MPS_CONTROL, --mps-control), or set kubegpu.mps.daemon: false when another tool runs it"
    )


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: a daemon that died unreaped is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = stat.rsplit(")", 1)[-1].split()
    return bool(fields) and fields[0] not in ("Z", "X")


class ControlDaemon:
    """One control daemon as ``plan`` describes it; not thread-safe (``MpsSupervisor`` serialises)."""

    def __init__(self, plan: DaemonPlan, binary: str, base_env: Mapping[str, str]) -> None:
        self.plan = plan
        self._binary = binary
        self._env = {**base_env, **plan.env}
        self.pid: int | None = None
        self._log_offset = 0

    @property
    def pid_file(self) -> Path:
        return Path(self.plan.pipe_dir) / PID_FILE

    @property
    def log_file(self) -> Path:
        return Path(self.plan.log_dir) / CONTROL_LOG

    def _read_pid(self) -> int | None:
        try:
            text = self.pid_file.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def _run(self, args: Sequence[str], stdin: str | None) -> str:
        what = " ".join((CONTROL_BINARY, *args)) if args else f"{CONTROL_BINARY} <<< {stdin!r}"
        try:
            done = subprocess.run(
                [self._binary, *args],
                input=stdin,
                env=self._env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise MpsDaemonError(
                f"{self.plan.resource}: {what} did not finish in {COMMAND_TIMEOUT_S:g} s"
            ) from exc
        except OSError as exc:
            raise MpsDaemonError(f"{self.plan.resource}: cannot run {self._binary}: {exc}") from exc
        if done.returncode != 0:
            said = clip(" ".join((done.stdout + " " + done.stderr).split()), limit=300) or "nothing"
            raise MpsDaemonError(
                f"{self.plan.resource}: {what} exited with {done.returncode} (it said: {said})"
            )
        return done.stdout.strip()

    def send(self, command: str) -> str:
        """One control command (``get_server_list``, ``quit`` …) through the control client; its answer."""
        return self._run((), command + "\n")

    def start(self) -> None:
        """Start the daemon and set its limits; ``MpsDaemonError`` (nothing left running) if it fails."""
        for directory in (self.plan.pipe_dir, self.plan.log_dir):
            try:
                os.makedirs(directory, mode=0o755, exist_ok=True)
            except OSError as exc:
                raise MpsDaemonError(
                    f"{self.plan.resource}: cannot create {directory}: {exc.strerror or exc}"
                ) from exc
        left = self._read_pid()
        if left is not None and process_alive(left):
            log.warning(
                "MPS control daemon left by an earlier run; quitting it first",
                extra={"resource": self.plan.resource, "pid": left},
            )
            self.pid = left
            self.stop()
        try:
            self._log_offset = self.log_file.stat().st_size
        except OSError:
            self._log_offset = 0
        with contextlib.suppress(OSError):
            self.pid_file.unlink()
        self._run(("-d",), None)
        deadline = time.monotonic() + START_WAIT_S
        pid = self._read_pid()
        while pid is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
            pid = self._read_pid()
        if pid is None or not process_alive(pid):
            raise MpsDaemonError(
                f"{self.plan.resource}: {CONTROL_BINARY} -d returned but no daemon runs "
                f"(no live PID in {self.pid_file} after {START_WAIT_S:g} s); see {self.log_file}"
            )
        self.pid = pid
        try:
            for command in self.plan.commands:
                self.send(command)
        except MpsDaemonError:
            self.stop()
            raise
        log.info(
            "MPS control daemon started",
            extra={
                "resource": self.plan.resource,
                "pid": pid,
                "gpus": [g.uuid for g in self.plan.gpus],
                "pipe": self.plan.pipe_dir,
                "limits": list(self.plan.commands),
            },
        )

    def alive(self) -> bool:
        return self.pid is not None and process_alive(self.pid)

    def stop(self) -> None:
        """``quit`` the daemon; SIGTERM to its PID only if it is still there ``QUIT_WAIT_S`` later."""
        pid = self.pid
        if pid is None:
            return
        self.pid = None
        if not process_alive(pid):
            return
        try:
            self.send("quit")
        except MpsDaemonError as exc:
            log.warning("MPS control daemon did not take quit", extra={"error": describe(exc)})
        if _wait_gone(pid, QUIT_WAIT_S):
            log.info("MPS control daemon stopped", extra={"resource": self.plan.resource, "pid": pid})
            return
        log.warning(
            "MPS control daemon still runs after quit; sending SIGTERM",
            extra={"resource": self.plan.resource, "pid": pid},
        )
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        _wait_gone(pid, QUIT_WAIT_S)

    def new_log_lines(self) -> list[str]:
        """Complete lines added to ``control.log`` since the last call (at most a bounded batch)."""
        try:
            with self.log_file.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self._log_offset:
                    self._log_offset = 0  # rotated or truncated
                f.seek(self._log_offset)
                data = f.read(64 * 1024)
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self._log_offset += end + 1
        lines = data[:end].decode(errors="replace").splitlines()
        return [line for line in lines if line.strip()][:LOG_LINES_PER_CHECK]


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while process_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


@dataclass(kw_only=True)
class _Entry:
    daemon: ControlDaemon
    backoff: Backoff
    up: bool = False
    reason: str = "its MPS control daemon is starting"
    retry_at: float = 0.0
    restarts: int = field(default=0)


class MpsSupervisor:
    """The running configuration's control daemons; thread-safe. ``on_change`` is called (without the
    lock) whenever a resource's devices turn available or unavailable."""

    def __init__(
        self,
        binary: str,
        *,
        base_env: Mapping[str, str],
        check_s: float = 1.0,
        max_backoff_s: float = 30.0,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.binary = binary
        self._base_env = dict(base_env)
        self._check_s = check_s
        self._max_backoff_s = max(max_backoff_s, check_s)
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        self._version = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the device plugin reads -------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    def unavailable(self, resource: str, gpu: int) -> str | None:
        entry = self._entries.get(resource)
        if entry is None or entry.up or gpu not in entry.daemon.plan.gpu_indexes:
            return None
        return entry.reason

    def pids(self) -> dict[str, int | None]:
        """Each supervised resource's daemon PID (None: not running now)."""
        with self._lock:
            return {name: e.daemon.pid if e.up else None for name, e in self._entries.items()}

    # -- lifecycle --------------------------------------------------------------------------------

    @staticmethod
    def _surface(entry: _Entry) -> None:
        """Log the lines the daemon added to its control.log."""
        for line in entry.daemon.new_log_lines():
            log.info(
                "MPS control daemon log", extra={"resource": entry.daemon.plan.resource, "line": clip(line)}
            )

    def _try_start(self, entry: _Entry) -> None:
        plan = entry.daemon.plan
        try:
            entry.daemon.start()
        except MpsDaemonError as exc:
            delay = entry.backoff.failed()
            entry.up = False
            entry.reason = f"its MPS control daemon is not running: {exc}"
            entry.retry_at = self._clock() + delay
            log.error(
                "MPS control daemon failed to start; its devices are Unhealthy until it runs",
                extra={
                    "resource": plan.resource,
                    "error": describe(exc),
                    "failures": entry.backoff.failures,
                    "retry_in_s": round(delay, 2),
                },
            )
            return
        entry.backoff.reset()
        entry.up, entry.reason = True, ""

    def apply(self, plans: Sequence[DaemonPlan]) -> None:
        """Start the daemons of ``plans`` that do not run as planned (before their resources are
        served); daemons of other resources keep running until ``retire``."""
        changed = False
        with self._lock:
            for plan in plans:
                entry = self._entries.get(plan.resource)
                if entry is not None and entry.daemon.plan == plan:
                    continue
                if entry is not None:
                    entry.daemon.stop()  # same pipe directory: the old daemon goes first
                fresh = _Entry(
                    daemon=ControlDaemon(plan, self.binary, self._base_env),
                    backoff=Backoff(initial_s=self._check_s, max_s=self._max_backoff_s),
                )
                self._entries[plan.resource] = fresh
                self._try_start(fresh)
                self._surface(fresh)
                changed = True
            if changed:
                self._version += 1
        if changed:
            self._on_change()

    def retire(self, plans: Sequence[DaemonPlan]) -> None:
        """Quit the daemons of resources not in ``plans`` (a reload removed their MPS sharing)."""
        wanted = {p.resource for p in plans}
        with self._lock:
            gone = [name for name in self._entries if name not in wanted]
            for name in gone:
                entry = self._entries.pop(name)
                entry.daemon.stop()
                self._surface(entry)
            if gone:
                self._version += 1
        if gone:
            self._on_change()

    def check(self) -> None:
        """One look at every daemon: surface its log, notice a death, restart when the backoff allows."""
        changed = False
        with self._lock:
            now = self._clock()
            for name, entry in self._entries.items():
                self._surface(entry)
                if entry.up and not entry.daemon.alive():
                    entry.up = False
                    entry.restarts += 1
                    entry.reason = f"its MPS control daemon (PID {entry.daemon.pid}) exited; restarting"
                    entry.daemon.pid = None
                    entry.retry_at = now + entry.backoff.failed()
                    changed = True
                    log.error(
                        "MPS control daemon exited; its devices are Unhealthy until it runs again",
                        extra={"resource": name, "restarts": entry.restarts},
                    )
                if not entry.up and now >= entry.retry_at and not self._stopping.is_set():
                    self._try_start(entry)
                    if entry.up:
                        changed = True
                        log.info("MPS control daemon running again", extra={"resource": name})
            if changed:
                self._version += 1
        if changed:
            self._on_change()

    def _loop(self) -> None:
        while not self._stopping.wait(self._check_s):
            try:
                self.check()
            except Exception as exc:  # the loop must outlive one bad check
                log.error("MPS supervision check failed", extra={"error": describe(exc)})

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="mps", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Quit every daemon (the agent stops). Waits at most ``STOP_WAIT_S`` for a check in flight (a
        restart): the agent's stop stays bounded; a daemon such a restart leaves behind is quit by the
        next agent run (its PID file)."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=STOP_WAIT_S)
        locked = self._lock.acquire(timeout=STOP_WAIT_S)
        try:
            entries = list(self._entries.values())
            self._entries.clear()
        finally:
            if locked:
                self._lock.release()
        for entry in entries:
            entry.daemon.stop()
            self._surface(entry)

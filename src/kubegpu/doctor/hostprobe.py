"""Read-only access to a host's files and commands, rooted at ``--host-root`` so tests can fake a host.

Every host fact the doctor uses goes through ``HostProbe``: files are read under the root, commands are
taken from ``<root>/usr/bin`` when present there, and looked up on ``PATH`` only when the root is ``/``
(a fixture root never runs the real ``nvidia-smi``). Commands run with a timeout and their results are
cached, so several checks can share one ``nvidia-smi`` call. Nothing here writes, loads or restarts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CommandResult", "HostProbe"]

_MAX_READ_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    """What running a command produced; ``problem`` says why it did not run to completion."""

    argv: tuple[str, ...]
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    problem: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.problem is None and self.returncode == 0

    @property
    def output(self) -> str:
        """stdout and stderr together, stripped: what an operator would have seen."""
        return "\n".join(part for part in (self.stdout.strip(), self.stderr.strip()) if part)

    def describe(self) -> str:
        """One evidence line: the command and how it ended."""
        cmd = " ".join(self.argv)
        if self.problem is not None:
            return f"$ {cmd}: {self.problem}"
        return f"$ {cmd}: exit {self.returncode}"


class HostProbe:
    """Files and commands of one host, seen under ``root``."""

    def __init__(self, root: Path | str = "/", *, command_timeout_s: float = 5.0) -> None:
        self.root = Path(root)
        self.command_timeout_s = command_timeout_s
        self._runs: dict[tuple[str, ...], CommandResult] = {}

    @property
    def is_live(self) -> bool:
        """True when the root is the real ``/`` (commands may come from PATH, ``dmesg`` may run)."""
        return self.root.resolve() == Path("/")

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def display(self, path: Path) -> str:
        """The path as it is on the host (``/etc/...``), whatever the root."""
        try:
            return "/" + str(path.relative_to(self.root)).lstrip("/")
        except ValueError:
            return str(path)

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.path(rel))

    def read_text(self, rel: str) -> str | None:
        """The file's text (at most 4 MiB, the tail for longer files), or None when unreadable."""
        return self.read_path(self.path(rel))

    def read_path(self, path: Path) -> str | None:
        try:
            with path.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size > _MAX_READ_BYTES:
                    handle.seek(size - _MAX_READ_BYTES)
                data = handle.read(_MAX_READ_BYTES)
        except OSError:
            return None
        return data.decode("utf-8", errors="replace")

    def glob(self, rel_dir: str, pattern: str) -> list[Path]:
        """Entries of ``rel_dir`` matching ``pattern``, sorted; empty when the directory is missing."""
        base = self.path(rel_dir)
        try:
            return sorted(base.glob(pattern))
        except OSError:
            return []

    def find_command(self, name: str) -> Path | None:
        """``<root>/usr/bin/<name>`` (or a GPU Operator dir) when present; else, on ``/`` only, ``PATH``."""
        for rel in (
            "usr/bin",
            "usr/local/bin",
            "usr/sbin",
            "usr/local/nvidia/toolkit",  # the GPU Operator's toolkit install
            "run/nvidia/driver/usr/bin",  # the GPU Operator's driver container
        ):
            candidate = self.path(rel) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        if self.is_live:
            found = shutil.which(name)
            return Path(found) if found else None
        return None

    def run(self, name: str, *args: str, timeout_s: float | None = None) -> CommandResult:
        """Run a command (read-only by contract of the callers) with a timeout; results are cached."""
        key = (name, *args)
        cached = self._runs.get(key)
        if cached is not None:
            return cached
        result = self._run_uncached(name, args, self.command_timeout_s if timeout_s is None else timeout_s)
        self._runs[key] = result
        return result

    def _run_uncached(self, name: str, args: tuple[str, ...], timeout_s: float) -> CommandResult:
        argv = (name, *args)
        exe = self.find_command(name)
        if exe is None:
            where = "on PATH" if self.is_live else f"under {self.display(self.path('usr/bin'))}"
            return CommandResult(argv=argv, problem=f"command not found {where}")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        try:
            proc = subprocess.Popen(
                [str(exe), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # so a timeout can stop the command and anything it started
            )
        except OSError as exc:
            return CommandResult(argv=argv, problem=f"could not run: {exc.strerror or exc}")
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return CommandResult(argv=argv, problem=f"timed out after {timeout_s:g} s")
        return CommandResult(
            argv=argv,
            returncode=proc.returncode,
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
        )

"""Fixtures for integration tests: a short-path plugin dir, the kubelet double, the real agent process."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.kubelet_double import KubeletDouble


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # unix socket paths must stay under 108 bytes, so not pytest's long tmp_path; tests put their
    # other sockets and files beside it (``plugin_dir.parent / ...``), so it is one level down in a
    # folder of its own, all of it removed afterwards
    base = Path(tempfile.mkdtemp(prefix="kg-", dir="/tmp"))
    path = base / "dp"
    path.mkdir(mode=0o700)  # as mkdtemp makes it (and as kubelet's own device-plugins folder is)
    yield path
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def kubelet(plugin_dir: Path) -> Iterator[KubeletDouble]:
    double = KubeletDouble(plugin_dir)
    double.start()
    yield double
    double.stop()


class AgentProcess:
    """``kubegpu agent`` as a child process; stopped by PID with SIGTERM."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubegpu", "agent", *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        with contextlib.suppress(Exception):
            self._log.close()


@pytest.fixture
def start_agent(plugin_dir: Path) -> Iterator[Callable[..., AgentProcess]]:
    started: list[AgentProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> AgentProcess:
        full_env = {k: v for k, v in os.environ.items() if k != "CONFIG_FILE"}
        # under the CDI strategies the agent writes its CDI spec: into this test's folder, never the
        # machine's /var/run/cdi (a test may still give its own with env or --cdi-spec-dir)
        full_env["KUBEGPU_CDI_SPEC_DIR"] = str(plugin_dir.parent / "cdi")
        full_env.update(env or {})
        proc = AgentProcess(
            ["--device-plugin-dir", str(plugin_dir), *args],
            plugin_dir.parent / f"{plugin_dir.name}-agent-{len(started)}.log",
            full_env,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        with contextlib.suppress(FileNotFoundError):
            proc.log_path.unlink()

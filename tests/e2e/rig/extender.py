"""`kubegpu extender` as a host process beside the rig, and its entry in a scheduler configuration.

Shared by the end-to-end tests (tests/e2e/test_extender*.py, test_kube_replay.py) and the kwok
replay benchmark (bench/kube_replay.py): one launcher, one place that spells the extender's
KubeSchedulerConfiguration entry (the fields are kube-scheduler's ``Extender`` type).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.rig.rig import RigError, log_tail

__all__ = ["ExtenderProcess", "extender_entry", "free_port"]

PATH = "/kubegpu"  # the extender's URL prefix


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def extender_entry(
    url: str, *, http_timeout: str = "10s", managed_resources: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One ``extenders`` item: filter and bind through ``url``, node names only (node cache).

    Without ``managed_resources`` every pod of the profile goes to the extender, CPU-only pods too.
    """
    entry: dict[str, Any] = {
        "urlPrefix": url,
        "filterVerb": "filter",
        "bindVerb": "bind",
        "nodeCacheCapable": True,
        "enableHTTPS": False,
        "httpTimeout": http_timeout,
    }
    if managed_resources is not None:
        entry["managedResources"] = managed_resources
    return entry


class ExtenderProcess:
    """``python -m kubegpu extender`` on a free local port with ``kubeconfig``, logging to ``log_path``.

    ``args`` are appended (``--policy``, ``--workload``, ...). ``KUBEGPU_E2E_PYTHON`` picks another
    interpreter (another checkout's venv), as for the tests' other kubegpu processes.
    """

    def __init__(self, kubeconfig: Path, log_path: Path, *args: str) -> None:
        self.port = free_port()
        self.log_path = log_path
        python = os.environ.get("KUBEGPU_E2E_PYTHON", sys.executable)
        self.argv = [
            python,
            "-m",
            "kubegpu",
            "extender",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--kubeconfig",
            str(kubeconfig),
            *args,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PATH}"

    def start(self, timeout_s: float = 120) -> None:
        """Start it and wait for ``/readyz``; ``RigError`` with the log's tail if it exits or times out."""
        with self.log_path.open("ab") as logf:
            self.proc = subprocess.Popen(
                self.argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RigError(f"kubegpu extender exited ({self.proc.returncode})\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise RigError(f"kubegpu extender not ready in {timeout_s:.0f} s\n{self.log_tail()}")

    def stop(self) -> None:
        """Terminate it (by its PID), then kill it if it has not exited within 15 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, "the extender log", lines)

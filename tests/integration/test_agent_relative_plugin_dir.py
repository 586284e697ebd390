"""A relative --device-plugin-dir works end to end: the agent serves there *and registers* with kubelet.

gRPC's ``unix://`` needs an absolute socket path. It once failed at start with gRPC's RuntimeError and
a traceback, then served but never registered (it dialled a relative ``kubelet.sock``); the agent now
resolves the directory against where it was started, once, as every other path flag is read.
Registration failures say which they were: kubelet not reachable, or kubelet refusing.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.helpers import log_records
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"


@contextmanager
def _agent(cwd: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = cwd / "agent.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kubegpu", "agent", "--node-spec", "builtin:seed-8gpu", *args],
            cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            yield proc, log
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(15)
    assert "Traceback" not in log.read_text(errors="replace")


def _wait_for_log(log: Path, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = log.read_text(errors="replace")
        if text in content:
            return content
        time.sleep(0.1)
    return log.read_text(errors="replace")


def test_agent_serves_and_registers_in_a_relative_device_plugin_dir(plugin_dir: Path) -> None:
    kubelet = KubeletDouble(plugin_dir / "rel" / "plugins")
    kubelet.start()
    try:
        with _agent(plugin_dir, "--device-plugin-dir", "rel/plugins") as (proc, log):
            assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 30), log.read_text()
            assert proc.poll() is None
            text = _wait_for_log(log, '"msg": "registered"')
            registered = [r for r in log_records(text) if r.get("msg") == "registered"]
            assert registered, text
            assert registered[0]["endpoint"] == kubelet.calls_named("Register")[0].request.endpoint
            sockets = [p for p in (plugin_dir / "rel" / "plugins").iterdir() if p.name.startswith("kubegpu-")]
            assert sockets
    finally:
        kubelet.stop()


def test_agent_serves_on_a_relative_device_plugin_dir_without_registration(plugin_dir: Path) -> None:
    with _agent(plugin_dir, "--kubelet-socket", "", "--device-plugin-dir", "rel/plugins") as (proc, log):
        text = _wait_for_log(log, "agent started")
        assert proc.poll() is None, text
        assert any(p.suffix == ".sock" for p in (plugin_dir / "rel" / "plugins").iterdir())


def test_a_kubelet_socket_nobody_listens_on_is_reported_as_not_reachable(plugin_dir: Path) -> None:
    directory = plugin_dir / "dp"
    directory.mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(directory / "kubelet.sock"))  # a socket file with no listener: connection refused
    stale.close()
    with _agent(plugin_dir, "--device-plugin-dir", "dp") as (proc, log):
        text = _wait_for_log(log, "registration failed")
        assert proc.poll() is None, text
        failed = [r for r in log_records(text) if r.get("msg") == "registration failed; retrying"]
        assert failed, text
        error = str(failed[0]["error"])
        assert error.startswith(f"kubelet not reachable at {directory / 'kubelet.sock'}: "), error
        assert "refused registration" not in error


def test_a_register_error_from_kubelet_is_reported_as_refused(plugin_dir: Path) -> None:
    kubelet = KubeletDouble(plugin_dir / "dp", refuse_registrations=1)
    kubelet.start()
    try:
        with _agent(plugin_dir, "--device-plugin-dir", "dp") as (_, log):
            assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 30), log.read_text()
            failed = [
                r for r in log_records(log.read_text()) if r.get("msg") == "registration failed; retrying"
            ]
            assert [str(r["error"]) for r in failed] == [
                f"kubelet refused registration of {GPU}: injected: kubelet is not ready"
            ]
    finally:
        kubelet.stop()

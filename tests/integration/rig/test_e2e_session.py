"""The e2e session fails once, with one message, when the rig cannot be built or cannot start.

Why: a cold machine used to error all 18 e2e tests with the same `missing binary` block. These tests run
the real e2e suite (`pytest -m e2e tests/e2e`) in a subprocess against a host the rig cannot use — a port
it needs held by this test, or a build that fails — with the rig's state and cache pointed at empty
temporary folders, so nothing is started on the host.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.rig.test_build_script import FakeToolchain

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.integration


def run_e2e(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {
        **os.environ,
        "CI": "true",
        "KUBEGPU_RIG_STATE": str(tmp_path / "state"),
        "KUBEGPU_RIG_CACHE": str(tmp_path / "cache"),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "e2e", "tests/e2e"],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )


@pytest.fixture
def held_kubelet_port() -> Iterator[None]:
    """Hold the kubelet's port the way another Kubernetes on this host would (or find it held already)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", 10250))
        s.listen(1)
    except OSError:
        pass  # something already holds it: the precondition fails all the same
    yield
    s.close()


@pytest.fixture
def as_root() -> None:
    """The e2e session's checks only run as root: skip loudly on a developer machine, fail in CI."""
    if os.geteuid() != 0:
        reason = "NOT RUN: this test checks the e2e session as root (as CI runs it); run it as root"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


@pytest.mark.usefixtures("as_root", "held_kubelet_port")
def test_a_host_the_rig_cannot_use_fails_the_session_once_before_any_test(tmp_path: Path) -> None:
    result = run_e2e(tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert out.count("E2E NOT RUN") == 1, out
    assert "port 10250 (kubelet) is already in use" in out
    assert " passed" not in out and " error" not in out, out
    assert not (tmp_path / "state").exists(), "something was started"


@pytest.mark.usefixtures("as_root")
def test_a_failed_build_fails_the_session_once_naming_the_binary(tmp_path: Path) -> None:
    go = FakeToolchain(tmp_path)
    env = {k: v for k, v in go.env.items() if k not in ("PATH", "HOME")}
    result = run_e2e(tmp_path, **env, FAKE_GO_FAIL="kube-apiserver")
    out = result.stdout + result.stderr
    if "port" in out and "already in use" in out:
        pytest.fail(f"a Kubernetes already runs on this host; stop it to run this test:\n{out[-2000:]}")
    assert result.returncode == 1, out
    assert out.count("E2E NOT RUN") == 1, out
    assert "kube-apiserver: go build exited non-zero" in out
    assert " passed" not in out, out

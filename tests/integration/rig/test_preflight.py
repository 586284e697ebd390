"""`up` checks every precondition before it starts anything, and says how to fix each one.

Why: `make rig-up` used to refuse a foreign /var/lib/kubelet only after five components were running,
and left them running. Here the rig's kubelet root, state and cache are pointed at temporary folders,
so the checks run for real without touching the host's /var/lib/kubelet.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.e2e.rig import rig as rigmod

pytestmark = pytest.mark.integration


@pytest.fixture
def fake_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "var-lib-kubelet"
    monkeypatch.setattr(rigmod, "KUBELET_ROOT", root)
    monkeypatch.setattr(rigmod, "DEVICE_PLUGIN_DIR", root / "device-plugins")
    monkeypatch.setenv("KUBEGPU_RIG_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("KUBEGPU_RIG_CACHE", str(tmp_path / "cache"))
    return root


def test_a_kubelet_dir_left_by_the_agent_example_is_named_with_the_fix(fake_host: Path) -> None:
    (fake_host / "device-plugins").mkdir(parents=True)
    problem = rigmod._foreign_kubelet_root()
    assert problem is not None
    assert "only device-plugins/" in problem and "kubegpu agent --device-plugin-dir" in problem
    assert f"rm -rf {fake_host}" in problem


def test_the_rigs_own_or_an_empty_kubelet_dir_is_fine(fake_host: Path) -> None:
    assert rigmod._foreign_kubelet_root() is None
    fake_host.mkdir()
    assert rigmod._foreign_kubelet_root() is None
    (fake_host / "pods").mkdir()
    (fake_host / rigmod.MARKER).write_text("x\n")
    assert rigmod._foreign_kubelet_root() is None


def test_up_lists_every_failed_precondition_and_starts_nothing(fake_host: Path) -> None:
    if os.geteuid() != 0:
        reason = "NOT RUN: this test checks the rig's preconditions as root (as CI runs it); run it as root"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    (fake_host / "device-plugins").mkdir(parents=True)
    r = rigmod.Rig()
    with pytest.raises(rigmod.RigError) as info:
        r.up()
    message = str(info.value)
    assert message.startswith("the rig cannot start; nothing was started:")
    assert "missing binary" in message and "make rig-build" in message
    assert str(fake_host) in message
    assert not r.paths.state.exists(), "up created state before its preconditions held"
    assert not any(r.pid(n) for n in rigmod.COMPONENTS)


def _as_root_only() -> None:
    if os.geteuid() != 0:
        reason = "NOT RUN: this test reads other processes' /proc/PID/exe as root (as CI runs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def test_a_containerd_the_rig_did_not_start_is_named_with_its_pid(fake_host: Path, tmp_path: Path) -> None:
    _as_root_only()
    fake = tmp_path / "usr" / "bin" / "containerd"  # any program whose executable is called containerd
    fake.parent.mkdir(parents=True)
    shutil.copy("/bin/sleep", fake)
    proc = subprocess.Popen([str(fake), "60"])
    try:
        problems = rigmod._foreign_containerd(rigmod.Paths.from_env())
    finally:
        proc.kill()
        proc.wait()
    mine = [p for p in problems if f"pid {proc.pid}," in p]
    assert len(mine) == 1, problems
    assert "did not start" in mine[0] and f"kill {proc.pid}" in mine[0]


def test_debians_containerd_service_is_named_with_how_to_stop_it(
    fake_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        rigmod, "_containerd_processes", lambda: [(4242, "/usr/bin/containerd", ["/usr/bin/containerd"])]
    )
    (problem,) = rigmod._foreign_containerd(rigmod.Paths.from_env())
    assert "pid 4242" in problem and "Debian's containerd service" in problem
    assert "systemctl stop containerd" in problem


def test_another_rigs_containerd_is_named_with_that_rigs_state_dir(
    fake_host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other-rig"
    (other / "pids").mkdir(parents=True)
    (other / "pids" / "containerd.pid").write_text("4243 1\n")
    argv = ["/usr/bin/containerd", f"--config={other / 'containerd' / 'config.toml'}"]
    monkeypatch.setattr(rigmod, "_containerd_processes", lambda: [(4243, "/usr/bin/containerd", argv)])
    (problem,) = rigmod._foreign_containerd(rigmod.Paths.from_env())
    assert "pid 4243" in problem and f"another rig's (state {other})" in problem
    assert f"KUBEGPU_RIG_STATE={other} python3 -m tests.e2e.rig down" in problem


def test_a_live_socket_where_the_rig_puts_containerds_is_named(
    fake_host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rigmod, "_containerd_processes", list)
    monkeypatch.setattr(rigmod, "DEBIAN_CONTAINERD_SOCK", tmp_path / "no-such.sock")
    paths = rigmod.Paths.from_env()
    assert rigmod._foreign_containerd(paths) == []
    paths.containerd_sock.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(paths.containerd_sock))
        s.listen(1)
        (problem,) = rigmod._foreign_containerd(paths)
    assert str(paths.containerd_sock) in problem and "ss -xlp" in problem
    # A socket file nobody listens on (left by a killed containerd) is not a problem: `up` replaces it.
    assert rigmod._foreign_containerd(paths) == []


def test_the_versions_file_is_read_and_the_environment_overrides_it(tmp_path: Path) -> None:
    f = tmp_path / "versions.env"
    f.write_text(
        "# c\nKUBEGPU_RIG_K8S_VERSION=v1.37.2 # x\nKUBEGPU_RIG_ETCD_VERSION=v3.6.16\n"
        "KUBEGPU_RIG_CONTAINERD_VERSION=v2.4.2\nKUBEGPU_RIG_KWOK_VERSION=v0.8.0\n"
    )
    assert rigmod.load_versions(f, {}) == {
        "k8s": "v1.37.2",
        "etcd": "v3.6.16",
        "containerd": "v2.4.2",
        "kwok": "v0.8.0",
    }
    assert rigmod.load_versions(f, {"KUBEGPU_RIG_K8S_VERSION": "v1.34.4"})["k8s"] == "v1.34.4"
    f.write_text("KUBEGPU_RIG_K8S_VERSION=v1.37.2\n")
    with pytest.raises(rigmod.RigError, match="sets no KUBEGPU_RIG_ETCD_VERSION"):
        rigmod.load_versions(f, {})

"""`up` checks every precondition before it starts anything, and says how to fix each one.

Why: `make rig-up` used to refuse a foreign /var/lib/kubelet only after five components were running,
and left them running. Here the rig's kubelet root, state and cache are pointed at temporary folders,
so the checks run for real without touching the host's /var/lib/kubelet.
"""

from __future__ import annotations

import os
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

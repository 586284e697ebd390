"""`python -m tests.e2e.rig packages` (`make rig-packages`, the first step of `make test`) installs the
Debian packages the host lacks, and only those.

Why: on a fresh machine `check` runs beside the rig build, before the rig comes up; busybox, which the
simulated nvidia-smi's tests run the script with, used to arrive only when e2e brought the rig up, so
a first `make test` collected 11 tests fewer than the next one. apt-get itself is recorded, not run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.rig import rig as rigmod

pytestmark = pytest.mark.integration


@pytest.fixture
def apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Probe files under tmp_path (one present, one absent per table); apt-get calls recorded."""
    present = tmp_path / "present"
    present.write_text("")
    monkeypatch.setattr(
        rigmod, "REQUIRED_PACKAGES", {str(present): "here-already", str(tmp_path / "no-sh"): "busybox-static"}
    )
    monkeypatch.setattr(rigmod, "TOOL_PACKAGES", {str(tmp_path / "no-tool"): "skopeo"})
    monkeypatch.setattr(rigmod, "POLICY_RC_D", tmp_path / "policy-rc.d")
    monkeypatch.setattr(rigmod, "APPARMOR_ENABLED", tmp_path / "apparmor-enabled")  # absent: AppArmor off
    monkeypatch.setattr(rigmod, "log", lambda *_: None)
    calls: list[list[str]] = []

    def run(argv: list[str], **kw: Any) -> None:
        calls.append([str(a) for a in argv])

    monkeypatch.setattr(rigmod, "_run", run)
    return calls


def test_only_missing_packages_are_installed_and_tools_without_their_services(apt: list[list[str]]) -> None:
    missing, tools = rigmod.missing_packages()
    assert "busybox-static" in missing and "here-already" not in missing
    assert tools == ["skopeo"]
    assert set(rigmod.ensure_packages()) >= {"busybox-static", "skopeo"}
    assert apt[0] == ["apt-get", "update", "-q"]
    assert apt[1][:4] == ["apt-get", "install", "-y", "-q"] and "busybox-static" in apt[1]
    assert apt[2] == ["apt-get", "install", "-y", "-q", "--no-install-recommends", "skopeo"]


def test_apparmor_on_without_its_parser_adds_apparmor(apt: list[list[str]], tmp_path: Path) -> None:
    (tmp_path / "apparmor-enabled").write_text("Y\n")
    missing, _ = rigmod.missing_packages()
    assert ("apparmor" in missing) == (rigmod.shutil.which("apparmor_parser") is None)


def test_a_host_with_every_package_runs_no_apt_get(
    apt: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rigmod, "REQUIRED_PACKAGES", {})
    monkeypatch.setattr(rigmod, "TOOL_PACKAGES", {})
    assert rigmod.ensure_packages() == []
    assert apt == []


def test_packages_as_another_user_is_one_clear_line(
    apt: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(rigmod.os, "geteuid", lambda: 1000)
    assert rigmod.main(["packages"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "rig: installing the rig's Debian packages needs root: run it with sudo"
    assert apt == []

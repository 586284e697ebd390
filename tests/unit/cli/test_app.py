"""The CLI's contract: usage errors exit 2 with one message, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubegpu.cli.app import COMMAND_MODULES


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_unknown_command_exits_2_without_traceback() -> None:
    res = run("no-such-command")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "no-such-command" in res.stderr


def test_help_lists_commands() -> None:
    res = run("--help")
    assert res.returncode == 0
    assert "kubegpu" in res.stdout


def test_version_through_the_installed_entry_point_prints_the_version() -> None:
    """`kubegpu version` as a user types it: the command of the installed package, not the test app
    (a one-command app made ``version`` an unexpected extra argument, exit 2)."""
    from kubegpu import __version__

    entry = Path(sys.executable).with_name("kubegpu")
    assert entry.exists(), f"the installed entry point {entry} is missing (pip install -e .)"
    res = subprocess.run([str(entry), "version"], capture_output=True, text=True, timeout=60, check=False)
    assert (res.returncode, res.stdout.strip()) == (0, __version__), res.stderr


@pytest.mark.parametrize("command", [*COMMAND_MODULES, "version"])
def test_every_command_answers_help_through_the_installed_entry_point(command: str) -> None:
    entry = Path(sys.executable).with_name("kubegpu")
    res = subprocess.run(
        [str(entry), command, "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stderr
    assert f"kubegpu {command}" in res.stdout

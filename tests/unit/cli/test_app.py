"""The CLI's contract: usage errors exit 2 with one message, never a traceback."""

from __future__ import annotations

import subprocess
import sys


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

"""A failing e2e test prints the tail of each component's log, headed by the file it came from.

Why: the rig's components, the agent, the extender and Prometheus each print their log tail when a
test fails; the tail is what an operator reads first, so it must name the file and hold the last
lines, and a log that was never written must say so instead of raising inside the failure report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.rig.rig import log_tail

pytestmark = pytest.mark.integration


def test_the_tail_names_the_file_and_keeps_only_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "kubelet.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    text = log_tail(log, "kubelet", 3)
    header, *body = text.splitlines()
    assert header == f"---- last 3 lines of kubelet ({log})"
    assert body == ["line 97", "line 98", "line 99"]


def test_a_short_log_is_shown_whole_with_its_true_length(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("started\nfailed: no device\n")
    assert log_tail(log, "the agent log", 40).splitlines() == [
        f"---- last 2 lines of the agent log ({log})",
        "started",
        "failed: no device",
    ]


def test_a_missing_log_is_reported_not_raised(tmp_path: Path) -> None:
    missing = tmp_path / "never-written.log"
    assert log_tail(missing, "the extender log") == f"---- the extender log: no log at {missing}"

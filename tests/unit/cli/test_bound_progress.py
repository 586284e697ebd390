"""A bound that solves for minutes says so while it runs (`sim bound --node-level` and
`--second-pivot` were silent for two to three minutes), and says nothing with --json."""

from __future__ import annotations

import threading

import pytest

from kubegpu.cli import simrun


def test_a_long_solve_prints_a_line_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simrun, "HEARTBEAT_S", 0.01)
    lines: list[str] = []
    beat = threading.Event()

    def say(text: str) -> None:
        lines.append(text)
        if "solving" in text:
            beat.set()

    def solve(workload: object, seed: int, *, inflate: float) -> str:
        assert beat.wait(30), "no line while the solve ran"
        return f"result {seed}"

    out = simrun._per_seed(solve, str, None, (42, 43), 1.3, quiet=False, say=say)
    assert out == ["result 42", "result 43"]
    assert any(line.startswith("bound seed 42 (1/2): solving, ") for line in lines)
    assert "bound seed 43 (2/2): result 43" in lines


def test_quiet_prints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simrun, "HEARTBEAT_S", 0.01)
    lines: list[str] = []
    out = simrun._per_seed(lambda w, s, *, inflate: s, str, None, (1,), 1.3, quiet=True, say=lines.append)
    assert out == [1] and lines == []

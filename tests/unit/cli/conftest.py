"""Run the real CLI entry point in-process and capture what a user would see."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from kubegpu.cli.app import main


@dataclass
class Result:
    code: int
    out: str
    err: str


Runner = Callable[..., Result]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Runner:
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str) -> Result:
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return Result(code=code, out=captured.out, err=captured.err)

    return run

"""The mutation runner (bench/mutation.py) on a toy package: a mutant a test kills, one no test can
kill (listed as equivalent), one on a line no test runs; the package it was given is never changed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"

TOY = """def clamp(x: int, hi: int) -> int:
    if x > hi:
        return hi
    return x


def unused(x: int) -> int:
    return x
"""

TOY_TEST = """from toy.calc import clamp


def test_clamp() -> None:
    assert clamp(5, 3) == 3 and clamp(1, 3) == 1
"""


def load_mutation() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # mutation.py imports benchcli beside it
    try:
        spec = importlib.util.spec_from_file_location("mutation", BENCH / "mutation.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["mutation"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


mutation = load_mutation()


def test_mutants_flip_one_thing_each_and_keep_every_line_where_it_was() -> None:
    source = (
        b"def f(a, b):\n    if a < b and not a:\n        return min(a, 1)\n    return (a ==\n        b)\n"
    )
    found = mutation.mutants("m.py", source)
    whats = sorted({m.what for m in found})
    assert "'<' -> '<='" in whats and "and -> or" in whats and "not dropped" in whats
    assert "min -> max" in whats and "1 -> 2" in whats and "1 -> 0" in whats
    assert "return X -> return None" in whats and "'==' -> '!='" in whats and "not added" in whats
    for m in found:
        mutated = mutation.apply(source, m)
        assert mutated != source and mutated.count(b"\n") == source.count(b"\n")
        compile(mutated, "m.py", "exec")
    assert len({m.key for m in found}) == len(found)


def test_logger_calls_and_annotations_are_not_mutated() -> None:
    source = (
        b"import logging\nlog = logging.getLogger()\n\n"
        b"def f(x: 'int' = 1) -> None:\n    log.info('x', extra={'n': 1 < 2})\n"
    )
    assert sorted(m.what for m in mutation.mutants("m.py", source)) == ["1 -> 0", "1 -> 2"]


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    (tmp_path / "src" / "toy").mkdir(parents=True)
    (tmp_path / "src" / "toy" / "__init__.py").write_text("")
    (tmp_path / "src" / "toy" / "calc.py").write_text(TOY)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_toy.py").write_text(TOY_TEST)
    return tmp_path


def test_a_run_counts_killed_survived_equivalent_and_unrun_mutants(toy: Path) -> None:
    equivalent = toy / "equivalent.txt"
    equivalent.write_text(
        "# module | mutation @ line | reason\n"
        "calc.py | '>' -> '>=' in `x > hi` @ if x > hi: | at x == hi both return the same\n"
        "calc.py | 1 -> 2 in `1` @ return x + 1 | a line since deleted\n"
    )
    opts = mutation.Options(
        modules=("calc.py",),
        max_mutants=None,
        budget_s=None,
        workers=1,
        timeout_s=60.0,
        seed=0,
        equivalent=equivalent,
        package=toy / "src" / "toy",
        cwd=toy,
        tests={"calc.py": ("tests/test_toy.py",)},
    )
    lines: list[str] = []
    (result,) = mutation.run(opts, say=lines.append)
    assert (toy / "src" / "toy" / "calc.py").read_text() == TOY
    assert result.tried == 5 and result.killed == 3 and result.timeouts == 0
    assert [m.key for m in result.equivalent] == ["'>' -> '>=' in `x > hi` @ if x > hi:"]
    assert [(m.line, m.what) for m in result.survived] == [(8, "return X -> return None")]
    assert result.uncovered == 1 and result.score == 75.0
    assert any(line.startswith("[5/5] killed 3 survived 2") for line in lines)
    assert (
        "calc.py: listed as equivalent but no longer surviving (remove it): 1 -> 2 in `1` @ return x + 1"
        in lines
    )
    text = mutation.table([result])
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "calc.py" in text and "75.0 %" in text
    assert "calc.py:8: return X -> return None" in mutation.survivors_text([result])


def test_a_malformed_equivalent_file_is_refused_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "eq.txt"
    bad.write_text("# fine\nexact.py | no reason\n")
    with pytest.raises(
        mutation.InputError, match=r"eq.txt:2: expected 'module \| mutation @ line text \| reason'"
    ):
        mutation.load_equivalent(bad)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--workers", "0"], "mutation.py: error: argument --workers: must be at least 1, got 0"),
        (["--max-mutants", "x"], "mutation.py: error: argument --max-mutants: 'x' is not an integer"),
        (["--module", "nope.py"], "mutation.py: error: argument --module: invalid choice: 'nope.py'"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str], line: str) -> None:
    res = subprocess.run(
        [sys.executable, str(BENCH / "mutation.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert res.stderr.startswith(line)

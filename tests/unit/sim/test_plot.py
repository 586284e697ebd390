"""Figures: the gap figure is written as an image, and a path that cannot take one is refused
before any work, naming the flag, with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.errors import InputError
from kubegpu.sim.plot import GapClosed, check_plot_path, plot_gap_closed

PNG = b"\x89PNG\r\n\x1a\n"


def _rows() -> list[GapClosed]:
    return [
        GapClosed(workload=w, policy=p, overall=share, per_seed=(share - 2, share, share + 3))
        for w in ("default", "gpushare60")
        for p, share in (("kubegpu", 40.0), ("kubegpu-plan", 72.0))
    ]


def test_the_gap_figure_is_written_as_a_png(tmp_path: Path) -> None:
    path = tmp_path / "gap.png"
    plot_gap_closed(_rows(), path, goal_pct=75.0, title="seeds 42-51")
    assert path.read_bytes()[:8] == PNG


def test_the_gap_figure_takes_a_workload_without_seeds_and_a_negative_share(tmp_path: Path) -> None:
    # a policy below FGD closes a negative share; a seed set where no seed had room for a share
    # (every bound at FGD) has no dots: both still draw
    rows = [GapClosed(workload="w", policy="random", overall=-35.0, per_seed=()), *_rows()]
    path = tmp_path / "gap.svg"
    plot_gap_closed(rows, path)
    assert b"<svg" in path.read_bytes()[:400]


@pytest.mark.parametrize(
    ("name", "words"),
    [("gap.txt", ("--plot", ".txt", "png")), ("missing/gap.png", ("--plot", "does not exist"))],
    ids=["unknown-format", "missing-folder"],
)
def test_a_path_that_cannot_take_a_figure_is_refused_and_nothing_is_written(
    tmp_path: Path, name: str, words: tuple[str, ...]
) -> None:
    path = tmp_path / name
    with pytest.raises(InputError) as err:
        check_plot_path(path)
    assert all(w in str(err.value) for w in words)
    with pytest.raises(InputError):
        plot_gap_closed(_rows(), path, flag="--figure")
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_folder_is_not_a_figure_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--out-plot .*is a folder"):
        check_plot_path(tmp_path, flag="--out-plot")


def test_paths_with_a_known_format_pass(tmp_path: Path) -> None:
    for name in ("a.png", "a.SVG", "a.pdf"):
        check_plot_path(tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_a_name_without_a_type_is_refused_naming_what_to_give(tmp_path: Path) -> None:
    """`--plot results/` arrives as `results`: matplotlib would write `results.png` without a word."""
    with pytest.raises(InputError, match=r"--plot .*results: name the image file with its type, e\.g\. "):
        check_plot_path(tmp_path / "results")
    assert list(tmp_path.iterdir()) == []

"""`kubegpu sim`'s table at 80 columns: every line fits, and policy names stay whole (they were cut
to `kube…`, so `kubegpu-plan` and `kubegpu` could not be told apart)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.unit.cli.test_sim_cli import trace_files

POLICIES = ("--seeds", "0-1", "--policy", "kubegpu-plan", "--policy", "kubegpu", "--policy", "fgd")


def test_at_80_columns_the_table_fits_and_names_every_policy_in_full(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "kubegpu", "sim", "--nodes", str(nodes), "--pods", str(pods), *POLICIES],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, result.stdout
    assert "…" not in result.stdout, result.stdout
    rows = {line.split()[0]: line for line in lines if line.split()[:1] in (["kubegpu-plan"], ["kubegpu"])}
    assert set(rows) == {"kubegpu-plan", "kubegpu"}, result.stdout
    header = next(line for line in lines if line.startswith("policy"))
    # one line per policy, no cell wrapped onto a second line: as many cells as the header has
    assert all(len(row.split()) == len(header.split()) for row in rows.values()), result.stdout


def _sim(nodes: Path, pods: Path) -> list[str]:
    return [sys.executable, "-m", "kubegpu", "sim", "--nodes", str(nodes), "--pods", str(pods)]


def test_out_with_a_file_name_is_refused_before_any_replay(tmp_path: Path) -> None:
    """`--out sim.json` made a folder called sim.json; it is refused, naming --json for one file."""
    nodes, pods = trace_files(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubegpu",
            "sim",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--out",
            str(tmp_path / "sim.json"),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert result.returncode == 2
    assert "looks like a file name; for one JSON document use --json" in result.stderr
    assert not (tmp_path / "sim.json").exists()


def test_plot_and_out_say_what_they_wrote(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    out, plot = tmp_path / "results", tmp_path / "curves.png"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubegpu",
            "sim",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--seeds",
            "0",
            "--out",
            str(out),
            "--plot",
            str(plot),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"kubegpu: wrote {plot}" in result.stderr
    assert f"kubegpu: wrote {out / 'summary.json'}, {out / 'curves.csv'}" in result.stderr
    assert plot.is_file() and (out / "summary.json").is_file()

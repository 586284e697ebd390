"""`kubegpu sim`'s table at 80 columns: every line fits, and policy names stay whole (they were cut
to `kube…`, so `kubegpu-plan` and `kubegpu` could not be told apart); its output flags refuse a
name of the wrong kind and say what they wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.unit.cli.test_sim_cli import trace_files

POLICIES = ("--seeds", "0-1", "--policy", "kubegpu-plan", "--policy", "kubegpu", "--policy", "fgd")


def sim(tmp_path: Path, *args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    """`kubegpu sim` on the small synthetic trace, as a user runs it (optionally at COLUMNS)."""
    nodes, pods = trace_files(tmp_path)
    env = {**os.environ, **({"COLUMNS": str(columns)} if columns else {})}
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", "sim", "--nodes", str(nodes), "--pods", str(pods), *args],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
        env=env,
    )


def test_at_80_columns_the_table_fits_and_names_every_policy_in_full(tmp_path: Path) -> None:
    result = sim(tmp_path, *POLICIES, columns=80)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, result.stdout
    assert "…" not in result.stdout, result.stdout
    rows = {line.split()[0]: line for line in lines if line.split()[:1] in (["kubegpu-plan"], ["kubegpu"])}
    assert set(rows) == {"kubegpu-plan", "kubegpu"}, result.stdout
    header = next(line for line in lines if line.startswith("policy"))
    # one line per policy, no cell wrapped onto a second line: as many cells as the header has
    assert all(len(row.split()) == len(header.split()) for row in rows.values()), result.stdout


def test_out_with_a_file_name_is_refused_before_any_replay(tmp_path: Path) -> None:
    """`--out sim.json` made a folder called sim.json; it is refused, naming --json for one file."""
    result = sim(tmp_path, "--out", str(tmp_path / "sim.json"))
    assert result.returncode == 2
    assert "looks like a file name; for one JSON document use --json" in result.stderr
    assert not (tmp_path / "sim.json").exists()


def test_plot_and_out_say_what_they_wrote(tmp_path: Path) -> None:
    out, plot = tmp_path / "results", tmp_path / "curves.png"
    result = sim(tmp_path, "--seeds", "0", "--out", str(out), "--plot", str(plot), "--json")
    assert result.returncode == 0, result.stderr
    assert f"kubegpu: wrote {plot}" in result.stderr
    assert f"kubegpu: wrote {out / 'summary.json'}, {out / 'curves.csv'}" in result.stderr
    assert plot.is_file() and (out / "summary.json").is_file()

"""The benchmark scripts refuse bad flags and bad input with one line and exit 2, never a traceback.

``bench/benchcli.py`` is what they share: argparse types and the entry point that turns a kubegpu
error into ``<script>: error: <message>``. The scripts run here only on paths that stop before any
benchmark starts (a flag argparse refuses, a trace that does not load, a cache path that is wrong).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kubegpu.errors import InputError, TraceError
from kubegpu.sim.openb import NODES_FILE, PODS_FILE

BENCH = Path(__file__).resolve().parents[3] / "bench"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,8,T4\nn1,32000,65536,4,T4\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,1024,1,500,\np1,1000,1024,1,1000,\n"


def load_benchcli() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchcli", BENCH / "benchcli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


benchcli = load_benchcli()


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("count", "0", "must be at least 1, got 0"),
        ("count", "-3", "must be at least 1, got -3"),
        ("count", "x", "'x' is not an integer"),
        ("counts", "2,0", "must be at least 1, got 0"),
        ("seed", "-1", "a seed is an integer of at least 0, got -1"),
        ("seeds", "5-2", "range '5-2' ends before it starts"),
        ("seeds", "x", "'x' is not a seed, a range like 42-51 or a list"),
        ("tie_modes", "node-order,bogus", "unknown tie mode 'bogus'; choose from node-order, random"),
        ("positive", "0", "must be above 0, got '0'"),
        ("positive", "nan", "must be a finite number, got 'nan'"),
        ("inflate", "nan", "must be a finite number, got 'nan'"),
        ("inflate", "inf", "must be a finite number, got 'inf'"),
        ("inflate", "-1", "must be 0 (no inflation) or a multiple of capacity up to 10, got -1.0"),
        ("inflate", "11", "must be 0 (no inflation) or a multiple of capacity up to 10, got 11.0"),
    ],
)
def test_argparse_types_refuse_with_a_message(kind: str, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        getattr(benchcli, kind)(text)
    assert str(info.value) == message


def test_argparse_types_accept_good_values() -> None:
    assert benchcli.count("3") == 3 and benchcli.counts("2,8") == (2, 8) and benchcli.seed("0") == 0
    assert benchcli.seeds("42-44") == (42, 43, 44) and benchcli.seeds_or_none("") == ()
    assert benchcli.inflate("0") == 0.0 and benchcli.positive("0.5") == 0.5


def test_a_kubegpu_error_becomes_one_line_and_its_exit_code(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["/x/bench/sim_idle.py"])

    def main() -> int:
        raise TraceError("pods.csv:3: column 'cpu_milli': 'x' is not an integer")

    with pytest.raises(SystemExit) as info:
        benchcli.run_main(main)
    assert info.value.code == 2
    assert (
        capsys.readouterr().err
        == "sim_idle.py: error: pods.csv:3: column 'cpu_milli': 'x' is not an integer\n"
    )


def test_an_output_file_is_checked_before_the_work(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a folder"):
        benchcli.check_out_file("--bound-cache", tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is a file, not a folder"):
        benchcli.check_out_file("--bound-cache", tmp_path / "file" / "c.json")
    benchcli.check_out_file("--bound-cache", tmp_path / "new" / "c.json")
    assert (tmp_path / "new").is_dir() and not (tmp_path / "new" / "c.json").exists()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "openb"
    folder.mkdir()
    (folder / NODES_FILE).write_text(NODES)
    (folder / PODS_FILE).write_text(PODS)
    return folder


def bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=110, check=False
    )


@pytest.mark.parametrize(
    ("script", "args", "last_line"),
    [
        ("sim_variants.py", ["--seeds", "5-2"], "argument --seeds: range '5-2' ends before it starts"),
        ("sim_idle.py", ["--workers", "0"], "argument --workers: must be at least 1, got 0"),
        ("sim_fidelity.py", ["--ties", "bogus"], "argument --ties: unknown tie mode 'bogus'"),
        ("gpu_contents.py", ["--seed", "-1"], "argument --seed: a seed is an integer of at least 0, got -1"),
        (
            "extender_filter.py",
            ["--inflate", "nan"],
            "argument --inflate: must be a finite number, got 'nan'",
        ),
        ("extender_filter.py", ["--policy", "bogus"], "argument --policy: invalid choice: 'bogus'"),
        ("doctor_bench.py", ["--runs", "0"], "argument --runs: must be at least 1, got 0"),
        ("dra_prepare.py", ["--claims", "0"], "argument --claims: must be at least 1, got 0"),
        ("shares_bench.py", ["--pods", "0"], "argument --pods: must be at least 1, got 0"),
    ],
)
def test_bad_flags_exit_2_with_the_flag_named(
    data: Path, script: str, args: list[str], last_line: str
) -> None:
    extra = ["--data", str(data)] if script.startswith(("sim_", "gpu_contents", "extender")) else []
    res = bench(script, *extra, *args)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith(f"{script}: error: {last_line}")


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("sim_variants.py", []),
        ("sim_refusals.py", []),
        ("sim_fidelity.py", []),
        ("sim_gap.py", ["--no-bound-cache"]),
    ],
)
def test_a_bad_pod_list_is_one_line_naming_file_line_and_column(
    data: Path, script: str, args: list[str]
) -> None:
    (data / PODS_FILE).write_text("name,cpu_milli,num_gpu,gpu_milli\np0,1000,1,500\n")
    res = bench(script, "--data", str(data), "--seeds", "1", *args)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"{script}: error: {data / PODS_FILE}:1: missing column 'memory_mib'; the header must name name, "
        "cpu_milli, memory_mib, num_gpu, gpu_milli"
    ]


def test_sim_gap_refuses_a_bound_cache_it_did_not_write_and_leaves_it_alone(
    data: Path, tmp_path: Path
) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("not a cache\n")
    res = bench("sim_gap.py", "--data", str(data), "--seeds", "1", "--bound-cache", str(other))
    assert res.returncode == 2 and other.read_text() == "not a cache\n"
    assert res.stderr.strip().splitlines() == [
        f"sim_gap.py: error: --bound-cache {other}: not a bound cache (sim_gap's JSON of bounds per seed); "
        "name another file, or pass --no-bound-cache"
    ]
    res = bench("sim_gap.py", "--data", str(data), "--seeds", "1", "--bound-cache", str(tmp_path))
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == f"sim_gap.py: error: --bound-cache {tmp_path}: is a folder; name the file to write"
    )

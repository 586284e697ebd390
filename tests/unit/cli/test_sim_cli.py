"""`kubegpu sim` end to end on a small synthetic trace: JSON shape, files, errors as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kubegpu.cli.app import app
from kubegpu.sim.trace import load_pods, write_nodes, write_pods
from tests.unit.sim.conftest import make_trace

NODES = [(f"n{i}", 32000, 1 << 18, 4 if i % 2 else 8, "G2" if i % 2 else "T4") for i in range(6)]
PODS = [
    (f"p{i:02d}", 2000 + 500 * (i % 4), 1024, 1, (300, 500, 1000, 1000)[i % 4], "") for i in range(24)
] + [
    ("multi", 4000, 1024, 4, 1000, ""),
    ("cpu", 8000, 1024, 0, 0, ""),
]


def trace_files(tmp_path: Path) -> tuple[Path, Path]:
    trace = make_trace(NODES, PODS)
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    write_nodes(nodes, trace.nodes)
    write_pods(pods, trace.pods)
    return nodes, pods


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", *args], capture_output=True, text=True, timeout=110, check=False
    )


def test_json_has_one_entry_per_policy_with_curve_and_headline_numbers(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "fgd",
            "--policy",
            "bestfit,kubegpu",
            "--seeds",
            "1-2",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc["policies"]) == ["fgd", "bestfit", "kubegpu"]
    fgd = doc["policies"]["fgd"]
    points = [p["arrived_pct"] for p in fgd["curve"]]
    assert points == sorted(points) and points[-1] <= 130
    assert set(fgd["curve"][0]) >= {"arrived_pct", "allocated_pct", "frag_pct"}
    for key in ("allocated_pct_at_100", "allocated_pct_at_130", "unallocated_gpus_at_130", "seconds"):
        assert key in fgd
    assert 0 < fgd["allocated_pct_at_100"] <= 100
    assert doc["seeds"] == [1, 2] and doc["tie"] == "node-order" and doc["order"] == "auto"
    # each policy's default node order: crc for kubegpu only
    assert [doc["policies"][p]["order"] for p in ("fgd", "bestfit", "kubegpu")] == ["none", "none", "crc"]


def test_order_flag_applies_the_crc_order_to_any_policy(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    args = ["sim", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd,kubegpu", "--seeds", "1"]
    result = CliRunner().invoke(app, [*args, "--order", "none", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["order"] == "none"
    assert [doc["policies"][p]["order"] for p in ("fgd", "kubegpu")] == ["none", "none"]


def test_plot_and_out_write_their_files(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    out, plot = tmp_path / "out", tmp_path / "curves.png"
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policy",
            "packing",
            "--seeds",
            "3",
            "--tie",
            "random",
            "--plot",
            str(plot),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "summary.json").read_text())["tie"] == "random"
    assert (out / "curves.csv").read_text().startswith("policy,arrived_pct,allocated_pct")
    assert "packing" in result.stdout  # the table


def test_a_cluster_where_nothing_fits_shows_no_data_not_nan(tmp_path: Path) -> None:
    # a GPU node without cores or memory: every pod fails, no replay has a 90 % point to show
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,0,0,2,T4\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\np1,1000,1024,1,1000\n")
    result = CliRunner().invoke(
        app, ["sim", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd", "--seeds", "1"]
    )
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("fgd "))  # the first table
    assert "nan" not in result.output
    assert row.count(" - ") >= 5  # allocation, idle GPUs, fragmentation and its ratio: no data


def test_workers_give_the_same_numbers_as_one_process(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    base = [
        "sim",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--policy",
        "fgd,random",
        "--seeds",
        "1-3",
        "--json",
    ]
    one = json.loads(CliRunner().invoke(app, base).stdout)
    two = json.loads(CliRunner().invoke(app, [*base, "--workers", "2"]).stdout)
    for name in ("fgd", "random"):
        assert one["policies"][name]["curve"] == two["policies"][name]["curve"]


def test_bad_csv_row_is_one_line_naming_file_line_and_column(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    lines = pods.read_text().splitlines()
    lines[4] = lines[4].replace(",1024,", ",lots,", 1)
    pods.write_text("\n".join(lines) + "\n")
    res = run_cli("sim", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert f"{pods}:5: column 'memory_mib': 'lots' is not an integer" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_bad_flags_are_input_errors(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    for extra, fragment in (
        (["--policy", "tetris"], "unknown policy"),
        (["--seeds", "9-3"], "ends before it starts"),
        (["--seeds", "x"], "is not a seed"),
        (["--tie", "coin"], "choose node-order or random"),
        (["--order", "alphabetical"], "choose auto, none or crc"),
        (["--workers", "0"], "at least 1"),
        (["--inflate", "nan"], "--inflate must be 0"),
        (["--inflate", "inf"], "--inflate must be 0"),
        (["--inflate", "-1"], "--inflate must be 0"),
        (["--out", ""], "--out: empty path"),
        (["--out", str(pods)], f"--out {pods}: is a file"),
        # refused before the replays, not after them: a folder under a file, one nobody can write
        (["--out", f"{pods}/results"], f"--out {pods}/results: {pods} is not a folder"),
        (["--out", "/proc/kubegpu-results"], "--out /proc/kubegpu-results: cannot write in /proc"),
        (["--plot", "/proc/curves.png"], "--plot /proc/curves.png: cannot write in /proc"),
    ):
        res = run_cli("sim", "--nodes", str(nodes), "--pods", str(pods), *extra)
        assert res.returncode == 2, extra
        assert fragment in res.stderr and "Traceback" not in res.stderr
    res = run_cli("sim", "--pods", str(pods))
    assert res.returncode == 2 and "--nodes" in res.stderr


def test_an_empty_out_writes_nothing_in_the_current_folder(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    args = [sys.executable, "-m", "kubegpu", "sim", "--nodes", str(nodes), "--pods", str(pods), "--out="]
    res = subprocess.run(args, capture_output=True, text=True, timeout=110, check=False, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "kubegpu: error: --out: empty path; name the folder for summary.json, curves.csv, failed_pods.csv"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nodes.csv", "pods.csv"]


def test_variant_writes_a_loadable_pod_list_with_the_asked_mix(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    output = tmp_path / "variant.csv"
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "variant",
            "--pods",
            str(pods),
            "--nodes",
            str(nodes),
            "-o",
            str(output),
            "--cpu-only",
            "0.5",
            "--count",
            "400",
            "--seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "wrote 400 pods" in result.stdout
    made = load_pods(output)
    share = sum(1 for p in made if p.num_gpu == 0) / len(made)
    assert 0.4 < share < 0.6


def _without_timings(text: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads(text)
    for entry in doc["policies"].values():  # type: ignore[attr-defined]
        del entry["seconds"], entry["pods_per_second"]
    return doc


def test_the_plain_command_gives_the_same_document_without_typer_as_through_it(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    args = ["--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd", "--policy=random,kubegpu"]
    args += ["--seeds", "1-2", "--inflate=1.5", "--order", "auto", "--workers", "1", "--json"]
    through_typer = CliRunner().invoke(app, ["sim", *args])
    assert through_typer.exit_code == 0, through_typer.output
    probe = (
        "import sys; from kubegpu.cli.app import main; main(sys.argv[1:]); "
        "print('typer imported' if 'typer' in sys.modules else '', file=sys.stderr)"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe, "sim", *args], capture_output=True, text=True, timeout=110, check=False
    )
    assert res.returncode == 0, res.stderr
    assert "typer imported" not in res.stderr
    assert _without_timings(res.stdout) == _without_timings(through_typer.stdout)


def test_forms_the_plain_parser_does_not_know_go_to_typer_and_behave_as_before(tmp_path: Path) -> None:
    from kubegpu.cli.simrun import parse_fast

    nodes, pods = trace_files(tmp_path)
    base = ["--nodes", str(nodes), "--pods", str(pods)]
    for odd in (["--help"], ["variant", "--help"], ["--workers", "two"], ["--seeds"], ["--jsn"], ["extra"]):
        assert parse_fast([*base, *odd]) is None, odd
    res = run_cli("sim", *base, "--workers", "two")
    assert res.returncode == 2 and "Traceback" not in res.stderr and "--workers" in res.stderr
    res = run_cli("sim", "--help")
    assert res.returncode == 0 and "--nodes" in res.stdout and "variant" in res.stdout
    parsed = parse_fast([*base, "--policy", "fgd", "--policy=bestfit", "--inflate", "2", "--json"])
    assert parsed is not None
    assert parsed["policy"] == ["fgd", "bestfit"] and parsed["inflate"] == 2.0 and parsed["as_json"] is True


def test_kubegpu_plan_is_the_default_and_places_every_pod_kubegpu_places_on_a_cluster_with_room(
    tmp_path: Path,
) -> None:
    nodes, pods = trace_files(tmp_path)
    base = ["sim", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--inflate", "0", "--json"]
    default = json.loads(CliRunner().invoke(app, base).stdout)
    # the paper's six and kubegpu's default placement; the plain score is there by name only
    assert list(default["policies"]) == [
        "random",
        "dotprod",
        "clustering",
        "packing",
        "bestfit",
        "fgd",
        "kubegpu-plan",
    ]
    result = CliRunner().invoke(app, [*base, "--policy", "kubegpu,kubegpu-plan"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)["policies"]
    # the trace fits the cluster as it is: both place every pod, the plan only moves shares around
    assert doc["kubegpu-plan"]["allocated_pct_at_130"] == doc["kubegpu"]["allocated_pct_at_130"]
    assert doc["kubegpu-plan"]["failed_pods_by_shape"] == {} == doc["kubegpu"]["failed_pods_by_shape"]


def test_without_nodes_and_pods_it_replays_the_trace_in_kubegpu_openb_dir(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    nodes.rename(tmp_path / "openb_node_list_gpu_node.csv")
    pods.rename(tmp_path / "openb_pod_list_default.csv")
    env = {**os.environ, "KUBEGPU_OPENB_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "kubegpu", "sim", "--policy", "fgd", "--seeds", "1", "--json"],
        capture_output=True, text=True, timeout=110, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["nodes"], doc["pods"]) == (len(NODES), len(PODS))


def test_without_a_trace_it_names_the_flags_and_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBEGPU_OPENB_DIR"}
    result = subprocess.run(
        [sys.executable, "-m", "kubegpu", "sim", "--policy", "fgd"],
        capture_output=True, text=True, timeout=110, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--nodes" in result.stderr and "KUBEGPU_OPENB_DIR" in result.stderr
    env["KUBEGPU_OPENB_DIR"] = str(tmp_path / "none")
    result = subprocess.run(
        [sys.executable, "-m", "kubegpu", "sim", "--policy", "fgd"],
        capture_output=True, text=True, timeout=110, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 2 and "openb_node_list_gpu_node.csv: no such file" in result.stderr

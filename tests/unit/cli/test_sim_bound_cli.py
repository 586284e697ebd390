"""`kubegpu sim bound`, `kubegpu sim --bound` and `kubegpu sim variant --preset` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kubegpu.cli.app import app
from kubegpu.sim.trace import load_pods
from tests.unit.cli.test_sim_cli import run_cli, trace_files


def test_bound_json_has_one_row_per_seed_below_capacity(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    result = CliRunner().invoke(
        app, ["sim", "bound", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2", "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = doc["bound"]["per_seed"]
    assert [r["seed"] for r in rows] == [1, 2]
    assert all(0 < r["bound_pct"] <= 100 and r["converged"] for r in rows)
    assert doc["total_gpus"] == 36


def test_sim_with_bound_adds_the_bound_and_each_policy_share_of_it(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    args = ["sim", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd,random", "--seeds", "1"]
    plain = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    result = CliRunner().invoke(app, [*args, "--json", "--bound", "--plot", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    bound = doc["bound"]["bound_pct_mean"]
    for name, entry in doc["policies"].items():
        # the existing keys are unchanged (timings aside), the share is added
        timing = {"seconds", "pods_per_second", "share_of_bound_pct_at_130"}
        assert {k: v for k, v in entry.items() if k not in timing} == {
            k: v for k, v in plain["policies"][name].items() if k not in timing
        }
        assert max(point["allocated_pct"] for point in entry["curve"]) <= bound
        share = entry["share_of_bound_pct_at_130"]
        assert share is None if entry["allocated_pct_at_130"] is None else share <= 100
    assert (tmp_path / "c.png").stat().st_size > 0


def test_bound_bad_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    lines = pods.read_text().splitlines()
    lines[3] = lines[3].replace(",1024,", ",much,", 1)
    pods.write_text("\n".join(lines) + "\n")
    res = run_cli("sim", "bound", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert f"{pods}:4: column 'memory_mib': 'much' is not an integer" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = run_cli("sim", "bound", "--nodes", str(tmp_path / "none.csv"), "--pods", str(pods))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1


def test_bound_bad_flags_are_input_errors(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    for extra, fragment in (
        (["--seeds", "5-1"], "ends before it starts"),
        (["--inflate", "-1"], "--inflate"),
        (["--inflate", "nan"], "--inflate"),
    ):
        res = run_cli("sim", "bound", "--nodes", str(nodes), "--pods", str(pods), *extra)
        assert res.returncode == 2, extra
        assert fragment in res.stderr and "Traceback" not in res.stderr


def test_node_level_refuses_a_node_too_large_for_its_core_grid(tmp_path: Path) -> None:
    _, pods = trace_files(tmp_path)
    nodes = tmp_path / "big.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nsmall,32000,65536,8,T4\nhuge,2000000,65536,8,T4\n")
    res = run_cli("sim", "bound", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--node-level")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        "kubegpu: error: --node-level: node huge has 2,000 cores; the node-level bound takes GPU nodes of "
        "up to 1,024 cores on its 0.25-core grid (leave out --node-level)"
    ]


def test_variant_preset_writes_the_same_file_for_the_same_seed(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    outputs = []
    for i in range(2):
        out = tmp_path / f"v{i}.csv"
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
                str(out),
                "--preset",
                "gpushare100",
            ],
        )
        assert result.exit_code == 0, result.output
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    made = load_pods(tmp_path / "v0.csv")
    assert all(p.num_gpu == 0 or p.gpu_milli < 1000 for p in made)


def test_variant_preset_rejects_unknown_names_and_mixing_with_knobs(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    base = ["sim", "variant", "--pods", str(pods), "--nodes", str(nodes), "-o", str(tmp_path / "v.csv")]
    for extra, fragment in (
        (["--preset", "gpushare50"], "unknown preset"),
        (["--preset", "cpu30"], "unknown preset"),
        (["--preset", "gpushare40", "--shared", "0.5"], "sets the whole mix"),
    ):
        res = run_cli(*base, *extra)
        assert res.returncode == 2, extra
        assert fragment in res.stderr and "Traceback" not in res.stderr


def test_online_bound_adds_a_column_per_seed_at_most_the_bound(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    args = ["sim", "bound", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2"]
    plain = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    result = CliRunner().invoke(app, [*args, "--json", "--online"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = doc["bound"]["per_seed"]
    # the offline figures are the same as without --online; the online one is at most them
    assert [r["bound_pct"] for r in rows] == [r["bound_pct"] for r in plain["bound"]["per_seed"]]
    assert all(r["online_bound_pct"] <= r["bound_pct"] + 1e-6 for r in rows)
    for r in rows:
        low, high = r["pivot_placed"]
        assert 0 <= low <= high <= r["pivot_arrived"]
    assert doc["bound"]["online_bound_pct_mean"] <= doc["bound"]["bound_pct_mean"] + 1e-6
    table = CliRunner().invoke(app, [*args, "--online"])
    assert table.exit_code == 0, table.output
    assert "online %" in table.stdout and "pivot" in table.stdout


def test_node_level_bound_holds_each_node_to_its_cores(tmp_path: Path) -> None:
    # two nodes of two GPUs and 10 cores, four 600-milli shares of 6 cores: the class's 20 cores
    # feed 20/6 of them in the per-GPU LP, a node only one
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\na,10000,65536,2,G2\nb,10000,65536,2,G2\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(f"p{i},6000,1024,1,600\n" for i in range(4))
    )
    args = ["sim", "bound", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--inflate", "0"]
    plain = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    result = CliRunner().invoke(app, [*args, "--json", "--node-level", "--online"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert plain["bound"]["per_seed"][0]["bound_pct"] == round(100 * 2000 / 4000, 3)
    assert plain["bound"]["node_level_cpu_step"] is None
    row = doc["bound"]["per_seed"][0]
    assert row["bound_pct"] == row["online_bound_pct"] == 30.0  # 1200 of 4000 milli
    assert doc["bound"]["node_level_cpu_step"] == 0.25
    assert doc["bound"]["model"].startswith("whole nodes")
    table = CliRunner().invoke(app, [*args, "--node-level"])
    assert table.exit_code == 0, table.output
    assert "node-level" in table.stdout and "30.00" in table.stdout


def bound_args(
    tmp_path: Path, *, gpus: int, milli: list[int], seed: int, cpu: dict[int, int] | None = None
) -> list[str]:
    """``kubegpu sim bound`` on ``gpus`` 1-GPU nodes and one 1-GPU pod per ``milli`` (2 cores, or
    ``cpu[milli]`` millicores), in the order ``seed`` draws them without inflation."""
    cores = cpu or {}
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{k},64000,262144,1,G2\n" for k in range(gpus))
    )
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        + "".join(f"p{i},{cores.get(m, 2000)},1024,1,{m}\n" for i, m in enumerate(milli))
    )
    return [
        "sim",
        "bound",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--seeds",
        str(seed),
        "--inflate",
        "0",
    ]


def test_second_pivot_tightens_the_online_bound_to_what_every_policy_reaches(tmp_path: Path) -> None:
    # two 1-GPU nodes; seed 17's order is 810, 470, 1000, 1000, 300, 300, 1000: the 810 and the
    # 470 must both be placed on arrival, after which only a 300 fits (every greedy policy ends at
    # 1,580 of 2,000 milli). The 470 and the whole GPUs ask 3 cores, so the 470 may not fit where
    # the 810 fits: the 810 alone as pivot lets the LP leave the 470 out (1,810)
    args = bound_args(
        tmp_path, gpus=2, milli=[470, 810, 1000, 1000, 1000, 300, 300], seed=17, cpu={470: 3000, 1000: 3000}
    )
    one = json.loads(CliRunner().invoke(app, [*args, "--json", "--online"]).stdout)["bound"]["per_seed"][0]
    result = CliRunner().invoke(app, [*args, "--json", "--second-pivot"])  # implies --online
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["bound"]["per_seed"][0]
    assert one["online_bound_pct"] == 90.5 and "second_pivot" not in one
    assert row["online_bound_pct"] == 79.0
    assert row["pivot"].endswith("1x810m") and row["second_pivot"].endswith("1x470m")
    assert row["joint_placed"] == [[1, 1], [1, 1]]  # one of each placed
    table = CliRunner().invoke(app, [*args, "--second-pivot"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "79.00" in table.stdout and "2c/1x810m + 3c/1x470m" in table.stdout


def test_three_pivots_reach_what_every_policy_places(tmp_path: Path) -> None:
    # three 1-GPU nodes; seed 27's order is 810, 470, 650, 300, 1000, 1000, 300, 1000: the three
    # shares take a GPU each, a 300 joins the 470 and one the 650 (every policy: 2,530 of 3,000
    # milli). The 470 and the 650 ask more cores than the shares before them, so none forces
    # another in (tests/unit/sim/test_online_bound.py). One pivot 93.667 %, two 86.0 %, three exact
    args = bound_args(
        tmp_path,
        gpus=3,
        milli=[470, 810, 650, 1000, 1000, 1000, 300, 300],
        seed=27,
        cpu={470: 3000, 650: 2500, 1000: 3000},
    )
    two = json.loads(CliRunner().invoke(app, [*args, "--json", "--second-pivot"]).stdout)["bound"]
    assert two["per_seed"][0]["online_bound_pct"] == 86.0 and "third_pivot" not in two["per_seed"][0]
    result = CliRunner().invoke(app, [*args, "--json", "--pivots", "3"])  # implies --online
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["bound"]["per_seed"][0]
    assert row["online_bound_pct"] == 84.333
    assert (row["second_pivot"], row["third_pivot"]) == ("3c/1x470m", "2.5c/1x650m")
    assert row["joint_placed"] == [[1, 1], [1, 1], [1, 1]]
    table = CliRunner().invoke(app, [*args, "--pivots", "3"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "84.33" in table.stdout and "2c/1x810m + 3c/1x470m + 2.5c/1x650m" in table.stdout
    bad = CliRunner().invoke(app, [*args, "--pivots", "6"])
    assert bad.exit_code == 2 and "--pivots" in bad.output


def test_whole_gpu_pivots_reach_what_every_policy_places(tmp_path: Path) -> None:
    # two 1-GPU nodes; seed 32's order is 470, 650, 1000, 300, 470, 810, 470, 1000: the 470 and the
    # 650 take the two GPUs, no whole GPU ever fits, every policy ends at 1,890 of 2,000 milli
    # (tests/unit/sim/test_online_bound.py). Up to five share pivots: 96.0 %; the first whole GPU as
    # a pivot (placed, it would force in the two shares before it): 94.5 %, exact
    args = bound_args(
        tmp_path,
        gpus=2,
        milli=[470, 650, 300, 470, 1000, 810, 1000, 470],
        seed=32,
        cpu={1000: 2500, 650: 2000, 810: 3000, 300: 2500, 470: 2500},
    )
    shares = json.loads(CliRunner().invoke(app, [*args, "--json", "--pivots", "5"]).stdout)["bound"]
    assert shares["per_seed"][0]["online_bound_pct"] == 96.0
    result = CliRunner().invoke(app, [*args, "--json", "--whole-pivots"])  # implies --pivots 2
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["bound"]["per_seed"][0]
    assert row["online_bound_pct"] == 94.5 and row["second_pivot"] == "2.5c/1x1000m"
    table = CliRunner().invoke(app, [*args, "--pivots", "5", "--whole-pivots"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "94.50" in table.stdout and "3c/1x810m + 2.5c/1x1000m" in table.stdout

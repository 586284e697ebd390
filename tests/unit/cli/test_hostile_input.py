"""Hostile input on every command: one line naming the flag, file or key, exit 2, no traceback.

Each case here once produced a traceback, a hang or an out-of-memory kill; the house rule is that bad
input never does. The in-process runner lets an unexpected exception fail the test with its traceback;
the agent runs as a subprocess because a start-up check that is missing would let it start serving.
Cases whose regression would eat all memory run as a subprocess under an address-space limit, so a
regression fails with MemoryError instead of the OOM killer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.cli.conftest import Runner

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,262144,8,T4\nn2,32000,262144,4,G2\n"
PODS_CSV = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    "p1,2000,1024,1,500,\np2,4000,1024,2,1000,\np3,1000,1024,0,0,\n"
)
UNREADABLE = "/proc/self/mem"  # opens, then every read fails with EIO (root ignores file modes)
MEMORY_LIMIT = 4 << 30
# Set the limit inside the child (no preexec_fn: it is unsafe once the test process has threads).
_LIMITED_MAIN = (
    "import resource, runpy, sys; "
    f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT})); "
    "sys.argv[0] = 'kubegpu'; runpy.run_module('kubegpu', run_name='__main__')"
)


def run_limited(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``kubegpu ARGS`` in a child that cannot take more than MEMORY_LIMIT of address space."""
    return subprocess.run(
        [sys.executable, "-c", _LIMITED_MAIN, *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=cwd,
    )  # fmt: skip


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES_CSV)
    pods.write_text(PODS_CSV)
    return nodes, pods


def one_line_input_error(res, *needles: str) -> str:
    assert res.code == 2, (res.code, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1, res.err
    assert lines[0].startswith("kubegpu: error: ")
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


@pytest.mark.parametrize("which", ["--nodes", "--pods"])
def test_sim_trace_that_cannot_be_read_is_an_input_error_naming_the_file(cli: Runner, trace, which) -> None:
    nodes, pods = trace
    paths = {"--nodes": str(nodes), "--pods": str(pods), which: UNREADABLE}
    res = cli("sim", "--nodes", paths["--nodes"], "--pods", paths["--pods"], "--seeds", "1")
    one_line_input_error(res, UNREADABLE, "cannot read")


def test_sim_variant_input_that_cannot_be_read_is_an_input_error(cli: Runner, trace, tmp_path) -> None:
    nodes, _ = trace
    out = tmp_path / "v.csv"
    res = cli("sim", "variant", "--pods", UNREADABLE, "--nodes", str(nodes), "-o", str(out))
    one_line_input_error(res, UNREADABLE)
    assert not out.exists()


def test_sim_seed_range_too_long_is_refused_before_it_is_expanded(trace) -> None:
    nodes, pods = trace
    res = run_limited("sim", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "0-99999999999999")
    subprocess_input_error(res, "--seeds", "at most")


@pytest.mark.parametrize("value", ["nan", "inf", "1e9"])
def test_sim_inflate_must_be_a_finite_bounded_multiple(trace, value) -> None:
    nodes, pods = trace
    res = run_limited("sim", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--inflate", value)
    subprocess_input_error(res, "--inflate")


def test_sim_plot_with_an_unknown_image_format_names_the_flag_and_writes_nothing(
    cli: Runner, trace, tmp_path
) -> None:
    nodes, pods = trace
    out = tmp_path / "out"
    res = cli(
        "sim", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--policy", "fgd",
        "--plot", str(tmp_path / "curves.txt"), "--out", str(out),
    )  # fmt: skip
    one_line_input_error(res, "--plot", "txt")
    assert not out.exists()


@pytest.mark.parametrize(
    ("flag", "value"), [("--count", "99999999999"), ("--seed", "-1")], ids=["huge-count", "negative-seed"]
)
def test_sim_variant_bad_count_or_seed_is_an_input_error(trace, tmp_path, flag, value) -> None:
    nodes, pods = trace
    out = tmp_path / "v.csv"
    res = run_limited(
        "sim", "variant", "--pods", str(pods), "--nodes", str(nodes), "-o", str(out), flag, value
    )
    subprocess_input_error(res, flag)
    assert not out.exists()


def subprocess_input_error(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr[-2000:]
    assert lines[0].startswith("kubegpu: error: ")
    for needle in needles:
        assert needle in lines[0]


def test_alloc_huge_index_range_is_refused_before_it_is_expanded() -> None:
    res = run_limited("alloc", "builtin:seed-8gpu", "-k", "2", "--available", "0-99999999999999")
    subprocess_input_error(res, "--available", "99999999999999")


def test_plan_serve_absurd_model_size_is_an_input_error(cli: Runner) -> None:
    res = cli("plan", "serve", "--model-gb", "1e308", "--instances", "5", "--gpu", "H100-80GB")
    one_line_input_error(res, "H100-80GB")


def test_plan_serve_absurd_instance_count_is_refused() -> None:
    res = run_limited("plan", "serve", "--model-gb", "14", "--instances", "99999999999", "--gpu", "H100-80GB")
    subprocess_input_error(res, "--instances")


@pytest.mark.parametrize("value", ["inf", "nan", "1e300", "0.0001"])
def test_plan_pools_deadline_must_fit_active_deadline_seconds(cli: Runner, tmp_path, value) -> None:
    out = tmp_path / "pools"
    res = cli(
        "plan", "pools", "--gpus", "4", "--gpu", "A100-80GB", "--users", "20",
        "--deadline-hours", value, "--emit", str(out),
    )  # fmt: skip
    one_line_input_error(res, "--deadline-hours")
    assert not out.exists()


# --- the agent: start-up checks only; nothing may be served when they fail -------------------------------


def run_agent(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_limited(
        "agent", "--node-spec", "builtin:seed-8gpu", "--kubelet-socket", "", *args, cwd=tmp_path
    )


def agent_input_error(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("kubegpu: error: ")
    for needle in needles:
        assert needle in last


def test_agent_config_that_is_not_text_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(b"\xf7\xfe\x00\x81 binary garbage")
    plugin_dir = tmp_path / "dp"
    res = run_agent(tmp_path, "--config", str(config), "--device-plugin-dir", str(plugin_dir))
    agent_input_error(res, str(config), "UTF-8")
    assert not plugin_dir.exists()


def test_agent_config_with_absurd_replicas_is_refused_at_start(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 99999999999999999999\n"
    )
    plugin_dir = tmp_path / "dp"
    res = run_agent(tmp_path, "--config", str(config), "--device-plugin-dir", str(plugin_dir))
    agent_input_error(res, "sharing.timeSlicing.resources[0].replicas")


@pytest.mark.parametrize("kind", ["a-file", "missing-parent"])
def test_agent_device_plugin_dir_that_cannot_be_created_names_the_flag(tmp_path: Path, kind) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    plugin_dir = blocker if kind == "a-file" else blocker / "sub"
    res = run_agent(tmp_path, "--device-plugin-dir", str(plugin_dir))
    agent_input_error(res, "--device-plugin-dir")


@pytest.mark.parametrize("kind", ["a-directory", "missing-parent"])
def test_agent_fault_file_that_can_never_be_read_is_refused_before_serving(tmp_path: Path, kind) -> None:
    (tmp_path / "faults").mkdir()
    fault = tmp_path / "faults" if kind == "a-directory" else tmp_path / "nowhere" / "faults.jsonl"
    plugin_dir = tmp_path / "dp"
    res = run_agent(tmp_path, "--fault-file", str(fault), "--device-plugin-dir", str(plugin_dir))
    agent_input_error(res, "--fault-file")
    assert not plugin_dir.exists()


# --- kubegpu mig validate FILE ----------------------------------------------------------------------------


def _laughs(depth: int = 9) -> str:
    """An alias bomb: 9**depth paths through nine references each (the 'billion laughs')."""
    lines = ["version: v1", "l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, depth + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    lines.append("mig-configs: {a: [{devices: all, mig-enabled: false}]}")
    return "\n".join(lines) + "\n"


def test_mig_validate_an_alias_bomb_is_refused_at_once_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_laughs())
    res = run_limited("mig", "validate", str(path))
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip() == (
        f"kubegpu: error: {path}:2: l0: unknown key 'l0'; allowed: mig-configs, version"
    )


def test_mig_validate_an_absurd_count_is_a_broken_rule_not_a_huge_list(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
        '      mig-devices: {"1g.10gb": 1000000000000000000}\n'
    )
    res = run_limited("mig", "validate", str(path), "--model", "H100-80GB")
    assert res.returncode == 1, res.stderr[-2000:]
    assert "1g.10gb appears 1000000000000000000 times, but at most 7" in res.stdout


@pytest.mark.parametrize("kind", ["unreadable", "binary"])
def test_mig_validate_a_file_that_cannot_be_read_is_one_line(cli: Runner, tmp_path: Path, kind) -> None:
    path = Path(UNREADABLE) if kind == "unreadable" else tmp_path / "binary.yaml"
    if kind == "binary":
        path.write_bytes(b"\xf7\xfe\x00\x81 binary garbage")
    one_line_input_error(cli("mig", "validate", str(path)), str(path), "cannot read")


# --- every command's --help shows how to call it ---------------------------------------------------------

COMMANDS = [
    (), ("version",), ("demo",), ("topo",), ("alloc",), ("mig",), ("mig", "profiles"), ("mig", "validate"),
    ("plan",), ("plan", "serve"), ("plan", "pools"), ("plan", "comm"), ("sim",), ("sim", "variant"),
    ("doctor",), ("doctor", "node"), ("doctor", "cluster"), ("doctor", "pod"), ("agent",),
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "kubegpu")
def test_every_help_shows_an_example(cli: Runner, command) -> None:
    res = cli(*command, "--help")
    assert res.code == 0
    assert "Example" in res.out
    assert f"kubegpu {' '.join(command)}".strip() in res.out.split("Example", 1)[1]

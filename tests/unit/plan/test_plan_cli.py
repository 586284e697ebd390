"""`kubegpu plan` on the command line: seed answers in --json, --emit writes parseable files, bad
input exits 2 with one line and no traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.cli.app import main

EXERCISE1 = ["plan", "serve", "--model-gb", "14", "--instances", "5", "--gpu", "H100-80GB", "--multi-tenant"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


def as_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def test_serve_json_has_the_documented_shape_and_exercise1_answer(capsys: pytest.CaptureFixture[str]) -> None:
    doc = as_json(capsys, *EXERCISE1)
    rec = doc["recommendation"]
    assert {k: rec[k] for k in ("mode", "profile", "gpus_needed", "instances_per_gpu")} == {
        "mode": "mig",
        "profile": "2g.20gb",
        "gpus_needed": 2,
        "instances_per_gpu": 3,
    }
    assert isinstance(rec["reasons"], list) and rec["reasons"]
    keys = {
        "mode",
        "profile",
        "fits",
        "reason",
        "instances_per_gpu",
        "gpus_needed",
        "step_ms",
        "kv_gb_left",
        "isolation",
    }
    for option in doc["options"]:
        assert keys <= set(option)
        assert option["mode"] in {"exclusive", "mig", "time-slicing", "mps"}
        assert option["isolation"] in {"hardware", "none"}
    small = next(o for o in doc["options"] if o["profile"] == "1g.10gb")
    assert small["fits"] is False
    assert len(doc["alternatives"]) == 3


def test_serve_table_prints_the_seed_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *EXERCISE1)
    assert code == 0
    for text in ("4.18", "14.63", "8.36", "12.54", "Recommendation: MIG 2g.20gb", "(3 + 2)"):
        assert text in out


def test_serve_emit_writes_yaml_that_parses(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, *EXERCISE1, "--emit", str(tmp_path / "out"))
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "mig-parted.yaml" in names and "tenants.yaml" in names and "nodes.sh" in names
    for p in (tmp_path / "out").glob("*.yaml"):
        assert list(yaml.safe_load_all(p.read_text()))
    assert "Wrote" in out


def test_serve_with_no_surviving_option_exits_1_and_emits_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, *EXERCISE1, "--gpus-available", "1", "--emit", str(tmp_path / "out"))
    assert code == 1
    assert "nothing fits in 1 GPU(s)" in out
    assert not (tmp_path / "out").exists()
    assert "nothing emitted" in err


def test_pools_json_reproduces_exercise3(capsys: pytest.CaptureFixture[str]) -> None:
    doc = as_json(
        capsys, "plan", "pools", "--gpus", "4", "--gpu", "A100-80GB", "--users", "20", "--exclusive", "2"
    )
    pools = {p["name"]: p for p in doc["pools"]}
    assert pools["time-sliced"]["virtual_gpus"] == 8
    assert pools["exclusive"]["gpus"] == 2
    assert doc["virtual_gpus"] == 8
    assert any("isolates no memory" in w for w in doc["warnings"])


def test_pools_emit_writes_the_pool_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(
        capsys, "plan", "pools", "--gpus", "4", "--gpu", "A100-80GB", "--users", "20", "--emit", str(tmp_path)
    )
    assert code == 0, err
    names = {p.name for p in tmp_path.iterdir()}
    assert {"limitrange.yaml", "priorityclasses.yaml", "nodes-time-sliced.sh", "nodes-exclusive.sh"} <= names


def test_comm_defaults_are_the_seeds_exercise2(capsys: pytest.CaptureFixture[str]) -> None:
    doc = as_json(capsys, "plan", "comm")
    assert doc["inside"]["allreduce_us"] == pytest.approx(3.333, abs=0.001)
    assert doc["across"]["allreduce_us"] == pytest.approx(25.0)
    assert doc["inside"]["step_comm_ms"] == pytest.approx(0.5333, abs=0.0001)
    assert doc["across"]["step_comm_ms"] == pytest.approx(4.0)


def test_comm_with_model_size_adds_the_weight_read(capsys: pytest.CaptureFixture[str]) -> None:
    doc = as_json(capsys, "plan", "comm", "--model-gb", "140", "--gpu", "H100-80GB")
    assert doc["base_step_ms"] == pytest.approx(35 / 3350 * 1000, abs=0.001)
    assert doc["across"]["step_ms"] == pytest.approx(doc["base_step_ms"] + 4.0, abs=0.001)


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "serve", "--model-gb", "14", "--instances", "5", "--gpu", "B300"],
        ["plan", "serve", "--model-gb", "200", "--instances", "5", "--gpu", "H100-80GB"],
        ["plan", "serve", "--model-gb", "14", "--instances", "0", "--gpu", "H100-80GB"],
        ["plan", "serve", "--model-gb", "-14", "--instances", "5", "--gpu", "H100-80GB"],
        [
            "plan",
            "serve",
            "--model-gb",
            "14",
            "--instances",
            "5",
            "--gpu",
            "H100-80GB",
            "--kv-gb-per-instance",
            "-1",
        ],
        ["plan", "serve", "--model-gb", "14", "--instances", "5", "--gpu", "H100-80GB", "--dtype", "int3"],
        ["plan", "serve", "--model-gb", "lots", "--instances", "5", "--gpu", "H100-80GB"],
        ["plan", "pools", "--gpus", "4", "--gpu", "A100-80GB", "--users", "20", "--exclusive", "9"],
        ["plan", "comm", "--tp", "1"],
        ["plan", "comm", "--link-gbs", "0"],
        ["plan", "comm", "--link-gbs", "1e-320"],
        ["plan", "serve", "--model-gb", "1e-320", "--instances", "5", "--gpu", "H100-80GB"],
        ["plan", "comm", "--allreduce-mb", "1e308", "--layers", "1000000000", "--json"],
        ["plan", "comm", "--tp", "99999999999999999999"],
        ["plan", "comm", "--model-gb", "1e309"],
        ["plan", "pools", "--gpus", "99999999999999999999", "--gpu", "A100-80GB", "--users", "20"],
        [
            "plan",
            "serve",
            "--model-gb",
            "14",
            "--instances",
            "5",
            "--gpu",
            "H100-80GB",
            "--max-step-ms",
            "inf",
        ],
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback" not in err + out
    assert err.strip()


@pytest.mark.parametrize("cmd", ["serve", "pools", "comm"])
def test_help_shows_examples(capsys: pytest.CaptureFixture[str], cmd: str) -> None:
    code, out, _ = run(capsys, "plan", cmd, "--help")
    assert code == 0
    assert "Examples" in out and f"kubegpu plan {cmd}" in out


@pytest.mark.parametrize(
    ("tenants", "message"),
    [
        (["BAD NS!"], "--tenant 'BAD NS!': not a namespace name"),
        ([""], "--tenant '': not a namespace name"),
        (["a" * 64], "at most 63"),
        (["team-a", "team-a"], "--tenant 'team-a': given twice"),
    ],
)
def test_serve_refuses_a_tenant_that_is_not_a_namespace_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tenants: list[str], message: str
) -> None:
    flags = [arg for t in tenants for arg in ("--tenant", t)]
    code, _, err = run(capsys, *EXERCISE1[:-1], *flags, "--emit", str(tmp_path / "out"))
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "command", [EXERCISE1, ["plan", "pools", "--gpus", "4", "--gpu", "A100-80GB", "--users", "20"]]
)
def test_an_empty_emit_path_is_refused_instead_of_writing_into_the_current_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *command, "--emit", "")
    assert code == 2
    assert "--emit: the path is empty" in err
    assert list(tmp_path.iterdir()) == []


def test_pools_refuses_more_replicas_than_the_agent_accepts_before_writing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "pools"
    argv = ["plan", "pools", "--gpus", "4", "--gpu", "A100-80GB", "--users", "20", "--replicas", "999999999"]
    code, _, err = run(capsys, *argv, "--emit", str(out_dir))
    assert code == 2
    assert "--replicas must be between 2" in err and "1024" in err
    assert not out_dir.exists()


def test_comm_json_stays_finite_at_the_edges_of_every_range(capsys: pytest.CaptureFixture[str]) -> None:
    edges = ["--tp", "1024", "--layers", "10000", "--per-layer", "100", "--allreduce-mb", "1e6"]
    edges += ["--link-gbs", "0.001", "--cross-gbs", "1e6", "--step-ms", "1e7"]
    code, out, err = run(capsys, "plan", "comm", *edges, "--json")
    assert code == 0, err

    def refuse(constant: str) -> float:
        raise AssertionError(f"{constant} in --json output")

    doc = json.loads(out, parse_constant=refuse)
    assert doc["inside"]["step_comm_ms"] > 0

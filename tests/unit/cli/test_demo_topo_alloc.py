"""demo, topo and alloc as a user runs them: the seed's numbers, JSON shapes, clean errors."""

from __future__ import annotations

import json

import pytest

from tests.unit.cli.conftest import Runner


def test_demo_prints_every_seed_number(cli: Runner) -> None:
    res = cli("demo")
    assert res.code == 0, res.err
    text = res.out
    for expected in (
        "[2, 3, 4, 5]",
        "18",
        "[4, 5, 6, 7]",
        "6.3 ms",
        "3.1 ms",
        "2.1 ms",
        "0.9 ms",
        "14%",
        "29%",
        "43%",
        "100%",
        "4.18 ms",
        "14.63 ms",
        "8.36 ms",
        "12.54 ms",
        "1g.10gb",
    ):
        assert expected in text, expected
    assert "do not fit 1g.10gb" in text


def test_demo_json_carries_the_seed_numbers(cli: Runner) -> None:
    res = cli("demo", "--json")
    data = json.loads(res.out)
    two, four = data["picks"]
    assert two["by_index"] == {"devices": [2, 3], "cost": 1.0}
    assert two["topology_aware"] == {"devices": [2, 3], "cost": 1.0}
    assert four["by_index"] == {"devices": [2, 3, 4, 5], "cost": 18.0}
    assert four["topology_aware"] == {"devices": [4, 5, 6, 7], "cost": 6.0}
    mig = {row["profile"]: (row["instances"], row["memory_gb"], row["decode_ms_3gb"]) for row in data["mig"]}
    assert mig == {
        "1g.10gb": (7, 10, 6.27),
        "2g.20gb": (3, 20, 3.13),
        "3g.40gb": (2, 40, 2.09),
        "7g.80gb": (1, 80, 0.9),
    }
    steps = [(r["mode"], r["step_ms"], r["instances"]) for r in data["sharing"]]
    assert steps == [
        ("exclusive", 4.18, 1),
        ("mig", 14.63, 3),
        ("time-slicing", 8.36, 2),
        ("time-slicing", 12.54, 3),
    ]
    assert "1g.10gb" in data["too_small_for_14gb"]


def test_demo_in_chinese(cli: Runner) -> None:
    res = cli("demo", "--lang", "zh")
    assert res.code == 0
    assert "拓扑感知" in res.out and "14.63 ms" in res.out


def test_demo_rejects_unknown_language(cli: Runner) -> None:
    res = cli("demo", "--lang", "fr")
    assert res.code == 2
    assert "en or zh" in res.err and "Traceback" not in res.err


def test_topo_json_shape(cli: Runner) -> None:
    res = cli("topo", "builtin:seed-8gpu", "--json")
    data = json.loads(res.out)
    assert [g["index"] for g in data["gpus"]] == list(range(8))
    assert all(g["uuid"].startswith("GPU-") and g["model"] == "H100-80GB" for g in data["gpus"])
    assert data["cost"][0][0] == 0 and data["cost"][0][4] == 4 and data["cost"][1][2] == 1
    assert data["links"][0][5] == "SYS"


def test_topo_table_shows_links_like_nvidia_smi(cli: Runner) -> None:
    res = cli("topo", "builtin:pcie-8gpu")
    assert res.code == 0
    assert "PIX" in res.out and "PHB" in res.out and "SYS" in res.out


def test_alloc_json_seed_case(cli: Runner) -> None:
    res = cli("alloc", "builtin:seed-8gpu", "--count", "4", "--available", "2,3,4,5,6,7", "--json")
    data = json.loads(res.out)
    assert data["devices"] == [4, 5, 6, 7]
    assert data["cost"] == 6
    assert data["by_index"] == {"devices": [2, 3, 4, 5], "cost": 18}


def test_alloc_must_include(cli: Runner) -> None:
    data = json.loads(cli("alloc", "builtin:hgx-16", "-k", "3", "--must-include", "5", "--json").out)
    assert 5 in data["devices"] and len(data["devices"]) == 3
    assert set(data["devices"]) <= {4, 5, 6, 7}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("alloc", "builtin:seed-8gpu", "--count", "9"), 1, "only 8 are available"),
        (("alloc", "builtin:seed-8gpu", "--count", "2", "--available", "1,x"), 2, "'x' is not a GPU index"),
        (("alloc", "builtin:seed-8gpu", "--count", "2", "--available", "7-9"), 2, "GPU 8 does not exist"),
        (("topo", "builtin:nope"), 2, "unknown builtin spec"),
        (("topo", "/nonexistent/spec.yaml"), 2, "no such file"),
        (("alloc", "builtin:seed-8gpu"), 2, "--count"),
    ],
)
def test_bad_input_is_one_line_and_a_nonzero_exit(args: tuple[str, ...], code: int, message: str) -> None:
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "kubegpu", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == code, res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr


def test_topo_of_a_file_without_a_matrix_is_one_line_and_exit_2(cli: Runner, tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "job.log"
    path.write_text("epoch 1: loss 0.3\nepoch 2: loss 0.2\n")
    res = cli("topo", str(path))
    assert res.code == 2
    assert f"no nvidia-smi topology matrix found in {path}" in res.err
    assert "Traceback" not in res.err


def test_alloc_on_a_dgx1_capture_takes_a_fully_nvlinked_quad(cli: Runner) -> None:
    from pathlib import Path

    capture = Path(__file__).parents[1] / "sources" / "captures" / "dgx1-v100-dlperf-report.txt"
    for extra in ((), ("--gpu-model", "V100-32GB")):
        res = cli("alloc", str(capture), "--count", "4", "--available", "1-7", "--json", *extra)
        assert res.code == 0, res.err
        data = json.loads(res.out)
        assert data["devices"] == [4, 5, 6, 7]
        assert data["cost"] <= data["by_index"]["cost"]
    res = cli("topo", "builtin:dgx1-v100", "--gpu-model", "V100-32GB")
    assert res.code == 2 and "--gpu-model is for nvidia-smi captures" in res.err

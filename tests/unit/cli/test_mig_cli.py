"""`kubegpu mig`: profiles per model, layout validation with start slots (exit 0) or the precise
reason (exit 1); unknown models or profiles exit 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubegpu.cli.app import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


def test_profiles_lists_every_h100_profile_with_slots(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "mig", "profiles", "H100-80GB", "--json")
    assert code == 0
    doc = json.loads(out)
    by_name = {p["name"]: p for p in doc["profiles"]}
    assert set(by_name) == {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
    assert by_name["2g.20gb"]["max_count"] == 3
    assert by_name["3g.40gb"]["start_slots"] == [0, 4]
    assert by_name["1g.10gb+me"]["resource"] == "nvidia.com/mig-1g.10gb.me"


def test_profiles_table_for_a100_40gb(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "mig", "profiles", "A100-40GB")
    assert code == 0
    assert "1g.5gb" in out and "7g.40gb" in out


def test_valid_layout_exits_0_with_each_start_slot(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "mig", "validate", "H100-80GB", "3g.40gb,2g.20gb,1g.10gb", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["valid"] is True
    assert [(i["profile"], i["start_slot"]) for i in doc["instances"]] == [
        ("3g.40gb", 0),
        ("2g.20gb", 4),
        ("1g.10gb", 6),
    ]


def test_valid_layout_table_shows_slots(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "mig", "validate", "H100-80GB", "4g.40gb,3g.40gb")
    assert code == 0
    assert "memory slices [0 0 0 0 1 1 1 1]" in out


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        ("2g.20gb,2g.20gb,2g.20gb,2g.20gb", "2g.20gb appears 4 times, but at most 3"),
        ("3g.40gb,3g.40gb,1g.10gb", "9 memory slices"),
        ("2g.20gb@2,3g.40gb@0", "overlaps"),
        ("3g.40gb@2", "not a valid start slot"),
    ],
)
def test_invalid_layout_exits_1_with_the_precise_reason(
    capsys: pytest.CaptureFixture[str], layout: str, reason: str
) -> None:
    code, out, _ = run(capsys, "mig", "validate", "H100-80GB", layout)
    assert code == 1
    assert reason in out
    code, out, _ = run(capsys, "mig", "validate", "H100-80GB", layout, "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["valid"] is False and reason in doc["reason"]


@pytest.mark.parametrize(
    "argv",
    [
        ["mig", "profiles", "T4"],
        ["mig", "profiles", "B300"],
        ["mig", "validate", "H100-80GB", "5g.50gb"],
        ["mig", "validate", "H100-80GB", ","],
        ["mig", "validate", "H100-80GB", "1g.10gb@x"],
        ["mig", "validate", "H100-80GB"],
    ],
)
def test_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback" not in out + err
    assert err.strip()


@pytest.mark.parametrize("cmd", ["profiles", "validate"])
def test_help_shows_examples(capsys: pytest.CaptureFixture[str], cmd: str) -> None:
    code, out, _ = run(capsys, "mig", cmd, "--help")
    assert code == 0
    assert "Examples" in out and f"kubegpu mig {cmd}" in out


# `kubegpu mig validate FILE`: mig-parted files, every named config for every model.

BAD_FILE = """\
version: v1
mig-configs:
  too-many-2g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "2g.20gb": 4
  a30-only:
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.6gb": 4
"""


def test_validate_builtin_defaults_exits_0_with_a_placement_per_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "mig", "validate", "builtin:mig-parted-default", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["valid"] is True
    configs = {c["name"]: {m["model"]: m for m in c["models"]} for c in doc["configs"]}
    h100 = configs["all-balanced"]["H100-80GB"]
    assert h100["status"] == "valid"
    (entry,) = h100["entries"]
    assert sorted((i["profile"], i["start_slot"]) for i in entry["instances"]) == [
        ("1g.10gb", 2),
        ("1g.10gb", 3),
        ("2g.20gb", 0),
        ("3g.40gb", 4),
    ]
    assert configs["all-1g.5gb"]["H100-80GB"]["status"] == "not applicable"
    assert configs["all-1g.5gb"]["A100-40GB"]["status"] == "valid"


def test_validate_file_with_a_broken_layout_exits_1_and_names_the_rule(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(BAD_FILE)
    code, out, _ = run(capsys, "mig", "validate", str(path))
    assert code == 1
    assert "2g.20gb appears 4 times, but at most 3 fit on one H100-80GB" in out
    assert "A30: kubegpu has no MIG profiles for it" in out
    code, out, _ = run(capsys, "mig", "validate", str(path), "--model", "A100-40GB", "--json")
    assert code == 0  # on an A100-40GB nothing applies: 2g.20gb is not one of its profiles
    doc = json.loads(out)
    assert [m["model"] for c in doc["configs"] for m in c["models"]] == ["A100-40GB", "A100-40GB"]
    assert {m["status"] for c in doc["configs"] for m in c["models"]} == {"not applicable"}


# Entries of NVIDIA's current default mig-parted config for RTX PRO 6000 Blackwell, whose profiles
# carry mig-parted's attribute syntax and which kubegpu's catalogue does not describe.
RTX_PRO_FILE = """\
version: v1
mig-configs:
  all-balanced:
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
  all-1g.24gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb": 4
  all-1g.24gb.gfx:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb+gfx": 4
  all-1g.24gb.me.all:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb+me.all": 1
  all-1g.24gb-me:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb-me": 4
  all-2g.48gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "2g.48gb": 2
  all-4g.96gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "4g.96gb": 1
"""


def test_profiles_of_a_gpu_kubegpu_does_not_know_are_not_applicable_not_invalid(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "config-default.yaml"
    path.write_text(RTX_PRO_FILE)
    code, out, _ = run(capsys, "mig", "validate", str(path), "--model", "H100-80GB", "--json")
    assert code == 0, out
    doc = json.loads(out)
    status = {c["name"]: c["models"][0]["status"] for c in doc["configs"]}
    assert status.pop("all-balanced") == "valid"
    assert set(status.values()) == {"not applicable"}
    code, out, _ = run(capsys, "mig", "validate", str(path))
    assert code == 0, out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      bogus: 1\n",
            ":6: ",
        ),
        ("version: v2\nmig-configs: {}\n", ":1: version: expected v1"),
        ("not: [valid\n", "not valid YAML"),
    ],
)
def test_validate_a_malformed_file_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "mig", "validate", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"kubegpu: error: {path}") and message in err


def test_validate_without_a_layout_or_file_exits_2_saying_what_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "mig", "validate", "H100-80GB")
    assert code == 2 and "H100-80GB needs a LAYOUT" in err
    code, _, err = run(capsys, "mig", "validate", str(tmp_path / "missing.yaml"))
    assert code == 2 and "no such file" in err
    code, _, err = run(capsys, "mig", "validate", "builtin:mig-parted-default", "--model", "L40S")
    assert code == 2 and "'L40S' has no MIG profiles" in err
    code, _, err = run(capsys, "mig", "validate", "H100-80GB", "7g.80gb", "--model", "A100-40GB")
    assert code == 2 and "--model is for validating a mig-parted FILE" in err

"""`kubegpu mig`: profiles per model, layout validation with start slots (exit 0) or the precise
reason (exit 1); unknown models or profiles exit 2 with one line."""

from __future__ import annotations

import json

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

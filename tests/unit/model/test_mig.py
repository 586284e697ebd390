"""MIG catalogue and placement rules, with the reference's examples."""

from __future__ import annotations

import pytest

from kubegpu.errors import InputError, MigLayoutError
from kubegpu.model.mig import mig_models, profile, profiles, validate_layout


def test_catalogue_covers_the_mig_models_with_seven_profiles_each() -> None:
    assert set(mig_models()) == {
        "A100-40GB",
        "A100-80GB",
        "A100-PCIe-40GB",
        "A100-PCIe-80GB",
        "H100-80GB",
        "H100-PCIe",
        "H100-NVL",
        "H200-141GB",
        "B200",
    }
    for model in mig_models():
        assert len(profiles(model)) == 7


def test_h100_profile_geometry() -> None:
    p = profile("H100-80GB", "3g.40gb")
    assert (p.compute_slices, p.memory_slices, p.max_count, p.start_slots) == (3, 4, 2, (0, 4))
    assert p.sm_count == 60
    assert profile("h100-80gb", "1g.10gb.me").name == "1g.10gb+me"
    assert profile("A100-40GB", "7g.40gb").memory_gb == 40


@pytest.mark.parametrize(
    "layout",
    [
        ["4g.40gb@0", "3g.40gb@4"],
        ["3g.40gb@0", "2g.20gb@4", "1g.10gb@6"],
        ["2g.20gb@0", "2g.20gb@2", "2g.20gb@4", "1g.10gb@6"],
        ["2g.20gb", "1g.10gb", "1g.10gb", "3g.40gb"],
        ["1g.10gb"] * 7,
        ["7g.80gb"],
        ["1g.20gb"] * 4,
    ],
)
def test_valid_layouts_are_placed_without_overlap(layout: list[str]) -> None:
    placement = validate_layout("H100-80GB", layout)
    assert len(placement.instances) == len(layout)
    used: set[int] = set()
    for inst in placement.instances:
        assert inst.start_slot in inst.profile.start_slots
        span = set(range(inst.start_slot, inst.end_slot))
        assert not span & used
        used |= span
    assert placement.compute_slices <= 7


def test_balanced_layout_puts_the_3g_high_to_leave_room() -> None:
    placement = validate_layout("H100-80GB", ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"])
    slots = {str(i) for i in placement.instances}
    assert "3g.40gb@4" in slots and "2g.20gb@0" in slots


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        (["3g.40gb", "3g.40gb", "1g.10gb"], "needs 9 memory slices"),
        (["2g.20gb"] * 4, "2g.20gb appears 4 times, but at most 3"),
        (["1g.10gb@7"], "7 is not a valid start slot for 1g.10gb"),
        (["3g.40gb@2"], "2 is not a valid start slot for 3g.40gb"),
        (["2g.20gb@2", "3g.40gb@0"], "overlaps 3g.40gb@0 on memory slices 2-3"),
        (["1g.10gb+me", "1g.10gb+me"], "at most 1"),
        (["4g.40gb", "2g.20gb", "2g.20gb"], "needs 8 compute slices"),
        (["4g.40gb", "1g.20gb@4", "1g.20gb@6", "1g.10gb"], "needs 9 memory slices"),
        (["1g.10gb@1", "4g.40gb"], "no placement fits: 4g.40gb can start only at slots 0"),
    ],
)
def test_invalid_layouts_say_precisely_why(layout: list[str], reason: str) -> None:
    with pytest.raises(MigLayoutError, match=reason):
        validate_layout("H100-80GB", layout)


def test_unknown_profile_and_model_are_input_errors() -> None:
    with pytest.raises(InputError, match=r"no MIG profile '5g\.50gb'"):
        validate_layout("H100-80GB", ["5g.50gb"])
    with pytest.raises(InputError, match="has no MIG profiles"):
        profiles("T4")

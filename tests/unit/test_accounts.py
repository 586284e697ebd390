"""The seed's accounts: every number the seed prints."""

from __future__ import annotations

import pytest

from kubegpu.accounts import (
    allreduce_ring_bytes,
    allreduce_step_ms,
    allreduce_us,
    decode_ms,
    mig_layout,
    timeslice_latency,
)
from kubegpu.errors import InputError
from kubegpu.model.mig import profile


def test_decode_floor_for_a_7b_model_on_h100() -> None:
    assert round(decode_ms(14, 3350), 2) == 4.18


@pytest.mark.parametrize(
    ("name", "instances", "memory", "share_pct", "ms"),
    [
        ("1g.10gb", 7, 10, 14, 6.3),
        ("2g.20gb", 3, 20, 29, 3.1),
        ("3g.40gb", 2, 40, 43, 2.1),
        ("7g.80gb", 1, 80, 100, 0.9),
    ],
)
def test_mig_table_of_the_seed(name: str, instances: int, memory: int, share_pct: int, ms: float) -> None:
    share = mig_layout(profile("H100-80GB", name))
    assert (share.instances, share.memory_gb, round(share.share * 100)) == (instances, memory, share_pct)
    assert round(decode_ms(3, 3350, share.share), 1) == ms


def test_sharing_one_card_three_ways() -> None:
    base = decode_ms(14, 3350)
    mig = mig_layout(profile("H100-80GB", "2g.20gb"))
    assert round(decode_ms(14, 3350, mig.share), 2) == 14.63
    assert round(timeslice_latency(base, 2), 2) == 8.36
    assert round(timeslice_latency(base, 3), 2) == 12.54


def test_exercise_two_allreduce_inside_vs_across_nvlink_groups() -> None:
    assert allreduce_ring_bytes(4, 1e6) == pytest.approx(1.5e6)
    assert allreduce_us(4, 1, 450) == pytest.approx(3.33, abs=0.01)
    assert allreduce_us(4, 1, 60) == pytest.approx(25.0)
    assert allreduce_step_ms(4, 80, 2, 1, 450) == pytest.approx(0.53, abs=0.01)
    assert allreduce_step_ms(4, 80, 2, 1, 60) == pytest.approx(4.0)


def test_nonsense_inputs_are_rejected() -> None:
    with pytest.raises(InputError):
        decode_ms(-1, 3350)
    with pytest.raises(InputError):
        decode_ms(1, 3350, 0)
    with pytest.raises(InputError):
        timeslice_latency(1.0, 0)

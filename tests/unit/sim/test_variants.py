"""Trace variants: the knobs set the mix they name, the rest keeps the input's, same seed same file."""

from __future__ import annotations

import pytest

from kubegpu.errors import InputError
from kubegpu.sim.trace import NodeRecord, PodRecord
from kubegpu.sim.variants import VariantKnobs, make_variant, pod_mix

NODES = [
    NodeRecord(name="a", cpu_milli=96000, memory_mib=1 << 18, gpu_count=8, gpu_model="G2"),
    NodeRecord(name="b", cpu_milli=32000, memory_mib=1 << 18, gpu_count=2, gpu_model="T4"),
]


def pods() -> list[PodRecord]:
    out = []
    for i in range(100):
        kind = i % 10
        num, milli = (0, 0) if kind == 0 else (1, 500) if kind < 5 else (4, 1000) if kind == 9 else (1, 1000)
        out.append(
            PodRecord(name=f"p{i}", cpu_milli=1000, memory_mib=10, num_gpu=num, gpu_milli=milli, gpu_spec=())
        )
    return out


def test_unset_knobs_keep_the_input_mix() -> None:
    made = make_variant(pods(), NODES, VariantKnobs(count=4000, seed=1))
    base, got = pod_mix(pods()), pod_mix(made)
    for key in ("cpu_only", "shared", "multi_gpu"):
        assert got[key] == pytest.approx(base[key], abs=0.03)


@pytest.mark.parametrize(
    ("knobs", "key", "target"),
    [
        (VariantKnobs(cpu_only=0.4), "cpu_only", 0.4),
        (VariantKnobs(shared=0.8), "shared", 0.8),
        (VariantKnobs(multi_gpu=0.3), "multi_gpu", 0.3),
        (VariantKnobs(gpu_spec=0.5), "gpu_spec", 0.5),
    ],
)
def test_each_knob_sets_its_fraction(knobs: VariantKnobs, key: str, target: float) -> None:
    made = make_variant(pods(), NODES, VariantKnobs(**{**knobs.__dict__, "count": 4000, "seed": 2}))
    assert pod_mix(made)[key] == pytest.approx(target, abs=0.03)


def test_pinned_models_can_host_the_pod() -> None:
    made = make_variant(pods(), NODES, VariantKnobs(gpu_spec=1.0, multi_gpu=0.5, count=500, seed=3))
    sizes = {n.gpu_model: n.gpu_count for n in NODES}
    assert all(sizes[p.gpu_spec[0]] >= p.num_gpu for p in made if p.num_gpu)


def test_same_seed_same_variant() -> None:
    a = make_variant(pods(), NODES, VariantKnobs(shared=0.7, seed=5))
    b = make_variant(pods(), NODES, VariantKnobs(shared=0.7, seed=5))
    assert a == b


@pytest.mark.parametrize(
    "knobs",
    [VariantKnobs(cpu_only=1.5), VariantKnobs(shared=0.7, multi_gpu=0.5), VariantKnobs(count=0)],
)
def test_impossible_knobs_are_input_errors(knobs: VariantKnobs) -> None:
    with pytest.raises(InputError):
        make_variant(pods(), NODES, knobs)


def test_gpushare_preset_sets_sharing_pods_share_of_gpu_demand() -> None:
    from kubegpu.sim.variants import gpushare_variant

    base = pods()
    for percent in (20, 40, 60, 80, 100):
        made = gpushare_variant(base, percent, seed=5)
        assert len(made) == len(base)
        # CPU-only pods kept as they are, GPU pod count unchanged
        assert [p.cpu_milli for p in made if p.num_gpu == 0] == [p.cpu_milli for p in base if p.num_gpu == 0]
        gpu = [p for p in made if p.num_gpu]
        assert len(gpu) == sum(1 for p in base if p.num_gpu)
        # as many sharing pods as make them `percent` of the expected GPU demand: here sharing pods
        # ask 500 milli, the others (40 whole GPUs, 10 x 4 GPUs) 1600 on average
        share = percent / 100
        expected = round(share * 1600 * len(gpu) / ((1 - share) * 500 + share * 1600))
        assert sum(1 for p in gpu if p.gpu_milli < 1000) == expected
    assert gpushare_variant(base, 40, seed=5) == gpushare_variant(base, 40, seed=5)
    assert gpushare_variant(base, 40, seed=5) != gpushare_variant(base, 40, seed=6)
    with pytest.raises(InputError, match="unknown preset"):
        gpushare_variant(base, 50)

"""The serving planner reproduces the first seed's answers and applies its criteria in order."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.errors import InputError
from kubegpu.model.gpu import CATALOGUE, gpu_model
from kubegpu.plan.serve import (
    AlternativeKind,
    Dtype,
    Isolation,
    ServeOption,
    ServePlan,
    ServeRequest,
    SharingMode,
    plan_serve,
)

H100 = gpu_model("H100-80GB")


def exercise1(**overrides: object) -> ServePlan:
    args: dict[str, object] = {"model_gb": 14, "instances": 5, "gpu": H100, "multi_tenant": True}
    args.update(overrides)
    return plan_serve(ServeRequest(**args))  # type: ignore[arg-type]


def option(
    plan: ServePlan, mode: SharingMode, profile: str | None = None, per_gpu: int | None = None
) -> ServeOption:
    for o in plan.options:
        if o.mode is mode and o.profile == profile and (per_gpu is None or o.instances_per_gpu == per_gpu):
            return o
    raise AssertionError(f"no option {mode} {profile} x{per_gpu}")


def test_exercise1_recommends_2g20gb_three_per_card_on_two_cards() -> None:
    rec = exercise1().recommendation.option
    assert rec is not None
    assert (rec.mode, rec.profile) == (SharingMode.MIG, "2g.20gb")
    assert rec.instances_per_gpu == 3
    assert rec.gpus_needed == 2
    assert rec.per_gpu == (3, 2)
    assert rec.kv_gb_left == pytest.approx(5.0, abs=0.5)  # the seed: "about 5 GB left for KV"
    assert round(rec.step_ms, 2) == 14.63
    assert rec.isolation is Isolation.HARDWARE


def test_exercise1_rejects_1g10gb_because_10gb_is_less_than_14gb_of_weights() -> None:
    plan = exercise1()
    small = option(plan, SharingMode.MIG, "1g.10gb")
    assert not small.fits
    assert "10 GB <" in small.reason and "14 GB weights" in small.reason
    assert any("1g.10gb rejected" in r for r in plan.recommendation.reasons)


def test_exercise1_reasons_follow_the_seeds_order_and_compare_with_exclusive() -> None:
    reasons = exercise1().recommendation.reasons
    order = [
        next(i for i, r in enumerate(reasons) if r.startswith(prefix))
        for prefix in ("memory:", "multi-tenant:", "fits:", "fewest cards:", "decode")
    ]
    assert order == sorted(order)
    assert "14.63 ms" in reasons[-1] and "4.18 ms" in reasons[-1]
    assert "(3 + 2)" in next(r for r in reasons if r.startswith("fewest cards:"))


def test_exercise1_lists_the_seeds_three_alternatives() -> None:
    alts = {a.kind: a for a in exercise1().alternatives}
    assert set(alts) == {AlternativeKind.MERGE, AlternativeKind.FP8, AlternativeKind.QUOTA}
    assert alts[AlternativeKind.MERGE].gpus_needed == 1
    fp8 = alts[AlternativeKind.FP8]
    assert fp8.profile == "1g.10gb"  # 7 GB of FP8 weights barely fit the smallest slice
    assert fp8.kv_gb_left is not None and fp8.kv_gb_left < 7
    assert "ResourceQuota" in alts[AlternativeKind.QUOTA].summary


def test_seed_sharing_table_numbers() -> None:
    plan = exercise1(multi_tenant=False)
    assert round(option(plan, SharingMode.EXCLUSIVE).step_ms, 2) == 4.18
    assert option(plan, SharingMode.EXCLUSIVE).instances_per_gpu == 1
    mig = option(plan, SharingMode.MIG, "2g.20gb")
    assert (round(mig.step_ms, 2), mig.instances_per_gpu) == (14.63, 3)
    assert round(option(plan, SharingMode.TIME_SLICING, per_gpu=2).step_ms, 2) == 8.36
    assert round(option(plan, SharingMode.TIME_SLICING, per_gpu=3).step_ms, 2) == 12.54


def test_single_tenant_without_latency_needs_packs_onto_the_fewest_cards() -> None:
    rec = exercise1(multi_tenant=False).recommendation.option
    assert rec is not None
    assert rec.gpus_needed == 1
    assert rec.mode is SharingMode.MPS  # same cards and step as time-slicing, less jitter


def test_latency_sensitive_service_never_gets_time_slicing_or_mps() -> None:
    plan = exercise1(multi_tenant=False, latency_sensitive=True)
    rec = plan.recommendation.option
    assert rec is not None and rec.mode in (SharingMode.MIG, SharingMode.EXCLUSIVE)
    assert any(r.startswith("latency-sensitive:") for r in plan.recommendation.reasons)


def test_kv_requirement_moves_the_recommendation_to_a_bigger_slice() -> None:
    plan = exercise1(kv_gb_per_instance=6)
    assert not option(plan, SharingMode.MIG, "2g.20gb").fits
    rec = plan.recommendation.option
    assert rec is not None and (rec.profile, rec.gpus_needed) == ("3g.40gb", 3)


def test_fp8_halves_weights_so_the_smallest_slice_fits() -> None:
    plan = exercise1(dtype=Dtype.FP8)
    assert plan.request.weights_gb == 7
    assert option(plan, SharingMode.MIG, "1g.10gb").fits
    assert round(plan.base_step_ms, 2) == 2.09
    rec = plan.recommendation.option
    assert rec is not None and rec.gpus_needed == 1


def test_too_few_gpus_gives_no_recommendation_and_says_why() -> None:
    plan = exercise1(gpus_available=1)
    assert plan.recommendation.option is None
    assert "nothing fits in 1 GPU(s)" in plan.recommendation.reasons[-1]


def test_step_target_excludes_slow_options() -> None:
    rec = exercise1(max_step_ms=10).recommendation.option
    assert rec is not None and rec.step_ms <= 10
    assert rec.profile == "3g.40gb"


def test_gpu_without_mig_offers_no_mig_option() -> None:
    plan = exercise1(gpu=gpu_model("L40S"))
    assert all(o.mode is not SharingMode.MIG for o in plan.options)
    assert any("does not support MIG" in n for n in plan.notes)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"instances": 0}, "--instances"),
        ({"model_gb": -1}, "--model-gb"),
        ({"model_gb": 0}, "--model-gb"),
        ({"kv_gb_per_instance": -2}, "--kv-gb-per-instance"),
        ({"reserve_gb": -1}, "--reserve-gb"),
        ({"gpus_available": 0}, "--gpus-available"),
        ({"model_gb": 200}, "more than a whole H100-80GB"),
        ({"model_gb": 16, "gpu": gpu_model("T4")}, "more than a whole T4"),
    ],
)
def test_bad_input_is_one_clear_input_error(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        exercise1(**overrides)


def test_unknown_gpu_model_names_the_known_ones() -> None:
    with pytest.raises(InputError, match="H100-80GB"):
        gpu_model("B300")


@settings(max_examples=60, deadline=None)
@given(
    req=st.builds(
        ServeRequest,
        model_gb=st.floats(min_value=0.5, max_value=60),
        instances=st.integers(min_value=1, max_value=20),
        gpu=st.sampled_from(sorted(CATALOGUE)).map(gpu_model),
        kv_gb_per_instance=st.floats(min_value=0, max_value=10),
        latency_sensitive=st.booleans(),
        multi_tenant=st.booleans(),
        gpus_available=st.one_of(st.none(), st.integers(min_value=1, max_value=10)),
    )
)
def test_recommendation_fits_meets_every_criterion_and_uses_the_fewest_cards(req: ServeRequest) -> None:
    kv, latency, tenants, available = (
        req.kv_gb_per_instance,
        req.latency_sensitive,
        req.multi_tenant,
        req.gpus_available,
    )
    instances = req.instances
    try:
        plan = plan_serve(req)
    except InputError:
        assert req.need_gb > req.gpu.memory_gb
        return

    def allowed(o: ServeOption) -> bool:
        hard = o.isolation is Isolation.HARDWARE
        return (
            o.fits
            and (hard or not (latency or tenants))
            and (available is None or o.gpus_needed <= available)
        )

    rec = plan.recommendation.option
    survivors = [o for o in plan.options if allowed(o)]
    if rec is None:
        assert not survivors
        return
    assert allowed(rec)
    assert rec.gpus_needed == min(o.gpus_needed for o in survivors)
    assert rec.gpus_needed == math.ceil(instances / rec.instances_per_gpu)
    assert sum(rec.per_gpu) == instances
    assert rec.kv_gb_left >= kv


def test_every_criterion_given_is_named_in_the_reasons_even_when_it_removes_nothing_more() -> None:
    reasons = exercise1(latency_sensitive=True).recommendation.reasons
    assert any(r.startswith("latency-sensitive:") for r in reasons)
    assert any(r.startswith("multi-tenant:") for r in reasons)

"""Placement scores on hand-built node states: the fragmentation measure and each policy's choice."""

from __future__ import annotations

import numpy as np
import pytest

from kubegpu.sim.scoring import (
    CLASS_SHARED,
    Policy,
    fragmentation,
    score_nodes,
    typical_shapes,
)
from tests.unit.sim.conftest import node_arrays, pod

ANY = np.ones(2, dtype=bool)
ONLY_MODEL_1 = np.array([False, True])


def shapes_half_whole_cpu() -> object:
    # popularity 0.5 <1 core, 0.5 GPU>, 0.25 <1 core, 1 GPU>, 0.25 CPU-only
    return typical_shapes(
        [(1000, 500, 1, ANY, "a"), (1000, 1000, 1, ANY, "b"), (1000, 0, 0, ANY, "c")],
        [2, 1, 1],
        n_models=2,
        coverage=1.0,
    )


def test_fragmentation_counts_only_gpus_too_small_when_the_shape_fits() -> None:
    shapes = shapes_half_whole_cpu()
    nodes = node_arrays([[1000, 300]], cpu=[4000])
    # half: 300 too small; whole: 300 too small; CPU-only: all 1300 idle
    frag = fragmentation(nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes)  # type: ignore[arg-type]
    assert frag[0] == pytest.approx(0.5 * 300 + 0.25 * 300 + 0.25 * 1300)


def test_fragmentation_counts_all_idle_gpu_when_cpu_is_short_or_the_model_is_refused() -> None:
    shapes = typical_shapes(
        [(1000, 500, 1, ONLY_MODEL_1, "a"), (1000, 0, 0, ANY, "c")], [3, 1], n_models=2, coverage=1.0
    )
    nodes = node_arrays([[1000, 300], [1000, 300], [1000, 300]], cpu=[4000, 500, 4000], model=[1, 1, 0])
    frag = fragmentation(nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes)
    assert frag.tolist() == pytest.approx([0.75 * 300 + 0.25 * 1300, 1300, 1300])


def test_fragmentation_of_a_full_node_is_zero_and_of_a_multi_gpu_shape_needs_enough_gpus() -> None:
    shapes = typical_shapes([(1000, 1000, 2, ANY, "two")], [1], n_models=2, coverage=1.0)
    nodes = node_arrays([[0, 0], [1000, 0], [1000, 1000]])
    frag = fragmentation(nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes)
    assert frag.tolist() == [0, 1000, 0]


def test_typical_shapes_stop_at_the_shape_that_crosses_the_threshold() -> None:
    shape = [(1000 * i, 1000, 1, ANY, str(i)) for i in range(4)]
    exactly = typical_shapes(shape, [50, 30, 15, 5], n_models=2, coverage=0.95)
    assert exactly.count == 3 and exactly.coverage == pytest.approx(0.95)
    crossing = typical_shapes(shape, [50, 30, 14, 6], n_models=2, coverage=0.95)
    assert crossing.count == 4
    assert crossing.popularity.sum() == pytest.approx(1.0)


def score(
    policy: Policy, nodes: object, request: object, shapes: object = None
) -> tuple[list[float], list[int]]:
    result = score_nodes(policy, nodes, request, shapes or shapes_half_whole_cpu())  # type: ignore[arg-type]
    return result.score.tolist(), result.gpu.tolist()


@pytest.mark.parametrize("policy", list(Policy))
def test_every_policy_refuses_nodes_where_the_pod_does_not_fit(policy: Policy) -> None:
    nodes = node_arrays(
        [[1000, 1000], [400, 0], [1000, 1000], [1000, 1000], [1000, 1000]],
        cpu=[8000, 8000, 500, 8000, 8000],
        memory=[1000, 1000, 1000, 10, 1000],
        model=[1, 1, 1, 1, 0],
    )
    request = pod(cpu=1000, milli=500, memory=100)
    request = type(request)(cpu_milli=1000, memory_mib=100, num_gpu=1, gpu_milli=500, model_ok=ONLY_MODEL_1)
    scores, _ = score(policy, nodes, request)
    # node 1: no GPU with 500 free; node 2: CPU; node 3: memory; node 4: GPU model
    assert np.isfinite(scores[0])
    assert scores[1:] == [-np.inf] * 4


def test_fgd_fills_the_half_used_gpu_and_scores_integers() -> None:
    nodes = node_arrays([[1000, 1000], [500, 1000]])
    nodes.frag_milli[:] = fragmentation(
        nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes_half_whole_cpu()
    )  # type: ignore[arg-type]
    scores, gpus = score(Policy.FGD, nodes, pod(milli=500))
    assert int(np.argmax(scores)) == 1 and gpus[1] == 0
    assert all(s == int(s) and 0 <= s <= 100 for s in scores)


def test_fgd_keeps_whole_gpus_free_for_whole_gpu_pods() -> None:
    shapes = shapes_half_whole_cpu()
    nodes = node_arrays([[1000, 1000], [1000, 500]])
    nodes.frag_milli[:] = fragmentation(nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes)  # type: ignore[arg-type]
    scores, gpus = score(Policy.FGD, nodes, pod(milli=400), shapes)
    assert int(np.argmax(scores)) == 1 and gpus[1] == 1  # the 500 GPU, not a whole one


def test_bestfit_prefers_the_tightest_node_and_gpu() -> None:
    nodes = node_arrays([[1000, 1000], [1000, 600]], cpu=[8000, 8000])
    scores, gpus = score(Policy.BESTFIT, nodes, pod(milli=500))
    assert int(np.argmax(scores)) == 1 and gpus[1] == 1
    # 100 * (1 - ((8000-1000)/128000*0.5 + (1600-500)/8000*0.5)) truncated
    assert scores[1] == 90


def test_dotprod_prefers_the_smallest_product_of_free_and_request() -> None:
    nodes = node_arrays([[1000, 1000], [1000, 0]], cpu=[64_000, 64_000])
    scores, _ = score(Policy.DOTPROD, nodes, pod(cpu=32_000, milli=1000))
    # node 0: (0.5*0.25 + 0.25*0.125) / 2 = 0.078125 -> 92; node 1: (0.125 + 0.015625) / 2 -> 92.97 -> 92
    assert scores == [92, 92]
    scores, _ = score(Policy.DOTPROD, node_arrays([[1000] * 8, [1000, 0]], cpu=[64_000, 64_000]), pod(cpu=0))
    assert scores[1] > scores[0]


def test_packing_prefers_shared_gpus_then_used_nodes_then_empty_nodes() -> None:
    nodes = node_arrays([[1000, 1000], [1000, 0], [600, 1000]])
    scores, gpus = score(Policy.PACKING, nodes, pod(milli=500))
    assert scores == [31, 49, 94]  # empty: 33 - 2; free GPU of a used node: 50 - 1; shared: 100 - 60/10
    assert gpus[2] == 0
    whole, _ = score(Policy.PACKING, nodes, pod(milli=1000))
    assert whole == [31, 49, 49]
    cpu_only, _ = score(Policy.PACKING, nodes, pod(num=0, milli=0))
    assert cpu_only == [0, 0, 0]


def test_clustering_bands_by_the_classes_already_on_the_node() -> None:
    nodes = node_arrays(
        [[1000, 1000], [500, 1000], [500, 1000], [0, 1000]],
        classes={1: {CLASS_SHARED: 1}, 2: {CLASS_SHARED: 1, 1: 1}, 3: {1: 1}},
    )
    scores, _ = score(Policy.CLUSTERING, nodes, pod(milli=300))
    # idle 25 + 25*(8000-2000)//8000; only shared: 75 + ...; mixed: 50 + ...; other class only: 0 + ...
    assert scores == [25 + 18, 75 + 20, 50 + 20, 0 + 21]
    assert int(np.argmax(scores)) == 1


def test_random_scores_every_feasible_node_alike() -> None:
    nodes = node_arrays([[1000], [200], [1000]])
    scores, _ = score(Policy.RANDOM, nodes, pod(milli=500))
    assert scores == [0, -np.inf, 0]


def test_kubegpu_score_has_no_node_order_in_it() -> None:
    # identical nodes score identically: the fixed node order is the selector's job (policy.Order)
    nodes = node_arrays([[1000, 1000], [1000, 1000], [1000, 1000]])
    shapes = shapes_half_whole_cpu()
    nodes.frag_milli[:] = fragmentation(nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes)  # type: ignore[arg-type]
    scores, _ = score(Policy.KUBEGPU, nodes, pod(milli=1000), shapes)
    assert len(set(scores)) == 1


def test_kubegpu_sends_cpu_heavy_pods_away_from_nodes_whose_gpus_they_would_strand() -> None:
    # every typical shape needs little CPU, so FGD sees no difference between the two nodes
    shapes = typical_shapes([(100, 1000, 1, ANY, "a")], [1], n_models=2, coverage=1.0)
    nodes = node_arrays([[1000, 1000], [1000, 1000]], cpu=[16_000, 64_000])
    nodes.frag_milli[:] = fragmentation(nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes)
    request = pod(cpu=12_000, num=0, milli=0)
    fgd, _ = score(Policy.FGD, nodes, request, shapes)
    assert fgd[0] == fgd[1]
    ours, _ = score(Policy.KUBEGPU, nodes, request, shapes)
    assert ours[1] > ours[0]


def test_cpu_stranded_gpus_counts_idle_gpus_the_free_cpu_cannot_feed() -> None:
    from kubegpu.sim.scoring import cpu_stranded_gpus

    got = cpu_stranded_gpus(np.array([2000, 2000, 0]), np.array([16_000, 4_000, 0]), cores_per_gpu=8)
    assert got.tolist() == [0.0, 1.5, 0.0]


def test_scoring_module_needs_only_numpy_so_an_extender_can_import_it_unchanged() -> None:
    import subprocess
    import sys

    code = (
        "import sys, kubegpu.sim.scoring\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('kubegpu') or m.split('.')[0] in "
        "{'typer', 'rich', 'matplotlib', 'grpc', 'kubernetes', 'yaml'})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["kubegpu", "kubegpu.sim", "kubegpu.sim.scoring"]


def shapes_with_a_wasteful_share(*, whole: int = 5) -> object:
    # 810-milli pods leave 190 of a fresh GPU, which neither 470- nor 320-milli pods fit; ``whole``:
    # the weight of the 1-GPU shape
    return typical_shapes(
        [
            (3152, 810, 1, ANY, "a"),
            (6000, 470, 1, ANY, "b"),
            (4000, 320, 1, ANY, "c"),
            (12000, 1000, 1, ANY, "d"),
            (1000, 0, 0, ANY, "e"),
        ],
        [50, 30, 15, whole, 20],
        n_models=2,
        coverage=1.0,
    )


def test_kubegpu_target_weights_down_only_the_share_whose_leftover_no_typical_pod_fills() -> None:
    from kubegpu.sim.scoring import KUBEGPU_WASTEFUL_WEIGHT, kubegpu_target

    shapes = shapes_with_a_wasteful_share()
    target = kubegpu_target(shapes)  # type: ignore[arg-type]
    assert shapes.gpu_milli.tolist() == [810, 470, 320, 1000]  # type: ignore[attr-defined]
    assert target.weight.tolist() == [round(50 * KUBEGPU_WASTEFUL_WEIGHT), 30, 15, 5]
    # the CPU-only shapes keep their share of the total (up to rounding): 20 of 120
    cpu_only = (target.weight_total - int(target.weight.sum())) / target.weight_total
    assert abs(cpu_only - 20 / 120) < 1 / target.weight_total
    assert kubegpu_target(shapes) is target  # type: ignore[arg-type]


def test_kubegpu_target_is_fgds_when_typical_pods_fill_every_leftover() -> None:
    from kubegpu.sim.scoring import kubegpu_target

    # 160-milli pods (10 % of the GPU pods) fill what an 810-milli pod leaves
    shapes = typical_shapes(
        [(3152, 810, 1, ANY, "a"), (1000, 160, 1, ANY, "b"), (12000, 1000, 1, ANY, "c")],
        [50, 10, 40],
        n_models=2,
        coverage=1.0,
    )
    assert kubegpu_target(shapes) is shapes


def shapes_with_cpu_heavy_shares() -> object:
    # GPU demand 50x1000 + 20x470 + 10x470 + 4x500 + 16x250 milli, CPU 50x8 + 20x12 + 10x6 + 4x12 +
    # 16x2 cores: 11.1 cores per GPU, so a share is CPU-heavy above 22.3 cores per GPU
    return typical_shapes(
        [
            (8000, 1000, 1, ANY, "whole"),
            (12000, 470, 1, ANY, "heavy"),  # 25.5 cores per GPU, 20 % of the GPU pods
            (6000, 470, 1, ANY, "light"),  # 12.8
            (12000, 500, 1, ANY, "rare"),  # 24 cores per GPU but 4 % of the GPU pods
            (2000, 250, 1, ANY, "small"),  # 8
        ],
        [50, 20, 10, 4, 16],
        n_models=2,
        coverage=1.0,
    )


def _per_shape(shapes: object, values: object) -> dict[tuple[int, int], object]:
    """``values`` (one per shape) keyed by (CPU milli, GPU milli)."""
    return dict(
        zip(
            zip(shapes.cpu_milli.tolist(), shapes.gpu_milli.tolist(), strict=True),  # type: ignore[attr-defined]
            values.tolist(),  # type: ignore[attr-defined]
            strict=True,
        )
    )


def test_only_common_shares_with_twice_the_workloads_cores_per_gpu_are_cpu_heavy() -> None:
    from kubegpu.sim.scoring import cpu_heavy

    shapes = shapes_with_cpu_heavy_shares()
    assert _per_shape(shapes, cpu_heavy(shapes)) == {  # type: ignore[arg-type]
        (8000, 1000): False,  # whole GPUs are never shares
        (12000, 470): True,
        (6000, 470): False,
        (12000, 500): False,  # CPU-heavy, but under 5 % of the GPU shapes' weight
        (2000, 250): False,
    }


def test_kubegpu_target_weights_cpu_heavy_shares_down_and_keeps_the_rest() -> None:
    from kubegpu.sim.scoring import KUBEGPU_CPU_HEAVY_WEIGHT, kubegpu_target

    shapes = shapes_with_cpu_heavy_shares()
    target = kubegpu_target(shapes)  # type: ignore[arg-type]
    assert _per_shape(target, target.weight) == {
        (8000, 1000): 50,
        (12000, 470): round(20 * KUBEGPU_CPU_HEAVY_WEIGHT),
        (6000, 470): 10,
        (12000, 500): 4,
        (2000, 250): 16,
    }
    # with the factor at 1 nothing changes (no share here is wasteful)
    assert kubegpu_target(shapes, heavy=1.0) is shapes  # type: ignore[arg-type]


def test_kubegpu_opens_a_fresh_gpu_that_would_otherwise_take_a_wasteful_share() -> None:
    # FGD fills the GPU with 530 free (a 470 pod leaves 60 there); kubegpu gives the pod the fresh GPU,
    # which then can no longer take an 810-milli pod (190 idle for good at 130 % arrived)
    shapes = shapes_with_a_wasteful_share()
    nodes = node_arrays([[1000], [530]])
    nodes.frag_milli[:] = fragmentation(nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes)  # type: ignore[arg-type]
    request = pod(cpu=4000, milli=470)
    fgd, _ = score(Policy.FGD, nodes, request, shapes)
    assert fgd[1] > fgd[0]
    ours, _ = score(Policy.KUBEGPU, nodes, request, shapes)
    assert ours[0] > ours[1]


def shapes_to_spread() -> object:
    # more whole-GPU pods than shapes_with_a_wasteful_share: the target alone packs a 470 pod
    return shapes_with_a_wasteful_share(whole=20)


def _kubegpu_gpu(rows: list[list[int]], *, cpu: int, shapes: object, milli: int = 470) -> int:
    nodes = node_arrays(rows, cpu=[cpu] * len(rows))
    nodes.frag_milli[:] = fragmentation(nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes)  # type: ignore[arg-type]
    _, gpus = score(Policy.KUBEGPU, nodes, pod(cpu=4000, milli=milli), shapes)
    return gpus[0]


def test_kubegpu_spreads_a_share_onto_a_fresh_gpu_while_the_workload_has_wasteful_shares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kubegpu.sim import scoring
    from kubegpu.sim.scoring import wasteful_milli

    shapes = shapes_to_spread()
    assert wasteful_milli(shapes) == {810}  # type: ignore[arg-type]
    # kubegpu opens GPU 1 for the 470 pod, which an 810 pod then cannot take and a later 470 or
    # 320 pod fills; without the bonus (and under FGD) it fills GPU 0 (530 free, 60 left)
    assert _kubegpu_gpu([[530, 1000, 1000, 1000]], cpu=64_000, shapes=shapes) == 1
    monkeypatch.setattr(scoring, "KUBEGPU_SPREAD_BONUS", 0.0)
    assert _kubegpu_gpu([[530, 1000, 1000, 1000]], cpu=64_000, shapes=shapes) == 0


def test_kubegpu_packs_shares_where_spreading_would_starve_gpus_of_cpu_or_nothing_is_wasteful() -> None:
    shapes = shapes_to_spread()
    # 2,530 milli idle after the pod needs 12 cores per GPU (30.4 cores); 20 left is too few
    assert _kubegpu_gpu([[530, 1000, 1000, 1000]], cpu=24_000, shapes=shapes) == 0
    # the wasteful share itself is not spread: an 810 pod takes the GPU with 100 milli in use
    assert _kubegpu_gpu([[900, 1000, 1000, 1000]], cpu=64_000, shapes=shapes, milli=810) == 0
    # with a typical pod for every leftover (like the extender's default shapes) shares pack as FGD's
    assert _kubegpu_gpu([[500, 1000]], cpu=64_000, shapes=shapes_half_whole_cpu(), milli=500) == 0


def test_kubegpu_keeps_the_widest_nodes_whole_while_they_are_empty() -> None:
    shapes = shapes_to_spread()
    # the same empty 4-GPU node scores the bonus beside an 8-GPU node, and not as the widest node
    beside_wider = node_arrays([[1000] * 4, [1000] * 8])
    widest = node_arrays([[1000] * 4])
    request = pod(cpu=4000, milli=470)
    for nodes in (beside_wider, widest):
        frag = fragmentation(nodes.gpu_free_milli, nodes.cpu_left_milli, nodes.model_index, shapes)  # type: ignore[arg-type]
        nodes.frag_milli[:] = frag
    spread, _ = score(Policy.KUBEGPU, beside_wider, request, shapes)
    whole, _ = score(Policy.KUBEGPU, widest, request, shapes)
    assert spread[0] > whole[0]

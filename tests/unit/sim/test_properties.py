"""Property tests: trace files round-trip, and the fragmentation measure's invariants."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.sim.scoring import fragmentation, typical_shapes
from kubegpu.sim.trace import PodRecord, load_pods, write_pods

ANY = np.ones(2, dtype=bool)

pod_records = st.builds(
    lambda i, cpu, mem, kind, milli, spec: PodRecord(
        name=f"pod-{i}",
        cpu_milli=cpu,
        memory_mib=mem,
        num_gpu=kind,
        gpu_milli=0 if kind == 0 else (milli if kind == 1 else 1000),
        gpu_spec=spec if kind else (),
    ),
    st.integers(0, 10**6),
    st.integers(0, 128_000),
    st.integers(0, 1 << 20),
    st.sampled_from([0, 1, 2, 4, 8]),
    st.integers(1, 1000),
    st.sampled_from([(), ("T4",), ("V100M16", "V100M32")]),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(pod_records, min_size=1, max_size=20))
def test_written_pod_lists_load_back_identical(pods: list[PodRecord]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pods.csv"
        write_pods(path, pods)
        assert list(load_pods(path)) == pods


free_rows = st.lists(
    st.lists(st.integers(0, 100).map(lambda v: v * 10), min_size=8, max_size=8), min_size=1, max_size=6
)


@settings(max_examples=60, deadline=None)
@given(free_rows, st.integers(0, 64_000), st.randoms(use_true_random=False))
def test_fragmentation_is_between_zero_and_idle_and_ignores_gpu_order(
    rows: list[list[int]], cpu: int, rnd: object
) -> None:
    shapes = typical_shapes(
        [
            (4000, 500, 1, ANY, "a"),
            (11_000, 1000, 1, ANY, "b"),
            (8000, 1000, 4, ANY, "c"),
            (2000, 0, 0, ANY, "d"),
        ],
        [40, 30, 5, 25],
        n_models=2,
        coverage=1.0,
    )
    free = np.array(rows, dtype=np.int64)
    cpu_left = np.full(len(rows), cpu, dtype=np.int64)
    model = np.ones(len(rows), dtype=np.int64)
    frag = fragmentation(free, cpu_left, model, shapes)
    idle = free.sum(axis=1)
    assert (frag >= -1e-9).all() and (frag <= idle + 1e-9).all()
    shuffled = free.copy()
    for r in shuffled:
        rnd.shuffle(r)  # type: ignore[attr-defined]
    assert np.allclose(fragmentation(shuffled, cpu_left, model, shapes), frag)

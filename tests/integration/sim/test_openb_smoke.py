"""Smoke check on the real default trace (when the shared data folder has it): one seed, loose bounds.

The full fidelity check (10 seeds, the issue's tolerances) is ``bench/sim_fidelity.py``; this test
only guards against gross regressions and takes a few seconds. The trace is never copied into the
repository; without it the test is skipped with the reason, except in CI, where it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.trace import load_trace
from kubegpu.sim.workload import prepare

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data" / "openb"
DATA = Path(os.environ.get("KUBEGPU_OPENB_DIR", SHARED))
NODES, PODS = DATA / "openb_node_list_gpu_node.csv", DATA / "openb_pod_list_default.csv"

pytestmark = [pytest.mark.integration]


@pytest.fixture(autouse=True)
def _trace_present() -> None:
    """Skip loudly on a developer machine without the trace; in CI (which has shared/) fail instead."""
    if NODES.is_file() and PODS.is_file():
        return
    reason = f"the default openb trace is not in {DATA} (set KUBEGPU_OPENB_DIR)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must have ../shared/data/openb beside the clone")
    pytest.skip(reason)


def at(run: object, pct: int) -> float:
    arrived = run.arrived_milli / (run.total_gpu_milli / 100)  # type: ignore[attr-defined]
    alloc = run.allocated_milli / (run.total_gpu_milli / 100)  # type: ignore[attr-defined]
    return float(alloc[(arrived.round() == pct)].round(2).mean())


def test_default_trace_one_seed_is_close_to_the_published_numbers() -> None:
    w = prepare(load_trace(NODES, PODS))
    assert w.total_gpus == 6212 and len(w.node_names) == 1213
    assert w.typical.count == 35
    fgd = replay(w, Policy.FGD, 42)
    assert fgd.empty_frag_milli / w.total_gpu_milli * 100 == pytest.approx(13.94, abs=0.05)
    assert at(fgd, 130) == pytest.approx(95.39, abs=1.0)
    bestfit = replay(w, Policy.BESTFIT, 42)
    assert at(bestfit, 130) == pytest.approx(93.08, abs=1.0)
    ours = replay(w, Policy.KUBEGPU, 42)
    assert at(ours, 130) > at(fgd, 130)

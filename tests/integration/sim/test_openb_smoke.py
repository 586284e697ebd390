"""Smoke check on the real default trace, the copy that ships with kubegpu: one seed, loose bounds.

The full fidelity check (10 seeds, the issue's tolerances) is ``bench/sim_fidelity.py``; this test
only guards against gross regressions and takes a few seconds. The trace is part of the package
(``kubegpu.sim.openb``), so this test runs everywhere, with nothing beside the clone.
"""

from __future__ import annotations

import pytest

from kubegpu.sim.openb import default_trace
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.trace import load_trace
from kubegpu.sim.workload import prepare

pytestmark = [pytest.mark.integration]


def at(run: object, pct: int) -> float:
    arrived = run.arrived_milli / (run.total_gpu_milli / 100)  # type: ignore[attr-defined]
    alloc = run.allocated_milli / (run.total_gpu_milli / 100)  # type: ignore[attr-defined]
    return float(alloc[(arrived.round() == pct)].round(2).mean())


def test_default_trace_one_seed_is_close_to_the_published_numbers() -> None:
    trace = default_trace()
    w = prepare(load_trace(trace.nodes, trace.pods))
    assert w.total_gpus == 6212 and len(w.node_names) == 1213
    assert w.typical.count == 35
    fgd = replay(w, Policy.FGD, 42)
    assert fgd.empty_frag_milli / w.total_gpu_milli * 100 == pytest.approx(13.94, abs=0.05)
    assert at(fgd, 130) == pytest.approx(95.39, abs=1.0)
    bestfit = replay(w, Policy.BESTFIT, 42)
    assert at(bestfit, 130) == pytest.approx(93.08, abs=1.0)
    ours = replay(w, Policy.KUBEGPU, 42)
    assert at(ours, 130) > at(fgd, 130)

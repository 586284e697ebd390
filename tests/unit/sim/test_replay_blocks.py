"""The replay finds its best row through per-block maxima (issue 57, item 5: per-arrival work that does
not scan every node); the row found is always the one a scan of every row finds."""

from __future__ import annotations

import numpy as np
import pytest

from kubegpu.sim import replay as replay_module
from kubegpu.sim.policy import TieMode
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import Policy
from tests.unit.sim.test_nodescore import _RUN_FIELDS, _memory_tight_workload


def _masked_argmax(scores: np.ndarray, memory: np.ndarray, mem: int) -> int:
    masked = np.where(memory >= mem, scores, -np.inf)
    return int(masked.argmax()) if masked.max() > -np.inf else -1


@pytest.mark.parametrize("block", [1, 3, 8])
@pytest.mark.parametrize("tries", [0, 2, 1 << 30])
def test_the_best_row_by_blocks_is_the_first_best_row_of_all(
    block: int, tries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay_module, "BLOCK", block)
    monkeypatch.setattr(replay_module, "MEMORY_TRIES", tries)
    rng = np.random.default_rng(5)
    for _ in range(200):
        rows = int(rng.integers(1, 40))
        cache = replay_module._Cache(rows, None, blocks=True)
        cache.score[:] = rng.integers(0, 4, size=rows).astype(np.float64)  # many ties
        cache.score[rng.random(rows) < 0.3] = -np.inf
        cache.rescored_all()
        memory = rng.integers(0, 5, size=rows).astype(np.int64)
        for _ in range(5):  # rescore a few rows, as arrivals do, then ask again
            want = int(cache.score.argmax()) if cache.score.max() > -np.inf else -1
            assert cache.best() == want
            mem = int(rng.integers(1, 5))
            assert cache.best_with_memory(memory, mem) == _masked_argmax(cache.score, memory, mem)
            changed = rng.integers(0, rows, size=int(rng.integers(1, 4))).tolist()
            cache.score[changed] = rng.integers(-1, 4, size=len(changed)).astype(np.float64)
            cache.score[cache.score < 0] = -np.inf
            cache.rescored(changed)


@pytest.mark.parametrize("policy", [Policy.BESTFIT, Policy.FGD, Policy.KUBEGPU_PLAN, Policy.DOTPROD])
def test_a_replay_is_the_same_whatever_the_block_size(
    policy: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = _memory_tight_workload()
    runs = []
    for block, tries in ((1 << 20, 1 << 30), (2, 1 << 30), (3, 1), (5, 0)):
        monkeypatch.setattr(replay_module, "BLOCK", block)
        monkeypatch.setattr(replay_module, "MEMORY_TRIES", tries)
        runs.append(replay(workload, policy, 3, tie=TieMode.NODE_ORDER))
    first = runs[0]
    assert first.placed.any() and not first.placed.all()
    for run in runs[1:]:
        for field in _RUN_FIELDS:
            assert getattr(run, field).tolist() == getattr(first, field).tolist(), field
        assert run.gpus == first.gpus

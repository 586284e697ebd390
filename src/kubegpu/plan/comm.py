"""Communication plan: the first seed's exercise 2, what a bad GPU pick costs a tensor-parallel step.

A TP=n instance all-reduces its activations a few times per layer. A ring all-reduce sends 2(n-1)/n of
the buffer over every GPU's link, so the time per all-reduce is that over the slowest link of the ring:
NVLink inside a group, PCIe (or worse) when the ring crosses groups. Multiplied by all-reduces per layer
and layers, it is the communication time of one decode step, compared here with the step's weight
read when one is given. Bandwidth terms only (link latency adds to both, more across groups).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kubegpu import accounts
from kubegpu.errors import InputError

__all__ = ["CommPlan", "CommRequest", "LinkCost", "plan_comm", "weight_read_ms"]


@dataclass(frozen=True, kw_only=True)
class CommRequest:
    """A TP group's all-reduce traffic and the two links it may run over."""

    tp: int
    layers: int
    allreduce_mb: float
    per_layer: int
    link_gbs: float
    cross_gbs: float
    base_step_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class LinkCost:
    """All-reduce cost over one kind of link."""

    name: str
    link_gbs: float
    allreduce_us: float
    step_comm_ms: float
    step_ms: float | None

    @property
    def slowdown(self) -> float | None:
        """Whole step over the weight read alone, when the weight read is known."""
        return None if self.step_ms is None else self.step_ms / (self.step_ms - self.step_comm_ms)


@dataclass(frozen=True, kw_only=True)
class CommPlan:
    """Traffic per GPU and the cost inside an NVLink group and across groups."""

    request: CommRequest
    bytes_per_gpu: float
    allreduces_per_step: int
    inside: LinkCost
    across: LinkCost

    @property
    def comm_ratio(self) -> float:
        """How many times slower the communication is across groups than inside."""
        return self.across.step_comm_ms / self.inside.step_comm_ms if self.inside.step_comm_ms else 1.0


# Bounds on the inputs (docs/planning.md): generous for any real cluster, and tight enough that every
# result (at most ~2e15 ms per step) stays a finite number in the table and in --json.
MAX_TP = 1024  # GPUs in one tensor-parallel ring
MAX_LAYERS = 10_000
MAX_PER_LAYER = 100
MIN_ALLREDUCE_MB, MAX_ALLREDUCE_MB = 1e-6, 1_000_000.0  # one byte .. 1 TB per all-reduce
MIN_LINK_GBS, MAX_LINK_GBS = 0.001, 1_000_000.0  # 1 MB/s .. 1 PB/s
MAX_STEP_MS = 10_000_000.0  # a decode step of almost three hours
MAX_MODEL_GB = 1_000_000.0


def _count(value: int, flag: str, low: int, high: int, why: str = "") -> None:
    if not low <= value <= high:
        raise InputError(f"{flag} must be between {low} and {high}{why}, got {value}")


def _amount(value: float, flag: str, high: float, low: float = 0.0) -> None:
    """``value`` finite and in (0, high] (or [low, high] when ``low`` is given)."""
    ok = math.isfinite(value) and (low <= value if low else value > 0) and value <= high
    if not ok:
        floor = f"at least {low:g}" if low else "positive"
        raise InputError(f"{flag} must be {floor} and at most {high:g}, got {value:g}")


def weight_read_ms(model_gb: float, tp: int, bandwidth_gbps: float) -> float:
    """The decode step's weight read when each of ``tp`` GPUs reads its shard of ``model_gb``."""
    _count(tp, "--tp", 2, MAX_TP, " (one GPU does no all-reduce)")
    _amount(model_gb, "--model-gb", MAX_MODEL_GB)
    return accounts.decode_ms(model_gb / tp, bandwidth_gbps)


def plan_comm(req: CommRequest) -> CommPlan:
    """Ring all-reduce traffic and time per decode step inside a group vs across groups."""
    _count(req.tp, "--tp", 2, MAX_TP, " (one GPU does no all-reduce)")
    _count(req.layers, "--layers", 1, MAX_LAYERS)
    _count(req.per_layer, "--per-layer", 1, MAX_PER_LAYER)
    _amount(req.allreduce_mb, "--allreduce-mb", MAX_ALLREDUCE_MB, MIN_ALLREDUCE_MB)
    _amount(req.link_gbs, "--link-gbs", MAX_LINK_GBS, MIN_LINK_GBS)
    _amount(req.cross_gbs, "--cross-gbs", MAX_LINK_GBS, MIN_LINK_GBS)
    if req.base_step_ms is not None:
        _amount(req.base_step_ms, "--step-ms", MAX_STEP_MS)

    def cost(name: str, link: float) -> LinkCost:
        comm = accounts.allreduce_step_ms(req.tp, req.layers, req.per_layer, req.allreduce_mb, link)
        return LinkCost(
            name=name,
            link_gbs=link,
            allreduce_us=accounts.allreduce_us(req.tp, req.allreduce_mb, link),
            step_comm_ms=comm,
            step_ms=None if req.base_step_ms is None else req.base_step_ms + comm,
        )

    return CommPlan(
        request=req,
        bytes_per_gpu=accounts.allreduce_ring_bytes(req.tp, req.allreduce_mb * 1e6),
        allreduces_per_step=req.layers * req.per_layer,
        inside=cost("inside an NVLink group", req.link_gbs),
        across=cost("across groups", req.cross_gbs),
    )

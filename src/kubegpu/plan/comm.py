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

__all__ = ["CommPlan", "CommRequest", "LinkCost", "plan_comm"]


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


def _positive(value: float, flag: str) -> None:
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{flag} must be positive, got {value:g}")


def plan_comm(req: CommRequest) -> CommPlan:
    """Ring all-reduce traffic and time per decode step inside a group vs across groups."""
    if req.tp < 2:
        raise InputError(f"--tp must be at least 2 (one GPU does no all-reduce), got {req.tp}")
    if req.layers < 1:
        raise InputError(f"--layers must be at least 1, got {req.layers}")
    if req.per_layer < 1:
        raise InputError(f"--per-layer must be at least 1, got {req.per_layer}")
    _positive(req.allreduce_mb, "--allreduce-mb")
    _positive(req.link_gbs, "--link-gbs")
    _positive(req.cross_gbs, "--cross-gbs")
    if req.base_step_ms is not None:
        _positive(req.base_step_ms, "the base decode step")

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

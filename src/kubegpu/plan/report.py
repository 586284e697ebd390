"""The plans as plain JSON-ready objects: the documented ``--json`` shapes of ``kubegpu plan``.

Scripts and dashboards read these; the shapes are documented in ``docs/planning.md`` and only grow
(new keys), never change meaning. Times are in ms or µs as the key says, sizes in the seed's GB.
"""

from __future__ import annotations

from typing import Any

from kubegpu.plan.comm import CommPlan, LinkCost
from kubegpu.plan.pools import PoolKind, PoolsPlan
from kubegpu.plan.serve import ServeOption, ServePlan

__all__ = ["comm_json", "pools_json", "serve_json"]


def _r(value: float, digits: int = 4) -> float:
    return round(value, digits)


def _option(o: ServeOption) -> dict[str, Any]:
    return {
        "mode": o.mode.value,
        "profile": o.profile,
        "fits": o.fits,
        "reason": o.reason,
        "instances_per_gpu": o.instances_per_gpu,
        "gpus_needed": o.gpus_needed,
        "per_gpu": list(o.per_gpu),
        "step_ms": _r(o.step_ms),
        "steps_per_s_per_gpu": _r(o.steps_per_s_per_gpu, 2),
        "memory_gb_per_instance": _r(o.memory_gb_per_instance, 3),
        "kv_gb_left": _r(o.kv_gb_left, 3),
        "share": _r(o.share),
        "isolation": o.isolation.value,
        "jitter_risk": o.jitter_risk.value,
    }


def serve_json(plan: ServePlan) -> dict[str, Any]:
    """``kubegpu plan serve --json``: options, recommendation, alternatives."""
    req = plan.request
    rec = plan.recommendation.option
    return {
        "request": {
            "gpu": req.gpu.name,
            "model_gb": req.model_gb,
            "dtype": req.dtype.value,
            "weights_gb": req.weights_gb,
            "kv_gb_per_instance": req.kv_gb_per_instance,
            "reserve_gb": req.reserve_gb,
            "instances": req.instances,
            "gpus_available": req.gpus_available,
            "latency_sensitive": req.latency_sensitive,
            "multi_tenant": req.multi_tenant,
            "max_step_ms": req.max_step_ms,
        },
        "base_step_ms": _r(plan.base_step_ms),
        "options": [_option(o) for o in plan.options],
        "recommendation": {
            "mode": rec.mode.value if rec else None,
            "profile": rec.profile if rec else None,
            "gpus_needed": rec.gpus_needed if rec else None,
            "instances_per_gpu": rec.instances_per_gpu if rec else None,
            "per_gpu": list(rec.per_gpu) if rec else None,
            "step_ms": _r(rec.step_ms) if rec else None,
            "kv_gb_left": _r(rec.kv_gb_left, 3) if rec else None,
            "reasons": list(plan.recommendation.reasons),
        },
        "alternatives": [
            {
                "kind": a.kind.value,
                "summary": a.summary,
                "gpus_needed": a.gpus_needed,
                "step_ms": None if a.step_ms is None else _r(a.step_ms),
                "profile": a.profile,
                "kv_gb_left": None if a.kv_gb_left is None else _r(a.kv_gb_left, 3),
            }
            for a in plan.alternatives
        ],
        "notes": list(plan.notes),
    }


def pools_json(plan: PoolsPlan) -> dict[str, Any]:
    """``kubegpu plan pools --json``: both pools and their policy objects."""
    req = plan.request
    return {
        "gpu": req.gpu.name,
        "gpus": req.gpus,
        "gpus_per_node": req.gpus_per_node,
        "users": req.users,
        "pools": [
            {
                "name": p.kind.value,
                "gpus": p.gpus,
                "nodes": p.nodes,
                "replicas": p.replicas,
                "virtual_gpus": p.virtual_gpus,
                "memory_gb_per_device": _r(p.memory_gb_per_device, 3),
                "isolation": "none" if p.kind is PoolKind.TIME_SLICED else "hardware",
                "namespace": p.namespace,
                "priority_class": p.priority_class,
                "node_labels": p.node_labels,
                "taints": [str(t) for t in p.taints],
            }
            for p in plan.pools
        ],
        "virtual_gpus": sum(p.virtual_gpus for p in plan.pools if p.kind is PoolKind.TIME_SLICED),
        "users_per_virtual_gpu": None
        if plan.users_per_virtual_gpu is None
        else _r(plan.users_per_virtual_gpu, 3),
        "limit_range": {
            "pod_max": {"nvidia.com/gpu": 1},
            "container_default": {"cpu": "4", "memory": "16Gi"},
        },
        "priority_classes": [
            {"name": pc.name, "value": pc.value, "preempts": pc.preempt} for pc in plan.priority_classes
        ],
        "active_deadline_seconds": plan.active_deadline_seconds,
        "memory_fraction_per_replica": _r(plan.memory_fraction_per_replica),
        "warnings": list(plan.warnings),
        "advice": list(plan.advice),
    }


def _link(cost: LinkCost) -> dict[str, Any]:
    return {
        "link_gbs": cost.link_gbs,
        "allreduce_us": _r(cost.allreduce_us, 3),
        "step_comm_ms": _r(cost.step_comm_ms),
        "step_ms": None if cost.step_ms is None else _r(cost.step_ms),
    }


def comm_json(plan: CommPlan) -> dict[str, Any]:
    """``kubegpu plan comm --json``: traffic per GPU and the cost inside vs across NVLink groups."""
    req = plan.request
    return {
        "tp": req.tp,
        "layers": req.layers,
        "per_layer": req.per_layer,
        "allreduce_mb": req.allreduce_mb,
        "allreduces_per_step": plan.allreduces_per_step,
        "bytes_per_gpu": plan.bytes_per_gpu,
        "inside": _link(plan.inside),
        "across": _link(plan.across),
        "comm_ratio": _r(plan.comm_ratio, 3),
        "base_step_ms": None if req.base_step_ms is None else _r(req.base_step_ms),
    }

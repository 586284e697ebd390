"""Serving plan: the first seed's judgement between whole cards, MIG, time-slicing and MPS.

For N instances of one model on one GPU model, every way of sharing the card is costed with the
seed's accounts (``kubegpu.accounts``): does weights + KV fit (MIG memory is a hard cap; time-slicing
and MPS split the card's memory among tenants by agreement), instances per card, cards needed, the
batch-1 decode step (weights / (bandwidth x share)), what is left for KV cache, isolation and jitter.
The recommendation then applies the seed's criteria in the seed's order: does it fit, is the service
latency-sensitive (no time-slicing or MPS), are tenants separate (hard isolation), else pack onto the
fewest cards. Every number here is a model (a lower bound from bandwidth), not a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from kubegpu import accounts
from kubegpu.errors import InputError
from kubegpu.model.gpu import GpuModel
from kubegpu.model.mig import profiles

__all__ = [
    "DEFAULT_RESERVE_GB",
    "FP8_MIN_COMPUTE_CAPABILITY",
    "Alternative",
    "AlternativeKind",
    "Dtype",
    "Isolation",
    "JitterRisk",
    "Recommendation",
    "ServeOption",
    "ServePlan",
    "ServeRequest",
    "SharingMode",
    "plan_serve",
]

# Memory each serving process keeps that is neither weights nor KV cache: the CUDA context, the
# framework's workspace, and the gap between a profile's nominal size (20 GB) and what the driver
# reports (19.62 GiB on H100). With it the seed's "about 5 GB left for KV" on 2g.20gb comes out.
DEFAULT_RESERVE_GB = 1.0
# FP8 tensor cores arrived with Ada (8.9) and Hopper (9.0).
FP8_MIN_COMPUTE_CAPABILITY = (8, 9)
# Time-slicing and MPS rows are listed up to this many tenants per card.
MAX_SHARED_TENANTS = 16
MIN_MODEL_GB = 0.001  # 1 MB: below it the modelled decode step rounds to zero and steps/s is infinite
MAX_INSTANCES = 100_000  # a plan lists every card; beyond this it is no longer a plan a person reads


class SharingMode(StrEnum):
    """How instances get GPU time: a whole card each, a MIG slice, or a shared card."""

    EXCLUSIVE = "exclusive"
    MIG = "mig"
    TIME_SLICING = "time-slicing"
    MPS = "mps"


class Isolation(StrEnum):
    """Whether one instance can hurt another: separate hardware, or none at all."""

    HARDWARE = "hardware"
    NONE = "none"


class JitterRisk(StrEnum):
    """How much one instance's step time moves with what its neighbours do."""

    NONE = "none"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Dtype(StrEnum):
    """Precision the weights are served at; ``--model-gb`` is always the 16-bit size."""

    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def bytes_per_param(self) -> float:
        return 1.0 if self is Dtype.FP8 else 2.0


class AlternativeKind(StrEnum):
    """The three alternatives the seed lists after exercise 1."""

    MERGE = "merge-tenants"
    FP8 = "fp8-weights"
    QUOTA = "quota-only"


_MODE_ORDER = {
    SharingMode.EXCLUSIVE: 0,
    SharingMode.MIG: 1,
    SharingMode.MPS: 2,
    SharingMode.TIME_SLICING: 3,
}


@dataclass(frozen=True, kw_only=True)
class ServeRequest:
    """What is to be served: one model, N instances, on one GPU model."""

    model_gb: float
    instances: int
    gpu: GpuModel
    kv_gb_per_instance: float = 0.0
    gpus_available: int | None = None
    latency_sensitive: bool = False
    multi_tenant: bool = False
    dtype: Dtype = Dtype.FP16
    reserve_gb: float = DEFAULT_RESERVE_GB
    max_step_ms: float | None = None

    @property
    def weights_gb(self) -> float:
        """Weights at the serving precision (``model_gb`` is the 16-bit size)."""
        return self.model_gb * self.dtype.bytes_per_param / 2.0

    @property
    def need_gb(self) -> float:
        """Memory one instance needs at least: weights, the KV it asks for, and the runtime reserve."""
        return self.weights_gb + self.kv_gb_per_instance + self.reserve_gb


@dataclass(frozen=True, kw_only=True)
class ServeOption:
    """One way to serve the instances, with the seed's numbers for it."""

    mode: SharingMode
    profile: str | None
    fits: bool
    reason: str
    instances_per_gpu: int
    gpus_needed: int
    per_gpu: tuple[int, ...]
    memory_gb_per_instance: float
    kv_gb_left: float
    share: float
    step_ms: float
    steps_per_s_per_gpu: float
    isolation: Isolation
    jitter_risk: JitterRisk

    @property
    def label(self) -> str:
        if self.mode is SharingMode.MIG:
            return f"MIG {self.profile}"
        if self.mode in (SharingMode.TIME_SLICING, SharingMode.MPS):
            return f"{self.mode.value} x{self.instances_per_gpu}"
        return "exclusive"


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    """The option the seed's criteria pick (``option`` is None when none survives), and why."""

    option: ServeOption | None
    reasons: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Alternative:
    """One of the seed's alternatives to a sharing layout, costed where the seed gives numbers."""

    kind: AlternativeKind
    summary: str
    gpus_needed: int | None = None
    step_ms: float | None = None
    profile: str | None = None
    kv_gb_left: float | None = None


@dataclass(frozen=True, kw_only=True)
class ServePlan:
    """Every option, the recommendation, the alternatives, and notes worth reading."""

    request: ServeRequest
    base_step_ms: float
    options: tuple[ServeOption, ...]
    recommendation: Recommendation
    alternatives: tuple[Alternative, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def _gb(value: float) -> str:
    """A size the way the seed writes it: ``14 GB``, ``5.0 GB`` when fractional matters."""
    return f"{value:g} GB" if not math.isfinite(value) or value == int(value) else f"{value:.1f} GB"


def _spread(instances: int, per_gpu: int) -> tuple[int, ...]:
    """Instances per card when packing ``instances`` at most ``per_gpu`` to a card: (3, 2) for 5 by 3."""
    full, rest = divmod(instances, per_gpu)
    return (per_gpu,) * full + ((rest,) if rest else ())


def _validate(req: ServeRequest) -> None:
    if not math.isfinite(req.model_gb) or req.model_gb < MIN_MODEL_GB:
        raise InputError(f"--model-gb must be a size of at least {MIN_MODEL_GB:g} GB, got {req.model_gb:g}")
    if not 1 <= req.instances <= MAX_INSTANCES:
        raise InputError(f"--instances must be between 1 and {MAX_INSTANCES}, got {req.instances}")
    if not math.isfinite(req.kv_gb_per_instance) or req.kv_gb_per_instance < 0:
        raise InputError(f"--kv-gb-per-instance must not be negative, got {req.kv_gb_per_instance:g}")
    if not math.isfinite(req.reserve_gb) or req.reserve_gb < 0:
        raise InputError(f"--reserve-gb must not be negative, got {req.reserve_gb:g}")
    if req.gpus_available is not None and not 1 <= req.gpus_available <= MAX_INSTANCES:
        raise InputError(f"--gpus-available must be between 1 and {MAX_INSTANCES}, got {req.gpus_available}")
    if req.max_step_ms is not None and not (math.isfinite(req.max_step_ms) and req.max_step_ms > 0):
        raise InputError(f"--max-step-ms must be a positive number of ms, got {req.max_step_ms:g}")
    if req.need_gb > req.gpu.memory_gb:
        raise InputError(
            f"one instance needs {_gb(req.weights_gb)} of {req.dtype.value} weights"
            f" + {_gb(req.kv_gb_per_instance)} KV + {_gb(req.reserve_gb)} reserve"
            f" = {_gb(req.need_gb)}, more than a whole {req.gpu.name} ({req.gpu.memory_gb} GB);"
            " split it across cards with tensor parallelism (not planned here) or pick a larger GPU"
        )


def _fit_reason(req: ServeRequest, memory_gb: float, what: str) -> tuple[bool, float, str]:
    """Whether one instance fits ``memory_gb`` (spelled ``what``), the KV room left, and why."""
    left = memory_gb - req.weights_gb - req.reserve_gb
    fits = left >= req.kv_gb_per_instance
    spent = f"{_gb(req.weights_gb)} weights - {_gb(req.reserve_gb)} reserve"
    if fits:
        reason = f"{_gb(left)} left for KV cache ({what} - {spent})"
    elif left < 0:
        reason = f"{what} < {_gb(req.weights_gb)} weights + {_gb(req.reserve_gb)} reserve"
    else:
        reason = f"only {_gb(left)} left for KV cache ({what} - {spent}), {_gb(req.kv_gb_per_instance)} asked"
    return fits, left, reason


def _option(
    req: ServeRequest,
    *,
    mode: SharingMode,
    profile: str | None,
    per_gpu: int,
    memory_gb: float,
    what: str,
    share: float,
    step_ms: float,
    isolation: Isolation,
    jitter: JitterRisk,
) -> ServeOption:
    fits, left, reason = _fit_reason(req, memory_gb, what)
    spread = _spread(req.instances, per_gpu)
    return ServeOption(
        mode=mode,
        profile=profile,
        fits=fits,
        reason=reason,
        instances_per_gpu=per_gpu,
        gpus_needed=len(spread),
        per_gpu=spread,
        memory_gb_per_instance=memory_gb,
        kv_gb_left=left,
        share=share,
        step_ms=step_ms,
        steps_per_s_per_gpu=min(per_gpu, req.instances) * 1000.0 / step_ms,
        isolation=isolation,
        jitter_risk=jitter,
    )


def _options(req: ServeRequest, base_ms: float) -> list[ServeOption]:
    gpu = req.gpu
    bandwidth = gpu.memory_bandwidth_gbps
    options = [
        _option(
            req,
            mode=SharingMode.EXCLUSIVE,
            profile=None,
            per_gpu=1,
            memory_gb=gpu.memory_gb,
            what=f"{gpu.memory_gb} GB",
            share=1.0,
            step_ms=base_ms,
            isolation=Isolation.HARDWARE,
            jitter=JitterRisk.NONE,
        )
    ]
    if gpu.mig_capable:
        for p in profiles(gpu.name):
            mig = accounts.mig_layout(p)
            options.append(
                _option(
                    req,
                    mode=SharingMode.MIG,
                    profile=p.name,
                    per_gpu=mig.instances,
                    memory_gb=mig.memory_gb,
                    what=f"{mig.memory_gb} GB",
                    share=mig.share,
                    step_ms=accounts.decode_ms(req.weights_gb, bandwidth, mig.share),
                    isolation=Isolation.HARDWARE,
                    jitter=JitterRisk.LOW,
                )
            )
    # Tenants per card whose memory agreement still fits; list 2 .. that many (at least one row).
    most = max(2, min(req.instances, int(gpu.memory_gb // req.need_gb), MAX_SHARED_TENANTS))
    for mode, jitter in ((SharingMode.TIME_SLICING, JitterRisk.HIGH), (SharingMode.MPS, JitterRisk.MEDIUM)):
        for tenants in range(2, most + 1):
            step = (
                accounts.timeslice_latency(base_ms, tenants)
                if mode is SharingMode.TIME_SLICING
                else accounts.decode_ms(req.weights_gb, bandwidth, 1.0 / tenants)
            )
            options.append(
                _option(
                    req,
                    mode=mode,
                    profile=None,
                    per_gpu=tenants,
                    memory_gb=gpu.memory_gb / tenants,
                    what=f"{gpu.memory_gb} GB / {tenants}",
                    share=1.0 / tenants,
                    step_ms=step,
                    isolation=Isolation.NONE,
                    jitter=jitter,
                )
            )
    return options


def _names(opts: Sequence[ServeOption]) -> str:
    return ", ".join(o.label for o in opts)


def _per_gpu_text(o: ServeOption) -> str:
    return " + ".join(str(n) for n in o.per_gpu)


def _recommend(req: ServeRequest, options: Sequence[ServeOption], base_ms: float) -> Recommendation:
    reasons: list[str] = []
    candidates = list(options)

    def keep(
        pred: Callable[[ServeOption], bool], why_dropped: str, why_none: str, *, always: bool = False
    ) -> bool:
        nonlocal candidates
        kept = [o for o in candidates if pred(o)]
        dropped = [o for o in candidates if not pred(o)]
        if (dropped or always) and why_dropped:
            reasons.append(why_dropped.format(names=_names(dropped)))
        candidates = kept
        if not kept:
            reasons.append(why_none)
            return False
        return True

    # 1. Does it fit the slice? MIG memory is a hard cap.
    too_small = [o for o in candidates if not o.fits and o.mode is SharingMode.MIG]
    if too_small:
        reasons.append(
            "memory: "
            + "; ".join(f"{o.profile} rejected: {o.reason}" for o in too_small)
            + " (MIG memory is a hard cap)"
        )
    if not keep(lambda o: o.fits, "", "nothing fits: every option runs out of memory"):
        return Recommendation(option=None, reasons=tuple(reasons))
    # 2. Latency-sensitive: no time-slicing (and no MPS: shared SMs and bandwidth jitter too).
    if req.latency_sensitive and not keep(
        lambda o: o.isolation is Isolation.HARDWARE,
        "latency-sensitive: no time-slicing or MPS, neighbours make the step time jitter",
        "nothing left once time-slicing and MPS are excluded",
        always=True,
    ):
        return Recommendation(option=None, reasons=tuple(reasons))
    # 3. Separate tenants need hard isolation: MIG slices or whole cards.
    if req.multi_tenant and not keep(
        lambda o: o.isolation is Isolation.HARDWARE,
        "multi-tenant: tenants need hard isolation, so MIG or whole cards, no time-slicing or MPS",
        "nothing left with hard isolation",
        always=True,
    ):
        return Recommendation(option=None, reasons=tuple(reasons))
    if req.max_step_ms is not None:
        limit = req.max_step_ms
        if not keep(
            lambda o: o.step_ms <= limit,
            f"step target {limit:g} ms: excluded {{names}}",
            f"nothing meets the {limit:g} ms step target",
        ):
            return Recommendation(option=None, reasons=tuple(reasons))
    if req.gpus_available is not None:
        have = req.gpus_available
        if not keep(
            lambda o: o.gpus_needed <= have,
            f"{have} GPU(s) available: excluded {{names}}",
            f"nothing fits in {have} GPU(s)",
        ):
            return Recommendation(option=None, reasons=tuple(reasons))
    # 4. Pack onto the fewest cards; then the faster step; then the better-isolated mode.
    best = min(
        candidates, key=lambda o: (o.gpus_needed, round(o.step_ms, 6), _MODE_ORDER[o.mode], o.profile or "")
    )
    exclusive = next(o for o in options if o.mode is SharingMode.EXCLUSIVE)
    reasons.append(f"fits: {best.reason}")
    if best is exclusive:
        reasons.append(f"whole cards: {req.instances} instance(s) on {best.gpus_needed} card(s)")
    else:
        reasons.append(
            f"fewest cards: {best.label} holds {best.instances_per_gpu} per card, so {best.gpus_needed}"
            f" card(s) ({_per_gpu_text(best)}) instead of {exclusive.gpus_needed} whole cards"
        )
    if best.isolation is Isolation.NONE:
        reasons.append(
            "one tenant, not latency-sensitive: sharing without isolation is acceptable"
            + (
                " (MPS: one tenant's processes run kernels concurrently, less jitter than time-slicing)"
                if best.mode is SharingMode.MPS
                else ""
            )
        )
    reasons.append(
        f"decode {best.step_ms:.2f} ms per step per instance vs {base_ms:.2f} ms on a whole card"
        " (batch-1 lower bound: weights / (bandwidth x share))"
    )
    return Recommendation(option=best, reasons=tuple(reasons))


def _alternatives(req: ServeRequest, options: Sequence[ServeOption], base_ms: float) -> list[Alternative]:
    gpu = req.gpu
    alts: list[Alternative] = []
    # (1) One shared instance for everyone: throughput grows with batch.
    shared_kv = gpu.memory_gb - req.weights_gb - req.reserve_gb
    if req.instances > 1:
        alts.append(
            Alternative(
                kind=AlternativeKind.MERGE,
                summary=(
                    f"merge the {req.instances} tenants into one shared instance on 1 card"
                    f" (prefix caching, per-tenant priorities): step {base_ms:.2f} ms at batch 1,"
                    f" throughput grows with batch, {_gb(shared_kv)} of KV cache shared by all;"
                    " almost always the fewest cards"
                ),
                gpus_needed=1,
                step_ms=base_ms,
                kv_gb_left=shared_kv,
            )
        )
    # (2) FP8 weights: half the memory and half the bytes read per step.
    if req.dtype is not Dtype.FP8:
        fp8 = ServeRequest(
            model_gb=req.model_gb,
            instances=req.instances,
            gpu=gpu,
            kv_gb_per_instance=req.kv_gb_per_instance,
            latency_sensitive=req.latency_sensitive,
            multi_tenant=req.multi_tenant,
            dtype=Dtype.FP8,
            reserve_gb=req.reserve_gb,
        )
        fp8_ms = accounts.decode_ms(fp8.weights_gb, gpu.memory_bandwidth_gbps)
        fp8_opts = _options(fp8, fp8_ms)
        mig_fits = [o for o in fp8_opts if o.mode is SharingMode.MIG and o.fits]
        caveat = (
            ""
            if gpu.compute_capability >= FP8_MIN_COMPUTE_CAPABILITY
            else f"; {gpu.name} (compute {gpu.compute_capability[0]}.{gpu.compute_capability[1]}) has no"
            " FP8 tensor cores, so FP8 needs weight-only kernels"
        )
        if mig_fits:
            small = min(mig_fits, key=lambda o: (o.memory_gb_per_instance, o.gpus_needed, o.step_ms))
            tight = " (KV space too small for real concurrency)" if small.kv_gb_left < fp8.weights_gb else ""
            summary = (
                f"FP8 weights ({_gb(fp8.weights_gb)}): the smallest slice that holds them is {small.profile},"
                f" {_gb(small.kv_gb_left)} left for KV{tight}; {small.instances_per_gpu} per card,"
                f" {small.gpus_needed} card(s), step {small.step_ms:.2f} ms{caveat}"
            )
            alts.append(
                Alternative(
                    kind=AlternativeKind.FP8,
                    summary=summary,
                    gpus_needed=small.gpus_needed,
                    step_ms=small.step_ms,
                    profile=small.profile,
                    kv_gb_left=small.kv_gb_left,
                )
            )
        else:
            alts.append(
                Alternative(
                    kind=AlternativeKind.FP8,
                    summary=(
                        f"FP8 weights ({_gb(fp8.weights_gb)}): step {fp8_ms:.2f} ms on a whole card,"
                        f" twice the KV room{caveat}"
                    ),
                    gpus_needed=req.instances,
                    step_ms=fp8_ms,
                    kv_gb_left=gpu.memory_gb - fp8.weights_gb - req.reserve_gb,
                )
            )
    # (3) Quota instead of performance isolation: namespaces + ResourceQuota on shared cards.
    shared = [o for o in options if o.mode is SharingMode.TIME_SLICING and o.fits]
    if shared:
        pack = min(shared, key=lambda o: (o.gpus_needed, o.step_ms))
        alts.append(
            Alternative(
                kind=AlternativeKind.QUOTA,
                summary=(
                    "if tenants need a quota rather than performance isolation: one namespace per tenant"
                    " with a ResourceQuota on requests.nvidia.com/gpu, cards shared by time-slicing"
                    f" ({pack.instances_per_gpu} replicas per card: {pack.gpus_needed} card(s),"
                    f" step {pack.step_ms:.2f} ms, with jitter and no memory isolation)"
                ),
                gpus_needed=pack.gpus_needed,
                step_ms=pack.step_ms,
            )
        )
    return alts


def plan_serve(req: ServeRequest) -> ServePlan:
    """Cost every option for ``req``, recommend one by the seed's criteria, and list alternatives."""
    _validate(req)
    base_ms = accounts.decode_ms(req.weights_gb, req.gpu.memory_bandwidth_gbps)
    options = _options(req, base_ms)
    notes: list[str] = []
    if not req.gpu.mig_capable:
        notes.append(f"{req.gpu.name} does not support MIG: no MIG options")
    if req.dtype is Dtype.FP8 and req.gpu.compute_capability < FP8_MIN_COMPUTE_CAPABILITY:
        notes.append(f"{req.gpu.name} has no FP8 tensor cores: FP8 weights need weight-only kernels")
    notes.append(
        "step times are batch-1 lower bounds (weights / (bandwidth x share)); MIG share is compute slices"
        " out of 7 as in the seed; time-slicing also pays context switches, not modelled"
    )
    return ServePlan(
        request=req,
        base_step_ms=base_ms,
        options=tuple(options),
        recommendation=_recommend(req, options, base_ms),
        alternatives=tuple(_alternatives(req, options, base_ms)),
        notes=tuple(notes),
    )

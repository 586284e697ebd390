"""``kubegpu demo``: the seed program's walkthrough, every number computed by kubegpu's own library.

Three accounts on the seed's machine (``builtin:seed-8gpu``) and an H100: which GPUs to pick
(by index versus topology-aware), what MIG leaves of a card, and the three ways to share one card.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.table import Table

from kubegpu.cli.common import console, print_json

FREE = (2, 3, 4, 5, 6, 7)
MIG_SHOWN = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")
SMALL_WEIGHTS_GB = 3.0
MODEL_WEIGHTS_GB = 14.0
CARD = "H100-80GB"


@dataclass(frozen=True, kw_only=True)
class Pick:
    count: int
    by_index: tuple[int, ...]
    by_index_cost: float
    aware: tuple[int, ...]
    aware_cost: float


@dataclass(frozen=True, kw_only=True)
class MigRow:
    profile: str
    instances: int
    memory_gb: int
    share: float
    decode_ms: float


@dataclass(frozen=True, kw_only=True)
class ShareRow:
    mode: str
    detail: str
    step_ms: float
    instances: int


@dataclass(frozen=True, kw_only=True)
class Walkthrough:
    picks: tuple[Pick, ...]
    mig: tuple[MigRow, ...]
    sharing: tuple[ShareRow, ...]
    bandwidth_gbps: float
    smallest_fitting: str
    too_small: tuple[str, ...]


def build() -> Walkthrough:
    """Compute every number of the seed's walkthrough."""
    from kubegpu.accounts import decode_ms, mig_layout, timeslice_latency
    from kubegpu.allocate import choose_scored, choose_simple
    from kubegpu.model.gpu import gpu_model
    from kubegpu.model.mig import profile, profiles
    from kubegpu.sources.spec import load_node

    node = load_node("builtin:seed-8gpu")
    topo = node.topology
    assert topo is not None
    picks = []
    for count in (2, 4):
        naive = choose_simple(FREE, count)
        aware = choose_scored(topo, FREE, count)
        picks.append(
            Pick(
                count=count,
                by_index=naive,
                by_index_cost=topo.set_cost(naive),
                aware=aware.devices,
                aware_cost=aware.cost,
            )
        )
    bandwidth = gpu_model(CARD).memory_bandwidth_gbps
    mig_rows = []
    for name in MIG_SHOWN:
        share = mig_layout(profile(CARD, name))
        mig_rows.append(
            MigRow(
                profile=name,
                instances=share.instances,
                memory_gb=share.memory_gb,
                share=share.share,
                decode_ms=decode_ms(SMALL_WEIGHTS_GB, bandwidth, share.share),
            )
        )
    base = decode_ms(MODEL_WEIGHTS_GB, bandwidth)
    mig2 = mig_layout(profile(CARD, "2g.20gb"))
    sharing = [
        ShareRow(mode="exclusive", detail="whole card", step_ms=base, instances=1),
        ShareRow(
            mode="mig",
            detail="2g.20gb",
            step_ms=decode_ms(MODEL_WEIGHTS_GB, bandwidth, mig2.share),
            instances=mig2.instances,
        ),
    ]
    sharing += [
        ShareRow(mode="time-slicing", detail=str(n), step_ms=timeslice_latency(base, n), instances=n)
        for n in (2, 3)
    ]
    fitting = [p for p in profiles(CARD) if p.memory_gb >= MODEL_WEIGHTS_GB and not p.media_extensions]
    too_small = tuple(
        p.name for p in profiles(CARD) if p.memory_gb < MODEL_WEIGHTS_GB and not p.media_extensions
    )
    return Walkthrough(
        picks=tuple(picks),
        mig=tuple(mig_rows),
        sharing=tuple(sharing),
        bandwidth_gbps=bandwidth,
        smallest_fitting=min(fitting, key=lambda p: (p.compute_slices, p.memory_gb)).name,
        too_small=too_small,
    )


def payload(w: Walkthrough) -> dict[str, Any]:
    return {
        "node": "builtin:seed-8gpu",
        "free": list(FREE),
        "picks": [
            {
                "count": p.count,
                "by_index": {"devices": list(p.by_index), "cost": p.by_index_cost},
                "topology_aware": {"devices": list(p.aware), "cost": p.aware_cost},
            }
            for p in w.picks
        ],
        "mig": [
            {
                "profile": r.profile,
                "instances": r.instances,
                "memory_gb": r.memory_gb,
                "share": round(r.share, 4),
                "decode_ms_3gb": round(r.decode_ms, 2),
            }
            for r in w.mig
        ],
        "sharing": [
            {"mode": r.mode, "detail": r.detail, "step_ms": round(r.step_ms, 2), "instances": r.instances}
            for r in w.sharing
        ],
        "too_small_for_14gb": list(w.too_small),
    }


_TEXT = {
    "en": {
        "machine": "An 8-GPU node (builtin:seed-8gpu): GPUs 0-3 and 4-7 are two NVLink groups.",
        "pick_title": "Which GPUs? free {free}",
        "pick_cols": ("request", "by index", "cost", "topology-aware", "cost"),
        "gpus": "{n} GPUs",
        "mig_title": "MIG: one H100-80GB cut into one profile "
        "(decode floor for 3 GB of weights at {bw:g} GB/s)",
        "mig_cols": ("profile", "instances", "memory each", "compute", "decode step"),
        "share_title": "Three ways to share one H100 for a 7B model (14 GB of weights, {bw:g} GB/s)",
        "share_cols": ("way", "step", "instances", "isolation"),
        "modes": {
            "exclusive": ("exclusive", "-"),
            "mig": ("MIG {detail}", "hardware"),
            "time-slicing": ("time-slicing, {detail} tenants", "none: memory shared, jitter"),
        },
        "note": "MIG cuts memory too: 14 GB of weights do not fit {small}; the smallest profile that holds "
        "them is {fit}, so 1g.10gb only serves smaller models.",
        "lesson": "Picking 4 GPUs by index crosses the groups (cost {bad:g}); topology-aware picking keeps "
        "them in one group (cost {good:g}).",
    },
    "zh": {
        "machine": "一台 8 卡节点（builtin:seed-8gpu）：0-3 号卡与 4-7 号卡各为一个 NVLink 组。",
        "pick_title": "挑哪几张卡？空闲 {free}",
        "pick_cols": ("需求", "按编号", "代价", "拓扑感知", "代价"),
        "gpus": "{n} 张卡",
        "mig_title": "MIG：一张 H100-80GB 只切一种档位（3 GB 权重、{bw:g} GB/s 下的 decode 下限）",
        "mig_cols": ("档位", "实例数", "每份显存", "算力占比", "每步 decode"),
        "share_title": "一张 H100 跑 7B 模型（14 GB 权重、{bw:g} GB/s）的三种共享方式",
        "share_cols": ("方式", "每步", "实例数", "隔离"),
        "modes": {
            "exclusive": ("独占整卡", "-"),
            "mig": ("MIG {detail}", "硬件隔离"),
            "time-slicing": ("时间片共享（{detail} 个租户）", "无：显存共用，互相抖动"),
        },
        "note": "MIG 连显存一起切：14 GB 权重放不进 {small}；能装下的最小档位是 {fit}，"
        "1g.10gb 只适合更小的模型。",
        "lesson": "按编号挑 4 张卡会跨组（代价 {bad:g}）；拓扑感知把它们留在同一组内（代价 {good:g}）。",
    },
}


def render(w: Walkthrough, lang: str) -> None:
    t: dict[str, Any] = _TEXT[lang]
    console.print(t["machine"])
    picks = Table(title=t["pick_title"].format(free=list(FREE)))
    for col in t["pick_cols"]:
        picks.add_column(col)
    for p in w.picks:
        picks.add_row(
            t["gpus"].format(n=p.count),
            str(list(p.by_index)),
            f"{p.by_index_cost:g}",
            str(list(p.aware)),
            f"{p.aware_cost:g}",
        )
    console.print(picks)
    four = w.picks[-1]
    console.print(t["lesson"].format(bad=four.by_index_cost, good=four.aware_cost))
    mig = Table(title=t["mig_title"].format(bw=w.bandwidth_gbps))
    for col in t["mig_cols"]:
        mig.add_column(col)
    for r in w.mig:
        mig.add_row(
            r.profile, str(r.instances), f"{r.memory_gb} GB", f"{r.share:.0%}", f"{r.decode_ms:.1f} ms"
        )
    console.print(mig)
    share = Table(title=t["share_title"].format(bw=w.bandwidth_gbps))
    for col in t["share_cols"]:
        share.add_column(col)
    for row in w.sharing:
        label, isolation = t["modes"][row.mode]
        share.add_row(label.format(detail=row.detail), f"{row.step_ms:.2f} ms", str(row.instances), isolation)
    console.print(share)
    console.print(t["note"].format(small=", ".join(w.too_small), fit=w.smallest_fitting))


def register(app: typer.Typer) -> None:
    @app.command("demo", epilog="Examples: kubegpu demo · kubegpu demo --lang zh · kubegpu demo --json")
    def demo(
        lang: Annotated[str, typer.Option("--lang", help="Language of the walkthrough: en or zh.")] = "en",
        json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    ) -> None:
        """Walk through the seed's three accounts: topology, MIG, and sharing one card."""
        from kubegpu.errors import InputError

        if lang not in _TEXT:
            raise InputError(f"--lang: {lang!r} is not supported; choose en or zh")
        walkthrough = build()
        if json_out:
            print_json(payload(walkthrough))
        else:
            render(walkthrough, lang)

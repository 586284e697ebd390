"""Where the benchmark scripts find the openb trace: ``--data DIR``, else ``KUBEGPU_OPENB_DIR``.

The trace is not redistributed with kubegpu (its publisher allows research and study use with
citation), so it is never copied into the repository, and no benchmark looks for it anywhere by
itself: without a folder named one of those two ways, each prints how to give it and exits 0.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kubegpu.errors import InputError
from kubegpu.sim.openb import ENV, NODES_FILE, PODS_FILE
from kubegpu.sim.run import parse_seeds
from kubegpu.sim.trace import load_pods, load_trace, write_pods
from kubegpu.sim.variants import gpushare_variant
from kubegpu.sim.workload import Workload, prepare

NODES, PODS = NODES_FILE, PODS_FILE
VARIANTS = ("default", "gpushare40", "gpushare60", "gpushare80", "gpushare100")
VARIANT_SEED = 0  # the variant pod lists themselves: one fixed draw each (as bench/sim_gap.py)


def default_data_dir() -> Path | None:
    """``KUBEGPU_OPENB_DIR``, or None."""
    env = os.environ.get(ENV)
    return Path(env) if env else None


def trace_missing(data: Path | None, tool: str) -> bool:
    """True, after saying why, when ``data`` does not hold the trace's node and pod lists."""
    if data is None:
        print(f"{tool}: skipped: no openb trace given (set {ENV}=DIR or pass --data DIR; the trace is not")
        print(f"{tool}: part of kubegpu: its publisher allows research use, see docs/sim.md)")
        return True
    if not (data / NODES).is_file() or not (data / PODS).is_file():
        print(f"{tool}: skipped: {data} does not hold {NODES} and {PODS}")
        return True
    return False


def variants_and_seeds(
    tool: str, variants: str, seeds: str, *, problem: str = ""
) -> tuple[list[str], tuple[int, ...]]:
    """``--variants`` (comma-separated names of ``VARIANTS``) and ``--seeds`` (``parse_seeds``);
    ``InputError`` naming ``tool`` and what is allowed, also when ``problem`` (another option's
    complaint, e.g. "--workers at least 1") is set."""
    names = [v.strip() for v in variants.split(",") if v.strip()]
    if problem or not names or any(v not in VARIANTS for v in names):
        extra = f", {problem}" if problem else ""
        raise InputError(f"{tool}: --variants from {', '.join(VARIANTS)}{extra}")
    try:
        return names, parse_seeds(seeds)
    except InputError as exc:
        raise InputError(f"{tool}: {exc}") from exc


def variant_workload(data: Path, name: str) -> Workload:
    """The default trace (``default``) or one of the FGD artifact's sharing variants drawn from it
    (``gpushare40`` .. ``gpushare100``, ``VARIANT_SEED``), on the trace's nodes."""
    if name == "default":
        return prepare(load_trace(data / NODES, data / PODS))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.csv"
        write_pods(
            path,
            gpushare_variant(load_pods(data / PODS), int(name.removeprefix("gpushare")), seed=VARIANT_SEED),
        )
        return prepare(load_trace(data / NODES, path))

"""Figures of the simulator's results (matplotlib, written to an image file, PNG by default).

``plot_curves``: the replay's curves like the FGD paper's figures. Four panels against arrived GPU
demand: GPU allocation (with the ideal line, capped at 100 %), the same zoomed on the saturated end
(from 80 % arrived), fragmentation amount (% of cluster GPUs) and fragmentation ratio (% of idle
GPU that is fragmented). One line per policy, the mean over seeds, with a band of one standard
deviation on the zoomed panel.

``plot_gap_closed``: per workload and policy, the share of FGD's gap to the online bound closed
(``bench/sim_gap.py --plot``): a bar for the share of the means, a dot per seed, the goal as a line.

``check_plot_path`` says before any long work whether a path can take a figure at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kubegpu.atomicfile import writable_folder_error
from kubegpu.errors import InputError
from kubegpu.sim.curves import PolicySummary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["GapClosed", "check_plot_path", "plot_curves", "plot_gap_closed"]


@dataclass(frozen=True, kw_only=True)
class GapClosed:
    """One policy on one workload: the share (%) of FGD's gap to the online bound it closes.

    ``overall`` is the share of the means over the seeds (what ``bench/sim_gap.py``'s table prints),
    ``per_seed`` each seed's own share, in the order of the seeds.
    """

    workload: str
    policy: str
    overall: float
    per_seed: tuple[float, ...]


def check_plot_path(path: str | Path, *, flag: str = "--plot") -> None:
    """Raise ``InputError`` naming ``flag`` if ``path`` cannot take a figure: a file type matplotlib
    has no writer for, no type at all (matplotlib would write ``NAME.png``, not the file named), a
    folder, or a parent folder that does not exist. Writes nothing."""
    from matplotlib.backend_bases import FigureCanvasBase

    target = Path(path)
    kind = target.suffix.lower().removeprefix(".")
    formats = FigureCanvasBase.get_supported_filetypes()
    if kind and kind not in formats:
        raise InputError(
            f"{flag} {path}: no image writer for .{kind}; use one of {', '.join(sorted(formats))}"
        )
    if target.is_dir():
        raise InputError(f"{flag} {path}: is a folder; name the image file to write")
    if not kind:  # `--plot out/` reaches here as `out`, which matplotlib would write as out.png
        raise InputError(
            f"{flag} {path}: name the image file with its type, e.g. {target / 'curves.png'} or {target}.png"
        )
    if not target.parent.is_dir():
        raise InputError(f"{flag} {path}: folder {target.parent} does not exist")
    problem = writable_folder_error(target.parent)
    if problem:
        raise InputError(f"{flag} {path}: {problem}")


def _save(fig: Figure, path: str | Path, flag: str) -> None:
    import matplotlib.pyplot as plt

    try:
        fig.savefig(str(path), dpi=120)
    except OSError as exc:
        raise InputError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from exc
    except ValueError as exc:  # matplotlib: an extension it has no writer for
        raise InputError(f"{flag} {path}: {exc}") from exc
    finally:
        plt.close(fig)


def plot_curves(
    summaries: Sequence[PolicySummary],
    path: str | Path,
    *,
    title: str = "",
    bound_pct: float | None = None,
) -> None:
    """Write the figure to ``path`` (PNG); raises ``InputError`` if it cannot be written.

    ``bound_pct`` (``kubegpu sim --bound``) draws the upper bound on allocation as a horizontal line
    on both allocation panels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8))
    ax_alloc, ax_zoom, ax_frag, ax_ratio = axes
    for s in summaries:
        x = np.arange(len(s.alloc_mean))
        (line,) = ax_alloc.plot(x, s.alloc_mean, label=s.policy.value, linewidth=1.4)
        ax_zoom.plot(x[80:], s.alloc_mean[80:], color=line.get_color(), linewidth=1.4)
        ax_zoom.fill_between(
            x[80:],
            (s.alloc_mean - s.alloc_std)[80:],
            (s.alloc_mean + s.alloc_std)[80:],
            color=line.get_color(),
            alpha=0.15,
        )
        ax_frag.plot(x, s.frag_mean, label=s.policy.value, linewidth=1.4)
        ax_ratio.plot(x, s.frag_ratio_mean, label=s.policy.value, linewidth=1.4)
    if summaries:
        x = np.arange(len(summaries[0].alloc_mean))
        ax_alloc.plot(x, np.minimum(x, 100), color="grey", linestyle=":", linewidth=1, label="ideal")
    if bound_pct is not None:
        for ax in (ax_alloc, ax_zoom):
            ax.axhline(bound_pct, color="black", linestyle="--", linewidth=1, label=f"bound {bound_pct:.2f}")
    ax_alloc.set_ylabel("GPU allocation (%)")
    ax_zoom.set_ylabel("GPU allocation (%), from 80 % arrived")
    ax_frag.set_ylabel("fragmentation amount (% of GPUs)")
    ax_ratio.set_ylabel("fragmentation ratio (% of idle GPU)")
    for ax in axes:
        ax.set_xlabel("arrived GPU demand (% of capacity)")
        ax.grid(True, alpha=0.3)
    ax_alloc.legend(loc="upper left", fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path, "--plot")


def plot_gap_closed(
    rows: Sequence[GapClosed],
    path: str | Path,
    *,
    goal_pct: float | None = None,
    title: str = "",
    flag: str = "--plot",
) -> None:
    """Write the figure of ``rows`` to ``path``: workloads along x in their first-seen order, one bar
    per policy (its ``overall``) with a dot per seed, 0 % at FGD and 100 % at the online bound, and
    ``goal_pct`` as a dashed line. Raises ``InputError`` (naming ``flag``) if it cannot be written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r.workload for r in rows))
    policies = list(dict.fromkeys(r.policy for r in rows))
    width = 0.8 / max(1, len(policies))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(workloads) + 3), 4.8))
    for k, policy in enumerate(policies):
        color = f"C{k}"
        for r in (r for r in rows if r.policy == policy):
            x = workloads.index(r.workload) - 0.4 + width * (k + 0.5)
            ax.bar(x, r.overall, width * 0.9, color=color, alpha=0.55, label=policy)
            if r.per_seed:
                spread = np.linspace(-width * 0.3, width * 0.3, len(r.per_seed))
                ax.scatter(
                    x + spread, r.per_seed, s=10, color=color, edgecolors="black", linewidths=0.4, zorder=3
                )
            ax.annotate(f"{r.overall:.1f} %", (x, r.overall / 2), ha="center", va="center", fontsize="small")
    if goal_pct is not None:
        ax.axhline(goal_pct, color="black", linestyle="--", linewidth=1, label=f"goal {goal_pct:g} %")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_ylabel("share of FGD's gap to the online bound closed (%)")
    ax.grid(True, axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    _save(fig, path, flag)

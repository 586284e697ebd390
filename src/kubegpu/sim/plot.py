"""Drawing the replay's curves like the FGD paper's figures (matplotlib, written to a PNG file).

Four panels against arrived GPU demand: GPU allocation (with the ideal line, capped at 100 %), the
same zoomed on the saturated end (from 80 % arrived), fragmentation amount (% of cluster GPUs)
and fragmentation ratio (% of idle GPU that is fragmented). One line per policy, the mean over
seeds, with a band of one standard deviation on the zoomed panel.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kubegpu.errors import InputError
from kubegpu.sim.curves import PolicySummary

__all__ = ["plot_curves"]


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
    try:
        fig.savefig(str(path), dpi=120)
    except OSError as exc:
        raise InputError(f"--plot {path}: cannot write: {exc.strerror or exc}") from exc
    except ValueError as exc:  # matplotlib: an extension it has no writer for
        raise InputError(f"--plot {path}: {exc}") from exc
    finally:
        plt.close(fig)

"""One linear program, solved with HiGHS through ``highspy``: minimise ``c @ x`` subject to
``A @ x <= b`` and ``x >= 0``, with the row duals that column generation prices with.

``highspy`` is HiGHS's own small wheel (numpy its only dependency), so the bounds and the plan-guided
placement solve their LPs without scipy, in the container image too. Numpy and highspy; the one
I/O is keeping HiGHS's start-up banner off the process's standard output (``_silent_highs``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from kubegpu.errors import InputError

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class LpSolution:
    """The optimum ``fun``, per row of ``A`` its dual (``d fun / d b``: at most 0 here), and per
    column its value ``x``."""

    fun: float
    row_duals: FloatArray
    x: FloatArray = field(default_factory=lambda: np.zeros(0))


def solve_min(c: FloatArray, a: FloatArray, b: FloatArray) -> LpSolution:
    """``min c @ x  s.t.  a @ x <= b, x >= 0`` (``a`` dense, rows x columns); ``InputError`` unless
    optimal."""
    try:
        import highspy
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise InputError("the LP solver is missing: pip install highspy") from exc
    rows, cols = a.shape
    lp = highspy.HighsLp()
    lp.num_col_ = cols
    lp.num_row_ = rows
    lp.col_cost_ = np.asarray(c, dtype=np.float64)
    lp.col_lower_ = np.zeros(cols)
    lp.col_upper_ = np.full(cols, highspy.kHighsInf)
    lp.row_lower_ = np.full(rows, -highspy.kHighsInf)
    lp.row_upper_ = np.asarray(b, dtype=np.float64)
    col, row = np.nonzero(a.T)  # column-wise: for each column its nonzero rows, in order
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = cols
    lp.a_matrix_.num_row_ = rows
    lp.a_matrix_.start_ = np.concatenate([[0], np.cumsum(np.bincount(col, minlength=cols))]).astype(np.int32)
    lp.a_matrix_.index_ = row.astype(np.int32)
    lp.a_matrix_.value_ = a[row, col].astype(np.float64)
    h = _silent_highs(highspy)
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise InputError(f"the LP solver failed: {h.modelStatusToString(status)}")
    solution = h.getSolution()
    return LpSolution(
        fun=float(h.getInfo().objective_function_value),
        row_duals=np.asarray(solution.row_dual, dtype=np.float64),
        x=np.asarray(solution.col_value, dtype=np.float64),
    )


def _silent_highs(highspy: Any) -> Any:
    """A ``Highs`` whose output is off. HiGHS (1.16) writes its copyright banner to file descriptor 1
    when a process makes its first ``Highs``, before any option can be set: into the JSON that
    ``kubegpu sim ... --json`` prints, and between the extender's log lines. That one construction
    runs with descriptor 1 pointed at /dev/null (Python's buffer flushed first, so nothing of ours is
    lost)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    h.setOptionValue("output_flag", False)
    return h

"""One linear program, solved with HiGHS through ``highspy``: minimise ``c @ x`` subject to
``A @ x <= b`` and ``x >= 0``, with the row duals that column generation prices with.

``highspy`` is HiGHS's own small wheel (numpy its only dependency), so the bounds and the plan-guided
placement solve their LPs without scipy, in the container image too. Pure: numpy and highspy, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kubegpu.errors import InputError

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class LpSolution:
    """The optimum ``fun`` and, per row of ``A``, its dual (``d fun / d b``: at most 0 here)."""

    fun: float
    row_duals: FloatArray


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
    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise InputError(f"the LP solver failed: {h.modelStatusToString(status)}")
    solution = h.getSolution()
    return LpSolution(
        fun=float(h.getInfo().objective_function_value),
        row_duals=np.asarray(solution.row_dual, dtype=np.float64),
    )

"""Solving an LP prints nothing: HiGHS's start-up banner must not reach a command's standard output
(``kubegpu sim bound --json`` is read by programs; the extender's stdout and stderr are its log)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

PROGRAM = """
import numpy as np
from kubegpu.sim.lp import solve_min
print("before", flush=True)
got = solve_min(np.array([-1.0, -2.0]), np.array([[1.0, 1.0]]), np.array([3.0]))
print("after", got.fun)
"""


def test_the_first_lp_of_a_process_prints_nothing_of_its_own() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == "before\nafter -6.0\n"
    assert "HiGHS" not in done.stderr

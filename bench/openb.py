"""Where the benchmark scripts find the openb trace: ``KUBEGPU_OPENB_DIR``, else the team's copy in the
shared data folder beside the checkout. The trace is not redistributed with kubegpu (its publisher
allows research and study use with citation), so it is never copied into the repository; without it
each benchmark prints why and exits 0.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubegpu.sim.openb import ENV, NODES_FILE, PODS_FILE

NODES, PODS = NODES_FILE, PODS_FILE
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "openb"


def default_data_dir() -> Path:
    env = os.environ.get(ENV)
    return Path(env) if env else SHARED_DATA

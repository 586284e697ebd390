"""Where the benchmark scripts find the default openb trace: the copy that ships with kubegpu.

``KUBEGPU_OPENB_DIR`` overrides it (a folder with the same two file names); by default it is
``src/kubegpu/sim/data/openb`` (``kubegpu.sim.openb``), so a clone benchmarks with nothing beside it.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubegpu.sim.openb import DATA_DIR, NODES_FILE, PODS_FILE

NODES, PODS = NODES_FILE, PODS_FILE


def default_data_dir() -> Path:
    env = os.environ.get("KUBEGPU_OPENB_DIR")
    return Path(env) if env else DATA_DIR

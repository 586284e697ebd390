"""Where the benchmark scripts find the default openb trace: the shared data folder, never the repo.

``KUBEGPU_OPENB_DIR`` overrides it; by default it is ``../shared/data/openb`` beside the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

NODES, PODS = "openb_node_list_gpu_node.csv", "openb_pod_list_default.csv"


def default_data_dir() -> Path:
    env = os.environ.get("KUBEGPU_OPENB_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openb"

"""Where the openb trace is when a ``kubegpu sim`` command is given no ``--nodes``/``--pods``.

The Alibaba GPU cluster trace ("openb") is not redistributed with kubegpu: its publisher allows
research and study use with citation. ``KUBEGPU_OPENB_DIR`` names a folder that holds its node list
and default pod list under their published names; without it, or with the files missing, the
commands say so and name the flags that give a trace explicitly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kubegpu.errors import InputError

ENV = "KUBEGPU_OPENB_DIR"
NODES_FILE = "openb_node_list_gpu_node.csv"
PODS_FILE = "openb_pod_list_default.csv"


@dataclass(frozen=True)
class TracePaths:
    """Where one trace's two files are."""

    nodes: Path
    pods: Path


def default_trace() -> TracePaths:
    """The two files of the openb trace in ``$KUBEGPU_OPENB_DIR``; ``InputError`` naming what is missing."""
    folder = os.environ.get(ENV)
    if not folder:
        raise InputError(
            f"no trace given: pass --nodes NODES.csv and --pods PODS.csv, or set {ENV} to the folder "
            f"holding the openb trace ({NODES_FILE}, {PODS_FILE})"
        )
    paths = TracePaths(nodes=Path(folder) / NODES_FILE, pods=Path(folder) / PODS_FILE)
    for path in (paths.nodes, paths.pods):
        if not path.is_file():
            raise InputError(
                f"{path}: no such file ({ENV}={folder} should hold {NODES_FILE} and {PODS_FILE})"
            )
    return paths


def resolve(nodes: Path | None, pods: Path | None) -> TracePaths:
    """``--nodes``/``--pods`` as given, each missing one from the openb trace in ``$KUBEGPU_OPENB_DIR``."""
    if nodes is not None and pods is not None:
        return TracePaths(nodes=nodes, pods=pods)
    default = default_trace()
    return TracePaths(nodes=nodes or default.nodes, pods=pods or default.pods)

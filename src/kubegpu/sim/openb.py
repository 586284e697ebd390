"""The default trace that ships with kubegpu: the openb node list and default pod list (``data/openb``).

``kubegpu sim`` without ``--nodes``/``--pods``, the simulator's tests and the benchmarks replay these
files, so a clone or an installed wheel has its headline workload with nothing beside it. Source,
terms and checksums: ``data/openb/README.md`` and the repository's ``NOTICE``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from kubegpu.errors import InputError

DATA_DIR = Path(__file__).resolve().parent / "data" / "openb"
NODES_FILE = "openb_node_list_gpu_node.csv"
PODS_FILE = "openb_pod_list_default.csv"
SHA256 = {
    NODES_FILE: "2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5",
    PODS_FILE: "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8",
}


@dataclass(frozen=True)
class TracePaths:
    """Where one trace's two files are."""

    nodes: Path
    pods: Path


def default_trace(data_dir: Path | None = None) -> TracePaths:
    """The two files of the default trace, from ``data_dir`` (same file names) or the shipped copy."""
    base = DATA_DIR if data_dir is None else data_dir
    paths = TracePaths(nodes=base / NODES_FILE, pods=base / PODS_FILE)
    for path in (paths.nodes, paths.pods):
        if not path.is_file():
            raise InputError(f"{path}: the default openb trace file is missing")
    return paths


def resolve(nodes: Path | None, pods: Path | None) -> TracePaths:
    """``--nodes``/``--pods`` as given, each missing one from the shipped default trace."""
    if nodes is not None and pods is not None:
        return TracePaths(nodes=nodes, pods=pods)
    default = default_trace()
    return TracePaths(nodes=nodes or default.nodes, pods=pods or default.pods)


def verify() -> dict[str, str]:
    """Check the shipped files against their recorded digests; the digests on success."""
    got: dict[str, str] = {}
    for name, want in SHA256.items():
        path = DATA_DIR / name
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != want:
            raise InputError(f"{path}: sha256 {digest}, expected {want} (the shipped trace was changed)")
        got[name] = digest
    return got

"""Parser for ``nvidia-smi topo -m`` captures, as users paste them.

Accepts tab- or space-separated output, with or without NIC columns (``NIC0`` or older ``mlx5_0``
names), the ``CPU Affinity`` / ``NUMA Affinity`` / ``GPU NUMA ID`` columns, and the legend after the
matrix. NIC rows and columns are kept but play no part in GPU costs. A malformed capture raises
``TopologyParseError`` naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubegpu.errors import InputError, TopologyParseError
from kubegpu.model.node import Gpu, Node
from kubegpu.model.topology import Link, LinkKind, Topology

__all__ = ["SmiTopology", "looks_like_capture", "node_from_capture", "parse_topo_matrix"]

_DEVICE_RE = re.compile(r"\b(GPU\d+|NIC\d+|mlx\d+_\d+)\b")
_HEADER_TOKEN_RE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|CPU|NUMA|GPU|Affinity|ID)$")
_EXTRA_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


@dataclass(frozen=True, kw_only=True)
class SmiTopology:
    """What a capture says: device names, the full link matrix, and per-GPU affinity columns."""

    devices: tuple[str, ...]
    links: tuple[tuple[Link, ...], ...]
    cpu_affinity: tuple[str | None, ...]
    numa_affinity: tuple[int | None, ...]

    @property
    def gpu_positions(self) -> tuple[int, ...]:
        return tuple(i for i, d in enumerate(self.devices) if d.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if not d.startswith("GPU"))

    def gpu_topology(self) -> Topology:
        """The GPU-only topology (NIC rows and columns dropped), costs from the default table."""
        pos = self.gpu_positions
        return Topology.from_links([[self.links[i][j] for j in pos] for i in pos])


def _header_index(lines: list[str]) -> int:
    for i, line in enumerate(lines):
        tokens = line.split()
        if tokens and tokens[0] == "GPU0" and all(_HEADER_TOKEN_RE.match(t) for t in tokens):
            return i
    raise TopologyParseError(
        "no 'nvidia-smi topo -m' header found: expected a line of column names starting with GPU0"
    )


def looks_like_capture(text: str) -> bool:
    """True when ``text`` reads like ``nvidia-smi topo -m`` output rather than a YAML spec."""
    try:
        _header_index(text.splitlines()[:20])
    except TopologyParseError:
        return False
    return True


def _numa(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def parse_topo_matrix(text: str, origin: str = "<capture>") -> SmiTopology:
    """Parse a capture; errors name ``origin`` and the 1-based line."""
    lines = text.splitlines()
    try:
        head = _header_index(lines)
    except TopologyParseError as exc:
        raise TopologyParseError(f"{origin}: {exc}") from exc
    header = lines[head]
    affinity_at = min((header.find(c) for c in _EXTRA_COLUMNS if c in header), default=len(header))
    devices = tuple(_DEVICE_RE.findall(header[:affinity_at]))
    extras = [c for c in _EXTRA_COLUMNS if c in header]
    k = len(devices)
    rows: dict[str, tuple[list[Link], list[str]]] = {}
    row_line: dict[str, int] = {}
    for offset, line in enumerate(lines[head + 1 :], start=head + 2):
        stripped = line.strip()
        if not stripped:
            if rows:
                break
            continue
        if stripped.startswith(("Legend", "NIC Legend")):
            break
        tokens = stripped.split()
        label = tokens[0]
        if label not in devices:
            raise TopologyParseError(
                f"{origin}:{offset}: row {label!r} is not one of the columns {', '.join(devices)}"
            )
        if label in rows:
            raise TopologyParseError(f"{origin}:{offset}: row {label} appears twice")
        cells = tokens[1 : 1 + k]
        if len(cells) < k:
            raise TopologyParseError(
                f"{origin}:{offset}: row {label} has {len(cells)} link entries, expected {k}"
            )
        links: list[Link] = []
        for col, cell in enumerate(cells):
            try:
                links.append(Link.parse(cell))
            except InputError as exc:
                raise TopologyParseError(f"{origin}:{offset}: {label}/{devices[col]}: {exc}") from exc
        rows[label] = (links, tokens[1 + k :])
        row_line[label] = offset
    missing = [d for d in devices if d.startswith("GPU") and d not in rows]
    if missing:
        raise TopologyParseError(f"{origin}: no row for {', '.join(missing)}")
    matrix: list[tuple[Link, ...]] = []
    cpu: list[str | None] = []
    numa: list[int | None] = []
    for i, d in enumerate(devices):
        if d not in rows:  # a NIC without a row: fill from its column
            matrix.append(tuple(rows[o][0][i] if o in rows else Link(kind=LinkKind.SELF) for o in devices))
            cpu.append(None)
            numa.append(None)
            continue
        links, rest = rows[d]
        if links[i].kind is not LinkKind.SELF:
            raise TopologyParseError(
                f"{origin}:{row_line[d]}: {d}'s entry for itself must be X, not {links[i]}"
            )
        matrix.append(tuple(links))
        values = dict(zip(extras, rest, strict=False))
        cpu.append(values.get("CPU Affinity"))
        numa.append(_numa(values.get("NUMA Affinity")))
    for i, a in enumerate(devices):
        for j, b in enumerate(devices[:i]):
            if a in rows and b in rows and matrix[i][j] != matrix[j][i]:
                raise TopologyParseError(
                    f"{origin}:{row_line[a]}: {a}/{b} is {matrix[i][j]} but {b}/{a} is {matrix[j][i]}"
                )
        for j, b in enumerate(devices):
            if i != j and matrix[i][j].kind is LinkKind.SELF:
                raise TopologyParseError(
                    f"{origin}:{row_line.get(a, head + 1)}: {a}/{b}: X only on the diagonal"
                )
    return SmiTopology(
        devices=devices, links=tuple(matrix), cpu_affinity=tuple(cpu), numa_affinity=tuple(numa)
    )


def node_from_capture(text: str, *, origin: str = "<capture>", node_name: str | None = None) -> Node:
    """A node from a capture: GPUs of unknown model with stable UUIDs, NUMA from the capture."""
    from kubegpu.sources.spec import stable_uuid

    topo = parse_topo_matrix(text, origin)
    name = node_name or "captured-node"
    gpus = tuple(
        Gpu(
            index=idx,
            uuid=stable_uuid(name, idx),
            model="unknown",
            memory_mib=0,
            numa_node=topo.numa_affinity[pos],
            pci_bus_id=f"00000000:{0x18 + 0x10 * idx:02X}:00.0",
        )
        for idx, pos in enumerate(topo.gpu_positions)
    )
    return Node(name=name, gpus=gpus, topology=topo.gpu_topology())

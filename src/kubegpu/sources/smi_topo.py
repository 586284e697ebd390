"""Parser for ``nvidia-smi topo -m`` captures, as they are found in files, logs and issues.

The matrix is located by its header row wherever it is in the text: a line whose cells are
``GPU0 GPU1 ...``, then NIC columns (``NIC0`` or older ``mlx5_0`` names), then any of the
``CPU Affinity`` / ``NUMA Affinity`` / ``GPU NUMA ID`` columns. Around that the parser tolerates what
real captures carry: leading text and log prefixes on every line (``# ``, ``file:``, indentation),
ANSI SGR sequences with or without the ESC byte (nvidia-smi underlines the header even into files),
tabs or spaces, header cells run together (``NIC8NIC9``) and row cells too (``NODENODE``), blank
lines between rows, the legends after the matrix, and ``nvidia-smi -L`` style lines
(``GPU 0: NAME (UUID: GPU-...)``) beside it, which name the GPU model and UUIDs. NIC rows and
columns are kept but play no part in GPU costs. A malformed matrix raises ``TopologyParseError``
naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubegpu.echo import shorten
from kubegpu.errors import InputError, TopologyParseError
from kubegpu.model.gpu import GpuModel, gpu_model, model_for_product
from kubegpu.model.node import MAX_GPUS, MAX_NUMA_NODE, Gpu, GpuUuid, Node, node_name_problem
from kubegpu.model.topology import Link, LinkKind, Topology, fallback_link_cost

__all__ = ["SmiTopology", "looks_like_capture", "node_from_capture", "parse_topo_matrix"]

_SGR_RE = re.compile(r"\x1b?\[[0-9;]*m")
_DEVICE = r"(?:GPU\d+|NIC\d+|mlx\d+_(?:bond_)?\d+)"
_DEVICE_RE = re.compile(_DEVICE)
_DEVICES_ONLY_RE = re.compile(rf"(?:{_DEVICE})+")
_GPU0_RE = re.compile(r"(?<![A-Za-z0-9_])GPU0(?!\d)")
_LINK = r"(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)"
# A row: its device label, then a link cell, which may run into the next one (``NODENODE``) when a
# paste lost the tab between two cells.
_ROW_RE = re.compile(rf"(?<![A-Za-z0-9_])({_DEVICE})\s+({_LINK})(?={_LINK}|(?!\w))", re.IGNORECASE)
_RUN_TOGETHER_RE = re.compile(rf"{_LINK}{{2,}}", re.IGNORECASE)
_ONE_LINK_RE = re.compile(_LINK, re.IGNORECASE)
_EXTRA_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_EXTRA_RE = re.compile("|".join(re.escape(c) for c in _EXTRA_COLUMNS))
_LISTING_RE = re.compile(r"(?<![A-Za-z0-9_])GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)")


@dataclass(frozen=True, kw_only=True)
class SmiTopology:
    """What a capture says: device names, the full link matrix, per-GPU affinity columns, GPU names."""

    devices: tuple[str, ...]
    links: tuple[tuple[Link, ...], ...]
    cpu_affinity: tuple[str | None, ...]
    numa_affinity: tuple[int | None, ...]
    products: dict[int, str]  # GPU index -> product name, from ``GPU i: NAME (UUID: ...)`` lines
    uuids: dict[int, str]

    @property
    def gpu_positions(self) -> tuple[int, ...]:
        return tuple(i for i, d in enumerate(self.devices) if d.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if not d.startswith("GPU"))

    @property
    def gpu_numa(self) -> tuple[int | None, ...]:
        return tuple(self.numa_affinity[p] for p in self.gpu_positions)

    def detected_model(self) -> GpuModel | None:
        """The catalogue model named by the ``GPU i: NAME`` lines, when they name exactly one."""
        models = {model_for_product(name) for name in self.products.values()}
        if len(models) != 1:
            return None
        return models.pop()

    def gpu_topology(self, model: GpuModel | None = None) -> Topology:
        """The GPU-only topology (NIC rows and columns dropped), priced for ``model`` or the fallback."""
        pos = self.gpu_positions
        links = [[self.links[i][j] for j in pos] for i in pos]
        if model is None:
            costs = [[fallback_link_cost(link) for link in row] for row in links]
            return Topology.from_links(links, costs=costs, numa=self.gpu_numa)
        return Topology.from_links(
            links,
            nvlink_generation=model.nvlink_generation,
            pcie_generation=model.pcie_generation,
            numa=self.gpu_numa,
        )


def _clean(line: str) -> str:
    return _SGR_RE.sub("", line)


def _header_devices(line: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The device columns and extra columns of a header line, or None when ``line`` is not one."""
    start = _GPU0_RE.search(line)
    if start is None:
        return None
    body = line[start.start() :]
    extra_at = _EXTRA_RE.search(body)
    device_part = body if extra_at is None else body[: extra_at.start()]
    squeezed = re.sub(r"\s+", "", device_part)
    if not _DEVICES_ONLY_RE.fullmatch(squeezed):
        return None
    devices = tuple(_DEVICE_RE.findall(squeezed))
    gpus = [d for d in devices if d.startswith("GPU")]
    if gpus != [f"GPU{i}" for i in range(len(gpus))] or devices[: len(gpus)] != tuple(gpus):
        return None
    if len(set(devices)) != len(devices):
        return None
    extras: tuple[str, ...] = ()
    if extra_at is not None:
        tail = body[extra_at.start() :]
        extras = tuple(_EXTRA_RE.findall(tail))
        if _EXTRA_RE.sub("", tail).strip():
            return None
    return devices, extras


def _find_header(lines: list[str]) -> tuple[int, tuple[str, ...], tuple[str, ...]] | None:
    for i, line in enumerate(lines):
        found = _header_devices(line)
        if found is not None:
            return i, found[0], found[1]
    return None


def looks_like_capture(text: str) -> bool:
    """True when ``text`` holds an ``nvidia-smi topo -m`` header anywhere in it."""
    return _find_header([_clean(line) for line in text.splitlines()]) is not None


_NUMA_LIST_RE = re.compile(r"[0-9]{1,4}(?:-[0-9]{1,4})?(?:,[0-9]{1,4}(?:-[0-9]{1,4})?)*")


def _numa(value: str | None, where: str) -> int | None:
    """A NUMA Affinity cell: one node, several (``0,8,252-255`` on POWER9: no single node, so
    ``None``), or ``N/A`` or nothing when the driver does not know. Anything else is an error."""
    text = (value or "").strip()
    if text in {"", "N/A"}:
        return None
    if _NUMA_LIST_RE.fullmatch(text) and all(int(n) <= MAX_NUMA_NODE for n in re.split(r"[,-]", text)):
        return int(text) if text.isdigit() else None
    raise TopologyParseError(
        f"{where}: NUMA Affinity {shorten(text)} is not a NUMA node (0 to {MAX_NUMA_NODE}), a list "
        "of them, or N/A"
    )


def _link_cells(tokens: list[str], k: int) -> tuple[list[str], int]:
    """The first ``k`` link cells of a row's whitespace tokens (after its label), and how many tokens
    they took: a token of link types run together (``NODENODE``, ``NV18NV18``) is split into its
    cells, as run-together header cells are."""
    cells: list[str] = []
    used = 0
    for token in tokens:
        if len(cells) >= k:
            break
        used += 1
        if _RUN_TOGETHER_RE.fullmatch(token):
            cells.extend(_ONE_LINK_RE.findall(token))
        else:
            cells.append(token)
    return cells[:k], used


def _extras(rest: str, label: str, k: int, used: int, names: tuple[str, ...]) -> dict[str, str]:
    """The affinity values after the ``k`` link cells (``used`` tokens); tab-separated rows may leave
    CPU Affinity empty."""
    cells = [c.strip() for c in rest.split("\t")]
    if (
        "\t" in rest
        and used == k
        and len(cells) > k
        and cells[0] == label
        and all(c for c in cells[1 : 1 + k])
    ):
        values = cells[1 + k :]
        first = values[:1]
        later = [v for v in values[1:] if v]
        values = first + later
    else:
        values = rest.split()[1 + used :]
    return dict(zip(names, values, strict=False))


def _filled(rows: dict[str, tuple[list[Link], dict[str, str]]], other: str, nic: str, col: int) -> Link:
    if other in rows:
        return rows[other][0][col]
    # two NICs without rows: their link is unknown and plays no part in GPU costs
    return Link(kind=LinkKind.SELF) if other == nic else Link(kind=LinkKind.SYS)


def parse_topo_matrix(text: str, origin: str = "<capture>") -> SmiTopology:
    """Parse a capture; errors name ``origin`` and the 1-based line."""
    lines = [_clean(line) for line in text.splitlines()]
    found = _find_header(lines)
    if found is None:
        raise TopologyParseError(f"no nvidia-smi topology matrix found in {origin}")
    head, devices, extras = found
    gpu_count = sum(d.startswith("GPU") for d in devices)
    if gpu_count > MAX_GPUS:  # refused before the rows are read: 2000 GPUs are 4 million cells
        raise TopologyParseError(
            f"{origin}:{head + 1}: the matrix has {gpu_count} GPUs; a node has at most {MAX_GPUS}"
        )
    k = len(devices)
    rows: dict[str, tuple[list[Link], dict[str, str]]] = {}
    row_line: dict[str, int] = {}
    for offset, line in enumerate(lines[head + 1 :], start=head + 2):
        if not line.strip():
            continue
        match = _ROW_RE.search(line)
        if match is None:
            break  # the legend, the next command, the rest of the log
        label = match[1]
        if label not in devices:
            raise TopologyParseError(
                f"{origin}:{offset}: row {shorten(label)} is not one of the columns {', '.join(devices)}"
            )
        if label in rows:
            raise TopologyParseError(f"{origin}:{offset}: row {label} appears twice")
        rest = line[match.start(1) :]
        cells, used = _link_cells(rest.split()[1:], k)
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
        rows[label] = (links, _extras(rest, label, k, used, extras))
        row_line[label] = offset
    missing = [d for d in devices if d.startswith("GPU") and d not in rows]
    if missing:
        raise TopologyParseError(f"{origin}:{head + 1}: the matrix has no row for {', '.join(missing)}")
    matrix: list[tuple[Link, ...]] = []
    cpu: list[str | None] = []
    numa: list[int | None] = []
    for i, d in enumerate(devices):
        if d not in rows:  # a NIC without a row (a truncated paste): fill from its column
            matrix.append(tuple(_filled(rows, o, d, i) for o in devices))
            cpu.append(None)
            numa.append(None)
            continue
        links, values = rows[d]
        if links[i].kind is not LinkKind.SELF:
            raise TopologyParseError(
                f"{origin}:{row_line[d]}: {d}'s entry for itself must be X, not {links[i]}"
            )
        matrix.append(tuple(links))
        cpu.append(values.get("CPU Affinity") or None)
        numa.append(_numa(values.get("NUMA Affinity"), f"{origin}:{row_line[d]}: {d}"))
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
    products: dict[int, str] = {}
    uuids: dict[int, str] = {}
    for line in lines:
        for m in _LISTING_RE.finditer(line):
            products.setdefault(int(m[1]), m[2].strip())
            uuids.setdefault(int(m[1]), m[3])
    return SmiTopology(
        devices=devices,
        links=tuple(matrix),
        cpu_affinity=tuple(cpu),
        numa_affinity=tuple(numa),
        products=products,
        uuids=uuids,
    )


def node_from_capture(
    text: str, *, origin: str = "<capture>", node_name: str | None = None, gpu_model_name: str | None = None
) -> Node:
    """A node from a capture, NUMA from the capture.

    The GPU model is ``gpu_model_name`` when given, else the one the capture's ``GPU i: NAME`` lines
    name; with neither, GPUs are of unknown model and links are priced by the fallback table.
    """
    from kubegpu.sources.spec import stable_uuid

    topo = parse_topo_matrix(text, origin)
    model = gpu_model(gpu_model_name) if gpu_model_name is not None else topo.detected_model()
    name = node_name or "captured-node"
    problem = node_name_problem(name)
    if problem is not None:
        raise InputError(f"node name {shorten(name)} {problem}")
    gpus = tuple(
        Gpu(
            index=idx,
            uuid=GpuUuid(topo.uuids[idx]) if idx in topo.uuids else stable_uuid(name, idx),
            model="unknown" if model is None else model.name,
            memory_mib=0 if model is None else model.memory_mib,
            numa_node=topo.numa_affinity[pos],
            pci_bus_id=f"00000000:{0x18 + 0x10 * idx:02X}:00.0",
        )
        for idx, pos in enumerate(topo.gpu_positions)
    )
    try:
        topology = topo.gpu_topology(model)
    except InputError as exc:  # a cost no table gives: named with the file, never without it
        raise TopologyParseError(f"{origin}: {exc}") from exc
    return Node(name=name, gpus=gpus, topology=topology)

"""GPU-to-GPU topology: the link between every pair of GPUs and what using it costs.

Links are named as ``nvidia-smi topo -m`` names them: ``NV#`` (# bonded NVLinks), ``PIX`` (one PCIe
switch), ``PXB`` (several PCIe switches), ``PHB`` (a PCIe host bridge), ``NODE`` (host bridges within
one NUMA node) and ``SYS`` (across the SMP interconnect between NUMA nodes).

Costs are relative transfer times: ``cost = 450 / bandwidth_gbps`` where the bandwidth is the link's
nominal per-direction bandwidth, so one H100's 18 NVLinks (450 GB/s) cost 1.0. NVLink bandwidth is
``links x per-link bandwidth`` of the GPU's NVLink generation. A PCIe peer-to-peer path is modelled as
never faster than ``PCIE_P2P_SHARE_OF_NVLINK`` of one NVLink link of that generation, capped by the x16
bandwidth of the GPU's PCIe generation, and scaled by how far the path travels (``PCIE_PATH_FACTOR``).
So for every generation: any NVLink path costs less than any PCIe path, more links cost less than
fewer, and PIX < PXB < PHB < NODE < SYS (``docs/topology.md``). When the GPU model is unknown (a capture
that names none), ``fallback_link_cost`` prices with 25 GB/s per NVLink and no PCIe generation cap.
A node spec may replace every cost (the seed's model uses 1 inside an NVLink group and 4 across).
Costs are kept to three decimals so sums compare exactly. ``numa`` carries each GPU's NUMA node where
known; the allocator uses it to break ties (``docs/allocator.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from itertools import combinations

from kubegpu.echo import shorten
from kubegpu.errors import InputError
from kubegpu.model.gpu import NVLINK_LINK_GBPS, PCIE_X16_GBPS

__all__ = [
    "COST_REFERENCE_GBPS",
    "FALLBACK_NVLINK_LINK_GBPS",
    "MAX_COST",
    "MAX_NVLINKS",
    "MIN_COST",
    "PCIE_P2P_SHARE_OF_NVLINK",
    "PCIE_PATH_FACTOR",
    "Link",
    "LinkKind",
    "Topology",
    "default_link_cost",
    "fallback_link_cost",
]

COST_REFERENCE_GBPS = 450.0
COST_DECIMALS = 3
COST_SCALE = 1000  # 10 ** COST_DECIMALS
# Costs are kept to three decimals, so the smallest positive cost is 0.001; the largest is a link a
# million times slower than an H100's NVLink: anything beyond is a typo, and ``inf`` cannot be summed.
MIN_COST = 1 / COST_SCALE
MAX_COST = 1_000_000.0
# nvidia-smi prints NV1 ... NV18 today; a wider bond is a typo (and would price a link at cost 0).
MAX_NVLINKS = 64


class LinkKind(Enum):
    """The kind of path between two GPUs, as ``nvidia-smi topo -m`` prints it."""

    SELF = "X"
    NVLINK = "NV"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"


# Share of the x16 PCIe bandwidth a peer-to-peer transfer keeps on each kind of path (a model:
# every extra switch, host bridge or socket hop adds latency and contention).
PCIE_PATH_FACTOR: dict[LinkKind, float] = {
    LinkKind.PIX: 1.0,
    LinkKind.PXB: 0.9,
    LinkKind.PHB: 0.75,
    LinkKind.NODE: 0.6,
    LinkKind.SYS: 0.4,
}

# Peer-to-peer over PCIe crosses switches, host bridges or sockets and contends with host traffic; it
# is modelled as at most this share of one NVLink link of the same generation, so that any NVLink path
# is cheaper than any PCIe path whatever the PCIe generation.
PCIE_P2P_SHARE_OF_NVLINK = 0.8
# Per-link NVLink bandwidth assumed when the GPU model (and so its NVLink generation) is unknown.
FALLBACK_NVLINK_LINK_GBPS = 25.0

_LABEL_RE = re.compile(r"^(?:NV(?P<n>[0-9]+)|(?P<kind>X|PIX|PXB|PHB|NODE|SYS|SOC))$")


@dataclass(frozen=True, kw_only=True)
class Link:
    """One GPU-pair link: its kind and, for NVLink, how many links are bonded."""

    kind: LinkKind
    nvlinks: int = 0

    def __post_init__(self) -> None:
        if self.kind is LinkKind.NVLINK and not 1 <= self.nvlinks <= MAX_NVLINKS:
            raise InputError(f"an NVLink link bonds 1 to {MAX_NVLINKS} links (NV1 ... NV{MAX_NVLINKS})")
        if self.kind is not LinkKind.NVLINK and self.nvlinks != 0:
            raise InputError(f"{self.kind.value} carries no NVLinks")

    @property
    def label(self) -> str:
        """The ``nvidia-smi topo -m`` spelling: ``NV18``, ``PIX``, ``X``..."""
        return f"NV{self.nvlinks}" if self.kind is LinkKind.NVLINK else self.kind.value

    @classmethod
    def parse(cls, label: str) -> Link:
        """Parse a label as printed by ``nvidia-smi topo -m`` (``SOC`` is an old name of ``SYS``)."""
        match = _LABEL_RE.match(label.strip().upper())
        if match is None:
            raise InputError(
                f"unknown link type {shorten(label)}; expected X, NV<n>, PIX, PXB, PHB, NODE or SYS"
            )
        if match["n"] is not None:
            if len(match["n"]) > 3:  # refused before int(): a 5000-digit NV count is not parsed
                raise InputError(f"an NVLink link bonds 1 to {MAX_NVLINKS} links, not {shorten(label)}")
            return cls(kind=LinkKind.NVLINK, nvlinks=int(match["n"]))
        kind = "SYS" if match["kind"] == "SOC" else match["kind"]
        return cls(kind=LinkKind(kind))

    def __str__(self) -> str:
        return self.label


SELF = Link(kind=LinkKind.SELF)


def default_link_cost(
    link: Link, *, nvlink_generation: int | None = 4, pcie_generation: int | None = 5
) -> float:
    """The documented default cost of ``link`` for GPUs of the given NVLink/PCIe generations.

    ``None`` for a generation means unknown: 25 GB/s per NVLink link, no PCIe x16 cap.
    """
    if link.kind is LinkKind.SELF:
        return 0.0
    link_gbps = (
        NVLINK_LINK_GBPS[nvlink_generation] if nvlink_generation is not None else FALLBACK_NVLINK_LINK_GBPS
    )
    if link.kind is LinkKind.NVLINK:
        bandwidth = link.nvlinks * link_gbps
    else:
        path_gbps = PCIE_P2P_SHARE_OF_NVLINK * link_gbps
        if pcie_generation is not None:
            path_gbps = min(path_gbps, PCIE_X16_GBPS[pcie_generation])
        bandwidth = path_gbps * PCIE_PATH_FACTOR[link.kind]
    return round(COST_REFERENCE_GBPS / bandwidth, COST_DECIMALS)


def fallback_link_cost(link: Link) -> float:
    """The cost of ``link`` when the GPU model is unknown (NV1 18 ... NV18 1, PIX 22.5 ... SYS 56.25)."""
    return default_link_cost(link, nvlink_generation=None, pcie_generation=None)


def _square(name: str, rows: Sequence[Sequence[object]], n: int) -> None:
    if len(rows) != n or any(len(row) != n for row in rows):
        raise InputError(f"{name} must be {n}x{n}")


@dataclass(frozen=True, kw_only=True)
class Topology:
    """Links and costs between ``n`` GPUs, indexed 0..n-1; both matrices are symmetric."""

    n: int
    links: tuple[tuple[Link, ...], ...]
    cost: tuple[tuple[float, ...], ...]
    numa: tuple[int | None, ...] = ()  # each GPU's NUMA node (None: unknown); () when none is known
    _units: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise InputError("a topology needs at least one GPU")
        _square("link matrix", self.links, self.n)
        _square("cost matrix", self.cost, self.n)
        if self.numa and len(self.numa) != self.n:
            raise InputError(f"NUMA nodes given for {len(self.numa)} GPUs, but the topology has {self.n}")
        for i in range(self.n):
            if self.links[i][i].kind is not LinkKind.SELF:
                raise InputError(f"GPU{i}'s link to itself must be X, not {self.links[i][i]}")
            if self.cost[i][i] != 0:
                raise InputError(f"GPU{i}'s cost to itself must be 0, not {self.cost[i][i]}")
            for j in range(i + 1, self.n):
                if self.links[i][j] != self.links[j][i]:
                    raise InputError(
                        f"link matrix is not symmetric: GPU{i}-GPU{j} is {self.links[i][j]}, "
                        f"GPU{j}-GPU{i} is {self.links[j][i]}"
                    )
                if self.links[i][j].kind is LinkKind.SELF:
                    raise InputError(f"GPU{i}-GPU{j}: X is only valid on the diagonal")
                if self.cost[i][j] != self.cost[j][i]:
                    raise InputError(f"cost matrix is not symmetric at GPU{i}-GPU{j}")
                if not MIN_COST <= self.cost[i][j] <= MAX_COST:  # also refuses nan and inf
                    raise InputError(
                        f"cost GPU{i}-GPU{j} is {self.cost[i][j]}; a cost is a number from {MIN_COST} "
                        f"to {MAX_COST:.0f}"
                    )
        units = tuple(tuple(round(c * COST_SCALE) for c in row) for row in self.cost)
        object.__setattr__(self, "_units", units)

    # -- constructors -------------------------------------------------------------------------

    @classmethod
    def from_links(
        cls,
        links: Sequence[Sequence[Link]],
        *,
        costs: Sequence[Sequence[float]] | None = None,
        nvlink_generation: int | None = 4,
        pcie_generation: int | None = 5,
        numa: Sequence[int | None] | None = None,
    ) -> Topology:
        """Build from a link matrix; costs default to the bandwidth table for the generations given.

        ``numa`` gives each GPU's NUMA node; it is kept only when at least one is known.
        """
        n = len(links)
        _square("link matrix", links, n)
        link_rows = tuple(tuple(row) for row in links)
        if costs is None:
            cost_rows = tuple(
                tuple(
                    default_link_cost(
                        link, nvlink_generation=nvlink_generation, pcie_generation=pcie_generation
                    )
                    for link in row
                )
                for row in link_rows
            )
        else:
            _square("cost matrix", costs, n)
            cost_rows = tuple(tuple(round(float(c), COST_DECIMALS) for c in row) for row in costs)
        numa_nodes = tuple(numa) if numa is not None and any(x is not None for x in numa) else ()
        return cls(n=n, links=link_rows, cost=cost_rows, numa=numa_nodes)

    @classmethod
    def from_groups(
        cls,
        n: int,
        groups: Iterable[Iterable[int]],
        *,
        inside: float | None = 1.0,
        across: float | None = 4.0,
        inside_link: Link | None = None,
        across_link: Link | None = None,
        nvlink_generation: int = 4,
        pcie_generation: int = 5,
    ) -> Topology:
        """NVLink groups: GPUs in one group are linked by ``inside_link``, others by ``across_link``.

        ``inside``/``across`` give explicit costs (the seed's 1 and 4 by default); pass ``None`` to
        derive a cost from the link instead.
        """
        group_of: dict[int, int] = {}
        for gi, group in enumerate(groups):
            for g in group:
                if not 0 <= g < n:
                    raise InputError(f"NVLink group {gi} names GPU {g}, but the node has GPUs 0..{n - 1}")
                if g in group_of:
                    raise InputError(f"GPU {g} is in NVLink groups {group_of[g]} and {gi}")
                group_of[g] = gi
        in_link = inside_link or Link(kind=LinkKind.NVLINK, nvlinks=4)
        out_link = across_link or Link(kind=LinkKind.SYS)
        links: list[list[Link]] = []
        costs: list[list[float]] = []
        for i in range(n):
            link_row: list[Link] = []
            cost_row: list[float] = []
            for j in range(n):
                if i == j:
                    link_row.append(SELF)
                    cost_row.append(0.0)
                    continue
                same = i in group_of and group_of.get(i) == group_of.get(j)
                link = in_link if same else out_link
                explicit = inside if same else across
                link_row.append(link)
                cost_row.append(
                    explicit
                    if explicit is not None
                    else default_link_cost(
                        link, nvlink_generation=nvlink_generation, pcie_generation=pcie_generation
                    )
                )
            links.append(link_row)
            costs.append(cost_row)
        return cls.from_links(links, costs=costs)

    # -- queries ------------------------------------------------------------------------------

    @property
    def units(self) -> tuple[tuple[int, ...], ...]:
        """Costs as integers in thousandths, for exact sums and comparisons."""
        return self._units

    def pair_cost(self, a: int, b: int) -> float:
        return self.cost[a][b]

    def set_cost(self, devices: Iterable[int]) -> float:
        """Sum of pairwise costs of a set of GPUs: the seed's ``link_cost``."""
        return self.set_units(devices) / COST_SCALE

    def on_one_numa_node(self, devices: Iterable[int]) -> bool:
        """True when every GPU of ``devices`` sits on the same known NUMA node."""
        if not self.numa:
            return False
        nodes = {self.numa[d] for d in devices}
        return len(nodes) == 1 and None not in nodes

    def set_units(self, devices: Iterable[int]) -> int:
        u = self._units
        return sum(u[a][b] for a, b in combinations(sorted(set(devices)), 2))

    @cached_property
    def nvlink_groups(self) -> tuple[tuple[int, ...], ...]:
        """Connected components of the NVLink graph (GPUs with no NVLink are groups of one)."""
        parent = list(range(self.n))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for i, j in combinations(range(self.n), 2):
            if self.links[i][j].kind is LinkKind.NVLINK:
                parent[find(i)] = find(j)
        comps: dict[int, list[int]] = {}
        for i in range(self.n):
            comps.setdefault(find(i), []).append(i)
        return tuple(tuple(c) for c in sorted(comps.values()))

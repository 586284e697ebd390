"""Node specs: simulated GPU nodes described in YAML, and the builtin ones shipped with kubegpu.

A spec names the GPUs (model, optional UUID, memory, NUMA node, MIG layout) and the links between
them, as NVLink tiers, an explicit link matrix, or with explicit costs (format: ``docs/node-spec.md``).
``load_node`` also accepts a saved ``nvidia-smi topo -m`` capture, recognised by its content: a file
holding a topology header anywhere is a capture; otherwise it is a node spec only when it is YAML (a
``.yaml``/``.yml`` name, or a mapping with node-spec keys), and anything else is rejected as "no
nvidia-smi topology matrix found". Errors name the file, line and key; nothing is returned unless the
whole spec is valid.
"""

from __future__ import annotations

import os
import re
import socket
import uuid as uuidlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from kubegpu.echo import shorten
from kubegpu.errors import InputError, KubegpuError, SpecError, TopologyParseError
from kubegpu.model.gpu import GpuModel, gpu_model
from kubegpu.model.mig import validate_layout
from kubegpu.model.node import (
    MAX_GPUS,
    MAX_NUMA_NODE,
    Gpu,
    GpuUuid,
    MigInstance,
    Node,
    node_name_problem,
    pci_bus_id_problem,
    uuid_problem,
)
from kubegpu.model.topology import MAX_COST, MIN_COST, Link, LinkKind, Topology, default_link_cost
from kubegpu.sources.nvml import HostReading
from kubegpu.sources.yamlfile import LocatedDoc, load_located

__all__ = ["builtin_names", "load_node", "parse_spec", "stable_uuid"]

BUILTIN_PREFIX = "builtin:"
_NAMESPACE = uuidlib.UUID("5b1d8f5e-6f0e-4c1b-9a57-6b7567707500")
_RANGE_RE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
# YAML 1.1 (PyYAML) reads ``1e3`` as text; YAML 1.2 and JSON read it as a number, and so do costs.
_EXPONENT_RE = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")

# 16 TiB per GPU: a B200 has 192 GB; anything beyond is a typo, not a GPU.
MAX_MEMORY_MIB = 2**24

_TOP_KEYS = {"name", "description", "gpus", "topology", "driver", "cuda", "machine"}
# What NVML reports: a driver version ``550.54.15`` (``X.Y[.Z]``) and a CUDA driver API version ``12.4``.
_DRIVER_RE = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?")
_CUDA_RE = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")
_GPU_KEYS = {"model", "count", "numa", "uuid", "memory_mib", "pci_bus_id", "mig"}
_TOPO_KEYS = {"tiers", "matrix", "costs"}
_TIER_KEYS = {"link", "groups", "cost"}


def stable_uuid(node_name: str, *parts: object) -> GpuUuid:
    """A UUID that is the same every time for the same node and device (``GPU-...``/``MIG-...``)."""
    prefix = "MIG" if "mig" in parts else "GPU"
    value = uuidlib.uuid5(_NAMESPACE, "/".join([node_name, *map(str, parts)]))
    return GpuUuid(f"{prefix}-{value}")


def builtin_names() -> tuple[str, ...]:
    """Names of the builtin specs (``builtin:NAME``)."""
    files = resources.files("kubegpu.sources").joinpath("builtin")
    return tuple(sorted(p.name.removesuffix(".yaml") for p in files.iterdir() if p.name.endswith(".yaml")))


def _read_source(source: str) -> tuple[str, str]:
    if source.startswith(BUILTIN_PREFIX):
        name = source.removeprefix(BUILTIN_PREFIX)
        if name not in builtin_names():
            raise SpecError(f"unknown builtin spec {shorten(source)}; builtins: {', '.join(builtin_names())}")
        text = resources.files("kubegpu.sources").joinpath("builtin", f"{name}.yaml").read_text("utf-8")
        return text, source
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except FileNotFoundError as exc:
        raise SpecError(f"{source}: no such file (use builtin:NAME for a builtin spec)") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{source}: cannot read: {exc}") from exc


def _is_node_spec(text: str, origin: str) -> bool:
    if origin.startswith(BUILTIN_PREFIX) or origin.lower().endswith((".yaml", ".yml")):
        return True
    try:
        doc = load_located(text, origin, SpecError)
    except SpecError:
        return False
    return isinstance(doc.data, dict) and bool(_TOP_KEYS & {str(k) for k in doc.data})


NVML_SOURCE = "nvml"  # this host's GPUs, read through NVML (``./nvml`` names a file of that name)


def host_node_name() -> str:
    """This host's node name: ``NODE_NAME`` (set from the pod's spec.nodeName), else the hostname."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


def load_node(source: str, *, node_name: str | None = None, gpu_model_name: str | None = None) -> Node:
    """Load a node from ``builtin:NAME``, a node spec YAML file, an ``nvidia-smi topo -m`` capture, or
    ``nvml`` (this host's GPUs through NVML: the driver must be there).

    ``gpu_model_name`` names the GPU model of a capture (which names none itself); a node spec names
    its own models, so giving it with one is an error.
    """
    return load_reading(source, node_name=node_name, gpu_model_name=gpu_model_name).node


def load_reading(
    source: str, *, node_name: str | None = None, gpu_model_name: str | None = None
) -> HostReading:
    """``load_node``'s node with the driver and CUDA versions: NVML's for ``nvml``, a node spec's
    ``driver``/``cuda`` keys for a spec, none ("", None) for a spec without them or a capture."""
    if source == NVML_SOURCE:
        if gpu_model_name is not None:
            raise SpecError("nvml: NVML names the GPU models itself; --gpu-model is for nvidia-smi captures")
        from kubegpu.sources.nvml import read_host

        return read_host(node_name or host_node_name())
    node = _load_described(source, node_name=node_name, gpu_model_name=gpu_model_name)
    return HostReading(node=node, driver=node.driver_version, cuda=node.cuda_version)


def _load_described(source: str, *, node_name: str | None, gpu_model_name: str | None) -> Node:
    text, origin = _read_source(source)
    from kubegpu.sources.smi_topo import looks_like_capture, node_from_capture

    if not origin.startswith(BUILTIN_PREFIX) and looks_like_capture(text):
        return node_from_capture(text, origin=origin, node_name=node_name, gpu_model_name=gpu_model_name)
    if not _is_node_spec(text, origin):
        raise TopologyParseError(
            f"no nvidia-smi topology matrix found in {origin} "
            "(and it is not a node spec: see docs/node-spec.md)"
        )
    if gpu_model_name is not None:
        raise SpecError(f"{origin}: a node spec names its GPU models; --gpu-model is for nvidia-smi captures")
    return parse_spec(text, origin=origin, node_name=node_name)


def _expand_group(doc: LocatedDoc, path: tuple[str | int, ...], raw: Any, n: int) -> list[int]:
    items: list[int] = []
    values = raw if isinstance(raw, list) else [raw]
    for value in values:
        if isinstance(value, bool):
            raise doc.error(path, f"expected GPU indices, got {shorten(value)}", SpecError)
        if isinstance(value, int):
            items.append(value)
        elif isinstance(value, str) and (m := _RANGE_RE.match(value)):
            lo, hi = int(m[1]), int(m[2])
            if lo > hi:
                raise doc.error(path, f"range {shorten(value)} runs backwards", SpecError)
            if hi >= n:  # checked before expanding, so '0-99999999999' cannot eat memory
                first = max(lo, n)
                raise doc.error(path, f"GPU {first} does not exist: the spec has GPUs 0..{n - 1}", SpecError)
            items.extend(range(lo, hi + 1))
        elif isinstance(value, str) and value.strip().isdigit():
            items.append(int(value))
        else:
            what = f"expected GPU indices or ranges like '0-3', got {shorten(value)}"
            raise doc.error(path, what, SpecError)
    for g in items:
        if not 0 <= g < n:
            raise doc.error(path, f"GPU {g} does not exist: the spec has GPUs 0..{n - 1}", SpecError)
    return items


def _check_keys(
    doc: LocatedDoc, path: tuple[str | int, ...], value: Any, allowed: set[str], what: str
) -> None:
    if not isinstance(value, dict):
        raise doc.error(path, f"{what} must be a mapping", SpecError)
    for key in value:
        if key not in allowed:
            raise doc.error(
                (*path, str(key)),
                f"unknown key {shorten(key)}; allowed: {', '.join(sorted(allowed))}",
                SpecError,
            )


def _int(
    doc: LocatedDoc, path: tuple[str | int, ...], value: Any, *, minimum: int = 0, maximum: int | None = None
) -> int:
    if maximum is not None and isinstance(value, int) and not minimum <= value <= maximum:
        what = f"{shorten(value)} is out of range: expected an integer from {minimum} to {maximum}"
        raise doc.error(path, what, SpecError)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise doc.error(path, f"expected an integer >= {minimum}, got {shorten(value)}", SpecError)
    return value


def _cost(doc: LocatedDoc, path: tuple[str | int, ...], value: Any) -> float:
    """A link cost: a finite number from ``MIN_COST`` to ``MAX_COST`` (``1e3`` counts as a number)."""
    number = value
    if isinstance(value, str) and _EXPONENT_RE.fullmatch(value.strip()):
        number = float(value)
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise doc.error(path, f"cost {shorten(value)} is not a number", SpecError)
    if not MIN_COST <= number <= MAX_COST:  # also refuses nan and inf
        what = f"cost {shorten(value)} is out of range: costs are from {MIN_COST} to {MAX_COST:.0f}"
        raise doc.error(path, what, SpecError)
    return float(number)


def _link(doc: LocatedDoc, path: tuple[str | int, ...], value: Any) -> Link:
    try:
        return Link.parse(str(value))
    except InputError as exc:
        raise doc.error(path, str(exc), SpecError) from exc


def _gpus(doc: LocatedDoc, name: str) -> list[Gpu]:
    raw = doc.data.get("gpus")
    if not isinstance(raw, list) or not raw:
        raise doc.error(("gpus",), "a node spec needs a non-empty list of GPUs", SpecError)
    gpus: list[Gpu] = []
    for i, entry in enumerate(raw):
        path: tuple[str | int, ...] = ("gpus", i)
        _check_keys(doc, path, entry, _GPU_KEYS, "a GPU entry")
        if "model" not in entry:
            raise doc.error(path, "every GPU entry needs a model", SpecError)
        try:
            model = gpu_model(str(entry["model"]))
        except InputError as exc:
            raise doc.error((*path, "model"), str(exc), SpecError) from exc
        count = _int(doc, (*path, "count"), entry.get("count", 1), minimum=1)
        if len(gpus) + count > MAX_GPUS:
            raise doc.error((*path, "count"), f"the node would have over {MAX_GPUS} GPUs", SpecError)
        if count > 1 and ("uuid" in entry or "pci_bus_id" in entry):
            raise doc.error(path, "uuid and pci_bus_id name one GPU: drop them or use count: 1", SpecError)
        numa = entry.get("numa")
        if numa is not None:
            numa = _int(doc, (*path, "numa"), numa, maximum=MAX_NUMA_NODE)
        memory = _int(
            doc,
            (*path, "memory_mib"),
            entry.get("memory_mib", model.memory_mib),
            minimum=1,
            maximum=MAX_MEMORY_MIB,
        )
        bus_id = entry.get("pci_bus_id")
        if bus_id is not None:
            problem = pci_bus_id_problem(bus_id if isinstance(bus_id, str) else "")
            if problem is not None:
                raise doc.error((*path, "pci_bus_id"), f"{shorten(bus_id)} {problem}", SpecError)
        mig_raw = entry.get("mig")
        layout: list[str] = []
        if mig_raw is not None:
            if not isinstance(mig_raw, list) or not all(isinstance(m, str) for m in mig_raw):
                raise doc.error((*path, "mig"), "expected a list of MIG profile names", SpecError)
            if not model.mig_capable:
                raise doc.error((*path, "mig"), f"{model.name} does not support MIG", SpecError)
            layout = list(mig_raw)
        if "uuid" in entry:
            given = str(entry["uuid"])
            problem = uuid_problem(given) if given.startswith("GPU-") else "does not start with GPU-"
            if problem is not None:
                raise doc.error((*path, "uuid"), f"UUID {shorten(given)} {problem}", SpecError)
        for _ in range(count):
            index = len(gpus)
            gpu_uuid = GpuUuid(str(entry["uuid"])) if "uuid" in entry else stable_uuid(name, index)
            instances: tuple[MigInstance, ...] = ()
            if mig_raw is not None:
                try:
                    placement = validate_layout(model.name, layout)
                except KubegpuError as exc:
                    raise doc.error((*path, "mig"), str(exc), SpecError) from exc
                instances = tuple(
                    MigInstance(
                        profile=placed.profile.name,
                        start_slot=placed.start_slot,
                        uuid=stable_uuid(name, index, "mig", gi),
                        gi_index=gi,
                    )
                    for gi, placed in enumerate(placement.instances)
                )
            gpus.append(
                Gpu(
                    index=index,
                    uuid=gpu_uuid,
                    model=model.name,
                    memory_mib=memory,
                    numa_node=numa,
                    pci_bus_id=bus_id or f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                    mig_enabled=mig_raw is not None,
                    mig_instances=instances,
                )
            )
    seen: dict[str, int] = {}
    for gpu in gpus:
        if gpu.uuid in seen:
            raise doc.error(
                ("gpus",), f"GPUs {seen[gpu.uuid]} and {gpu.index} share UUID {gpu.uuid}", SpecError
            )
        seen[gpu.uuid] = gpu.index
    return gpus


def _tiers(doc: LocatedDoc, raw: Any, n: int) -> tuple[list[list[Link]], list[list[float | None]]]:
    if not isinstance(raw, list) or not raw:
        raise doc.error(("topology", "tiers"), "expected a non-empty list of tiers", SpecError)
    parsed: list[tuple[Link, list[set[int]] | None, float | None]] = []
    for t, tier in enumerate(raw):
        path: tuple[str | int, ...] = ("topology", "tiers", t)
        _check_keys(doc, path, tier, _TIER_KEYS, "a tier")
        if "link" not in tier:
            raise doc.error(path, "every tier needs a link type such as NV4, PIX or SYS", SpecError)
        link = _link(doc, (*path, "link"), tier["link"])
        groups: list[set[int]] | None = None
        if "groups" in tier:
            if not isinstance(tier["groups"], list):
                raise doc.error((*path, "groups"), "expected a list of groups", SpecError)
            groups = []
            owner: dict[int, int] = {}
            for g, group in enumerate(tier["groups"]):
                members = set(_expand_group(doc, (*path, "groups", g), group, n))
                for m in members:
                    if m in owner:
                        raise doc.error(
                            (*path, "groups", g),
                            f"GPU {m} is also in group {owner[m]} of this tier",
                            SpecError,
                        )
                    owner[m] = g
                groups.append(members)
        cost = None if tier.get("cost") is None else _cost(doc, (*path, "cost"), tier["cost"])
        parsed.append((link, groups, cost))
    links = [[Link(kind=LinkKind.SELF)] * n for _ in range(n)]
    costs: list[list[float | None]] = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            for link, groups, cost in parsed:
                if groups is None or any(i in grp and j in grp for grp in groups):
                    links[i][j] = link
                    costs[i][j] = cost
                    break
            else:
                raise doc.error(
                    ("topology", "tiers"),
                    f"GPUs {i} and {j} share no tier; end the list with a tier without groups",
                    SpecError,
                )
    return links, costs


def _matrix(doc: LocatedDoc, raw: Any, n: int, what: str) -> list[list[Any]]:
    path: tuple[str | int, ...] = ("topology", *what.split("."))
    if not isinstance(raw, list) or len(raw) != n:
        raise doc.error(path, f"expected {n} rows, one per GPU", SpecError)
    rows: list[list[Any]] = []
    for r, row in enumerate(raw):
        cells = row.split() if isinstance(row, str) else row
        if not isinstance(cells, list) or len(cells) != n:
            raise doc.error((*path, r), f"expected {n} entries in row {r}", SpecError)
        rows.append(cells)
    return rows


def _check_nvlinks(doc: LocatedDoc, links: list[list[Link]], models: Sequence[GpuModel], what: str) -> None:
    """An NVLink link needs NVLink on both GPUs, with no more links than either has (a T4 has none;
    an H100 has 18, so ``NV18`` between every pair behind NVSwitch is fine)."""
    for i, row in enumerate(links):
        for j in range(i + 1, len(row)):
            link = row[j]
            if link.kind is not LinkKind.NVLINK:
                continue
            most = min(models[i].nvlinks, models[j].nvlinks)
            if link.nvlinks > most:
                names = models[i].name if models[i] is models[j] else f"{models[i].name} and {models[j].name}"
                has = "no NVLink" if most == 0 else f"at most {most} NVLink links"
                path: tuple[str | int, ...] = (
                    ("topology", what, i) if what == "matrix" else ("topology", what)
                )
                raise doc.error(path, f"GPU{i}-GPU{j} is {link} but {names} GPUs have {has}", SpecError)


def _topology(doc: LocatedDoc, gpus: Sequence[Gpu]) -> Topology | None:
    raw = doc.data.get("topology")
    if raw is None:
        return None
    _check_keys(doc, ("topology",), raw, _TOPO_KEYS, "topology")
    n = len(gpus)
    if ("tiers" in raw) == ("matrix" in raw):
        raise doc.error(("topology",), "give exactly one of 'tiers' or 'matrix'", SpecError)
    explicit: list[list[float | None]]
    if "tiers" in raw:
        links, explicit = _tiers(doc, raw["tiers"], n)
    else:
        cells = _matrix(doc, raw["matrix"], n, "matrix")
        links = [[_link(doc, ("topology", "matrix", r), cell) for cell in row] for r, row in enumerate(cells)]
        for r in range(n):
            for c in range(r):
                if links[r][c] != links[c][r]:
                    raise doc.error(
                        ("topology", "matrix", r),
                        f"not symmetric: GPU{r}-GPU{c} is {links[r][c]} but GPU{c}-GPU{r} is {links[c][r]}",
                        SpecError,
                    )
        explicit = [[None if i != j else 0.0 for j in range(n)] for i in range(n)]
    if "costs" in raw:
        cells = _matrix(doc, raw["costs"], n, "costs")
        for r, row in enumerate(cells):
            for c, value in enumerate(row):
                if r == c:
                    if value != 0 or isinstance(value, bool):
                        raise doc.error(
                            ("topology", "costs", r), f"GPU{r}'s cost to itself must be 0", SpecError
                        )
                    continue
                explicit[r][c] = _cost(doc, ("topology", "costs", r), value)
    models = [gpu_model(g.model) for g in gpus]
    _check_nvlinks(doc, links, models, "tiers" if "tiers" in raw else "matrix")
    nv_gen = min((m.nvlink_generation for m in models if m.nvlink_generation), default=4)
    pcie_gen = min(m.pcie_generation for m in models)
    costs = [
        [
            explicit[i][j]
            if explicit[i][j] is not None
            else default_link_cost(links[i][j], nvlink_generation=nv_gen, pcie_generation=pcie_gen)
            for j in range(n)
        ]
        for i in range(n)
    ]
    try:
        return Topology.from_links(
            links, costs=[[float(c or 0.0) for c in row] for row in costs], numa=[g.numa_node for g in gpus]
        )
    except InputError as exc:
        raise doc.error(("topology",), str(exc), SpecError) from exc


def parse_spec(text: str, *, origin: str = "<spec>", node_name: str | None = None) -> Node:
    """Parse node spec YAML text into a ``Node``; errors name ``origin``, the line and the key."""
    doc = load_located(text, origin, SpecError)
    if not isinstance(doc.data, dict):
        raise SpecError(f"{origin}: a node spec must be a YAML mapping with 'gpus' (see docs/node-spec.md)")
    _check_keys(doc, (), doc.data, _TOP_KEYS, "a node spec")
    name = node_name or str(doc.data.get("name", Path(origin).stem))
    problem = node_name_problem(name)
    if problem is not None:
        raise doc.error(("name",), f"{shorten(name)} {problem}", SpecError)
    gpus = _gpus(doc, name)
    topology = _topology(doc, gpus)
    driver, cuda = _versions(doc)
    machine = doc.data.get("machine")
    if machine is not None and not isinstance(machine, str):
        what = f"machine {shorten(machine)} is not text (DMI's product name)"
        raise doc.error(("machine",), what, SpecError)
    return Node(
        name=name,
        gpus=tuple(gpus),
        topology=topology,
        driver_version=driver,
        cuda_version=cuda,
        machine=machine,
    )


def _versions(doc: LocatedDoc) -> tuple[str, str | None]:
    """The spec's ``driver`` (``550.54.15``) and ``cuda`` (``12.4``), as NVML would report them; a CUDA
    version needs a driver (NVML gives both or neither)."""
    driver, cuda = doc.data.get("driver"), doc.data.get("cuda")
    if driver is not None and not (isinstance(driver, str) and _DRIVER_RE.fullmatch(driver)):
        what = f'driver {shorten(driver)} is not a driver version like "550.54.15" (quote it in YAML)'
        raise doc.error(("driver",), what, SpecError)
    if cuda is not None and not (isinstance(cuda, str) and _CUDA_RE.fullmatch(cuda)):
        what = f'cuda {shorten(cuda)} is not a CUDA version like "12.4" (quote it in YAML)'
        raise doc.error(("cuda",), what, SpecError)
    if cuda is not None and driver is None:
        raise doc.error(("cuda",), "a CUDA version needs the driver version too (driver: ...)", SpecError)
    return (driver or ""), cuda

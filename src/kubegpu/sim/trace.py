"""Reading a GPU cluster trace: the node list and the pod list of the Alibaba "openb" schema.

The trace is the input of every replay, so it is checked completely before anything runs: a bad
row stops the load with a ``TraceError`` naming the file, the line and the column, and nothing is
half-loaded. Node CSV: ``sn, cpu_milli, memory_mib, gpu, model``. Pod CSV: ``name, cpu_milli,
memory_mib, num_gpu, gpu_milli`` (required), then ``gpu_spec`` (optional; the multi-GPU variants lack
it) and, in the default trace, ``qos, pod_phase, creation_time, deletion_time, scheduled_time``
(ignored: the replay has no departures).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubegpu.errors import TraceError

__all__ = [
    "MAX_CPU_MILLI",
    "MAX_GPUS_PER_NODE",
    "MAX_MEMORY_MIB",
    "MILLI_PER_GPU",
    "NODE_COLUMNS",
    "POD_COLUMNS",
    "NodeRecord",
    "PodRecord",
    "Trace",
    "load_nodes",
    "load_pods",
    "load_trace",
    "write_nodes",
    "write_pods",
]

MILLI_PER_GPU = 1000
MAX_GPUS_PER_NODE = 16
# Upper limits of a node's or a pod's CPU and memory: 2^40 milli-cores (about a billion cores) and
# 2^40 MiB (1 EiB) are far beyond any real machine, yet far enough below 2^63 that sums over millions
# of nodes still fit the replay's 64-bit integers (and every value is exact as a float).
MAX_CPU_MILLI = 2**40
MAX_MEMORY_MIB = 2**40
_INTEGER = re.compile(r"-?[0-9]+")  # plain ASCII decimal; int() alone also takes '1_000', '+5', '١٢٣'
_LONGEST = 24  # characters of an integer cell read as they are; longer ones are out of every range
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")  # required
POD_WRITTEN_COLUMNS = (*POD_COLUMNS, "gpu_spec")


@dataclass(frozen=True, kw_only=True)
class NodeRecord:
    """One node of the cluster as the trace describes it."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_model: str  # empty for a CPU-only node


@dataclass(frozen=True, kw_only=True)
class PodRecord:
    """One pod of the trace: its requests and the GPU models it may run on."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU, 0..1000; below 1000 only for a one-GPU (shared) pod
    gpu_spec: tuple[str, ...]  # allowed GPU models; empty = any

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def shape_label(self) -> str:
        """A short human label: ``8c/2x1000m`` or ``3.2c/1x470m@V100M16|V100M32``."""
        cores = f"{self.cpu_milli / 1000:g}c"
        gpu = f"{self.num_gpu}x{self.gpu_milli}m" if self.num_gpu else "cpu-only"
        spec = "@" + "|".join(self.gpu_spec) if self.gpu_spec else ""
        return f"{cores}/{gpu}{spec}"


@dataclass(frozen=True, kw_only=True)
class Trace:
    """A node list and a pod list, with the files they came from (for messages)."""

    nodes: tuple[NodeRecord, ...]
    pods: tuple[PodRecord, ...]
    nodes_path: str = ""
    pods_path: str = ""

    @property
    def total_gpus(self) -> int:
        return sum(n.gpu_count for n in self.nodes)


def _rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, row) for every data row, after checking the header."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise TraceError(f"{path}:1: not a CSV file: {exc}") from exc
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        if header is None:
            raise TraceError(f"{path}: empty file; expected a header with {', '.join(required)}")
        header = [h.strip() for h in header]
        twice = [c for c in header if c and header.count(c) > 1]
        if twice:  # which of the two counts would be a guess (and the fast loader took the first)
            raise TraceError(f"{path}:1: column {twice[0]!r} appears twice in the header")
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(
                f"{path}:1: missing column {missing[0]!r}; the header must name {', '.join(required)}"
            )
        try:
            for row in reader:
                line = reader.line_num
                if not row or all(not cell.strip() for cell in row):
                    continue
                if len(row) != len(header):
                    raise TraceError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
                yield line, dict(zip(header, row, strict=True))
        except csv.Error as exc:
            raise TraceError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise TraceError(f"{path}:{reader.line_num + 1}: not UTF-8 text: {exc.reason}") from exc
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _int(
    path: Path, line: int, row: dict[str, str], column: str, *, lo: int, hi: int | None = None, limit: int = 0
) -> int:
    """The cell as a plain ASCII decimal integer in ``lo..hi`` (the schema's range) and at most
    ``limit`` (a sanity limit, far below overflow); a ``TraceError`` naming file, line and column."""
    raw = row[column].strip()
    shown = raw if len(raw) <= _LONGEST else f"{raw[:20]}... ({len(raw)} characters)"
    if not _INTEGER.fullmatch(raw):
        raise TraceError(f"{path}:{line}: column {column!r}: {shown!r} is not an integer")
    # a longer digit string is beyond every range and limit (and int() refuses 4,300 digits and more)
    value = int(raw) if len(raw) <= _LONGEST else (-1 if raw.startswith("-") else 10**_LONGEST)
    if value < lo or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise TraceError(f"{path}:{line}: column {column!r}: {shown} is out of range ({bound})")
    if limit and value > limit:
        raise TraceError(f"{path}:{line}: column {column!r}: {shown} is above the limit of {limit:,}")
    return value


def load_nodes(path: str | Path) -> tuple[NodeRecord, ...]:
    """Read a node list; raises ``TraceError`` naming file, line and column on the first bad value."""
    p = Path(path)
    nodes: list[NodeRecord] = []
    seen: dict[str, int] = {}
    for line, row in _rows(p, NODE_COLUMNS):
        name = row["sn"].strip()
        if not name:
            raise TraceError(f"{p}:{line}: column 'sn': empty node name")
        if name in seen:
            raise TraceError(f"{p}:{line}: column 'sn': node {name!r} already defined on line {seen[name]}")
        seen[name] = line
        gpus = _int(p, line, row, "gpu", lo=0, hi=MAX_GPUS_PER_NODE)
        model = row["model"].strip()
        if gpus > 0 and not model:
            raise TraceError(f"{p}:{line}: column 'model': empty, but the node has {gpus} GPUs")
        nodes.append(
            NodeRecord(
                name=name,
                cpu_milli=_int(p, line, row, "cpu_milli", lo=0, limit=MAX_CPU_MILLI),
                memory_mib=_int(p, line, row, "memory_mib", lo=0, limit=MAX_MEMORY_MIB),
                gpu_count=gpus,
                gpu_model=model if gpus > 0 else "",
            )
        )
    if not nodes:
        raise TraceError(f"{p}: no nodes")
    return tuple(nodes)


def _fast_pods(p: Path) -> tuple[PodRecord, ...] | None:
    """The pod list when every row is valid, read in one pass without per-cell messages; ``None``
    when anything is off (then ``load_pods`` rereads the file the careful way, to name the error)."""
    try:
        with p.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not rows:
        return None
    header = [h.strip() for h in rows[0]]
    if any(c not in header for c in POD_COLUMNS) or len(set(header)) != len(header):
        return None
    i_name, i_cpu, i_mem, i_num, i_milli = (header.index(c) for c in POD_COLUMNS)
    i_spec = header.index("gpu_spec") if "gpu_spec" in header else -1
    width = len(header)
    pods: list[PodRecord] = []
    append = pods.append
    try:
        for row in rows[1:]:
            if len(row) != width:
                if not row or all(not cell.strip() for cell in row):
                    continue
                return None
            name = row[i_name].strip()
            digits = row[i_cpu] + row[i_mem] + row[i_num] + row[i_milli]
            if not (digits.isascii() and digits.isdigit()):  # not only plain ASCII digits: no '1_000'
                return None
            cpu, mem = int(row[i_cpu]), int(row[i_mem])
            num, milli = int(row[i_num]), int(row[i_milli])
            if (
                not name
                or cpu > MAX_CPU_MILLI
                or mem > MAX_MEMORY_MIB
                or not 0 <= num <= MAX_GPUS_PER_NODE
                or not 0 <= milli <= MILLI_PER_GPU
                or (num == 0) != (milli == 0)
                or (num > 1 and milli != MILLI_PER_GPU)
            ):
                return None
            raw = row[i_spec] if i_spec >= 0 else ""
            spec = tuple(x.strip() for x in raw.split("|") if x.strip()) if raw else ()
            append(
                PodRecord(
                    name=name, cpu_milli=cpu, memory_mib=mem, num_gpu=num, gpu_milli=milli, gpu_spec=spec
                )
            )
    except ValueError:
        return None
    return tuple(pods) if pods else None


def load_pods(path: str | Path) -> tuple[PodRecord, ...]:
    """Read a pod list; raises ``TraceError`` naming file, line and column on the first bad value."""
    p = Path(path)
    fast = _fast_pods(p)
    if fast is not None:
        return fast
    pods: list[PodRecord] = []
    for line, row in _rows(p, POD_COLUMNS):
        name = row["name"].strip()
        if not name:
            raise TraceError(f"{p}:{line}: column 'name': empty pod name")
        num_gpu = _int(p, line, row, "num_gpu", lo=0, hi=MAX_GPUS_PER_NODE)
        gpu_milli = _int(p, line, row, "gpu_milli", lo=0, hi=MILLI_PER_GPU)
        if num_gpu == 0 and gpu_milli != 0:
            raise TraceError(f"{p}:{line}: column 'gpu_milli': {gpu_milli} for a pod with num_gpu 0")
        if num_gpu > 0 and gpu_milli == 0:
            raise TraceError(f"{p}:{line}: column 'gpu_milli': 0 for a pod with num_gpu {num_gpu}")
        if num_gpu > 1 and gpu_milli != MILLI_PER_GPU:
            raise TraceError(
                f"{p}:{line}: column 'gpu_milli': {gpu_milli}; a pod with {num_gpu} GPUs takes whole "
                f"GPUs (1000)"
            )
        spec = tuple(s.strip() for s in row.get("gpu_spec", "").split("|") if s.strip())
        pods.append(
            PodRecord(
                name=name,
                cpu_milli=_int(p, line, row, "cpu_milli", lo=0, limit=MAX_CPU_MILLI),
                memory_mib=_int(p, line, row, "memory_mib", lo=0, limit=MAX_MEMORY_MIB),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec=spec,
            )
        )
    if not pods:
        raise TraceError(f"{p}: no pods")
    return tuple(pods)


def load_trace(nodes_path: str | Path, pods_path: str | Path) -> Trace:
    """Read both files; the node list must have at least one GPU."""
    nodes = load_nodes(nodes_path)
    pods = load_pods(pods_path)
    if sum(n.gpu_count for n in nodes) == 0:
        raise TraceError(f"{nodes_path}: the cluster has no GPUs; the replay measures GPU allocation")
    return Trace(nodes=nodes, pods=pods, nodes_path=str(nodes_path), pods_path=str(pods_path))


def write_nodes(path: str | Path, nodes: Sequence[NodeRecord]) -> None:
    """Write a node list in the trace schema (used by the variant generator and the tests)."""
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(NODE_COLUMNS)
        for n in nodes:
            writer.writerow([n.name, n.cpu_milli, n.memory_mib, n.gpu_count, n.gpu_model])


def write_pods(path: str | Path, pods: Sequence[PodRecord]) -> None:
    """Write a pod list with the first six columns of the schema (as the variant traces have)."""
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(POD_WRITTEN_COLUMNS)
        for pod in pods:
            writer.writerow(
                [pod.name, pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, "|".join(pod.gpu_spec)]
            )

"""Whether kubelet can read a resource's ListAndWatch answer: its size, computed before registering.

Why: kubelet reads a device plugin's ListAndWatch stream with gRPC's default maximum receive size,
4 MiB. A larger answer is dropped by kubelet's gRPC client (the stream fails, the resource shows no
devices) while the plugin believes it registered: 72 GPUs with 1000 time-slicing replicas each, or
``kubegpu.io/gpu-milli`` shares on more than 66 GPUs, are past it. The agent refuses such a config at
start (exit 2, one line) and at reload (the running config stays), naming the resource, its device
count and the largest replica count that fits.

The size is exact, computed from protobuf's wire format (``v1beta1.proto``: ``ListAndWatchResponse``
is ``repeated Device devices = 1``; ``Device`` is ``string ID = 1``, ``string health = 2``,
``TopologyInfo topology = 3`` with ``repeated NUMANode nodes = 1`` of ``int64 ID = 1``), with every
device counted ``Unhealthy`` (the longer health string: a GPU failing must not push the answer over)
and its NUMA node as the agent sends it. A test checks it against the generated message's own
serialisation. Pure: no gRPC, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kubegpu.deviceplugin.inventory import REPLICA_SEPARATOR, Inventory, Resource, ResourceKind
from kubegpu.errors import ConfigError

__all__ = [
    "KUBELET_MAX_RECEIVE_BYTES",
    "LIMIT_BYTES",
    "ListSize",
    "check_inventory",
    "device_bytes",
    "list_size",
    "response_bytes",
]

KUBELET_MAX_RECEIVE_BYTES = 4 * 2**20  # gRPC's default max receive message size, which kubelet keeps
LIMIT_BYTES = 3584 * 2**10  # 3.5 MiB: what kubegpu sends at most (a margin under kubelet's 4 MiB)
_WORST_HEALTH = "Unhealthy"  # longer than "Healthy"


def _varint(value: int) -> int:
    """Bytes of ``value`` as a protobuf varint (negative int64 values take ten)."""
    if value < 0:
        return 10
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _field(payload: int) -> int:
    """A length-delimited field with a one-byte tag: tag, length, payload."""
    return 1 + _varint(payload) + payload


def _text(value: str) -> int:
    """A string field; proto3 leaves out an empty one."""
    size = len(value.encode())
    return _field(size) if size else 0


def device_bytes(device_id: str, numa_node: int | None, health: str = _WORST_HEALTH) -> int:
    """Bytes one device adds to a ``ListAndWatchResponse`` (its ``devices`` entry, tag and length
    included)."""
    body = _text(device_id) + _text(health)
    if numa_node is not None:  # topology { nodes { ID: n } }; proto3 leaves out ID 0
        node = 0 if numa_node == 0 else 1 + _varint(numa_node)
        body += _field(_field(node))
    return _field(body)


def response_bytes(devices: Iterable[tuple[str, int | None]]) -> int:
    """Bytes of the ``ListAndWatchResponse`` listing ``devices`` (ID, NUMA node), all unhealthy."""
    return sum(device_bytes(device_id, numa) for device_id, numa in devices)


@dataclass(frozen=True, kw_only=True)
class ListSize:
    """A resource's ListAndWatch answer: its devices and the bytes they take."""

    resource: str
    devices: int
    size_bytes: int

    @property
    def fits(self) -> bool:
        return self.size_bytes <= LIMIT_BYTES


def list_size(resource: Resource) -> ListSize:
    return ListSize(
        resource=str(resource.name),
        devices=len(resource.devices),
        size_bytes=response_bytes((d.id, d.numa_node) for d in resource.devices),
    )


def _replicated_bytes(bases: list[tuple[str, int | None]], replicas: int) -> int:
    """The answer's bytes with ``replicas`` devices ``<uuid>::<i>`` for every base device."""
    return sum(
        device_bytes(f"{uuid}{REPLICA_SEPARATOR}{i}", numa) for uuid, numa in bases for i in range(replicas)
    )


def _bases(resource: Resource) -> list[tuple[str, int | None]]:
    """The distinct devices the resource's replicas are made of (a GPU's or MIG instance's UUID)."""
    seen: dict[str, int | None] = {}
    for d in resource.devices:
        seen.setdefault(d.uuid, d.numa_node)
    return list(seen.items())


def _most_replicas(bases: list[tuple[str, int | None]], upto: int) -> int:
    """The largest replica count per base device (below ``upto``) whose answer fits; 0 if none."""
    low, high = 0, upto  # fits(low) holds (0 devices), fits(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        if _replicated_bytes(bases, middle) <= LIMIT_BYTES:
            low = middle
        else:
            high = middle
    return low


def _advice(resource: Resource) -> str:
    """What fits instead: fewer replicas per GPU, or (gpu-milli, whose shares per GPU are fixed) fewer
    GPUs."""
    bases = _bases(resource)
    replicated = any(d.replica is not None for d in resource.devices)
    if not replicated or not bases:
        return "serve fewer devices in this resource (split it, e.g. with kubegpu.sharing.exclusive)"
    counts: dict[str, int] = {}
    for d in resource.devices:
        counts[d.uuid] = counts.get(d.uuid, 0) + 1
    per_base = max(counts.values())
    if resource.kind is ResourceKind.MILLI:
        per_gpu = _replicated_bytes(bases[:1], per_base)
        gpus = LIMIT_BYTES // per_gpu if per_gpu else len(bases)
        return (
            f"{per_base} shares per GPU: at most {gpus} GPUs' shares fit; serve the others whole or "
            "through the DRA driver (kubegpu.dra.gpus), or turn kubegpu.fractional off"
        )
    most = _most_replicas(bases, per_base)
    return (
        f"{len(bases)} GPUs x {per_base} replicas: at most {most} replicas a GPU fit; lower the "
        "time-slicing/MPS replicas, or split the GPUs (kubegpu.sharing.exclusive, per-GPU replicas)"
    )


def check_inventory(inventory: Inventory) -> None:
    """``ConfigError`` for the first resource whose ListAndWatch answer kubelet could not read."""
    for resource in inventory.resources:
        size = list_size(resource)
        if size.fits:
            continue
        raise ConfigError(
            f"{size.resource}: {size.devices:,} devices make a ListAndWatch answer of "
            f"{size.size_bytes / 2**20:.2f} MiB; kubelet reads at most "
            f"{KUBELET_MAX_RECEIVE_BYTES / 2**20:.0f} MiB (kubegpu sends at most "
            f"{LIMIT_BYTES / 2**20:.1f} MiB) and would see no device: {_advice(resource)}"
        )

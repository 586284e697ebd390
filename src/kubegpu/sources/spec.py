"""TEMPORARY stand-in for the core's node specs until main lands."""

from __future__ import annotations

from kubegpu.errors import SpecError
from kubegpu.model.node import Gpu, GpuUuid, MigInstance, Node
from kubegpu.model.topology import Topology


def _gpus(n: int, model: str = "H100-80GB") -> tuple[Gpu, ...]:
    return tuple(
        Gpu(
            index=i,
            uuid=GpuUuid(f"GPU-{i:08x}-0000-0000-0000-000000000000"),
            model=model,
            memory_mib=81559,
            numa_node=0 if i < n // 2 else 1,
            pci_bus_id=f"0000:{0x10 + i:02x}:00.0",
        )
        for i in range(n)
    )


def load_node(source: str) -> Node:
    if source == "builtin:seed-8gpu":
        return Node(
            name="seed-8gpu", gpus=_gpus(8), topology=Topology.from_groups(8, [range(4), range(4, 8)])
        )
    if source == "builtin:hgx-16":
        return Node(
            name="hgx-16", gpus=_gpus(16), topology=Topology.from_groups(16, [range(8), range(8, 16)])
        )
    if source == "builtin:h100-mig-mixed":
        gpus = list(_gpus(2))
        base = gpus[0]
        mig = tuple(
            MigInstance(profile=p, start_slot=s, uuid=GpuUuid(f"MIG-{k:08x}-1111"), gi_index=k)
            for k, (p, s) in enumerate([("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)])
        )
        gpus[0] = Gpu(
            index=0,
            uuid=base.uuid,
            model=base.model,
            memory_mib=base.memory_mib,
            numa_node=0,
            pci_bus_id=base.pci_bus_id,
            mig_enabled=True,
            mig_instances=mig,
        )
        return Node(name="h100-mig-mixed", gpus=tuple(gpus), topology=None)
    raise SpecError(f"unknown node spec {source!r}")

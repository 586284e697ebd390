"""An API-server stand-in for ResourceSlices: stores what it is given, checks resourceVersions on replace."""

from __future__ import annotations

import copy
from typing import Any

from kubegpu.errors import ApiServerError
from kubegpu.model.node import Gpu, GpuUuid, Node

__all__ = ["Api", "big"]


class Api:
    """Stores slices as the API server would, adding a resourceVersion and normalising nothing."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.writes: list[str] = []
        self.version = 0
        self.down = False

    def get_node(self, name: str, *, quick: bool = False) -> dict[str, Any] | None:
        return {"metadata": {"name": name, "uid": "node-uid"}}

    def list_resource_slices(self, *, node_name: str, driver: str) -> list[dict[str, Any]]:
        if self.down:
            raise ApiServerError("https://api: not reachable")
        return [
            copy.deepcopy(s)
            for s in self.slices.values()
            if s["spec"]["nodeName"] == node_name and s["spec"]["driver"] == driver
        ]

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.version)
        self.slices[body["metadata"]["name"]] = body
        return body

    def create_resource_slice(self, body: dict[str, Any]) -> dict[str, Any] | None:
        assert body["metadata"]["name"] not in self.slices
        self.writes.append("create " + body["metadata"]["name"])
        return self._store(body)

    def replace_resource_slice(self, body: dict[str, Any]) -> dict[str, Any] | None:
        name = body["metadata"]["name"]
        assert self.slices[name]["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
        self.writes.append("replace " + name)
        return self._store(body)

    def delete_resource_slice(self, name: str) -> None:
        self.writes.append("delete " + name)
        del self.slices[name]


def big(n: int) -> Node:
    """A node of ``n`` H100s without topology, for slice-size limits."""
    gpus = tuple(
        Gpu(
            index=i,
            uuid=GpuUuid(f"GPU-{i:08d}"),
            model="H100-80GB",
            memory_mib=81559,
            numa_node=None,
            pci_bus_id="",
        )
        for i in range(n)
    )
    return Node(name="big", gpus=gpus, topology=None)

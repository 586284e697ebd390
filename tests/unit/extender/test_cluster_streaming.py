"""The extender's lists stream (issue 57, item 1): each page of raw objects is turned into the
ledger's compact records at once, so the raw objects of earlier pages are gone before the next page
is asked for, and the ledger keeps only ``PodFacts`` / ``GpuNode``."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from kubegpu.extender.cluster import NODES, PODS, ClusterSync
from tests.unit.extender.conftest import gpu_node, gpu_pod, ledger


class Raw(dict[str, Any]):
    """A raw object whose lifetime a test can see (a weak reference to a plain dict is not allowed)."""


class Pages:
    """``KubeApi.list_pages`` of ``pages`` that records, as each page is asked for, how many raw
    objects of the pages before the previous one are still alive."""

    def __init__(self, pages: list[list[dict[str, Any]]]) -> None:
        self._pages = pages
        self._refs: list[list[weakref.ref[Raw]]] = []
        self.alive_before: list[int] = []
        self.resource_version = ""

    def _alive(self, upto: int) -> int:
        return sum(1 for page in self._refs[:upto] for ref in page if ref() is not None)

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        for k, page in enumerate(self._pages):
            self.alive_before.append(self._alive(k - 1) if k >= 1 else 0)
            raw = [Raw(obj) for obj in page]
            self._refs.append([weakref.ref(o) for o in raw])
            yield raw  # type: ignore[misc]
            del raw
        self.resource_version = "7"


class Api:
    def __init__(self, pages: dict[str, list[list[dict[str, Any]]]]) -> None:
        self.pages = pages
        self.listed: dict[str, Pages] = {}
        self.sync: ClusterSync | None = None

    def list_pages(self, path: str, **_: Any) -> Pages:
        self.listed[path] = Pages(self.pages[path])
        return self.listed[path]

    def list_objects(self, path: str) -> tuple[list[Any], str]:  # what the code before issue 57 called
        pages = self.list_pages(path)
        return [o for page in pages for o in page], pages.resource_version

    def watch(self, path: str, *, resource_version: str, timeout_s: int) -> Iterator[Any]:
        assert resource_version == "7"
        assert self.sync is not None
        self.sync.stop()
        yield from ()


def no_wait(stop: threading.Event, seconds: float) -> bool:
    return stop.is_set()


def bound(i: int) -> dict[str, Any]:
    pod = gpu_pod(f"p{i}", gpus=1, node=f"n{i % 4}", phase="Running")
    pod["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    return pod


def test_the_raw_objects_of_a_page_are_gone_before_the_page_after_the_next_is_asked_for() -> None:
    book = ledger([gpu_node(f"n{k}", 8) for k in range(4)])
    pages = [[bound(10 * k + j) for j in range(5)] for k in range(6)]  # 30 pods in 6 pages
    api = Api({PODS: pages})
    sync = ClusterSync(api, book, wait=no_wait)  # type: ignore[arg-type]
    api.sync = sync
    sync._run(PODS)
    assert api.listed[PODS].alive_before == [0] * 6  # a page at most is alive (the one being read)
    assert sum(8000 - sum(use.gpu_free_milli) for use in book.snapshot().values()) == 30 * 1000
    held = book.holding("uid-p13")
    assert held is not None and held.node == "n1" and held.pod == "default/p13"


def test_a_node_list_streams_too() -> None:
    book = ledger([])
    node_pages = [
        [
            {
                "metadata": {"name": f"n{10 * k + j}", "labels": {"nvidia.com/gpu.count": "8"}},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"}},
            }
            for j in range(3)
        ]
        for k in range(4)
    ]
    api = Api({NODES: node_pages})
    sync = ClusterSync(api, book, wait=no_wait)  # type: ignore[arg-type]
    api.sync = sync
    sync._run(NODES)
    assert api.listed[NODES].alive_before == [0] * 4
    assert book.node_count() == 12


def test_pod_facts_keep_what_placement_needs_and_nothing_of_the_raw_object() -> None:
    from kubegpu.extender.podfacts import PodFacts, facts_of  # new in issue 57

    pod = bound(3)
    pod["metadata"]["annotations"]["kubegpu.io/gpu-assignment"] = (
        '{"gpus":[2],"milli":1000,"node":"n3","uuids":[],"version":1}'
    )
    facts = facts_of(pod)
    assert facts == PodFacts(
        uid="uid-p3",
        pod="default/p3",
        node="n3",
        phase="Running",
        ask=facts.ask,
        claim=facts.claim,
    )
    assert facts.ask is not None and (facts.ask.num_gpu, facts.ask.gpu_milli, facts.ask.cpu_milli) == (
        1,
        1000,
        1000,
    )
    assert facts.claim is not None and facts.claim.gpus == (2,)
    assert not hasattr(facts, "__dict__")  # slots: no per-object dictionary
    assert facts_of(bound(4)).ask is facts.ask  # equal asks are one object
    assert facts_of("not a pod").uid == ""
    petacore = bound(5)
    petacore["spec"]["containers"][0]["resources"]["requests"]["cpu"] = [1]
    assert facts_of(petacore).ask is None and facts_of(petacore).ask_error

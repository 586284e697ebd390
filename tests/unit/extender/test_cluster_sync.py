"""The API sync outlives anything an object or the API server does, and says when it cannot be
trusted (issue 55, finding 1): a poison object is refused alone, an exception of any kind is followed
by a fresh list, readiness reflects a watch that keeps failing, liveness a thread that ended."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kubegpu.errors import ApiServerError
from kubegpu.extender.cluster import NODES, PODS, ClusterSync
from tests.unit.extender.conftest import Clock, gpu_pod, ledger


def node_object(name: str, gpus: int, *, label: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.count": label or str(gpus)}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": str(gpus)}},
    }


def event(kind: str, obj: Any) -> dict[str, Any]:
    return {"type": kind, "object": obj}


class OnePage:
    """``KubeApi.list_pages`` of a list that fits one page."""

    def __init__(self, items: list[Any], version: str) -> None:
        self.items, self.resource_version = items, version

    def __iter__(self) -> Iterator[list[Any]]:
        yield self.items


class ScriptedApi:
    """``list_pages`` and ``watch`` play a script per collection: each step a list of items (list)
    or of events (watch), or an exception to raise; an exception among a watch's events is raised
    there. When a collection's script is done, the sync is stopped."""

    def __init__(self, lists: dict[str, list[Any]], watches: dict[str, list[Any]]) -> None:
        self.lists, self.watches = lists, watches
        self.sync: ClusterSync | None = None
        self.calls: list[str] = []

    def _done(self) -> None:
        assert self.sync is not None
        self.sync.stop()

    def list_pages(self, path: str, **_: Any) -> OnePage:
        self.calls.append(f"list {path}")
        if not self.lists[path]:
            self._done()
            return OnePage([], "0")
        step = self.lists[path].pop(0)
        if isinstance(step, BaseException):
            raise step
        return OnePage(step, "1")

    def watch(self, path: str, *, resource_version: str, timeout_s: int) -> Iterator[Any]:
        self.calls.append(f"watch {path}")
        if not self.watches[path]:
            self._done()
            return
        step = self.watches[path].pop(0)
        if isinstance(step, BaseException):
            raise step
        for e in step:
            if isinstance(e, BaseException):
                raise e
            yield e


def no_wait(stop: threading.Event, seconds: float) -> bool:
    return stop.is_set()


def run(api: ScriptedApi, book: Any, path: str, **kwargs: Any) -> ClusterSync:
    sync = ClusterSync(api, book, on_synced=lambda: None, wait=no_wait, **kwargs)  # type: ignore[arg-type]
    api.sync = sync
    sync._run(path)  # the thread's body, in this thread: deterministic
    return sync


def bound(name: str, **kwargs: Any) -> dict[str, Any]:
    return gpu_pod(name, node="n1", phase="Running", **kwargs)


def petacore(name: str) -> dict[str, Any]:
    pod = bound(name, gpus=1)
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "10P"
    return pod


def test_a_pod_the_ledger_cannot_take_does_not_stop_the_watch() -> None:
    """`cpu: 10P` killed the pods watch: deletes after it never freed a GPU. Now the watch goes on."""
    book = ledger([])
    book.replace_nodes([])
    nodes_api = ScriptedApi({NODES: [[node_object("n1", 2)]]}, {NODES: []})
    run(nodes_api, book, NODES)
    a = bound("a", gpus=1)
    api = ScriptedApi(
        {PODS: [[a, petacore("huge-listed")]]},
        {PODS: [[event("ADDED", petacore("huge")), event("DELETED", a), event("DELETED", petacore("huge"))]]},
    )
    run(api, book, PODS)
    assert book.snapshot()["n1"].gpu_free_milli == (0, 1000)  # huge-listed still counts; a is freed
    assert api.calls == ["list /api/v1/pods", "watch /api/v1/pods", "watch /api/v1/pods"]  # no relist


def test_any_exception_is_followed_by_a_fresh_list_and_the_loop_goes_on() -> None:
    book = ledger([])
    api = ScriptedApi(
        {
            NODES: [
                RuntimeError("boom"),
                [node_object("n1", 1)],
                OverflowError("int64"),
                [node_object("n1", 4)],
            ]
        },
        {NODES: [[event("MODIFIED", node_object("n1", 2)), KeyError("bug")]]},
    )
    sync = run(api, book, NODES)
    assert book.snapshot()["n1"].gpu_free_milli == (1000,) * 4  # the last list won
    assert api.calls.count("list /api/v1/nodes") == 4
    assert sync.health()[0].failing_s == 0.0


def test_a_node_the_ledger_cannot_take_is_left_out_alone() -> None:
    book = ledger([])
    api = ScriptedApi(
        {NODES: [[node_object("n1", 2), {"metadata": {"name": 5}}, "not a node"]]},
        {NODES: [[event("ADDED", node_object("n2", 8, label="9999999999999")), event("ADDED", [1]), "junk"]]},
    )
    run(api, book, NODES)
    assert set(book.snapshot()) == {"n1", "n2"}
    assert book.snapshot()["n2"].gpu_free_milli == (1000,) * 8


def test_readiness_fails_while_a_watch_has_been_failing_for_long_and_recovers() -> None:
    clock = Clock()
    book = ledger([])
    api = ScriptedApi({NODES: [[node_object("n1", 1)]], PODS: [[]]}, {NODES: [], PODS: []})
    sync = ClusterSync(api, book, wait=no_wait, clock=clock, stale_after_s=60)  # type: ignore[arg-type]
    api.sync = sync
    assert not sync.ready()  # nothing listed yet
    sync._listed(NODES)
    sync._listed(PODS)
    assert sync.ready() and sync.alive()
    sync._failed(PODS, ApiServerError("not reachable"))
    clock.now += 59
    assert sync.ready()  # a short outage: still ready
    clock.now += 2
    assert not sync.ready()
    assert "not reachable" in sync.health()[1].error
    sync._ok(PODS)
    assert sync.ready()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_liveness_fails_when_a_watch_thread_has_ended() -> None:
    """Should a thread end anyway (here: a BaseException no loop catches), /healthz must say so."""
    book = ledger([])
    done = threading.Event()

    class Dying(ScriptedApi):
        def list_pages(self, path: str, **_: Any) -> OnePage:
            if path == PODS:
                done.set()
                raise SystemExit  # ends the thread
            return OnePage([node_object("n1", 1)], "1")

        def watch(self, path: str, *, resource_version: str, timeout_s: int) -> Iterator[Any]:
            done.wait()
            yield from ()

    api = Dying({}, {})
    sync = ClusterSync(api, book, on_synced=lambda: None, wait=no_wait)  # type: ignore[arg-type]
    api.sync = sync
    assert sync.alive()  # not started yet
    sync.start()
    for t in sync._threads.values():
        if t.name.endswith("pods"):
            t.join()
    assert not sync.alive()
    assert not sync.ready()
    sync.stop()

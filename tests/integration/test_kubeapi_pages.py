"""Lists are paginated and streamed (issue 57, item 1): every page is followed to the end and the
list's version is the last page's; a page is asked for only when the previous one was taken, so a
caller that keeps compact records holds one page of raw objects at most."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubegpu.errors import ApiServerError
from kubegpu.kubeapi import KubeApi
from tests.stub_apiserver import StubApiServer, kubeconfig

pytestmark = pytest.mark.integration

PODS = "/api/v1/pods"


@pytest.fixture
def stub() -> Iterator[StubApiServer]:
    server = StubApiServer()
    yield server
    server.stop()


def pods(n: int) -> list[dict[str, object]]:
    return [{"metadata": {"name": f"p{i}", "uid": f"u{i}"}} for i in range(n)]


def api_for(stub: StubApiServer, tmp_path: Path) -> KubeApi:
    return KubeApi(kubeconfig=str(kubeconfig(tmp_path / "kubeconfig", stub.start())), sleep=lambda s: None)


def test_a_paginated_list_is_followed_to_the_end_and_its_version_is_the_last_pages(
    stub: StubApiServer, tmp_path: Path
) -> None:
    stub.serve(PODS, pods(7))
    api = api_for(stub, tmp_path)
    pages = api.list_pages(PODS, limit=3)
    got = [[p["metadata"]["name"] for p in page] for page in pages]
    assert got == [["p0", "p1", "p2"], ["p3", "p4", "p5"], ["p6"]]
    assert [r.query.get("continue") for r in stub.lists(PODS)] == [None, "3:1", "6:1"]
    assert all(r.query["limit"] == "3" for r in stub.lists(PODS))
    assert pages.resource_version == "1"
    stub.push(PODS, "ADDED", pods(8)[7])  # the collection moves on: a new list has the new version
    items, version = api.list_objects(PODS)
    assert len(items) == 8 and version == "2"


def test_pages_are_asked_for_only_as_the_caller_takes_them(stub: StubApiServer, tmp_path: Path) -> None:
    stub.serve(PODS, pods(9))
    served: list[int] = []
    stub.before_page = lambda path, index: served.append(index)
    pages = api_for(stub, tmp_path).list_pages(PODS, limit=3)
    assert served == []  # nothing asked before the first page is taken
    taken = iter(pages)
    first = next(taken)
    assert served == [0] and len(first) == 3
    second = next(taken)
    assert served == [0, 1] and second[0]["metadata"]["name"] == "p3"
    with pytest.raises(RuntimeError):
        _ = pages.resource_version  # not known before the last page
    assert len(next(taken)) == 3 and served == [0, 1, 2]
    assert next(taken, None) is None
    assert pages.resource_version == "1"


def test_a_page_that_fails_raises_and_the_version_stays_unknown(stub: StubApiServer, tmp_path: Path) -> None:
    stub.serve(PODS, pods(6))
    api = api_for(stub, tmp_path)

    def fail_second(path: str, index: int) -> None:
        if index == 1:
            raise ConnectionResetError("the API server went away")

    stub.before_page = fail_second
    pages = api.list_pages(PODS, limit=3)
    with pytest.raises(ApiServerError):
        for _ in pages:
            pass
    with pytest.raises(RuntimeError):
        _ = pages.resource_version

"""kubegpu's PodResources client against a double that serves the real gRPC API on a unix socket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubegpu.errors import PodResourcesUnavailable
from kubegpu.podresources.client import PodResourcesClient
from tests.integration.podresources_double import FakeContainer, FakePod, PodResourcesDouble

pytestmark = pytest.mark.integration


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[PodResourcesDouble]:
    double = PodResourcesDouble(tmp_path / "pod-resources" / "kubelet.sock").start()
    yield double
    double.stop()


def test_lists_every_container_holding_gpus_with_ids_as_advertised(kubelet: PodResourcesDouble) -> None:
    kubelet.pods = [
        FakePod(
            namespace="team-a",
            name="trainer",
            containers=(
                FakeContainer(name="init", devices={"nvidia.com/gpu": ("GPU-x",)}, kind="init"),
                FakeContainer(name="main", devices={"nvidia.com/gpu": ("GPU-a", "GPU-b")}),
                FakeContainer(name="log-shipper", kind="sidecar"),
            ),
        ),
        FakePod(
            namespace="team-b",
            name="notebook",
            containers=(FakeContainer(name="nb", devices={"nvidia.com/gpu.shared": ("GPU-c::4",)}),),
        ),
    ]
    client = PodResourcesClient(kubelet.socket_path)
    held = client.holders()
    assert [(h.namespace, h.pod, h.container, h.resource, h.device_ids) for h in held] == [
        ("team-a", "trainer", "main", "nvidia.com/gpu", ("GPU-a", "GPU-b")),
        ("team-b", "notebook", "nb", "nvidia.com/gpu.shared", ("GPU-c::4",)),
    ]
    assert held[1].physical_ids == {"GPU-c"}
    client.close()


def test_reports_only_the_resources_it_is_asked_for(kubelet: PodResourcesDouble) -> None:
    kubelet.pods = [
        FakePod(
            namespace="ns",
            name="mixed",
            containers=(
                FakeContainer(
                    name="c", devices={"nvidia.com/gpu": ("GPU-a",), "example.com/fpga": ("fpga0",)}
                ),
            ),
        )
    ]
    client = PodResourcesClient(kubelet.socket_path, wanted=lambda r: r.startswith("nvidia.com/"))
    assert [h.resource for h in client.holders()] == ["nvidia.com/gpu"]


def test_a_missing_socket_is_one_clear_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "pod-resources" / "kubelet.sock"
    with pytest.raises(PodResourcesUnavailable, match="does not exist") as err:
        PodResourcesClient(path).holders()
    assert str(path) in str(err.value)


def test_rate_limited_calls_fail_clearly_and_the_next_call_works_again(kubelet: PodResourcesDouble) -> None:
    client = PodResourcesClient(kubelet.socket_path)
    kubelet.pods = [FakePod(namespace="ns", name="p", containers=(FakeContainer(name="c"),))]
    errors = []
    for _ in range(15):  # burst of 10
        try:
            client.holders()
        except PodResourcesUnavailable as exc:
            errors.append(str(exc))
    assert errors, "the double's burst of 10 must reject some of 15 back-to-back calls"
    assert "RESOURCE_EXHAUSTED" in errors[0] and "rate limit" in errors[0]


def test_a_restarted_kubelet_is_dialled_again(kubelet: PodResourcesDouble) -> None:
    client = PodResourcesClient(kubelet.socket_path)
    assert client.holders() == []
    kubelet.stop()
    with pytest.raises(PodResourcesUnavailable):
        client.holders()
    kubelet.start()
    kubelet.pods = [
        FakePod(namespace="ns", name="p", containers=(FakeContainer(name="c", devices={"r/x": ("d",)}),))
    ]
    assert [h.pod for h in client.holders()] == ["p"]

"""The DRA plugin over real gRPC when its checkpoint cannot be written or read, called as kubelet calls it.

A full plugin directory (ENOSPC, injected: a real full file system needs root) is that claim's error in
the NodePrepareResources / NodeUnprepareResources answer, the other claims of the call are answered on
their own, and a restarted plugin serves exactly what was answered. An unreadable checkpoint does not
stop the plugin from starting and serving.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import kubegpu.dra.checkpoint as checkpoint_module
from kubegpu.dra.api import dra_v1_pb2 as v1
from kubegpu.dra.api import dra_v1_pb2_grpc as v1_grpc
from kubegpu.dra.server import DraServer
from kubegpu.model.dra import DRIVER_NAME
from tests.integration.test_dra_plugin import NODE, Claims, channel, new_server

pytestmark = pytest.mark.integration


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kgdra-", dir="/tmp"))  # unix socket paths must stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def allocate(claims: Claims, name: str, uid: str, device: str) -> v1.Claim:
    result = {"request": "gpus", "driver": DRIVER_NAME, "pool": NODE, "device": device}
    claims.objects[("ml", name)] = {
        "metadata": {"uid": uid},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    return v1.Claim(namespace="ml", uid=uid, name=name)


def serving(root: Path, claims: Claims) -> DraServer:
    server = new_server(root, claims)
    server.start()
    return server


def test_a_full_plugin_directory_is_a_per_claim_error_and_a_restart_serves_what_was_answered(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = Claims()
    full = {"on": False}
    real = checkpoint_module.write_atomically

    def write(path: Path, text: str, *, mode: int = 0o644) -> None:
        if full["on"] and path.name == "checkpoint.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, text, mode=mode)

    monkeypatch.setattr(checkpoint_module, "write_atomically", write)
    kept = allocate(claims, "kept", "uid-kept", "gpu-0")
    server = serving(root, claims)
    try:
        with channel(server.socket) as ch:
            stub = v1_grpc.DRAPluginStub(ch)
            ok = stub.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[kept]), timeout=45)
            assert ok.claims["uid-kept"].error == ""
            full["on"] = True
            new = allocate(claims, "new", "uid-new", "gpu-1")
            gone = v1.Claim(namespace="ml", uid="uid-gone", name="gone")
            for _ in range(2):  # asked again while the disk is still full: the same answers
                answer = stub.NodePrepareResources(
                    v1.NodePrepareResourcesRequest(claims=[new, gone]), timeout=45
                )
                assert "No space left on device" in answer.claims["uid-new"].error
                assert not answer.claims["uid-new"].devices
                assert "does not exist" in answer.claims["uid-gone"].error  # answered on its own
                done = stub.NodeUnprepareResources(
                    v1.NodeUnprepareResourcesRequest(claims=[kept]), timeout=45
                )
                assert "No space left on device" in done.claims["uid-kept"].error
    finally:
        server.stop()
    claims.objects.clear()  # a restarted plugin answers recorded claims without the API server
    restarted = serving(root, claims)
    try:
        with channel(restarted.socket) as ch:
            stub = v1_grpc.DRAPluginStub(ch)
            again = stub.NodePrepareResources(
                v1.NodePrepareResourcesRequest(
                    claims=[kept, v1.Claim(namespace="ml", uid="uid-new", name="new")]
                ),
                timeout=45,
            )
            assert again.claims["uid-kept"].error == ""  # still prepared: its unprepare failed
            assert [d.device_name for d in again.claims["uid-kept"].devices] == ["gpu-0"]
            assert "does not exist" in again.claims["uid-new"].error  # never prepared, never served
    finally:
        restarted.stop()


def test_a_plugin_with_an_unreadable_checkpoint_starts_and_serves(root: Path) -> None:
    path = root / "plugins" / DRIVER_NAME / "checkpoint.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"[" * 100_000 + b"\xff")
    claims = Claims()
    server = serving(root, claims)
    try:
        with channel(server.socket) as ch:
            ref = allocate(claims, "x", "uid-1", "gpu-2")
            answer = v1_grpc.DRAPluginStub(ch).NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=[ref]), timeout=45
            )
            assert answer.claims["uid-1"].error == ""
    finally:
        server.stop()
    assert [p.name.startswith("checkpoint.json.corrupt-") for p in path.parent.glob("checkpoint.json.*")] == [
        True
    ]

"""The DRA checkpoint under faults: a file that cannot be used, and writes that fail.

What a user sees is asserted: the driver starts (``dra serve`` used to exit 1 on every start), the bad
file is kept aside for a human with one log line, and after a failed write the driver's answers, its
memory and the file on disk (what a restarted driver reads) agree: a claim is prepared in all three or
in none.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import kubegpu.dra.checkpoint as checkpoint_module
from kubegpu.dra.checkpoint import MAX_CHECKPOINT_BYTES, Checkpoint
from tests.unit.dra.test_driver import Claims, make, result


@pytest.fixture
def claims() -> Claims:
    return Claims()


def checkpoint_path(tmp_path: Path) -> Path:
    return tmp_path / "plugin" / "checkpoint.json"


def valid_doc(**claim: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "namespace": "default",
        "name": "train",
        "devices": [{"requests": ["gpus"], "pool": "gpu-node-1", "device": "gpu-0", "cdi": ["k/g=x"]}],
        "cdiSpec": None,
    }
    entry.update(claim)
    return {"version": 1, "claims": {"uid-1": entry}}


def nested(depth: int) -> object:
    doc: object = "x"
    for _ in range(depth):
        doc = {"a": doc}
    return doc


UNUSABLE: dict[str, bytes] = {
    "bad bytes": b'{"version": 1, "claims": {"uid-\xff\xfe": {}}}',
    "latin-1 text": '{"version": 1, "claims": {}, "note": "caf\u00e9"}'.encode("latin-1"),
    "not json": b"{not json",
    "empty": b"",
    "100k-deep arrays": b"[" * 100_000 + b"]" * 100_000,
    "100k-deep objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "deep inside a claim": json.dumps(valid_doc(cdiSpec=nested(200))).encode(),
    "a list": b"[]",
    "a string": b'"checkpoint"',
    "null": b"null",
    "other version": json.dumps({"version": 2, "claims": {}}).encode(),
    "claims a list": json.dumps({"version": 1, "claims": []}).encode(),
    "claim a string": json.dumps({"version": 1, "claims": {"uid-1": "x"}}).encode(),
    "namespace an object": json.dumps(valid_doc(namespace={"a": 1})).encode(),
    "name a number": json.dumps(valid_doc(name=7)).encode(),
    "devices an object": json.dumps(valid_doc(devices={"a": 1})).encode(),
    "requests a string": json.dumps(
        valid_doc(devices=[{"requests": "gpus", "pool": "p", "device": "gpu-0", "cdi": []}])
    ).encode(),
    "device missing": json.dumps(valid_doc(devices=[{"requests": [], "pool": "p", "cdi": []}])).encode(),
    "cdi spec a list": json.dumps(valid_doc(cdiSpec=[1, 2])).encode(),
    "empty uid": json.dumps(valid_doc()).replace('"uid-1"', '""').encode(),
    "huge": b" " * MAX_CHECKPOINT_BYTES + json.dumps(valid_doc()).encode(),
}


@pytest.mark.parametrize("content", list(UNUSABLE.values()), ids=list(UNUSABLE))
def test_any_unusable_checkpoint_is_moved_aside_once_and_the_driver_starts_empty(
    tmp_path: Path, claims: Claims, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = checkpoint_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR, logger="kubegpu.dra.checkpoint"):
        driver = make(tmp_path, claims)
    assert driver.prepared() == {}
    aside = [p for p in path.parent.iterdir() if p.name.startswith("checkpoint.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == content  # kept for a human, untouched
    assert not path.exists()
    assert len(caplog.records) == 1 and "DRA checkpoint unreadable" in caplog.records[0].getMessage()
    # the driver works from there, and a restarted one reads what it wrote
    ref = claims.add("x", "uid-2", [result("gpu-1")])
    assert driver.prepare([ref])["uid-2"].error == ""
    assert list(make(tmp_path, claims).prepared()) == ["uid-2"]


def test_a_checkpoint_that_is_a_directory_is_moved_aside(tmp_path: Path, claims: Claims) -> None:
    path = checkpoint_path(tmp_path)
    (path / "junk").mkdir(parents=True)
    driver = make(tmp_path, claims)
    assert driver.prepared() == {}
    assert not path.exists()
    ref = claims.add("x", "uid-1", [result("gpu-1")])
    assert driver.prepare([ref])["uid-1"].error == ""


def test_two_unusable_checkpoints_in_one_second_are_both_kept(tmp_path: Path) -> None:
    path = checkpoint_path(tmp_path)
    path.parent.mkdir(parents=True)
    for content in (b"{first", b"{second"):
        path.write_bytes(content)
        assert Checkpoint(path, clock=lambda: 1_700_000_000.0).claims == {}
    kept = sorted(p.read_bytes() for p in path.parent.iterdir())
    assert kept == [b"{first", b"{second"]


def test_a_valid_checkpoint_is_read_back_exactly(tmp_path: Path, claims: Claims) -> None:
    ref = claims.add("x", "uid-1", [result("gpu-2"), result("gpu-3")])
    first = make(tmp_path, claims).prepare([ref])["uid-1"]
    again = make(tmp_path, claims)
    assert again.prepared()["uid-1"].devices == first.devices
    assert not [p for p in checkpoint_path(tmp_path).parent.iterdir() if "corrupt" in p.name]


class Disk:
    """Makes writes of the checkpoint file fail with ``code`` while ``full`` (CDI specs still write)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        self.code = errno.ENOSPC
        real = checkpoint_module.write_atomically

        def write(path: Path, text: str, *, mode: int = 0o644) -> None:
            if self.full and path.name == "checkpoint.json":
                raise OSError(self.code, os.strerror(self.code))
            real(path, text, mode=mode)

        monkeypatch.setattr(checkpoint_module, "write_atomically", write)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    yield Disk(monkeypatch)


FAULTS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO, "EROFS": errno.EROFS}


@pytest.mark.parametrize("code", list(FAULTS.values()), ids=list(FAULTS))
def test_a_prepare_whose_checkpoint_write_fails_is_an_error_and_is_not_recorded(
    tmp_path: Path, claims: Claims, disk: Disk, code: int
) -> None:
    driver = make(tmp_path, claims)
    earlier = claims.add("a", "uid-0", [result("gpu-0")])
    assert driver.prepare([earlier])["uid-0"].error == ""
    disk.full, disk.code = True, code
    ref = claims.add("x", "uid-1", [result("gpu-1")])
    for _ in range(2):  # asked again while the disk is still full: still an error, never "prepared"
        answer = driver.prepare([ref])["uid-1"]
        assert answer.devices == ()
        assert "not prepared" in answer.error and "checkpoint" in answer.error
        assert os.strerror(code) in answer.error
        assert set(driver.prepared()) == {"uid-0"}
        assert not (tmp_path / "cdi" / "kubegpu.io-gpu_uid-1.json").exists()  # nothing half-prepared
    assert set(make(tmp_path, claims).prepared()) == {"uid-0"}  # what a restart reads agrees
    disk.full = False  # space freed: kubelet's retry prepares it
    assert driver.prepare([ref])["uid-1"].error == ""
    assert set(make(tmp_path, claims).prepared()) == {"uid-0", "uid-1"}


@pytest.mark.parametrize("code", list(FAULTS.values()), ids=list(FAULTS))
def test_an_unprepare_whose_checkpoint_write_fails_is_an_error_and_the_claim_is_kept(
    tmp_path: Path, claims: Claims, disk: Disk, code: int
) -> None:
    driver = make(tmp_path, claims)
    ref = claims.add("x", "uid-1", [result("gpu-1")])
    prepared = driver.prepare([ref])["uid-1"]
    disk.full, disk.code = True, code
    for _ in range(2):  # asked again while the disk is still full: still an error, never "done"
        error = driver.unprepare([ref])["uid-1"]
        assert "not unprepared" in error and os.strerror(code) in error
        assert set(driver.prepared()) == {"uid-1"}
    assert set(make(tmp_path, claims).prepared()) == {"uid-1"}  # what a restart reads agrees
    claims.objects.clear()  # while it is still recorded, kubelet's prepare is answered from the record
    assert driver.prepare([ref])["uid-1"] == prepared
    disk.full = False
    assert driver.unprepare([ref]) == {"uid-1": ""}
    assert driver.prepared() == {} and make(tmp_path, claims).prepared() == {}


def test_a_checkpoint_that_would_outgrow_its_cap_refuses_the_claim_not_the_driver(
    tmp_path: Path, claims: Claims, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint_module, "MAX_CHECKPOINT_BYTES", 2000)
    driver = make(tmp_path, claims)
    answers = [driver.prepare([claims.add(f"c{i}", f"uid-{i}", [result(f"gpu-{i}")])]) for i in range(8)]
    errors = [a[f"uid-{i}"].error for i, a in enumerate(answers)]
    assert errors[0] == "" and any("larger than 2000 bytes" in e for e in errors)
    kept = {f"uid-{i}" for i, e in enumerate(errors) if not e}
    assert set(driver.prepared()) == kept == set(make(tmp_path, claims).prepared())
    assert not [p for p in checkpoint_path(tmp_path).parent.iterdir() if "corrupt" in p.name]

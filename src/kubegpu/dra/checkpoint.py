"""Prepared claims on disk, so a driver or kubelet restart keeps them, and the CDI spec files.

The checkpoint is one JSON file in the driver's plugin directory, replaced atomically (write to a
temporary file, fsync, rename, fsync the directory) on every change, so a crash leaves the old or the
new state, never half of one. Memory follows the file: a change is made in memory only after the file
was written, so a write that fails (a full disk, an I/O error, a read-only file system) changes nothing
and the caller answers an error for that claim. A checkpoint that cannot be used for any reason (not
readable, not UTF-8, not JSON, nested too deeply, over ``MAX_CHECKPOINT_BYTES``, a field of the wrong
type) is moved aside (``.corrupt-<time>``) with one log line and the driver starts empty: kubelet
prepares every claim of a pod it starts again, which is idempotent.

CDI specs go to ``/var/run/cdi`` (the dynamic directory, which wins over ``/etc/cdi``), one file per
claim named ``kubegpu.io-gpu_<claim uid>.json`` as the CDI library names transient specs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kubegpu.atomicfile import write_atomically

__all__ = [
    "CHECKPOINT_NAME",
    "MAX_CHECKPOINT_BYTES",
    "CdiStore",
    "Checkpoint",
    "CheckpointUnreadable",
    "PreparedClaim",
    "PreparedDevice",
    "parse_checkpoint",
    "write_atomically",
]

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.json"
CHECKPOINT_VERSION = 1
# far above a node's claims (a claim with its CDI spec is a few KiB), far below what would strain memory
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024
MAX_CHECKPOINT_DEPTH = 32  # a checkpoint with CDI specs is 11 levels deep (a mount's options)


@dataclass(frozen=True, kw_only=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    cdi_spec: dict[str, Any] | None  # what was written to /var/run/cdi, rewritten if it went missing

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "devices": [
                {
                    "requests": list(d.request_names),
                    "pool": d.pool,
                    "device": d.device,
                    "cdi": list(d.cdi_ids),
                }
                for d in self.devices
            ],
            "cdiSpec": self.cdi_spec,
        }


class CheckpointUnreadable(ValueError):
    """Why a checkpoint file cannot be used (its bytes, its JSON, or its shape)."""


def _check_depth(doc: Any) -> None:
    """Refuse a document nested deeper than ``MAX_CHECKPOINT_DEPTH`` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_CHECKPOINT_DEPTH:
            raise CheckpointUnreadable(f"nested deeper than {MAX_CHECKPOINT_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def _string(doc: dict[str, Any], key: str, where: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise CheckpointUnreadable(f"{where}: {key!r} is not a string")
    return value


def _strings(doc: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = doc.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointUnreadable(f"{where}: {key!r} is not a list of strings")
    return tuple(value)


def _claim_of(uid: str, doc: Any) -> PreparedClaim:
    """One checkpointed claim, every field of the type it must have (nothing coerced)."""
    where = f"claim {uid[:64]!r}"
    if not uid or not isinstance(doc, dict):
        raise CheckpointUnreadable(f"{where} is not an object with a UID")
    devices = doc.get("devices")
    if not isinstance(devices, list):
        raise CheckpointUnreadable(f"{where}: 'devices' is not a list")
    prepared = []
    for d in devices:
        if not isinstance(d, dict):
            raise CheckpointUnreadable(f"{where}: a device is not an object")
        prepared.append(
            PreparedDevice(
                request_names=_strings(d, "requests", where),
                pool=_string(d, "pool", where),
                device=_string(d, "device", where),
                cdi_ids=_strings(d, "cdi", where),
            )
        )
    spec = doc.get("cdiSpec")
    if spec is not None and not isinstance(spec, dict):
        raise CheckpointUnreadable(f"{where}: 'cdiSpec' is not an object")
    return PreparedClaim(
        uid=uid,
        namespace=_string(doc, "namespace", where),
        name=_string(doc, "name", where),
        devices=tuple(prepared),
        cdi_spec=spec,
    )


def parse_checkpoint(data: bytes) -> dict[str, PreparedClaim]:
    """The claims of a checkpoint file's bytes; ``CheckpointUnreadable`` says why they cannot be used."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise CheckpointUnreadable(f"larger than {MAX_CHECKPOINT_BYTES} bytes")
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CheckpointUnreadable(f"not UTF-8 text (byte {exc.start})") from exc
    except RecursionError as exc:
        raise CheckpointUnreadable("nested too deeply to parse") from exc
    except ValueError as exc:
        raise CheckpointUnreadable(f"not JSON: {exc}") from exc
    _check_depth(doc)
    if not isinstance(doc, dict):
        raise CheckpointUnreadable("not a JSON object")
    if doc.get("version") != CHECKPOINT_VERSION:
        raise CheckpointUnreadable(f"version {str(doc.get('version'))[:32]!r}, expected {CHECKPOINT_VERSION}")
    claims = doc.get("claims")
    if not isinstance(claims, dict):
        raise CheckpointUnreadable("'claims' is not an object")
    return {uid: _claim_of(uid, c) for uid, c in claims.items()}


class Checkpoint:
    """The prepared claims by UID; not thread-safe on its own (the driver serialises its calls).

    ``claims`` is what the file on disk holds: ``add`` and ``remove`` write the file first and change
    memory only once the write succeeded, so a write that fails (``OSError``: ENOSPC, EIO, a read-only
    file system) leaves both as they were.
    """

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._claims: dict[str, PreparedClaim] = self._read()

    @property
    def claims(self) -> Mapping[str, PreparedClaim]:
        """The prepared claims (read-only: change them with ``add`` and ``remove``)."""
        return MappingProxyType(self._claims)

    def _read(self) -> dict[str, PreparedClaim]:
        try:
            with self.path.open("rb") as fh:
                data = fh.read(MAX_CHECKPOINT_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:  # a directory, no permission, an I/O error
            return self._set_aside(f"cannot be read: {exc.strerror or exc}")
        try:
            return parse_checkpoint(data)
        except CheckpointUnreadable as exc:
            return self._set_aside(str(exc))

    def _set_aside(self, why: str) -> dict[str, PreparedClaim]:
        """Move the unreadable file out of the way (kept for a human) and start empty: one log line."""
        stamp = int(self._clock())
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 0
        while aside.exists() or aside.is_symlink():
            n += 1
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
        try:
            os.replace(self.path, aside)
        except OSError as exc:
            moved = f"could not be moved aside ({exc.strerror or exc}); the next prepare replaces it"
        else:
            moved = f"moved to {aside}"
        log.error(
            "DRA checkpoint unreadable; starting empty (kubelet prepares again)",
            extra={"path": str(self.path), "error": why, "moved": moved},
        )
        return {}

    def _write(self, claims: Mapping[str, PreparedClaim]) -> None:
        doc = {
            "version": CHECKPOINT_VERSION,
            "claims": {u: c.to_json() for u, c in sorted(claims.items())},
        }
        text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
        if len(text.encode("utf-8")) > MAX_CHECKPOINT_BYTES:
            raise OSError(
                errno.EFBIG,
                f"the checkpoint would be larger than {MAX_CHECKPOINT_BYTES} bytes",
                str(self.path),
            )
        write_atomically(self.path, text, mode=0o600)

    def add(self, claim: PreparedClaim) -> None:
        """Record ``claim``; ``OSError`` when the file cannot be written (then nothing changed)."""
        claims = {**self._claims, claim.uid: claim}
        self._write(claims)
        self._claims = claims

    def remove(self, uid: str) -> bool:
        """Forget ``uid`` (False: it was not recorded); ``OSError`` when the file cannot be written
        (then the claim is still recorded, on disk and here)."""
        if uid not in self._claims:
            return False
        claims = {u: c for u, c in self._claims.items() if u != uid}
        self._write(claims)
        self._claims = claims
        return True


class CdiStore:
    """One CDI spec file per prepared claim in ``directory``."""

    def __init__(self, directory: Path, *, kind: str) -> None:
        self.directory = directory
        self._prefix = kind.replace("/", "-")

    def path(self, claim_uid: str) -> Path:
        return self.directory / f"{self._prefix}_{claim_uid}.json"

    def write(self, claim_uid: str, spec: dict[str, Any]) -> Path:
        path = self.path(claim_uid)
        write_atomically(path, json.dumps(spec, indent=1, sort_keys=True) + "\n")
        return path

    def remove(self, claim_uid: str) -> None:
        with contextlib.suppress(NotADirectoryError):  # the directory is not one: no spec to remove
            self.path(claim_uid).unlink(missing_ok=True)

    def present(self, claim_uid: str) -> bool:
        return self.path(claim_uid).exists()

"""Prepared claims on disk, so a driver or kubelet restart keeps them, and the CDI spec files.

The checkpoint is one JSON file in the driver's plugin directory, replaced atomically (write to a
temporary file, fsync, rename, fsync the directory) on every change, so a crash leaves the old or the
new state, never half of one. A checkpoint that cannot be read is moved aside (``.corrupt-<time>``)
and the driver starts empty: kubelet prepares every claim of a running pod again, which is idempotent.

CDI specs go to ``/var/run/cdi`` (the dynamic directory, which wins over ``/etc/cdi``), one file per
claim named ``kubegpu.io-gpu_<claim uid>.json`` as the CDI library names transient specs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegpu.atomicfile import write_atomically

__all__ = ["CHECKPOINT_NAME", "CdiStore", "Checkpoint", "PreparedClaim", "PreparedDevice", "write_atomically"]

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.json"
CHECKPOINT_VERSION = 1


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

    @classmethod
    def from_json(cls, uid: str, doc: dict[str, Any]) -> PreparedClaim:
        return cls(
            uid=uid,
            namespace=str(doc["namespace"]),
            name=str(doc["name"]),
            devices=tuple(
                PreparedDevice(
                    request_names=tuple(str(r) for r in d["requests"]),
                    pool=str(d["pool"]),
                    device=str(d["device"]),
                    cdi_ids=tuple(str(c) for c in d["cdi"]),
                )
                for d in doc["devices"]
            ),
            cdi_spec=doc.get("cdiSpec"),
        )


class Checkpoint:
    """The prepared claims by UID; not thread-safe on its own (the driver serialises its calls)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, PreparedClaim] = self._read()

    def _read(self) -> dict[str, PreparedClaim]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            doc = json.loads(text)
            if doc.get("version") != CHECKPOINT_VERSION:
                raise ValueError(f"version {doc.get('version')!r}, expected {CHECKPOINT_VERSION}")
            return {uid: PreparedClaim.from_json(uid, c) for uid, c in doc["claims"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            os.replace(self.path, aside)
            log.error(
                "DRA checkpoint unreadable; moved aside, starting empty (kubelet prepares again)",
                extra={"path": str(self.path), "moved_to": str(aside), "error": str(exc)},
            )
            return {}

    def _write(self) -> None:
        doc = {
            "version": CHECKPOINT_VERSION,
            "claims": {u: c.to_json() for u, c in sorted(self.claims.items())},
        }
        write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=True) + "\n", mode=0o600)

    def add(self, claim: PreparedClaim) -> None:
        self.claims[claim.uid] = claim
        self._write()

    def remove(self, uid: str) -> bool:
        if self.claims.pop(uid, None) is None:
            return False
        self._write()
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

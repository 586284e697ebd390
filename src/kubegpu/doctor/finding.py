"""What a doctor check reports: one ``Finding`` per check, in the chain's order.

A finding is the unit of the doctor's interface: its ``id`` is stable (scripts and alerts match on it),
its ``layer`` says which link of the chain driver → container runtime → device plugin → scheduler →
workload it is about, and it carries the evidence it saw and the fix an operator would apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NewType

__all__ = ["CheckId", "Finding", "Layer", "Outcome", "Status", "fail", "ok", "skip", "warn"]

CheckId = NewType("CheckId", str)


class Status(Enum):
    """How a check came out; ``fail`` makes the command exit 1."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class Layer(Enum):
    """The link of the chain a check examines, in chain order."""

    HOST = "host"
    RUNTIME = "runtime"
    PLUGIN = "plugin"
    CLUSTER = "cluster"
    POD = "pod"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one check function returns; the runner adds the id and layer to make a ``Finding``."""

    status: Status
    summary: str
    evidence: tuple[str, ...] = ()
    fix: str = ""


def ok(summary: str, *evidence: str) -> Outcome:
    return Outcome(status=Status.OK, summary=summary, evidence=evidence)


def warn(summary: str, *evidence: str, fix: str = "") -> Outcome:
    return Outcome(status=Status.WARN, summary=summary, evidence=evidence, fix=fix)


def fail(summary: str, *evidence: str, fix: str = "") -> Outcome:
    return Outcome(status=Status.FAIL, summary=summary, evidence=evidence, fix=fix)


def skip(summary: str, *evidence: str) -> Outcome:
    return Outcome(status=Status.SKIP, summary=summary, evidence=evidence)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """The result of one check: stable id, chain layer, status, and what to do about it."""

    id: CheckId
    layer: Layer
    status: Status
    summary: str
    evidence: tuple[str, ...] = ()
    fix: str = ""

    def to_json(self) -> dict[str, object]:
        """The ``--json`` shape: ``{"id","layer","status","summary","evidence","fix"}``."""
        return {
            "id": self.id,
            "layer": self.layer.value,
            "status": self.status.value,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "fix": self.fix,
        }

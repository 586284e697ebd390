"""MIG repartitioning of simulated GPUs (``--node-spec``): the node's MIG instances change in memory.

``SimulatedMigBackend`` is the ``MigBackend`` of simulated nodes. Applying a transition replaces the
affected GPUs' instances (``kubegpu.model.migplan.repartitioned``); a new instance's UUID is derived from
its GPU's UUID, profile and start slot (``MIG-…``, UUIDv5), so a layout applied again gives the same
device IDs and a profile that moves never reuses another's ID.

With a state file (``kubegpu.migManager.stateFile``) the applied layout is written there (atomically:
a temporary file, then a rename) before it is served, and ``restore`` puts it back on the node the spec
gives when the agent starts again, before anything is advertised: a restarted agent keeps the node's
layout, as a real GPU keeps its instances until reboot. A state file that cannot be read, or that
names GPUs the node does not have, is ignored with one warning (the spec's layout is served, and the
MIG manager re-applies the labelled config). Without a state file a restart serves the spec's layout.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubegpu.errors import KubegpuError, MigApplyError
from kubegpu.model.mig import PlacedInstance, validate_layout
from kubegpu.model.migplan import MigTransition, repartitioned
from kubegpu.model.node import Gpu, GpuUuid, MigInstance, Node, uuid_problem
from kubegpu.sources.spec import stable_uuid

__all__ = ["STATE_VERSION", "SimulatedMigBackend", "simulated_mig_uuid"]

log = logging.getLogger(__name__)

STATE_VERSION = 1


def simulated_mig_uuid(gpu: Gpu, placed: PlacedInstance) -> GpuUuid:
    """The UUID of a simulated MIG instance: stable for one GPU, profile and start slot."""
    return stable_uuid(str(gpu.uuid), "mig", placed.profile.name, placed.start_slot)


class SimulatedMigBackend:
    """Repartitions a simulated node; ``state_file`` None: the layout lives only in memory."""

    def __init__(self, state_file: Path | None = None) -> None:
        self.state_file = state_file

    def current(self, node: Node) -> Node:
        return node

    def apply(self, node: Node, transition: MigTransition) -> Node:
        new = repartitioned(node, transition, mig_uuid=simulated_mig_uuid)
        self._save(new, transition.config)
        return new

    # -- the state file -----------------------------------------------------------------------------

    def _save(self, node: Node, config: str) -> None:
        if self.state_file is None:
            return
        doc = {
            "version": STATE_VERSION,
            "config": config,
            "gpus": {
                str(g.uuid): {
                    "migEnabled": g.mig_enabled,
                    "instances": [
                        {"profile": m.profile, "startSlot": m.start_slot, "uuid": str(m.uuid)}
                        for m in g.mig_instances
                    ],
                }
                for g in node.gpus
            },
        }
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        try:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
            os.replace(tmp, self.state_file)
        except OSError as exc:
            raise MigApplyError(
                f"cannot write the simulated MIG state file {self.state_file}: {exc.strerror or exc}; "
                "the layout was not changed"
            ) from exc

    def restore(self, node: Node) -> Node:
        """``node`` with the layout the state file recorded, or ``node`` unchanged (no file, or one that
        does not fit this node: one warning)."""
        if self.state_file is None or not self.state_file.exists():
            return node
        try:
            doc = json.loads(self.state_file.read_text(encoding="utf-8"))
            gpus = _restored(node, doc)
        except (OSError, ValueError, KeyError, TypeError, KubegpuError) as exc:
            log.warning(
                "simulated MIG state file ignored; serving the node spec's layout",
                extra={"file": str(self.state_file), "error": str(exc)[:300]},
            )
            return node
        log.info(
            "simulated MIG layout restored",
            extra={"file": str(self.state_file), "config": doc.get("config")},
        )
        return Node(name=node.name, gpus=gpus, topology=node.topology)


def _restored(node: Node, doc: Any) -> tuple[Gpu, ...]:
    if (
        not isinstance(doc, dict)
        or doc.get("version") != STATE_VERSION
        or not isinstance(doc.get("gpus"), dict)
    ):
        raise ValueError(f"not a version {STATE_VERSION} kubegpu MIG state file")
    recorded: dict[str, Any] = doc["gpus"]
    if set(recorded) != {str(g.uuid) for g in node.gpus}:
        raise ValueError("it records other GPUs than this node has (another node spec?)")
    gpus = []
    for gpu in node.gpus:
        entry = recorded[str(gpu.uuid)]
        instances = tuple(
            MigInstance(
                profile=str(i["profile"]),
                start_slot=int(i["startSlot"]),
                uuid=GpuUuid(str(i["uuid"])),
                gi_index=gi,
            )
            for gi, i in enumerate(entry["instances"])
        )
        enabled = bool(entry["migEnabled"])
        if not enabled and instances:
            raise ValueError(f"GPU {gpu.index} has MIG instances but MIG off")
        if enabled and instances:
            validate_layout(gpu.model, [f"{m.profile}@{m.start_slot}" for m in instances])  # KubegpuError
        bad = [str(m.uuid) for m in instances if uuid_problem(str(m.uuid)) is not None]
        if bad:
            raise ValueError(f"GPU {gpu.index}: bad MIG UUID {bad[0][:64]!r}")
        gpus.append(replace(gpu, mig_enabled=enabled, mig_instances=instances))
    return tuple(gpus)

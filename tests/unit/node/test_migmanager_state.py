"""The MIG manager's state label says what the GPUs hold, whatever was labelled or served before.

The GPUs' layout is read back (the simulated backend's state file is what the simulated GPUs hold; NVML
reads the GPUs), not remembered from the last label: a relabel back to a config the GPUs no longer hold
repartitions them, a relabel back to the config they hold while another one was pending ends in
``success``, and a state label someone else changed is written back.
"""

from __future__ import annotations

import json
from pathlib import Path

from kubegpu.model.migplan import MigTransition
from kubegpu.model.node import Node
from kubegpu.sources.migsim import SimulatedMigBackend
from tests.unit.node.test_migmanager import SPEC, STATE, Harness

CONFIG = "nvidia.com/mig.config"


def held(tmp_path: Path) -> str:
    """The config the simulated GPUs hold (their state file)."""
    return str(json.loads((tmp_path / "mig.json").read_text())["config"])


def profiles(node: Node) -> list[list[str]]:
    return [sorted(m.profile for m in g.mig_instances) for g in node.gpus]


def test_back_to_the_held_config_while_another_was_pending_ends_in_success(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.api.labels[CONFIG] = "all-1g.10gb"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success" and held(tmp_path) == "all-1g.10gb"
    h.hold("trainer", str(h.node.gpus[0].mig_instances[0].uuid))
    h.api.labels[CONFIG] = "all-balanced"  # blocked by the pod
    h.manager.sync_once()
    assert h.api.labels[STATE] == "pending"
    h.api.labels[CONFIG] = "all-1g.10gb"  # changed mind: the GPUs hold this one
    outcome = h.manager.sync_once()
    assert outcome is not None and outcome.state.value == "success"
    assert h.api.labels[STATE] == "success" and held(tmp_path) == "all-1g.10gb"
    assert len(h.served) == 1  # nothing torn down or re-served
    assert h.manager.sync_once() is None and h.api.labels[STATE] == "success"


def test_a_layout_applied_but_not_served_is_what_the_next_config_is_planned_from(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.api.labels[CONFIG] = "all-1g.10gb"
    h.manager.sync_once()
    served_a = h.node
    h.serve_ok = False  # the agent cannot serve the next layout
    h.api.labels[CONFIG] = "all-balanced"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "failed" and held(tmp_path) == "all-balanced"
    assert h.node == served_a  # the agent still serves the old layout
    h.serve_ok = True
    h.api.labels[CONFIG] = "all-1g.10gb"  # back to the served config: the GPUs must be given it again
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success"
    assert held(tmp_path) == "all-1g.10gb"  # success means the GPUs hold it
    assert profiles(h.node) == profiles(served_a)


def test_a_layout_applied_but_not_served_is_served_once_it_is_asked_for_again(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.serve_ok = False
    h.api.labels[CONFIG] = "all-1g.10gb"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "failed" and held(tmp_path) == "all-1g.10gb" and h.node == SPEC
    h.serve_ok = True
    h.api.labels[CONFIG] = "all-balanced"
    h.manager.sync_once()
    h.api.labels[CONFIG] = "all-1g.10gb"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success" and held(tmp_path) == "all-1g.10gb"
    assert profiles(h.node) == [["1g.10gb"] * 7, ["1g.10gb"] * 7]


def test_the_gpus_already_holding_a_layout_the_agent_does_not_serve_get_it_served(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.serve_ok = False
    h.api.labels[CONFIG] = "all-1g.10gb"
    h.manager.sync_once()
    h.serve_ok = True
    h.api.labels[CONFIG] = "all-balanced"  # a different value, then back: the GPUs hold all-1g.10gb
    h.hold("trainer", str(SPEC.gpus[0].mig_instances[0].uuid))  # blocks any repartition of GPU 0
    h.manager.sync_once()
    assert h.api.labels[STATE] == "pending"
    h.api.labels[CONFIG] = "all-1g.10gb"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success"
    assert profiles(h.node) == [["1g.10gb"] * 7, ["1g.10gb"] * 7]  # served now, without touching GPUs


def test_a_state_label_changed_by_someone_else_is_written_back(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.api.labels[CONFIG] = "all-1g.10gb"
    h.manager.sync_once()
    for foreign in ("pending", "failed", "rebooting"):
        h.api.labels[STATE] = foreign
        h.manager.sync_once()
        assert h.api.labels[STATE] == "success"
    del h.api.labels[STATE]
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success"
    assert len(h.served) == 1 and len(h.api.events) == 1  # nothing applied again, nothing told again


def test_gpus_read_back_holding_the_config_already_are_served_as_they_are(tmp_path: Path) -> None:
    """A backend that reads the GPUs (as NVML does): the config is compared with them, not the agent."""
    h = Harness(tmp_path)
    gpus = SimulatedMigBackend().apply(SPEC, _transition(SPEC, "all-1g.10gb"))

    class ReadBack(SimulatedMigBackend):
        def current(self, node: Node) -> Node:
            return gpus

    h.manager._backend = ReadBack(tmp_path / "mig.json")
    h.api.labels[CONFIG] = "all-1g.10gb"  # the agent serves the spec's layout; the GPUs hold this one
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success"
    assert h.served == [gpus]  # nothing applied (the GPUs hold it already); the agent serves what they hold


def _transition(node: Node, name: str) -> MigTransition:
    from kubegpu.model.migplan import plan_transition
    from kubegpu.sources.migparted import load_mig_parted

    return plan_transition(node, load_mig_parted("builtin:mig-parted-default").config(name))

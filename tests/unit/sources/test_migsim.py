"""Simulated MIG repartitioning: new instances, stable UUIDs, and the state file that survives a restart."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from kubegpu.errors import MigApplyError
from kubegpu.model.migplan import plan_transition
from kubegpu.sources.migparted import load_mig_parted
from kubegpu.sources.migsim import SimulatedMigBackend
from kubegpu.sources.spec import load_node

NODE = load_node("builtin:h100-mig-mixed")
DEFAULT = load_mig_parted("builtin:mig-parted-default")


def test_apply_gives_new_instances_whose_uuids_never_reuse_an_old_profiles_id() -> None:
    new = SimulatedMigBackend().apply(NODE, plan_transition(NODE, DEFAULT.config("all-1g.10gb")))
    assert [len(g.mig_instances) for g in new.gpus] == [7, 7]
    old = {m.uuid: m.profile for m in NODE.gpus[0].mig_instances}
    for m in new.gpus[0].mig_instances:
        assert old.get(m.uuid, "1g.10gb") == "1g.10gb"  # an ID never moves to another profile
    uuids = [m.uuid for g in new.gpus for m in g.mig_instances]
    assert len(set(uuids)) == 14 and all(u.startswith("MIG-") for u in uuids)
    again = SimulatedMigBackend().apply(NODE, plan_transition(NODE, DEFAULT.config("all-1g.10gb")))
    assert again == new  # the same layout gives the same device IDs


def test_the_state_file_restores_the_applied_layout_after_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state" / "mig.json"
    applied = SimulatedMigBackend(state).apply(NODE, plan_transition(NODE, DEFAULT.config("all-1g.10gb")))
    assert json.loads(state.read_text())["config"] == "all-1g.10gb"
    assert SimulatedMigBackend(state).restore(load_node("builtin:h100-mig-mixed")) == applied


def test_no_state_file_serves_the_spec_layout(tmp_path: Path) -> None:
    assert SimulatedMigBackend(tmp_path / "absent.json").restore(NODE) == NODE
    assert SimulatedMigBackend(None).restore(NODE) == NODE


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        '{"version": 9, "gpus": {}}',
        '{"version": 1, "gpus": {"GPU-other": {"migEnabled": false, "instances": []}}}',
    ],
)
def test_a_state_file_that_does_not_fit_is_ignored_with_a_warning(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "mig.json"
    state.write_text(content)
    with caplog.at_level(logging.WARNING):
        assert SimulatedMigBackend(state).restore(NODE) == NODE
    assert "simulated MIG state file ignored" in caplog.text


def test_a_state_file_with_a_layout_breaking_the_rules_is_ignored(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    SimulatedMigBackend(state).apply(NODE, plan_transition(NODE, DEFAULT.config("all-1g.10gb")))
    doc = json.loads(state.read_text())
    gpu0 = next(iter(doc["gpus"].values()))
    gpu0["instances"].append({"profile": "3g.40gb", "startSlot": 4, "uuid": "MIG-extra"})
    state.write_text(json.dumps(doc))
    assert SimulatedMigBackend(state).restore(NODE) == NODE


def test_an_unwritable_state_file_fails_the_apply_and_changes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    backend = SimulatedMigBackend(blocker / "mig.json")  # its directory is a file
    with pytest.raises(MigApplyError, match="cannot write the simulated MIG state file"):
        backend.apply(NODE, plan_transition(NODE, DEFAULT.config("all-1g.10gb")))

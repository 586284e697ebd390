"""A CDI spec checked against the CDI specification's documented fields (reference dra-protocol.md §6):
what a runtime's CDI loader would refuse (unknown fields, a field newer than the declared version, a
bad kind or device name, a device without edits, relative paths) fails here too."""

from __future__ import annotations

import re
from typing import Any

VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
_KIND = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?/[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_EDITS = {"env", "deviceNodes", "mounts", "hooks", "intelRdt", "additionalGids", "netDevices"}
_NODE = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
_MOUNT = {"hostPath", "containerPath", "options", "type"}
_HOOK = {"hookName", "path", "args", "env", "timeout"}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def _edits(where: str, edits: Any, version: tuple[int, ...]) -> None:
    assert isinstance(edits, dict), where
    assert set(edits) <= _EDITS, f"{where}: unknown fields {set(edits) - _EDITS}"
    for env in edits.get("env", []):
        assert isinstance(env, str) and "=" in env and not env.startswith("="), f"{where}: env {env!r}"
    for node in edits.get("deviceNodes", []):
        assert set(node) <= _NODE, f"{where}: device node fields {set(node) - _NODE}"
        assert node["path"].startswith("/"), f"{where}: {node}"
        if "hostPath" in node:
            assert version >= (0, 5, 0), f"{where}: hostPath needs cdiVersion 0.5.0"
            assert node["hostPath"].startswith("/"), f"{where}: {node}"
        if "permissions" in node:
            assert set(node["permissions"]) <= set("rwm"), f"{where}: {node}"
    for mount in edits.get("mounts", []):
        assert set(mount) <= _MOUNT, f"{where}: mount fields {set(mount) - _MOUNT}"
        assert mount["hostPath"].startswith("/") and mount["containerPath"].startswith("/"), (
            f"{where}: {mount}"
        )
        assert all(isinstance(o, str) for o in mount.get("options", [])), f"{where}: {mount}"
    for hook in edits.get("hooks", []):
        assert set(hook) <= _HOOK and hook["path"].startswith("/"), f"{where}: {hook}"


def check_cdi_spec(spec: Any) -> None:
    """Assert that ``spec`` (parsed JSON) is a CDI spec a runtime would load."""
    assert isinstance(spec, dict)
    assert set(spec) <= {"cdiVersion", "kind", "devices", "containerEdits", "annotations"}, set(spec)
    assert spec["cdiVersion"] in VERSIONS, spec["cdiVersion"]
    version = _version(spec["cdiVersion"])
    assert _KIND.fullmatch(spec["kind"]) and spec["kind"].count("/") == 1, spec["kind"]
    devices = spec["devices"]
    assert isinstance(devices, list) and devices, "a spec declares at least one device"
    names = [d["name"] for d in devices]
    assert len(set(names)) == len(names), "device names are unique"
    for device in devices:
        assert set(device) <= {"name", "containerEdits", "annotations"}, set(device)
        assert _NAME.fullmatch(device["name"]), device["name"]
        edits = device["containerEdits"]
        _edits(f"device {device['name']}", edits, version)
        assert any(edits.get(k) for k in _EDITS), f"device {device['name']} has no edits"
    if "containerEdits" in spec:
        _edits("containerEdits", spec["containerEdits"], version)

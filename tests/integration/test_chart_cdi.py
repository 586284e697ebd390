"""The chart with a CDI device-list strategy: the agent gets the host's CDI directory (where it writes
the spec of its devices) and, on real GPUs, the host's driver root read-only at /driver-root with the
config saying so; without CDI, neither is mounted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubegpu.deviceplugin.config import load_config
from tests.integration.chart import by_kind, helm, render

__all__ = ["helm"]  # the fixture, re-used


def _agent(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = by_kind(docs, "DaemonSet")["kubegpu"]["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "agent")
    return pod, container


def _config(docs: list[dict[str, Any]], tmp_path: Path) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(by_kind(docs, "ConfigMap")["kubegpu-config"]["data"]["config.yaml"])
    return load_config(path)


def test_cdi_mounts_the_spec_directory_and_the_driver_root(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "config.deviceListStrategy=cdi-cri")
    pod, container = _agent(docs)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert volumes["cdi-specs"]["hostPath"]["path"] == "/var/run/cdi"
    assert mounts["cdi-specs"]["mountPath"] == "/var/run/cdi" and not mounts["cdi-specs"].get("readOnly")
    assert volumes["driver-root"]["hostPath"]["path"] == "/"
    assert mounts["driver-root"] == {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBEGPU_CDI_SPEC_DIR"] == "/var/run/cdi"
    config = _config(docs, tmp_path)
    assert str(config.nvidia_driver_root) == "/"
    assert str(config.container_driver_root) == "/driver-root"


def test_without_cdi_nothing_of_the_host_is_mounted_for_it(helm: Path, tmp_path: Path) -> None:
    docs = render(helm)
    pod, container = _agent(docs)
    assert not {"cdi-specs", "driver-root"} & {v["name"] for v in pod["volumes"]}
    assert "KUBEGPU_CDI_SPEC_DIR" not in {e["name"] for e in container["env"]}


def test_simulated_cdi_gets_the_spec_directory_but_no_driver_root(helm: Path) -> None:
    docs = render(helm, "config.deviceListStrategy=cdi-cri", "simulated.enabled=true")
    pod, _ = _agent(docs)
    names = {v["name"] for v in pod["volumes"]}
    assert "cdi-specs" in names and "driver-root" not in names


def test_a_driver_root_elsewhere_is_what_is_mounted(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "config.deviceListStrategy=cdi-cri", "cdi.driverRoot=/run/nvidia/driver")
    pod, _ = _agent(docs)
    assert {v["name"]: v for v in pod["volumes"]}["driver-root"]["hostPath"]["path"] == "/run/nvidia/driver"
    assert str(_config(docs, tmp_path).nvidia_driver_root) == "/run/nvidia/driver"

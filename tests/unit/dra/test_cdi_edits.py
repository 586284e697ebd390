"""The DRA driver's per-claim CDI specs carry what the agent's spec carries on real GPUs: the driver's
files under the spec's own edits, and a MIG device's nvidia-caps nodes beside its GPU's node."""

from __future__ import annotations

import json
from pathlib import Path

from kubegpu.dra.checkpoint import CdiStore, Checkpoint
from kubegpu.dra.driver import DraDriver
from kubegpu.dra.service import driver_edits
from kubegpu.model.dra import CDI_KIND, dra_devices
from kubegpu.sources.spec import load_node
from tests.cdi_shape import check_cdi_spec
from tests.unit.dra.test_driver import NODE, Claims, result

MIG = load_node("builtin:h100-mig-mixed")
LIB = "/usr/lib/x86_64-linux-gnu"


def _root(tmp_path: Path) -> tuple[Path, Path]:
    root, proc = tmp_path / "root", tmp_path / "proc"
    for path in ("/dev/nvidiactl", f"{LIB}/libcuda.so.560.35.03", "/usr/bin/nvidia-smi"):
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text("")
    (root / LIB.lstrip("/") / "libcuda.so.1").symlink_to("libcuda.so.560.35.03")
    (proc / "driver/nvidia-caps").mkdir(parents=True)
    (proc / "driver/nvidia-caps/mig-minors").write_text("gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n")
    return root, proc


def test_a_claims_spec_carries_the_driver_files_and_a_mig_devices_caps_nodes(tmp_path: Path) -> None:
    root, proc = _root(tmp_path)
    devices = dra_devices(MIG)
    caps, common = driver_edits(MIG, devices, driver_root=str(root), proc_root=proc)
    [mig] = [d for d in devices if d.uuid == MIG.gpus[0].mig_instances[1].uuid]  # GPU instance 1
    assert caps[mig.name] == ("/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13")
    assert "gpu-1" not in caps
    claims = Claims()
    driver = DraDriver(
        node_name=NODE,
        devices=devices,
        claims=claims,
        checkpoint=Checkpoint(tmp_path / "plugin" / "checkpoint.json"),
        cdi=CdiStore(tmp_path / "cdi", kind=CDI_KIND),
        gpu_nodes=True,
        device_nodes=caps,
        common_edits=common,
    )
    ref = claims.add("c", "uid-1", [result(mig.name)])
    assert driver.prepare([ref])["uid-1"].error == ""
    spec = json.loads((tmp_path / "cdi" / "kubegpu.io-gpu_uid-1.json").read_text())
    check_cdi_spec(spec)
    request = next(d for d in spec["devices"] if "deviceNodes" in d["containerEdits"])
    assert [n["path"] for n in request["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap12",
        "/dev/nvidia-caps/nvidia-cap13",
    ]
    edits = spec["containerEdits"]
    assert edits["deviceNodes"] == [{"path": "/dev/nvidiactl", "hostPath": f"{root}/dev/nvidiactl"}]
    mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
    assert mounts == {
        f"{LIB}/libcuda.so.560.35.03": f"{root}{LIB}/libcuda.so.560.35.03",
        f"{LIB}/libcuda.so.1": f"{root}{LIB}/libcuda.so.560.35.03",
        "/usr/bin/nvidia-smi": f"{root}/usr/bin/nvidia-smi",
    }

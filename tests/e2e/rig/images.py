"""Container images for the rig, written with the Python standard library only.

Why: the rig has no Docker engine and no registry; containerd imports a docker-archive tarball
(`ctr -n k8s.io images import`), which is a tar of one layer tar, a config JSON and a manifest.json.
Both images contain only the statically linked busybox from Debian's busybox-static package:
- the pause image (pod sandbox) sleeps forever; containerd stops sandboxes with SIGKILL;
- the test image gives pods `sh`, `env`, `sleep`, `cat` and friends.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import time
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
PAUSE_IMAGE = "kubegpu.local/pause:rig"
TEST_IMAGE = "kubegpu.local/busybox:rig"
_APPLETS_FALLBACK = ("sh", "env", "sleep", "cat", "ls", "echo", "true", "grep", "sort", "tr", "wc")


def _applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True).stdout
    names = [n.strip() for n in out.splitlines() if n.strip() and "/" not in n]
    return names or list(_APPLETS_FALLBACK)


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mtime: int, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    tar.addfile(info)


def _add_symlink(tar: tarfile.TarFile, name: str, target: str, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    info.mode = 0o777
    info.mtime = mtime
    info.uid = info.gid = 0
    tar.addfile(info)


def busybox_layer(busybox: Path = BUSYBOX) -> bytes:
    """An uncompressed layer tar: /bin/busybox, an applet symlink per applet, /etc/passwd, /tmp."""
    mtime = int(time.time())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "root", "var", "var/run"):
            _add_dir(tar, d, mtime, 0o1777 if d == "tmp" else 0o755)
        _add_file(tar, "bin/busybox", busybox.read_bytes(), 0o755, mtime)
        for applet in _applets(busybox):
            if applet != "busybox":
                _add_symlink(tar, f"bin/{applet}", "busybox", mtime)
        _add_file(
            tar,
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
            0o644,
            mtime,
        )
        _add_file(tar, "etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644, mtime)
    return buf.getvalue()


def docker_archive(*, tag: str, layer: bytes, entrypoint: list[str] | None, cmd: list[str]) -> bytes:
    """A docker-archive (`docker save` format) holding one image with one layer."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": {
            "Entrypoint": entrypoint,
            "Cmd": cmd,
            "Env": ["PATH=/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "kubegpu rig images.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}]
    mtime = int(time.time())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_dir(tar, layer_name.split("/")[0], mtime)
        _add_file(tar, layer_name, layer, 0o644, mtime)
        _add_file(tar, config_name, config_bytes, 0o644, mtime)
        _add_file(tar, "manifest.json", json.dumps(manifest).encode(), 0o644, mtime)
    return buf.getvalue()


def write_images(out_dir: Path, busybox: Path = BUSYBOX) -> dict[str, Path]:
    """Write the pause and test images as docker-archives; returns {tag: path}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    layer = busybox_layer(busybox)
    images = {
        PAUSE_IMAGE: docker_archive(
            tag=PAUSE_IMAGE, layer=layer, entrypoint=["/bin/sleep"], cmd=["2147483647"]
        ),
        TEST_IMAGE: docker_archive(tag=TEST_IMAGE, layer=layer, entrypoint=None, cmd=["/bin/sh"]),
    }
    paths = {}
    for tag, data in images.items():
        path = out_dir / (tag.split("/")[-1].replace(":", "-") + ".tar")
        path.write_bytes(data)
        paths[tag] = path
    return paths

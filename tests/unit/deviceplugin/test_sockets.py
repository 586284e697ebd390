"""Socket names always fit the 107-byte unix limit; directories and sockets get their modes whatever
the umask."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubegpu.deviceplugin.sockets import (
    SUN_PATH_MAX,
    bound_with_mode,
    make_dirs,
    socket_name,
    socket_room,
    too_long,
)

KUBELET_DIR = Path("/var/lib/kubelet/device-plugins")
_NAME = st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")


@given(short=_NAME, pid=st.integers(1, 4_194_304), serial=st.integers(0, 999_999))
def test_every_valid_resource_name_fits_under_kubelets_directory(short: str, pid: int, serial: int) -> None:
    name = socket_name(f"example.com/{short}", pid=pid, serial=serial, room=socket_room(KUBELET_DIR))
    assert len(os.fsencode(KUBELET_DIR / name)) <= SUN_PATH_MAX
    assert name.startswith("kubegpu-") and name.endswith(f"-{pid}-{serial}.sock")
    assert "/" not in name


def test_names_are_readable_stable_and_differ_per_resource() -> None:
    gpu = socket_name("nvidia.com/gpu", pid=7, serial=0)
    assert gpu.startswith("kubegpu-gpu-") and gpu == socket_name("nvidia.com/gpu", pid=7, serial=0)
    assert socket_name("example.com/gpu", pid=7, serial=0) != gpu  # same short name, other hash
    long_a = socket_name("example.com/" + "a" * 62 + "1", pid=7, serial=0)
    long_b = socket_name("example.com/" + "a" * 62 + "2", pid=7, serial=0)
    assert long_a != long_b and len(long_a) < 60


def test_a_directory_with_no_room_is_named_with_the_limit(tmp_path: Path) -> None:
    assert too_long(KUBELET_DIR) is None
    deep = Path("/" + "d" * 90)
    message = too_long(deep, what="--device-plugin-dir")
    assert message is not None and str(deep) in message and "107" in message
    # the longest accepted directory still fits the longest name
    for length in range(40, 90):
        directory = Path("/" + "e" * (length - 1))
        if too_long(directory) is None:
            name = socket_name(
                "x.com/" + "y" * 63, pid=4_194_304, serial=999_999, room=socket_room(directory)
            )
            assert len(os.fsencode(directory / name)) <= SUN_PATH_MAX


def test_make_dirs_creates_0750_under_umask_000_and_leaves_existing_ones(tmp_path: Path) -> None:
    tmp_path.chmod(0o711)
    target = tmp_path / "a" / "b"
    old = os.umask(0)
    try:
        make_dirs(target)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o750
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o711
    make_dirs(target)  # idempotent
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        make_dirs(tmp_path / "file")


def test_a_socket_bound_under_umask_000_is_0600_and_the_umask_is_restored(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    old = os.umask(0)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            with bound_with_mode(path):
                sock.bind(str(path))
                assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0  # never wider, not even briefly
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert os.umask(0) == 0
    finally:
        os.umask(old)

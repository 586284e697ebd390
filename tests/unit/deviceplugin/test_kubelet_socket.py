"""kubelet.sock identity: a recreated socket is told apart even when ext4 reuses its inode number."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kubegpu.deviceplugin.kubelet_socket import socket_identity


def _fake_stat(ino: int, ctime_ns: int, mode: int = stat.S_IFSOCK | 0o755) -> os.stat_result:
    # st_mode, st_ino, st_dev, st_nlink, st_uid, st_gid, st_size, then atime/mtime/ctime (int, float, ns)
    fields = [mode, ino, 42, 1, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0, ctime_ns]
    return os.stat_result(fields)


def test_a_recreated_socket_with_the_same_inode_number_has_a_different_identity() -> None:
    path = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
    old = socket_identity(path, stat_fn=lambda p: _fake_stat(ino=131, ctime_ns=1_000))
    same = socket_identity(path, stat_fn=lambda p: _fake_stat(ino=131, ctime_ns=1_000))
    new = socket_identity(path, stat_fn=lambda p: _fake_stat(ino=131, ctime_ns=2_000))
    assert old is not None and old == same
    assert new is not None and new != old


def test_no_socket_has_no_identity(tmp_path: Path) -> None:
    assert socket_identity(None) is None
    assert socket_identity(tmp_path / "kubelet.sock") is None
    (tmp_path / "kubelet.sock").write_text("not a socket")
    assert socket_identity(tmp_path / "kubelet.sock") is None

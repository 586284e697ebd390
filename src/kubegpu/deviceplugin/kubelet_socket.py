"""Is ``kubelet.sock`` still the socket the agent registered with? (kubelet-restart detection)

A restarted kubelet recreates ``kubelet.sock``. Its inode number alone cannot tell: ext4 hands a freed
inode to the next file created in the directory, so the new socket often has the old number. The
identity used here is (device, inode, ctime in nanoseconds): binding a new socket sets a new ctime even
when the inode number is reused, and nothing the kubelet does to a live socket changes it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SocketIdentity", "socket_identity"]


@dataclass(frozen=True, kw_only=True)
class SocketIdentity:
    """One incarnation of a socket file; a recreated socket never compares equal to the old one."""

    device: int
    inode: int
    ctime_ns: int


def socket_identity(
    path: Path | None, *, stat_fn: Callable[[Path], os.stat_result] = os.stat
) -> SocketIdentity | None:
    """The identity of the socket at ``path``; ``None`` if there is none (absent, or not a socket)."""
    if path is None:
        return None
    try:
        st = stat_fn(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    return SocketIdentity(device=st.st_dev, inode=st.st_ino, ctime_ns=st.st_ctime_ns)

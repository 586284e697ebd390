"""The plugin's socket files: names that fit the unix-socket limit, and modes whatever the umask.

A unix socket path holds at most 107 bytes (``sun_path`` is 108 with its NUL). A valid resource name
can be 63 characters after its ``/``, so a name built from it overflows under
``/var/lib/kubelet/device-plugins/``: ``socket_name`` keeps a readable part of the resource name only
as far as it fits, and always adds a stable 8-hex-digit hash of the full name, then the pid and a
serial (a fresh name per server start, as the protocol reference advises). A directory too long for
even the shortest name is refused up front, naming the directory and the limit.

Modes: a socket is created under a tightened umask (so it is never reachable with wider permissions,
not even for an instant) and then set to 0600; directories kubegpu creates are 0750 (kubelet's own
mode for this directory). An existing directory, usually kubelet's, is left as it is.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "DIR_MODE",
    "SOCKET_MODE",
    "SUN_PATH_MAX",
    "bound_with_mode",
    "make_dirs",
    "socket_name",
    "socket_room",
    "too_long",
]

SUN_PATH_MAX = 107  # bytes of a unix socket path, without the terminating NUL
SOCKET_MODE = 0o600
DIR_MODE = 0o750
READABLE_MAX = 24  # at most this much of the resource name is kept in the file name
_PREFIX = "kubegpu"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_umask_lock = threading.Lock()


def socket_room(directory: Path) -> int:
    """How many bytes a socket file name may have inside ``directory``."""
    return SUN_PATH_MAX - len(os.fsencode(directory.absolute())) - 1


def socket_name(resource: str, *, pid: int, serial: int, room: int = SUN_PATH_MAX) -> str:
    """``nvidia.com/mig-1g.10gb`` -> ``kubegpu-mig-1g.10gb-<hash8>-<pid>-<serial>.sock``, within ``room``.

    The readable part shrinks (to nothing) before the hash, pid and serial do; the caller checks
    the result fits (``too_long``), since a directory can leave no room at all.
    """
    digest = hashlib.sha256(resource.encode("utf-8")).hexdigest()[:8]
    tail = f"-{digest}-{pid}-{serial}.sock"
    readable = _UNSAFE.sub("_", resource.split("/", 1)[-1])
    keep = max(0, min(READABLE_MAX, room - len(_PREFIX) - 1 - len(tail)))
    return f"{_PREFIX}-{readable[:keep]}{tail}" if keep else f"{_PREFIX}{tail}"


def too_long(directory: Path, *, what: str = "the device plugin directory") -> str | None:
    """Why no socket fits in ``directory`` (a message naming it and the limit), or ``None``."""
    shortest = socket_name("x", pid=4_194_304, serial=999_999, room=0)  # pid_max, a long-lived agent
    room = socket_room(directory)
    if room >= len(shortest):
        return None
    length = len(os.fsencode(directory.absolute()))
    return (
        f"{what} {directory} is too long for unix sockets: its path is {length} bytes and a socket "
        f"name needs {len(shortest) + 1} more, but a socket path holds at most {SUN_PATH_MAX} bytes; "
        f"use a directory of at most {SUN_PATH_MAX - len(shortest) - 1} bytes "
        "(kubelet's /var/lib/kubelet/device-plugins is 31)"
    )


def make_dirs(directory: Path, mode: int = DIR_MODE) -> None:
    """Create ``directory`` and missing parents with ``mode`` whatever the umask; existing ones stay."""
    missing: list[Path] = []
    probe = directory.absolute()
    while not probe.exists() and not probe.is_symlink():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            if path.is_dir():
                continue  # created meanwhile by someone else: theirs, left as it is
            raise
        os.chmod(path, mode)  # mkdir's mode is filtered by the umask
    if not directory.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))


@contextmanager
def bound_with_mode(path: Path, mode: int = SOCKET_MODE) -> Iterator[None]:
    """Bind the socket at ``path`` inside this block; it is created with at most ``mode``, then set to it.

    The umask is process-wide, so it is only ever tightened, under a lock, for the bind itself: a
    file another thread creates meanwhile gets fewer permissions, never more.
    """
    with _umask_lock:
        old = os.umask(0o777)
        os.umask(old | (0o777 & ~mode))
        try:
            yield
        finally:
            os.umask(old)
    if path.exists():
        os.chmod(path, mode)

"""Files replaced whole or not at all: the one way kubegpu writes state that must survive a crash.

``write_atomically`` writes a temporary file beside the target, fsyncs it, renames it over the target
and fsyncs the directory, so after a crash the path holds the old content or the new, never half of
either. Used by the DRA driver's checkpoint and CDI specs and by the agent's ledger of GPU shares.
``writable_folder_error`` asks, before minutes of work, whether results could be written somewhere.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["writable_folder_error", "write_atomically"]


def write_atomically(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically and durably; parent folders are created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def writable_folder_error(folder: Path) -> str | None:
    """Why files could not be created in ``folder`` (to be created with its parents), or None.

    Probes the folder, or the nearest folder above it that exists, with a temporary file that is
    removed at once: nothing is left behind either way.
    """
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        return f"cannot write in {probe}: {exc.strerror or exc}"
    return None

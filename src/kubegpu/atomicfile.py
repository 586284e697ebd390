"""Files replaced whole or not at all: the one way kubegpu writes state that must survive a crash.

``write_atomically`` writes a temporary file beside the target, fsyncs it, renames it over the target
and fsyncs the directory, so after a crash the path holds the old content or the new, never half of
either. Used by the DRA driver's checkpoint and CDI specs and by the agent's ledger of GPU shares.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomically"]


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

"""A stand-in ``nvidia-cuda-mps-control`` (``control.py``) for the MPS tests, and helpers to use it.

``install(directory)`` writes an executable ``nvidia-cuda-mps-control`` there that runs ``control.py``
with this interpreter; ``Record`` reads what the stand-in daemons did (starts, commands with their
environment, exits) from the JSON-lines file named by ``KUBEGPU_MPS_STANDIN_RECORD``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CONTROL", "Record", "install"]

CONTROL = Path(__file__).with_name("control.py")


def install(directory: Path) -> Path:
    """An executable ``nvidia-cuda-mps-control`` in ``directory`` that runs the stand-in."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvidia-cuda-mps-control"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{CONTROL}" "$@"\n')
    os.chmod(path, 0o755)
    return path


@dataclass(frozen=True)
class Record:
    """The stand-in's record file."""

    path: Path

    def entries(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def commands(self, pipe_dir: str | None = None) -> list[str]:
        """The commands the daemons accepted, in order (of the daemon of ``pipe_dir`` only, if given)."""
        return [
            e["command"]
            for e in self.entries()
            if e["event"] == "command"
            and e["ok"]
            and (pipe_dir is None or e["env"].get("CUDA_MPS_PIPE_DIRECTORY") == pipe_dir)
        ]

    def events(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.entries() if e["event"] == event]

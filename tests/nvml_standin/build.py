"""Compile ``nvml_standin.c`` into ``libnvidia-ml.so.1`` with the machine's C compiler, cached by source.

The library lands in ``build/nvml-standin/<sha256 of the source>/`` (``KUBEGPU_NVML_STANDIN_CACHE``
moves it); a cached build is reused, a changed source builds anew. Building is atomic (a temporary
name, then a rename), so two test sessions at once never load a half-written library.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "nvml_standin.c"
LIBRARY = "libnvidia-ml.so.1"  # the name pynvml dlopens on Linux


class StandinBuildError(RuntimeError):
    """The stand-in could not be built: no compiler, or the compiler refused the source."""


@dataclass(frozen=True)
class Standin:
    """A built stand-in: the directory to put first on LD_LIBRARY_PATH, and the library itself."""

    directory: Path
    library: Path

    def env(self, machine: Path, **extra: str) -> dict[str, str]:
        """Variables that make a child process's pynvml load this library and play ``machine``."""
        path = os.environ.get("LD_LIBRARY_PATH", "")
        return {
            "LD_LIBRARY_PATH": f"{self.directory}:{path}" if path else str(self.directory),
            "KUBEGPU_NVML_MACHINE": str(machine),
            **extra,
        }


def cache_root() -> Path:
    env = os.environ.get("KUBEGPU_NVML_STANDIN_CACHE")
    return Path(env) if env else HERE.parents[1] / "build" / "nvml-standin"


def compiler() -> str:
    """The C compiler: ``$CC``, else ``cc``/``gcc``/``clang`` on PATH."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise StandinBuildError(
        "no C compiler (set CC, or install one: apt-get install gcc) to build the NVML stand-in"
    )


def build() -> Standin:
    """The stand-in library for the current source, built now if it is not cached."""
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    directory = cache_root() / digest
    library = directory / LIBRARY
    if library.is_file():
        return Standin(directory=directory, library=library)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{LIBRARY}.{os.getpid()}.tmp"
    argv = [
        compiler(), "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
        f"-Wl,-soname,{LIBRARY}", "-o", str(tmp), str(SOURCE), "-lpthread",
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise StandinBuildError(f"{' '.join(argv)} failed:\n{proc.stderr.strip()}")
    tmp.replace(library)
    return Standin(directory=directory, library=library)

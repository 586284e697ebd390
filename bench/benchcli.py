"""What the benchmark scripts' command lines share, so that bad input ends in one line, never a traceback.

``run_main(main)`` is every script's entry point: a ``KubegpuError`` (a bad trace, spec or flag value found
past argparse) becomes ``<script>: error: <message>`` on stderr and the error's exit code (2 for bad
input). The argparse types refuse a value before any work starts: ``count`` (an integer >= 1),
``counts`` (``2,8``), ``seed`` (>= 0), ``seeds`` (``42``, ``42-51`` or ``42,44``), ``tie_modes``,
``positive`` (a finite number > 0) and ``inflate`` (as ``kubegpu sim``). ``check_out_file``
checks an output file the user named before the long work, as ``kubegpu.sim.plot.check_plot_path``
does for figures.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from kubegpu.errors import InputError, KubegpuError

if TYPE_CHECKING:
    from kubegpu.sim.replay import TieMode


def run_main(main: Callable[[], int | None]) -> NoReturn:
    """Exit with what ``main()`` returns; a ``KubegpuError`` becomes one line on stderr and its exit code."""
    try:
        code = main()
    except KubegpuError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    sys.exit(code or 0)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def count(text: str) -> int:
    """argparse type: an integer of at least 1 (runs, rounds, workers, claims...)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seed(text: str) -> int:
    """argparse type: a random seed, an integer of at least 0."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is an integer of at least 0, got {value}")
    return value


def counts(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated integers of at least 1 (``2,8``)."""
    return tuple(count(part.strip()) for part in text.split(","))


def seeds(text: str) -> tuple[int, ...]:
    """argparse type: ``42``, ``42-51`` or ``42,44`` (``kubegpu.sim.run.parse_seeds``)."""
    from kubegpu.sim.run import parse_seeds

    try:
        return parse_seeds(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--seeds {text!r}: ")) from None


def seeds_or_none(text: str) -> tuple[int, ...]:
    """argparse type: as ``seeds``, or ``''`` for none."""
    return seeds(text) if text.strip() else ()


def tie_modes(text: str) -> tuple[TieMode, ...]:
    """argparse type: tie modes, comma-separated (``node-order,random``)."""
    from kubegpu.sim.replay import TieMode

    names = [part.strip() for part in text.split(",")]
    allowed = [mode.value for mode in TieMode]
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown tie mode {unknown[0]!r}; choose from {', '.join(allowed)}")
    return tuple(TieMode(name) for name in names)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive(text: str) -> float:
    """argparse type: a finite number above 0 (seconds, steps)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
    return value


def inflate(text: str) -> float:
    """argparse type: ``--inflate`` as ``kubegpu sim`` takes it (``kubegpu.sim.workload.check_inflate``)."""
    from kubegpu.sim.workload import check_inflate

    value = _number(text)
    try:
        check_inflate(value)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--inflate ")) from None
    return value


def check_out_file(flag: str, path: Path) -> None:
    """``InputError`` naming ``flag`` if ``path`` cannot be written as a file: a folder, or a parent
    folder that cannot be created. Creates the parent folder, writes nothing else."""
    if path.is_dir():
        raise InputError(f"{flag} {path}: is a folder; name the file to write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(f"{flag} {path}: {path.parent} is a file, not a folder") from None
    except OSError as exc:
        raise InputError(f"{flag} {path}: cannot create folder {path.parent}: {exc.strerror or exc}") from exc

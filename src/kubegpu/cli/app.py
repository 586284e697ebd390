"""The ``kubegpu`` command: one typer app, each command group registered from its own module.

``main`` is the only place where a ``KubegpuError`` becomes a one-line message and an exit code;
commands never print tracebacks. Usage errors (unknown flags, bad values) exit 2.

Start-up is part of every command's latency (``kubegpu sim`` of one seed is about a second), so
``main`` imports and registers only the module of the command it was asked for; ``--help`` and
unknown commands get the whole app. ``app`` (the whole app, for tests) is built on first access.
The plain form of ``kubegpu sim`` does not import typer at all (``kubegpu.cli.simrun.fast_main``):
typer and what it imports are about half of that command's start-up.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from typing import TYPE_CHECKING, Any

from kubegpu.errors import KubegpuError

if TYPE_CHECKING:
    import typer

# command name -> the kubegpu.cli module that registers it; the order here is the order in --help
COMMAND_MODULES = {
    "demo": "demo",
    "topo": "topo",
    "labels": "labels",
    "alloc": "alloc",
    "mig": "mig",
    "plan": "plan",
    "sim": "sim",
    "doctor": "doctor",
    "agent": "agent",
    "dra": "dra",
    "extender": "extender",
}


def _new_app() -> typer.Typer:
    import typer

    new = typer.Typer(
        name="kubegpu",
        help="Get NVIDIA GPUs into Kubernetes pods, correctly and efficiently, and say what is broken.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        rich_markup_mode="rich",
        epilog="Examples: kubegpu demo · kubegpu topo builtin:seed-8gpu · kubegpu doctor · "
        "kubegpu COMMAND --help",
    )

    # a root callback keeps the app a group of commands even when it holds ``version`` alone (typer
    # runs a one-command app as that command, so ``kubegpu version`` was "an unexpected extra argument")
    @new.callback()
    def root() -> None:
        pass

    @new.command("version", epilog="Example: kubegpu version")
    def version() -> None:
        """Print the kubegpu version."""
        from kubegpu import __version__

        print(__version__)

    return new


def build_app(only: str | None = None) -> typer.Typer:
    """The app with every command, or with ``version`` and the command ``only`` alone."""
    new = _new_app()
    for command, module in COMMAND_MODULES.items():
        if only is None or command == only:
            importlib.import_module(f"kubegpu.cli.{module}").register(new)
    return new


_FULL: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    global _FULL  # noqa: PLW0603 - the whole app, built once on first use
    if name == "app":
        if _FULL is None:
            _FULL = build_app()
        return _FULL
    raise AttributeError(name)


def _app_for(argv: list[str]) -> typer.Typer:
    first = argv[0] if argv else ""
    if first in COMMAND_MODULES:
        return build_app(first)
    if first == "version":
        return _new_app()
    return build_app()


# typer's boxed help cuts flag names, env vars and defaults to "…" below about this many columns;
# click's plain help wraps them instead
RICH_HELP_MIN_COLUMNS = 100


def _plain_help_when_narrow() -> None:
    """Below ``RICH_HELP_MIN_COLUMNS`` columns, help and usage errors are click's plain text (typer's
    ``TYPER_USE_RICH``, read when typer is first imported; a value the user set is kept)."""
    if "TYPER_USE_RICH" not in os.environ and shutil.get_terminal_size().columns < RICH_HELP_MIN_COLUMNS:
        os.environ["TYPER_USE_RICH"] = "0"


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; turn kubegpu errors into one line on stderr and a non-zero exit code.

    typer (click) itself reports usage errors (exit 2); everything kubegpu raises on purpose is a
    ``KubegpuError`` and is reported here as one line.
    """
    args = sys.argv[1:] if argv is None else argv
    _plain_help_when_narrow()
    try:
        if args[:1] == ["sim"]:
            from kubegpu.cli.simrun import fast_main

            if fast_main(args[1:]):
                return
        _app_for(args)(args=args, prog_name="kubegpu")
    except KubegpuError as exc:
        print(f"kubegpu: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("kubegpu: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)

"""The ``kubegpu`` command: one typer app, each command group registered from its own module.

``main`` is the only place where a ``KubegpuError`` becomes a one-line message and an exit code;
commands never print tracebacks. Usage errors (unknown flags, bad values) exit 2.
"""

from __future__ import annotations

import sys

import typer

from kubegpu.cli import agent, alloc, demo, doctor, labels, mig, plan, sim, topo
from kubegpu.errors import KubegpuError

app = typer.Typer(
    name="kubegpu",
    help="Get NVIDIA GPUs into Kubernetes pods, correctly and efficiently, and say what is broken.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
    epilog="Examples: kubegpu demo · kubegpu topo builtin:seed-8gpu · kubegpu doctor · "
    "kubegpu COMMAND --help",
)


@app.command("version", epilog="Example: kubegpu version")
def version() -> None:
    """Print the kubegpu version."""
    from kubegpu import __version__

    typer.echo(__version__)


def _register_all() -> None:
    # Each module owns its commands; the order here is the order in --help.
    for module in (demo, topo, labels, alloc, mig, plan, sim, doctor, agent):
        module.register(app)


_register_all()


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; turn kubegpu errors into one line on stderr and a non-zero exit code.

    typer (click) itself reports usage errors (exit 2); everything kubegpu raises on purpose is a
    ``KubegpuError`` and is reported here as one line.
    """
    try:
        app(args=argv, prog_name="kubegpu")
    except KubegpuError as exc:
        print(f"kubegpu: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("kubegpu: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)

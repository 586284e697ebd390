"""`kubegpu mig`: the MIG profile catalogue and the placement check for a mixed layout.

``profiles MODEL`` lists what one GPU model can be cut into; ``validate MODEL LAYOUT`` says whether a
layout (``3g.40gb,2g.20gb,1g.10gb``, optionally pinned ``3g.40gb@4``) can be placed, and where each
instance starts (exit 0), or which rule it breaks (exit 1). Unknown models or profiles exit 2.
``validate FILE`` checks a mig-parted file instead (``kubegpu.cli.migfile``).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

from kubegpu.errors import InputError, KubegpuError, MigLayoutError
from kubegpu.model import mig

mig_app = typer.Typer(
    name="mig",
    help="MIG profiles of a GPU model and placement checks for mixed layouts.",
    epilog="Examples: kubegpu mig profiles H100-80GB · "
    "kubegpu mig validate H100-80GB 3g.40gb,2g.20gb,1g.10gb",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

ModelArg = Annotated[str, typer.Argument(metavar="MODEL", help="GPU model, e.g. H100-80GB, A100-40GB.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]


def _console() -> Console:
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 120, highlight=False)


def _slots(start: int, memory_slices: int) -> str:
    end = start + memory_slices - 1
    return str(start) if end == start else f"{start}-{end}"


@mig_app.command(
    "profiles",
    epilog="Examples:\n\n  kubegpu mig profiles H100-80GB\n\n  kubegpu mig profiles A100-40GB --json",
)
def profiles_cmd(model: ModelArg, as_json: JsonOpt = False) -> None:
    """List MIG profiles: slices, memory, SMs, max count per GPU and valid start slots."""
    rows = mig.profiles(model)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "model": rows[0].model,
                    "profiles": [
                        {
                            "name": p.name,
                            "resource": f"nvidia.com/mig-{p.resource_suffix}",
                            "gi_profile_id": p.gi_profile_id,
                            "compute_slices": p.compute_slices,
                            "memory_slices": p.memory_slices,
                            "memory_gb": p.memory_gb,
                            "memory_gib": p.memory_gib,
                            "sm_count": p.sm_count,
                            "sm_share": round(p.sm_share, 4),
                            "max_count": p.max_count,
                            "start_slots": list(p.start_slots),
                        }
                        for p in rows
                    ],
                },
                indent=2,
            )
        )
        return
    from rich.table import Table

    table = Table(title=f"MIG profiles of {rows[0].model}")
    for col in (
        "profile",
        "resource",
        "compute",
        "memory slices",
        "GB",
        "GiB reported",
        "SMs",
        "max",
        "start slots",
    ):
        table.add_column(col)
    for p in rows:
        table.add_row(
            p.name,
            f"nvidia.com/mig-{p.resource_suffix}",
            f"{p.compute_slices}/7",
            f"{p.memory_slices}/8",
            str(p.memory_gb),
            "n/k" if p.memory_gib is None else f"{p.memory_gib:g}",
            "n/k" if p.sm_count is None else str(p.sm_count),
            str(p.max_count),
            ",".join(map(str, p.start_slots)),
        )
    console = _console()
    console.print(table)
    if any(p.memory_gib is None for p in rows):
        console.print(
            "[dim]n/k: not known from an authoritative source; placements presumed as on H100[/dim]"
        )


@mig_app.command(
    "validate",
    epilog=(
        "Examples:\n\n"
        "  kubegpu mig validate H100-80GB 3g.40gb,2g.20gb,1g.10gb\n\n"
        "  kubegpu mig validate H100-80GB 2g.20gb@2,3g.40gb@0 --json   (exit 1: overlap)\n\n"
        "  kubegpu mig validate A100-80GB 2g.20gb,2g.20gb,2g.20gb,2g.20gb   (exit 1: max count 3)\n\n"
        "  kubegpu mig validate builtin:mig-parted-default   (every named config, every MIG model)\n\n"
        "  kubegpu mig validate mig-parted.yaml --model H100-80GB --json"
    ),
)
def validate_cmd(
    model: Annotated[
        str,
        typer.Argument(
            metavar="MODEL|FILE",
            help="GPU model (with LAYOUT), or a mig-parted file / builtin:mig-parted-default (without).",
        ),
    ],
    layout: Annotated[
        str | None,
        typer.Argument(
            metavar="LAYOUT",
            help="Comma-separated profiles; pin a start slot with NAME@SLOT (3g.40gb@4).",
            show_default=False,
        ),
    ] = None,
    models: Annotated[
        list[str] | None,
        typer.Option("--model", metavar="MODEL", help="With FILE: check only these GPU models (repeatable)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a mixed layout against the placement rules: start slot of each instance, or why not.

    Given a mig-parted file instead, check every named config for every GPU model its entries can
    apply to: exit 0 if all are valid, 1 if one breaks a rule, 2 if the file is malformed.
    """
    if layout is None:
        from kubegpu.cli.migfile import validate_file

        validate_file(model, models or [], as_json=as_json)
        return
    if models:
        raise InputError("--model is for validating a mig-parted FILE; with MODEL LAYOUT, name one model")
    items = [item for item in layout.split(",") if item.strip()]
    try:
        placement = mig.validate_layout(model, items)
    except MigLayoutError as exc:
        if as_json:
            typer.echo(
                json.dumps({"model": model, "layout": items, "valid": False, "reason": str(exc)}, indent=2)
            )
        else:
            typer.echo(f"invalid: {exc}")
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "model": placement.model,
                    "layout": items,
                    "valid": True,
                    "instances": [
                        {
                            "profile": inst.profile.name,
                            "start_slot": inst.start_slot,
                            "memory_slices": list(range(inst.start_slot, inst.end_slot)),
                            "compute_slices": inst.profile.compute_slices,
                        }
                        for inst in placement.instances
                    ],
                    "compute_slices_used": placement.compute_slices,
                    "memory_slices_used": placement.memory_slices,
                },
                indent=2,
            )
        )
        return
    from rich.table import Table

    table = Table(title=f"valid on {placement.model}")
    for col in ("instance", "profile", "start slot", "memory slices", "compute slices"):
        table.add_column(col)
    for i, inst in enumerate(placement.instances):
        table.add_row(
            str(i),
            inst.profile.name,
            str(inst.start_slot),
            _slots(inst.start_slot, inst.profile.memory_slices),
            str(inst.profile.compute_slices),
        )
    console = _console()
    console.print(table)
    cells = ["."] * mig.MEMORY_SLICES
    for i, inst in enumerate(placement.instances):
        for s in range(inst.start_slot, inst.end_slot):
            cells[s] = str(i)
    console.print(
        f"memory slices [{' '.join(cells)}]  ({placement.memory_slices}/{mig.MEMORY_SLICES} memory,"
        f" {placement.compute_slices}/{mig.COMPUTE_SLICES} compute slices used)"
    )


def register(app: typer.Typer) -> None:
    """Add ``kubegpu mig profiles|validate``."""
    app.add_typer(mig_app, name="mig")


@mig_app.command(
    "current",
    epilog="Examples:\n\n  kubegpu mig current nvml   (this host, read-only)\n\n"
    "  kubegpu mig current builtin:h100-mig-mixed --json",
)
def current_cmd(
    source: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE",
            help="nvml (this host's GPUs, read-only: nothing is created or destroyed), builtin:NAME, "
            "or a node spec file.",
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Show each GPU's MIG mode and its MIG instances (profile, start slot, GPU instance, UUID)."""
    from kubegpu.sources.spec import load_node

    node = load_node(source)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "node": node.name,
                    "gpus": [
                        {
                            "index": g.index,
                            "uuid": str(g.uuid),
                            "model": g.model,
                            "mig_enabled": g.mig_enabled,
                            "instances": [
                                {
                                    "profile": m.profile,
                                    "start_slot": m.start_slot,
                                    "gpu_instance": m.gi_index,
                                    "uuid": str(m.uuid),
                                }
                                for m in sorted(g.mig_instances, key=lambda m: m.start_slot)
                            ],
                        }
                        for g in node.gpus
                    ],
                },
                indent=2,
            )
        )
        return
    from rich.table import Table

    table = Table(
        title=f"{node.name}: MIG on {sum(g.mig_enabled for g in node.gpus)} of {len(node.gpus)} GPU(s)"
    )
    for column in ("gpu", "model", "mig", "profile", "slots", "gpu instance", "uuid"):
        table.add_column(column)
    for g in node.gpus:
        if not g.mig_instances:
            table.add_row(str(g.index), g.model, "on" if g.mig_enabled else "off", "-", "-", "-", str(g.uuid))
            continue
        for m in sorted(g.mig_instances, key=lambda m: m.start_slot):
            try:
                size = mig.profile(g.model, m.profile).memory_slices
            except KubegpuError:  # a model without MIG profiles in the catalogue
                size = 1
            table.add_row(
                str(g.index),
                g.model,
                "on",
                m.profile,
                _slots(m.start_slot, size),
                str(m.gi_index),
                str(m.uuid),
            )
    _console().print(table)

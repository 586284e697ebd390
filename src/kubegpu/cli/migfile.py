"""`kubegpu mig validate FILE`: every named config of a mig-parted file, for every GPU model.

A config's entries apply to the models their device filter names (no filter: every MIG-capable model
in the catalogue). A cell is *valid* with each instance's start slot, *invalid* with the broken rule
(exit 1), or *not applicable* where an entry without a device filter names only other models'
profiles, as with NVIDIA's per-SKU ``all-<profile>`` configs (a profile no model has is invalid).
Device IDs kubegpu has no model for are listed as not checked.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from kubegpu.errors import InputError
from kubegpu.model.mig import MigPlacement, mig_models
from kubegpu.model.migparted import (
    CheckStatus,
    ConfigCheck,
    MigConfig,
    MigPartedConfig,
    check_config,
    format_device_id,
    profile_model,
    sku_for,
)
from kubegpu.sources.migparted import load_mig_parted, looks_like_mig_parted

__all__ = ["validate_file"]


def _placement_text(placement: MigPlacement | None) -> str:
    if placement is None:
        return "MIG disabled"
    if not placement.instances:
        return "MIG enabled, no instances"
    return " ".join(str(i) for i in placement.instances)


def _unchecked(config: MigConfig) -> list[tuple[str, str]]:
    """(device ID, why) for filter IDs that map to no catalogue model."""
    out: list[tuple[str, str]] = []
    for entry in config.entries:
        for device_id in entry.device_filter:
            sku = sku_for(device_id)
            text = format_device_id(device_id)
            if sku is None:
                out.append((text, "a PCI device ID kubegpu does not know"))
            elif sku.model is None:
                out.append((text, f"{sku.product}: kubegpu has no MIG profiles for it"))
    return list(dict.fromkeys(out))


def _detail(check: ConfigCheck, config: MigConfig) -> str:
    if not check.entries:
        return "no entry applies to this model"
    several = len(check.entries) > 1
    parts = []
    for e in check.entries:
        text = _placement_text(e.placement) if e.status is CheckStatus.VALID else e.reason
        if several:
            text = f"entry {e.entry} ({config.entries[e.entry].describe_devices()}): {text}"
        parts.append(text)
    return "; ".join(parts)


def _json_check(check: ConfigCheck, config: MigConfig) -> dict[str, Any]:
    return {
        "model": check.model,
        "status": check.status.value,
        "entries": [
            {
                "entry": e.entry,
                "where": config.entries[e.entry].where,
                "devices": config.entries[e.entry].describe_devices(),
                "status": e.status.value,
                "instances": (
                    [{"profile": i.profile.name, "start_slot": i.start_slot} for i in e.placement.instances]
                    if e.placement is not None
                    else None
                ),
                "reason": e.reason or None,
            }
            for e in check.entries
        ],
    }


def validate_file(source: str, models: list[str], *, as_json: bool) -> None:
    """Check the mig-parted file ``source``; exit 1 when some applicable layout breaks a rule."""
    if not looks_like_mig_parted(source):
        if source.strip().lower() in {m.lower() for m in mig_models()}:
            raise InputError(f"{source} needs a LAYOUT (3g.40gb,2g.20gb,...), or give a mig-parted FILE")
        raise InputError(f"{source}: no such file (give MODEL LAYOUT, or a mig-parted FILE)")
    parted: MigPartedConfig = load_mig_parted(source)
    chosen = tuple(dict.fromkeys(profile_model(m) for m in models)) if models else mig_models()
    results = [
        (c, [check_config(c, m) for m in chosen], [] if models else _unchecked(c)) for c in parted.configs
    ]
    invalid = any(ch.status is CheckStatus.INVALID for _, checks, _ in results for ch in checks)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "file": parted.origin,
                    "valid": not invalid,
                    "configs": [
                        {
                            "name": c.name,
                            "models": [_json_check(ch, c) for ch in checks],
                            "not_checked": [{"device_id": d, "reason": r} for d, r in unchecked],
                        }
                        for c, checks, unchecked in results
                    ],
                },
                indent=2,
            )
        )
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{parted.origin}: {len(parted.configs)} named config(s)")
        for col in ("config", "model", "result", "placement or reason"):
            table.add_column(col, overflow="fold")
        for c, checks, unchecked in results:
            for ch in checks:
                style = {"valid": "green", "invalid": "red"}.get(ch.status.value, "dim")
                table.add_row(c.name, ch.model, f"[{style}]{ch.status.value}[/{style}]", _detail(ch, c))
            for device_id, reason in unchecked:
                table.add_row(c.name, device_id, "[dim]not checked[/dim]", reason)
        console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
        console.print(table)
        bad = sum(ch.status is CheckStatus.INVALID for _, checks, _ in results for ch in checks)
        valid = sum(ch.status is CheckStatus.VALID for _, checks, _ in results for ch in checks)
        if invalid:
            summary = f"{bad} invalid layout(s)"
        elif valid:
            summary = "every applicable layout is valid"
        else:  # not "valid": nothing was placed (profiles of GPUs kubegpu has no profiles for)
            summary = "nothing in the file applies to the GPU models checked; no layout was placed"
        console.print(summary)
    if invalid:
        raise typer.Exit(1)

"""``kubegpu labels``: the GPU labels the agent would write on a node, computed without a cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kubegpu.cli.common import console, print_json
from kubegpu.cli.topo import SOURCE_HELP


def register(app: typer.Typer) -> None:
    @app.command(
        "labels",
        epilog="Examples: kubegpu labels builtin:seed-8gpu · kubegpu labels nvml (this host) · "
        "kubegpu labels builtin:h100-mig-mixed --config mixed.yaml --json",
    )
    def labels(
        source: Annotated[str, typer.Argument(help=SOURCE_HELP)],
        config_file: Annotated[
            Path | None,
            typer.Option(
                "--config", help="The agent's config file (MIG strategy, sharing), as for kubegpu agent."
            ),
        ] = None,
        json_out: Annotated[
            bool, typer.Option("--json", help="Print one JSON object of the labels.")
        ] = False,
    ) -> None:
        """Print the GFD-compatible GPU labels (plus kubegpu.io/ topology labels) for a node source.

        With SOURCE nvml the driver and CUDA labels come from NVML too, as the agent writes them;
        gfd.timestamp (the agent's start time) is left out.
        """
        from kubegpu.agent import labels_for
        from kubegpu.deviceplugin.config import load_config
        from kubegpu.deviceplugin.inventory import build_inventory
        from kubegpu.node.labels import DriverVersions
        from kubegpu.sources.spec import load_reading

        reading = load_reading(source)
        node = reading.node
        versions = DriverVersions(driver=reading.driver, cuda=reading.cuda) if reading.driver else None
        config = load_config(config_file)
        for warning in config.warnings:  # on stderr: --json keeps stdout one object
            print(f"kubegpu: warning: {warning}", file=sys.stderr)
        build_inventory(node, config)  # the agent refuses a config that does not fit the node: so do we
        result = labels_for(node, config, versions=versions)
        if json_out:
            print_json(result)
            return
        table = Table(title=f"{node.name}: {len(result)} label(s)")
        table.add_column("label")
        table.add_column("value")
        for key, value in result.items():
            table.add_row(key, value)
        console.print(table)

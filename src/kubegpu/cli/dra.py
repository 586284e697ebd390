"""``kubegpu dra``: the DRA driver (``serve``), and what it publishes, computed without a cluster."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from kubegpu.cli.common import console, print_json
from kubegpu.cli.topo import SOURCE_HELP
from kubegpu.errors import InputError
from kubegpu.model.dra import DeviceOrder


def _cell(value: int | bool | str | None) -> str:
    """A device attribute in a table: ``-`` where the device has none (as ``kubegpu topo`` shows it)."""
    return "-" if value is None else str(value)


def _order(text: str) -> DeviceOrder:
    try:
        return DeviceOrder(text)
    except ValueError:
        raise InputError(
            f"--device-order: {text!r} is not one of {', '.join(o.value for o in DeviceOrder)}"
        ) from None


def register(app: typer.Typer) -> None:
    dra = typer.Typer(
        help="kubegpu's DRA driver (driver gpu.kubegpu.io): ResourceSlices and a kubelet plugin.",
        no_args_is_help=True,
    )
    app.add_typer(dra, name="dra")

    @dra.command(
        "devices",
        epilog="Examples: kubegpu dra devices builtin:seed-8gpu · kubegpu dra devices builtin:dgx1-v100",
    )
    def devices(
        source: Annotated[str, typer.Argument(help=SOURCE_HELP)],
        json_out: Annotated[
            bool, typer.Option("--json", help="Print the devices as the slice lists them.")
        ] = False,
    ) -> None:
        """Print the devices and attributes the driver would publish for a node source."""
        from kubegpu.model.dra import dra_devices
        from kubegpu.sources.spec import NVML_SOURCE, load_reading

        reading = load_reading(source)
        node = reading.node
        roots: dict[int, str] = {}
        if source == NVML_SOURCE:  # this host's GPUs are in its sysfs; a spec's bus IDs name no device here
            from kubegpu.dra.service import pcie_root

            roots = {g.index: r for g in node.gpus if (r := pcie_root(g.pci_bus_id)) is not None}
        found = dra_devices(node, driver_version=reading.driver or None, pcie_roots=roots)
        if json_out:
            print_json([d.to_api() for d in found])
            return
        # borderless, short headers, no type column (the UUID's GPU-/MIG- says it; --json has it), and
        # names and UUIDs folded rather than cut: at 80 columns a cut left every UUID as "GPU-…"
        table = Table(
            title=f"{node.name}: {len(found)} device(s)",
            caption="domain, clique, numa: the nvlinkDomain, nvlinkClique and numaNode attributes",
            box=None,
            pad_edge=False,
            header_style="bold underline",
        )
        table.add_column("device", overflow="fold")
        table.add_column("uuid", overflow="fold")
        for column in ("domain", "clique", "numa", "MiB"):
            table.add_column(column, justify="right", no_wrap=True)
        for d in found:
            table.add_row(
                d.name,
                d.uuid,
                *(_cell(d.attribute(key)) for key in ("nvlinkDomain", "nvlinkClique", "numaNode")),
                str(d.memory_mib),
            )
        console.print(table)

    @dra.command("classes", epilog="Example: kubegpu dra classes | kubectl apply -f -")
    def classes() -> None:
        """Print the DeviceClasses gpu.kubegpu.io and mig.kubegpu.io (JSON, for kubectl apply -f -)."""
        from kubegpu.model.dra import device_classes

        typer.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": device_classes()}, indent=2))

    @dra.command(
        "serve",
        epilog="Examples: kubegpu dra serve --node-spec builtin:seed-8gpu --node-name gpu-1 · "
        "kubegpu dra serve --nvml (NODE_NAME from the pod)",
    )
    def serve(  # noqa: PLR0917 - typer maps each parameter to a flag
        node_spec: Annotated[
            str | None, typer.Option("--node-spec", help=f"Simulated GPUs: {SOURCE_HELP}")
        ] = None,
        nvml: Annotated[bool, typer.Option("--nvml", help="Real GPUs, read through NVML.")] = False,
        node_name: Annotated[
            str | None,
            typer.Option(
                "--node-name",
                envvar="NODE_NAME",
                help="This node's name: the pool and nodeName of the slices.",
            ),
        ] = None,
        kubeconfig: Annotated[
            str | None, typer.Option("--kubeconfig", help="Kubeconfig; default: the pod's service account.")
        ] = None,
        kubelet_dir: Annotated[
            Path,
            typer.Option(
                "--kubelet-dir", help="kubelet's root: plugins/ and plugins_registry/ are under it."
            ),
        ] = Path("/var/lib/kubelet"),
        cdi_dir: Annotated[
            Path, typer.Option("--cdi-dir", help="Where CDI specs of prepared claims go.")
        ] = Path("/var/run/cdi"),
        simulated_nvidia_smi: Annotated[
            bool,
            typer.Option(
                "--simulated-nvidia-smi",
                help="--node-spec only: mount a stand-in nvidia-smi into containers.",
            ),
        ] = False,
        config_file: Annotated[
            Path | None,
            typer.Option(
                "--config",
                help="The agent's config file: kubegpu.dra.gpus picks the GPUs served here (the agent leaves "
                "them out), kubegpu.health the health policy. Default: every GPU, NVIDIA's health policy.",
            ),
        ] = None,
        fault_file: Annotated[
            Path | None,
            typer.Option(
                "--fault-file", help="Inject GPU health events from this file (as for kubegpu agent)."
            ),
        ] = None,
        device_order: Annotated[
            str,
            typer.Option(
                "--device-order",
                help="topology: fullest NVLink clique first, re-ordered as claims are allocated, so the "
                "scheduler's first fit is a best fit; index: GPU index order, as other drivers publish.",
            ),
        ] = "topology",
        resync: Annotated[
            float, typer.Option("--resync", min=0.5, help="Seconds between slice reconciles.")
        ] = 10.0,
        log_level: Annotated[
            str, typer.Option("--log-level", help="debug, info, warning or error.")
        ] = "info",
    ) -> None:
        """Run the DRA kubelet plugin and keep this node's ResourceSlices, until SIGTERM."""
        from kubegpu.cli.logs import check_log_level, setup_logging
        from kubegpu.deviceplugin.config import load_config
        from kubegpu.dra.service import DraOptions, DraService, load_node
        from kubegpu.kubeapi import KubeApi
        from kubegpu.model.dra import DraGpus

        check_log_level(log_level)  # bad input is refused before anything starts
        if node_spec is not None and nvml:
            raise InputError("give one GPU source: --node-spec or --nvml, not both")
        if not node_name:
            raise InputError("give --node-name (or NODE_NAME): the slices are published for that node")
        setup_logging(log_level)
        options = DraOptions(
            node_name=node_name,
            node_spec=node_spec,
            use_nvml=nvml,
            kubelet_dir=kubelet_dir,
            cdi_dir=cdi_dir,
            kubeconfig=kubeconfig,
            simulated_nvidia_smi=simulated_nvidia_smi,
            resync_s=resync,
            fault_file=fault_file,
            device_order=_order(device_order),
        )
        gpus, health = DraGpus(all=True), None
        if config_file is not None or os.environ.get("KUBEGPU_DRA_GPUS"):
            config = load_config(config_file, env=dict(os.environ))
            if not config.dra_gpus.any:
                where = config_file or "KUBEGPU_DRA_GPUS"
                raise InputError(
                    f"{where}: kubegpu.dra.gpus is none, so the device plugin serves every GPU of this node; "
                    "set it to all or to GPU indexes for the DRA driver to serve them"
                )
            gpus, health = config.dra_gpus, config.health
            for warning in config.warnings:
                logging.getLogger("kubegpu.dra").warning(warning)
        reading = load_node(options)
        api = KubeApi(kubeconfig=kubeconfig)
        DraService(
            options,
            node=reading.node,
            driver_version=reading.driver_version,
            api=api,
            claims=api,
            allocations=api,
            health=health,
            health_sources=reading.health_sources,
            gpus=gpus,
        ).run_until_signalled()

"""``kubegpu topo``: a node's GPUs, the link matrix as ``nvidia-smi topo -m`` shows it, and costs."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from kubegpu.cli.common import console, print_json
from kubegpu.model.node import Node

SOURCE_HELP = (
    "builtin:NAME (e.g. builtin:seed-8gpu), a node spec YAML file, an nvidia-smi topo -m capture, "
    "or nvml (this host's GPUs through the NVIDIA driver)"
)
GPU_MODEL_HELP = (
    "GPU model of an nvidia-smi capture (e.g. V100-32GB), to price its links exactly; "
    "default: the model its 'GPU i: NAME' lines name, else the fallback cost table."
)


def node_payload(node: Node) -> dict[str, Any]:
    topo = node.topology
    return {
        "name": node.name,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "memory_mib": g.memory_mib,
                "numa_node": g.numa_node,
                "pci_bus_id": g.pci_bus_id,
                "mig": [
                    {"profile": m.profile, "start_slot": m.start_slot, "uuid": m.uuid}
                    for m in g.mig_instances
                ],
            }
            for g in node.gpus
        ],
        "links": None if topo is None else [[link.label for link in row] for row in topo.links],
        "cost": None if topo is None else [list(row) for row in topo.cost],
        "nvlink_groups": None if topo is None else [list(g) for g in topo.nvlink_groups],
    }


def _fmt_cost(value: float) -> str:
    return "0" if value == 0 else f"{value:g}"


def render_node(node: Node) -> None:
    gpus = Table(title=f"{node.name}: {len(node.gpus)} GPU(s)")
    for col in ("GPU", "UUID", "model", "memory (MiB)", "NUMA", "MIG"):
        gpus.add_column(col, overflow="fold")
    for g in node.gpus:
        mig = ", ".join(f"{m.profile}@{m.start_slot}" for m in g.mig_instances) or "-"
        numa = "-" if g.numa_node is None else str(g.numa_node)
        gpus.add_row(str(g.index), g.uuid, g.model, str(g.memory_mib), numa, mig)
    console.print(gpus)
    topo = node.topology
    if topo is None:
        console.print("no topology: GPUs will be chosen by index")
        return
    n = topo.n
    link_cells = [[topo.links[i][j].label for j in range(n)] for i in range(n)]
    cost_cells = [[_fmt_cost(topo.cost[i][j]) for j in range(n)] for i in range(n)]
    numa_cells = ["-" if g.numa_node is None else str(g.numa_node) for g in node.gpus]
    for title, cells, extra in (
        ("links (nvidia-smi topo -m)", link_cells, True),
        ("cost (lower is better; see docs/topology.md)", cost_cells, False),
    ):
        table = Table(title=title)
        table.add_column("")
        for j in range(n):
            table.add_column(f"GPU{j}", justify="center")
        if extra:
            table.add_column("NUMA", justify="center")
        for i in range(n):
            table.add_row(f"GPU{i}", *cells[i], *([numa_cells[i]] if extra else []))
        console.print(table)


def register(app: typer.Typer) -> None:
    @app.command(
        "topo",
        epilog="Examples: kubegpu topo builtin:dgx1-v100 · kubegpu topo node.yaml --json · "
        "kubegpu topo topo-m.txt --gpu-model V100-32GB",
    )
    def topo(
        source: Annotated[str, typer.Argument(help=SOURCE_HELP)],
        json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
        gpu_model: Annotated[str | None, typer.Option("--gpu-model", help=GPU_MODEL_HELP)] = None,
    ) -> None:
        """Show a node's GPUs, link matrix and cost matrix."""
        from kubegpu.sources.spec import load_node

        node = load_node(source, gpu_model_name=gpu_model)
        if json_out:
            print_json(node_payload(node))
        else:
            render_node(node)

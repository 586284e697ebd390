"""``kubegpu alloc``: which GPUs the exact topology-aware allocator picks, and what that set costs."""

from __future__ import annotations

from typing import Annotated

import typer

from kubegpu.cli.common import console, parse_indices, print_json
from kubegpu.cli.topo import GPU_MODEL_HELP, SOURCE_HELP


def register(app: typer.Typer) -> None:
    @app.command(
        "alloc",
        epilog="Examples: kubegpu alloc builtin:seed-8gpu --count 4 --available 2-7 · "
        "kubegpu alloc builtin:hgx-16 --count 3 --must-include 5 --json",
    )
    def alloc(  # noqa: PLR0917 - typer maps each parameter to a flag
        source: Annotated[str, typer.Argument(help=SOURCE_HELP)],
        count: Annotated[int, typer.Option("--count", "-k", help="How many GPUs to choose.")],
        available: Annotated[
            str | None, typer.Option("--available", help="Free GPUs, e.g. 0,2,3 or 2-7 (default: all).")
        ] = None,
        must_include: Annotated[
            str | None, typer.Option("--must-include", help="GPUs the set must contain, e.g. 3 or 3,4.")
        ] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
        gpu_model: Annotated[str | None, typer.Option("--gpu-model", help=GPU_MODEL_HELP)] = None,
    ) -> None:
        """Choose COUNT GPUs with the lowest total link cost (exact), honouring --must-include."""
        from kubegpu.allocate import choose_scored, choose_simple
        from kubegpu.errors import InputError
        from kubegpu.sources.spec import load_node

        if count < 1:  # bad input (exit 2), not a request the node cannot meet (exit 1)
            raise InputError(f"--count: {count} GPUs; ask for at least one")
        free = parse_indices(available, "--available") if available is not None else None
        must = parse_indices(must_include, "--must-include") if must_include is not None else []
        node = load_node(source, gpu_model_name=gpu_model)
        n = len(node.gpus)
        if free is None:
            free = list(range(n))
        for flag, values in (("--available", free), ("--must-include", must)):
            bad = [i for i in values if i >= n]
            if bad:
                raise InputError(f"{flag}: GPU {bad[0]} does not exist; {node.name} has GPUs 0..{n - 1}")
        naive = choose_simple(free, count, must)
        if node.topology is None:
            devices, cost = naive, None
            naive_cost = None
        else:
            choice = choose_scored(node.topology, free, count, must)
            devices, cost = choice.devices, choice.cost
            naive_cost = node.topology.set_cost(naive)
        if json_out:
            print_json(
                {
                    "node": node.name,
                    "devices": list(devices),
                    "uuids": [node.gpus[i].uuid for i in devices],
                    "cost": cost,
                    "by_index": {"devices": list(naive), "cost": naive_cost},
                }
            )
            return
        if cost is None:
            console.print(f"{node.name} has no topology: chose by index {list(devices)}")
            return
        console.print(f"topology-aware: {list(devices)}  cost {cost:g}")
        console.print(f"by index:       {list(naive)}  cost {naive_cost:g}")

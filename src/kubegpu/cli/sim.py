"""`kubegpu sim`: replay a GPU cluster trace under placement policies and compare them.

Thin layer over ``kubegpu.sim``: parse flags, load the trace, run the replays (with a progress bar
on a terminal), render a table or ``--json``, and write ``--plot`` / ``--out`` files. ``kubegpu sim
variant`` writes a resampled pod list with a different mix of pod kinds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kubegpu.cli.simrun import (
    ALL_POLICIES,
    bounds,
    check_inflate,
    check_node_level,
    online_bounds,
    render_bound,
    run_sim,
)
from kubegpu.errors import InputError


def register(app: typer.Typer) -> None:
    """Add ``kubegpu sim`` (and ``kubegpu sim variant``) to the app."""
    sim_app = typer.Typer(
        help="Replay a GPU cluster trace (FGD / Alibaba openb schema) and compare placement policies.",
        no_args_is_help=False,
        invoke_without_command=True,
    )

    @sim_app.callback(
        invoke_without_command=True,
        epilog="Examples: kubegpu sim (the openb trace in $KUBEGPU_OPENB_DIR) · "
        "kubegpu sim --nodes nodes.csv --pods pods.csv · "
        "kubegpu sim --nodes nodes.csv --pods pods.csv --policy fgd --policy kubegpu --seeds 42 --json · "
        "kubegpu sim variant --pods pods.csv --nodes nodes.csv --shared 0.4 -o variant.csv",
    )
    def sim(  # noqa: PLR0917 - typer maps each parameter to a flag
        ctx: typer.Context,
        nodes: Annotated[
            Path | None,
            typer.Option(
                "--nodes",
                help="Node list CSV (sn, cpu_milli, memory_mib, gpu, model). "
                "Default: the openb trace in $KUBEGPU_OPENB_DIR.",
            ),
        ] = None,
        pods: Annotated[
            Path | None,
            typer.Option(
                "--pods",
                help="Pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]). "
                "Default: the openb trace in $KUBEGPU_OPENB_DIR.",
            ),
        ] = None,
        policy: Annotated[
            list[str] | None,
            typer.Option(
                "--policy",
                help=f"Policy to replay (repeatable): {', '.join(ALL_POLICIES)}."
                " Default: all but kubegpu (kubegpu-plan is kubegpu's default placement).",
            ),
        ] = None,
        seeds: Annotated[str, typer.Option("--seeds", help="Seeds: 42, 42-51 or 42,44.")] = "42-51",
        inflate: Annotated[
            float,
            typer.Option(
                "--inflate", help="Inflate arrivals to this multiple of GPU capacity (0: replay as is)."
            ),
        ] = 1.3,
        tie: Annotated[
            str,
            typer.Option(
                "--tie",
                help="Ties between equal scores: node-order (the artifact's) or random (kube-scheduler's).",
            ),
        ] = "node-order",
        order: Annotated[
            str,
            typer.Option(
                "--order",
                help="Fixed node order before the tie rule: auto (each policy's default: crc for kubegpu, "
                "none for the others), none, or crc (highest CRC-32 of the node name first).",
            ),
        ] = "auto",
        workers: Annotated[int, typer.Option("--workers", help="Worker processes.")] = 1,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON object instead of tables.")
        ] = False,
        plot: Annotated[
            Path | None, typer.Option("--plot", help="Write the curves to this PNG file.")
        ] = None,
        out: Annotated[  # text, not a Path: Path("") would quietly be the current folder
            str | None,
            typer.Option("--out", help="Write summary.json, curves.csv and failed_pods.csv here."),
        ] = None,
        with_bound: Annotated[
            bool,
            typer.Option(
                "--bound",
                help="Also compute the upper bound (kubegpu sim bound) per seed, about 4 s each, "
                "and show each policy as a share of it.",
            ),
        ] = False,
    ) -> None:
        """Replay a trace under placement policies: allocation and fragmentation curves, failed pods."""
        if ctx.invoked_subcommand is not None:
            return
        run_sim(
            nodes=nodes,
            pods=pods,
            policy=policy,
            seeds=seeds,
            inflate=inflate,
            tie=tie,
            order=order,
            workers=workers,
            as_json=as_json,
            plot=plot,
            out=out,
            with_bound=with_bound,
        )

    @sim_app.command(
        "variant",
        epilog="Examples: kubegpu sim variant --preset gpushare40 -o gpushare40.csv · "
        "kubegpu sim variant --pods pods.csv --nodes nodes.csv --shared 0.4 -o shared.csv · "
        "kubegpu sim variant --pods pods.csv --nodes nodes.csv --cpu-only 0.2 --count 5000 --seed 1 -o v.csv",
    )
    def variant(  # noqa: PLR0917 - typer maps each parameter to a flag
        output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the variant pod list.")],
        pods: Annotated[
            Path | None, typer.Option("--pods", help="Pod list to draw from. Default: $KUBEGPU_OPENB_DIR's.")
        ] = None,
        nodes: Annotated[
            Path | None,
            typer.Option("--nodes", help="Node list (GPU models and sizes). Default: $KUBEGPU_OPENB_DIR's."),
        ] = None,
        cpu_only: Annotated[
            float | None, typer.Option("--cpu-only", help="Fraction of pods without GPUs.")
        ] = None,
        shared: Annotated[
            float | None, typer.Option("--shared", help="Fraction of GPU pods sharing one GPU.")
        ] = None,
        multi_gpu: Annotated[
            float | None, typer.Option("--multi-gpu", help="Fraction of GPU pods with 2+ GPUs.")
        ] = None,
        gpu_spec: Annotated[
            float | None, typer.Option("--gpu-spec", help="Fraction of GPU pods pinned to one GPU model.")
        ] = None,
        count: Annotated[
            int | None, typer.Option("--count", help="Number of pods (default: as many as the input).")
        ] = None,
        seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 0,
        preset: Annotated[
            str | None,
            typer.Option(
                "--preset",
                help="The FGD artifact's GPU-sharing pod lists: gpushare20, 40, 60, 80 or 100 "
                "(sharing pods' share of GPU demand); not with the mix knobs.",
            ),
        ] = None,
    ) -> None:
        """Write a variant of a pod list with more CPU-only, shared, multi-GPU or model-pinned pods."""
        from kubegpu.sim.openb import resolve
        from kubegpu.sim.trace import load_nodes, load_pods, write_pods
        from kubegpu.sim.variants import VariantKnobs, gpushare_variant, make_variant, pod_mix

        trace = resolve(nodes, pods)
        nodes, pods = trace.nodes, trace.pods

        if preset is not None:
            if any(v is not None for v in (cpu_only, shared, multi_gpu, gpu_spec, count)):
                raise InputError(
                    f"--preset {preset} sets the whole mix; "
                    "drop --cpu-only/--shared/--multi-gpu/--gpu-spec/--count"
                )
            digits = preset.strip().lower().removeprefix("gpushare")
            if not digits.isdigit():
                raise InputError(
                    f"--preset {preset!r}: unknown preset; choose from "
                    "gpushare20, gpushare40, gpushare60, gpushare80, gpushare100"
                )
            load_nodes(nodes)  # checked like the knobs' case, though the preset needs no node data
            made = gpushare_variant(load_pods(pods), int(digits), seed=seed)
        else:
            knobs = VariantKnobs(
                cpu_only=cpu_only,
                shared=shared,
                multi_gpu=multi_gpu,
                gpu_spec=gpu_spec,
                count=count,
                seed=seed,
            )
            made = make_variant(load_pods(pods), load_nodes(nodes), knobs)
        try:
            write_pods(output, made)
        except OSError as exc:
            raise InputError(f"--output {output}: cannot write: {exc.strerror or exc}") from exc
        mix = pod_mix(made)
        typer.echo(
            f"wrote {len(made)} pods to {output}: cpu-only {mix['cpu_only']:.1%}, shared {mix['shared']:.1%} "
            f"and multi-GPU {mix['multi_gpu']:.1%} of GPU pods, model-pinned {mix['gpu_spec']:.1%}"
        )

    @sim_app.command(
        "bound",
        epilog="Examples: kubegpu sim bound (the trace in $KUBEGPU_OPENB_DIR) · "
        "kubegpu sim bound --nodes nodes.csv --pods pods.csv · "
        "kubegpu sim bound --nodes nodes.csv --pods pods.csv --seeds 42-51 --json · "
        "kubegpu sim bound --seeds 42 --online --node-level · "
        "kubegpu sim bound --seeds 42 --second-pivot · "
        "kubegpu sim bound --seeds 42 --pivots 3 · "
        "kubegpu sim bound --seeds 42 --pivots 5 --whole-pivots",
    )
    def bound(  # noqa: PLR0917 - typer maps each parameter to a flag
        nodes: Annotated[
            Path | None,
            typer.Option(
                "--nodes",
                help="Node list CSV (sn, cpu_milli, memory_mib, gpu, model). Default: $KUBEGPU_OPENB_DIR's.",
            ),
        ] = None,
        pods: Annotated[
            Path | None,
            typer.Option(
                "--pods",
                help="Pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]). "
                "Default: $KUBEGPU_OPENB_DIR's.",
            ),
        ] = None,
        seeds: Annotated[str, typer.Option("--seeds", help="Seeds: 42, 42-51 or 42,44.")] = "42-51",
        inflate: Annotated[
            float,
            typer.Option(
                "--inflate", help="Inflate arrivals to this multiple of GPU capacity (0: the trace as is)."
            ),
        ] = 1.3,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON object instead of a table.")
        ] = False,
        online: Annotated[
            bool,
            typer.Option(
                "--online",
                help="Also the online bound: what no policy that places every pod that fits on arrival "
                "exceeds (a few LPs more per seed, about 10 s).",
            ),
        ] = False,
        node_level: Annotated[
            bool,
            typer.Option(
                "--node-level",
                help="Hold each node, not only each node class, to its own cores: whole nodes as the "
                "LP's columns (tighter where a node's CPU binds; one to three minutes per seed on 1,213 "
                "nodes, a line every 10 s while it solves).",
            ),
        ] = False,
        second_pivot: Annotated[
            bool,
            typer.Option(
                "--second-pivot",
                help="The online bound (implies --online) tightened by a second pivot: each other share "
                "with 2 % of the GPU demand is tried jointly with the first (one to three minutes per "
                "seed). "
                "The same as --pivots 2.",
            ),
        ] = False,
        pivots: Annotated[
            int,
            typer.Option(
                "--pivots",
                min=1,
                max=5,
                help="Shapes forced in jointly by the online bound (implies --online when above 1): 2 is "
                "--second-pivot, 3 also tries the two second pivots that came lowest together (two to "
                "three minutes per seed on openb), 4 and 5 the three and four lowest.",
            ),
        ] = 1,
        whole_pivots: Annotated[
            bool,
            typer.Option(
                "--whole-pivots",
                help="Common 1-GPU whole-GPU shapes are tried as extra pivots too (implies --pivots 2 at "
                "least; each is placed while an untouched GPU is left; tighter on gpushare60 and 80).",
            ),
        ] = False,
    ) -> None:
        """An upper bound on the GPU % any policy can allocate for each seed's arrivals (an LP relaxation)."""
        from kubegpu.sim.openb import resolve
        from kubegpu.sim.run import parse_seeds
        from kubegpu.sim.trace import load_trace
        from kubegpu.sim.workload import prepare

        seed_list = parse_seeds(seeds)
        check_inflate(inflate)
        trace = resolve(nodes, pods)
        workload = prepare(load_trace(trace.nodes, trace.pods))
        from kubegpu.sim.bound import NODE_LEVEL_CPU_STEP, bound_json

        step = NODE_LEVEL_CPU_STEP if node_level else None
        if step is not None:
            check_node_level(workload, step)
        joint = max(pivots, 2 if second_pivot or whole_pivots else 1)
        if online or joint > 1:
            from kubegpu.sim.online_bound import with_online

            found = online_bounds(
                workload,
                seed_list,
                inflate,
                quiet=as_json,
                cpu_step=step,
                pivots=joint,
                whole_pivots=whole_pivots,
            )
            document = bound_json(
                [r.offline for r in found], seeds=seed_list, inflate=inflate, workload=workload, cpu_step=step
            )
            document = with_online(document, found)
        else:
            results = bounds(workload, seed_list, inflate, quiet=as_json, cpu_step=step)
            document = bound_json(results, seeds=seed_list, inflate=inflate, workload=workload, cpu_step=step)
        if as_json:
            typer.echo(json.dumps(document))
        else:
            render_bound(document)

    @sim_app.command(
        "kube",
        epilog="Example: kubegpu sim kube --nodes nodes.csv --pods pods.csv --kubeconfig rig.kubeconfig "
        "--scheduler-name kubegpu --extender --compare kubegpu",
    )
    def kube(  # noqa: PLR0917 - typer maps each parameter to a flag
        scheduler_name: Annotated[
            str,
            typer.Option(
                "--scheduler-name", help="spec.schedulerName of the pods (the scheduler to measure)."
            ),
        ],
        nodes: Annotated[
            Path | None,
            typer.Option("--nodes", help="Node list CSV; one kwok node each. Default: $KUBEGPU_OPENB_DIR's."),
        ] = None,
        pods: Annotated[
            Path | None,
            typer.Option(
                "--pods", help="Pod list CSV; arrivals as the sim draws them. Default: $KUBEGPU_OPENB_DIR's."
            ),
        ] = None,
        kubeconfig: Annotated[
            Path | None,
            typer.Option("--kubeconfig", help="Kubeconfig (default: $KUBECONFIG or ~/.kube/config)."),
        ] = None,
        seed: Annotated[int, typer.Option("--seed", help="The sim's seed for the arrival order.")] = 42,
        inflate: Annotated[
            float, typer.Option("--inflate", help="Arrivals up to this multiple of capacity.")
        ] = 1.3,
        extender: Annotated[
            bool,
            typer.Option(
                "--extender",
                help="GPUs come from kubegpu extender's assignment annotation (else the replay plays each "
                "node's device plugin).",
            ),
        ] = False,
        compare: Annotated[
            str | None, typer.Option("--compare", help="Also run kubegpu sim with this policy and compare.")
        ] = None,
        limit: Annotated[int | None, typer.Option("--limit", help="Only the first N arrivals.")] = None,
        window: Annotated[
            int, typer.Option("--window", help="Pods created but not yet resolved, at most.")
        ] = 32,
        namespace: Annotated[
            str, typer.Option("--namespace", help="Namespace of the replay's pods.")
        ] = "kubegpu-replay",
        keep_nodes: Annotated[
            bool, typer.Option("--keep-nodes", help="Leave the kwok nodes in place.")
        ] = False,
        whole_milli: Annotated[
            bool,
            typer.Option(
                "--whole-milli",
                help="Whole-GPU pods ask kubegpu.io/gpu-milli (1000 x k) too, so a stock scheduler's two "
                "node-level GPU counts agree.",
            ),
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    ) -> None:
        """Replay a seed's arrivals on kwok nodes through a real API server and scheduler."""
        from kubegpu.cli.simkube import run_kube

        run_kube(
            nodes=nodes,
            pods=pods,
            kubeconfig=kubeconfig,
            scheduler_name=scheduler_name,
            seed=seed,
            inflate=inflate,
            extender=extender,
            compare=compare,
            limit=limit,
            window=window,
            namespace=namespace,
            keep_nodes=keep_nodes,
            whole_milli=whole_milli,
            as_json=as_json,
        )

    app.add_typer(sim_app, name="sim")

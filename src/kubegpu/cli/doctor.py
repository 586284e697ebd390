"""`kubegpu doctor`: find the broken link between a GPU and a pod, read-only.

``doctor node`` checks this host (or a fixture root), ``doctor cluster`` the API server's view,
``doctor pod NS/NAME`` one pod, and bare ``doctor`` runs node + cluster where a cluster is reachable.
Exit 0 when nothing fails, 1 when something does, 2 on bad usage.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kubegpu.errors import InputError

if TYPE_CHECKING:
    from kubegpu.doctor import ClusterApi, Report

HostRoot = Annotated[
    Path,
    typer.Option("--host-root", help="Read host facts under this directory (a fixture root in tests)."),
]
JsonOut = Annotated[bool, typer.Option("--json", help='Print {"findings": [...]} instead of the report.')]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show the evidence of passing checks too.")]
Kubeconfig = Annotated[
    str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default $KUBECONFIG, ~/.kube/config).")
]
KubeContext = Annotated[str | None, typer.Option("--context", help="Kubeconfig context to use.")]
NodeName = Annotated[str | None, typer.Option("--node", help="Only this node (default: every GPU node).")]
Timeout = Annotated[
    float,
    typer.Option(
        "--timeout", min=0.1, help="Seconds nvidia-smi may take before it counts as hung (dmesg, uname: 2 s)."
    ),
]
Recorded = Annotated[
    Path | None,
    typer.Option(
        "--from-recorded",
        help="Read API objects from *.json (kubectl get -o json) and logs/<ns>/<pod>/<c>.log in this "
        "directory instead of a live cluster.",
    ),
]


def _root(path: Path) -> Path:
    if not path.is_dir():
        raise InputError(f"--host-root {path}: not a directory")
    return path


def _connector(
    kubeconfig: str | None, context: str | None, recorded: Path | None
) -> Callable[[], ClusterApi]:
    from kubegpu.doctor import LiveCluster, RecordedCluster

    if recorded is not None:
        if not recorded.is_dir():
            raise InputError(f"--from-recorded {recorded}: not a directory")
        data = RecordedCluster.from_dir(recorded)
        return lambda: data
    return lambda: LiveCluster(kubeconfig=kubeconfig, context=context)


def _finish(report: Report, *, as_json: bool, verbose: bool, title: str) -> None:
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        _render(report, verbose=verbose, title=title)
    raise typer.Exit(report.exit_code)


_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _render(report: Report, *, verbose: bool, title: str) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=True)
    console.print(Text(title, style="bold"))
    first = report.first_broken
    if first is not None:
        head = Text("First broken link: ", style="bold red")
        head.append(f"{first.id}", style="bold")
        head.append(f" ({first.layer.value}): {first.summary}")
        console.print(head)
        for i, fix_line in enumerate(first.fix.splitlines()):
            console.print(Text(f"  {'fix: ' if i == 0 else '     '}{fix_line}", style="cyan"))
    else:
        console.print(Text("No broken link found.", style="bold green"))
    layer = None
    for f in report.findings:
        if f.layer is not layer:
            layer = f.layer
            console.print(Text(f"\n{layer.value.upper()}", style="bold"))
        line = Text(f"  {f.status.value.upper():<5} ", style=_STYLE[f.status.value])
        line.append(f"{f.id:<22} ", style="bold")
        line.append(f.summary)
        console.print(line)
        if f.status.value in ("warn", "fail") or verbose:
            for ev in f.evidence:
                console.print(Text(f"{'':8}· {ev}", style="dim"))
            if f.fix:
                for i, fix_line in enumerate(f.fix.splitlines()):
                    console.print(Text(f"{'':8}{'fix: ' if i == 0 else '     '}{fix_line}", style="cyan"))
    counts = {s: sum(1 for f in report.findings if f.status.value == s) for s in _STYLE}
    console.print(
        Text(
            f"\n{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail, {counts['skip']} skip "
            f"({report.elapsed_s:.2f} s)",
            style="bold",
        )
    )


def register(app: typer.Typer) -> None:
    """Add ``kubegpu doctor`` and its ``node``, ``cluster`` and ``pod`` subcommands."""
    doctor = typer.Typer(
        help="Walk the chain driver → runtime → device plugin → scheduler → pod and name the broken link.",
        no_args_is_help=False,
    )

    @doctor.callback(
        invoke_without_command=True,
        epilog="Examples: kubegpu doctor · kubegpu doctor node · kubegpu doctor cluster --node gpu-1 · "
        "kubegpu doctor pod default/trainer --json",
    )
    def doctor_all(
        ctx: typer.Context,
        *,
        host_root: HostRoot = Path("/"),
        node: NodeName = None,
        kubeconfig: Kubeconfig = None,
        context: KubeContext = None,
        recorded: Recorded = None,
        as_json: JsonOut = False,
        verbose: Verbose = False,
        timeout: Timeout = 5.0,
    ) -> None:
        """Node checks, then cluster checks where a cluster is reachable (skipped with the reason if not)."""
        if ctx.invoked_subcommand is not None:
            return
        from kubegpu.doctor import full_report

        report = full_report(
            _root(host_root), _connector(kubeconfig, context, recorded), node=node, command_timeout_s=timeout
        )
        _finish(report, as_json=as_json, verbose=verbose, title=f"kubegpu doctor (host root {host_root})")

    @doctor.command("node", epilog="Examples: kubegpu doctor node · kubegpu doctor node --verbose --json")
    def doctor_node(
        *,
        host_root: HostRoot = Path("/"),
        as_json: JsonOut = False,
        verbose: Verbose = False,
        timeout: Timeout = 5.0,
    ) -> None:
        """Check this host: GPU, nouveau, driver, NVML, XIDs, container runtime, plugin socket."""
        from kubegpu.doctor import node_report

        report = node_report(_root(host_root), command_timeout_s=timeout)
        _finish(
            report, as_json=as_json, verbose=verbose, title=f"kubegpu doctor node (host root {host_root})"
        )

    @doctor.command(
        "cluster",
        epilog="Examples: kubegpu doctor cluster · kubegpu doctor cluster --node gpu-1 --context prod · "
        "kubegpu doctor cluster --from-recorded ./recorded --json",
    )
    def doctor_cluster(
        *,
        node: NodeName = None,
        kubeconfig: Kubeconfig = None,
        context: KubeContext = None,
        recorded: Recorded = None,
        as_json: JsonOut = False,
        verbose: Verbose = False,
    ) -> None:
        """Check the cluster's view: plugin pods, allocatable vs capacity, readiness, labels, taints."""
        from kubegpu.doctor import cluster_report

        report = cluster_report(_connector(kubeconfig, context, recorded), node=node)
        _finish(report, as_json=as_json, verbose=verbose, title="kubegpu doctor cluster")

    @doctor.command(
        "pod",
        epilog="Examples: kubegpu doctor pod default/trainer · "
        "kubegpu doctor pod ml/infer-0 --from-recorded ./recorded --json",
    )
    def doctor_pod(
        target: Annotated[str, typer.Argument(metavar="NAMESPACE/NAME", help="The pod to examine.")],
        *,
        kubeconfig: Kubeconfig = None,
        context: KubeContext = None,
        recorded: Recorded = None,
        as_json: JsonOut = False,
        verbose: Verbose = False,
    ) -> None:
        """Check one pod: GPU request, why it is Pending, its spec's GPU settings, its logs."""
        from kubegpu.doctor import pod_report

        namespace, sep, name = target.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise InputError(f"pod {target!r}: expected NAMESPACE/NAME, e.g. default/gpu-test")
        report = pod_report(_connector(kubeconfig, context, recorded), namespace, name)
        _finish(report, as_json=as_json, verbose=verbose, title=f"kubegpu doctor pod {target}")

    app.add_typer(doctor, name="doctor")

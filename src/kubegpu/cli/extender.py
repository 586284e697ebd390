"""`kubegpu extender`: serve kube-scheduler's extender API with one of the simulator's placement policies.

A thin command: build the ledger (policy, target workload), the API sync and the HTTP server, then
wait for SIGTERM/SIGINT. Deployment and the KubeSchedulerConfiguration it needs: docs/extender.md.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command(
        "extender",
        epilog="Example: kubegpu extender --listen 127.0.0.1:8888 --kubeconfig ~/.kube/config "
        "(then point KubeSchedulerConfiguration.extenders at http://127.0.0.1:8888/kubegpu)",
    )
    def extender(  # noqa: PLR0917 - typer maps each parameter to a flag
        listen: Annotated[
            str, typer.Option("--listen", help="HOST:PORT to serve filter/prioritize/bind and /healthz on.")
        ] = "127.0.0.1:8888",
        kubeconfig: Annotated[
            str | None,
            typer.Option(
                "--kubeconfig", help="Kubeconfig file (default: the pod's service account, else $KUBECONFIG)."
            ),
        ] = None,
        policy: Annotated[
            str,
            typer.Option(
                "--policy",
                help="Placement policy: kubegpu-plan (the default: kubegpu's score with each share placed "
                "by a plan of the workload), kubegpu, fgd, bestfit, packing, clustering, dotprod, random.",
            ),
        ] = "kubegpu-plan",
        workload: Annotated[
            Path | None,
            typer.Option(
                "--workload",
                help="Pod list CSV (the simulator's schema) whose popular shapes define fragmentation; "
                "default: a half-GPU share and 1, 2, 4, 8 GPUs, equally popular.",
            ),
        ] = None,
        reservation_ttl: Annotated[
            float,
            typer.Option("--reservation-ttl", help="Seconds a filter's choice waits for its bind.", min=1.0),
        ] = 30.0,
        scheduler_name: Annotated[
            list[str] | None,
            typer.Option(
                "--scheduler-name",
                metavar="NAME",
                help="A spec.schedulerName whose pods bind may bind (repeat for several profiles); "
                "default: kubegpu, the chart's profile.",
            ),
        ] = None,
        log_level: Annotated[
            str, typer.Option("--log-level", help="debug, info, warning or error.")
        ] = "info",
        tls_cert_file: Annotated[
            Path | None,
            typer.Option(
                "--tls-cert-file",
                dir_okay=False,
                help="Serve HTTPS with this certificate (PEM; with --tls-private-key-file).",
            ),
        ] = None,
        tls_private_key_file: Annotated[
            Path | None,
            typer.Option(
                "--tls-private-key-file", dir_okay=False, help="The certificate's private key (PEM)."
            ),
        ] = None,
        client_ca_file: Annotated[
            Path | None,
            typer.Option(
                "--client-ca-file",
                dir_okay=False,
                help="CA bundle (PEM): answer filter, prioritize and bind only to clients with a certificate "
                "it signed (kube-scheduler's tlsConfig certFile/keyFile); /healthz and /readyz need none.",
            ),
        ] = None,
    ) -> None:
        """Run the kube-scheduler extender: per-GPU accounting from the API server, GPU shares
        (kubegpu.io/gpu-milli), and the placement policy of `kubegpu sim`."""
        from kubegpu.cli.logs import check_log_level
        from kubegpu.errors import InputError
        from kubegpu.extender.cluster import ApiBinder, ClusterSync
        from kubegpu.extender.handlers import Extender
        from kubegpu.extender.ledger import Ledger
        from kubegpu.extender.server import ExtenderServer, TlsSettings
        from kubegpu.extender.workload import default_typical, typical_from_file
        from kubegpu.kubeapi import KubeApi
        from kubegpu.probes import parse_address
        from kubegpu.sim.plan import value_plan_of
        from kubegpu.sim.policy import get_policy
        from kubegpu.sim.scoring import Policy

        logging.basicConfig(
            level=check_log_level(log_level),  # an unknown level is refused before anything starts
            format="%(asctime)s %(levelname)s %(name)s %(message)s",
            stream=sys.stderr,
        )
        parse_address(listen, flag="--listen")  # bad input is refused before anything starts
        if (tls_cert_file is None) != (tls_private_key_file is None):
            raise InputError("--tls-cert-file and --tls-private-key-file go together")
        if client_ca_file is not None and tls_cert_file is None:
            raise InputError("--client-ca-file needs --tls-cert-file and --tls-private-key-file")
        tls = None
        if tls_cert_file is not None and tls_private_key_file is not None:
            tls = TlsSettings(
                cert_file=tls_cert_file, key_file=tls_private_key_file, client_ca_file=client_ca_file
            )
            tls.context()  # an unreadable file is refused before anything starts, naming the flag
        placer = get_policy(policy)
        typical = typical_from_file(workload) if workload is not None else default_typical()
        plan_note = ""
        if placer.name == Policy.KUBEGPU_PLAN.value:  # its plan (an LP) now, not at the first pod
            plan_note = f" (plan: {value_plan_of(typical).summary()})"
        names = [n.strip() for n in scheduler_name or ["kubegpu"]]
        if not all(names):
            raise InputError("--scheduler-name: a scheduler name cannot be empty")
        api = KubeApi(kubeconfig=kubeconfig)
        ledger = Ledger(policy=placer, typical=typical, reservation_ttl_s=reservation_ttl)
        sync = ClusterSync(api, ledger, on_synced=ledger.warm_up)
        # ready: both first lists in and both watches current; alive: both watch threads run
        front = Extender(
            ledger, ApiBinder(api), readiness=sync.ready, liveness=sync.alive, scheduler_names=names
        )
        server = ExtenderServer(front, listen, tls=tls)
        server.start()
        sync.start()
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        typer.echo(
            f"kubegpu extender: policy {placer.name}{plan_note}, serving {'https' if tls else 'http'} on "
            f"{listen} (port {server.port})",
            err=True,
        )
        stop.wait()
        sync.stop()
        server.stop()

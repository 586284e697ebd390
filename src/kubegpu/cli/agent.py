"""`kubegpu agent`: run the kubelet device plugin for this node's GPUs (real or simulated).

Flags and environment variables carry NVIDIA's k8s-device-plugin names where NVIDIA has them
(``--mig-strategy``/``MIG_STRATEGY``, ``--device-list-strategy``/``DEVICE_LIST_STRATEGY`` …), so a
DaemonSet written for NVIDIA's plugin keeps working. Precedence: flag > environment > config file.
The options of the agent's settings are generated from ``kubegpu.deviceplugin.config.SETTINGS`` (the
one description of each setting); the options written out below are the ones that are not settings:
where the GPUs come from, where kubelet is, the config file, fault injection and logging.
Logs are one JSON object per line when stderr is not a terminal.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from kubegpu.cli.logs import setup_logging as _setup_logging
from kubegpu.deviceplugin.config import CLI_FLAGS, SETTINGS, Setting
from kubegpu.echo import shorten

__all__ = ["register"]


def _display(value: object) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(_display(v) for v in value)
    return str(value) if value != "" else "none"


def _setting_help(setting: Setting[Any]) -> str:
    """A setting's ``--help`` text, from the table: what it does, its values, default and sources."""
    parts = [setting.help]
    if setting.allowed:
        parts.append(f"Allowed: {', '.join(setting.allowed)}.")
    if setting.default_from:
        parts.append(f"Default: the value of {CLI_FLAGS.get(setting.default_from, setting.default_from)}.")
    else:
        parts.append(f"Default: {_display(setting.default)}.")
    sources = [f"env {', '.join(e.name for e in setting.env)}"] if setting.env else []
    sources += [f"file {setting.file_keys[0]}"] if setting.file_keys else []
    if sources:
        parts.append(f"({'; '.join(sources)})")
    return " ".join(parts)


def _setting_option(setting: Setting[Any]) -> inspect.Parameter:
    assert setting.flag is not None
    if isinstance(setting.default, bool):
        option = typer.Option(f"{setting.flag}/--no-{setting.flag[2:]}", help=_setting_help(setting))
        annotation: object = Annotated[bool | None, option]
    else:
        option = typer.Option(setting.flag, help=_setting_help(setting), show_default=False)
        annotation = Annotated[str | None, option]
    return inspect.Parameter(
        setting.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


def _with_setting_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` one option per ``SETTINGS`` row with a flag, generated from the row; the
    command gets them as ``settings`` (setting name -> raw value, None where the flag was not given),
    which is what ``load_config(cli=...)`` takes. Its own parameters are the options that are not
    settings."""
    own = inspect.signature(command, eval_str=True)
    flagged = [s for s in SETTINGS if s.flag]
    clash = {s.name for s in flagged} & set(own.parameters)
    if clash:
        raise TypeError(f"agent options named like settings: {', '.join(sorted(clash))}")
    params = [p for name, p in own.parameters.items() if name != "settings"]
    params += [_setting_option(s) for s in flagged]

    @functools.wraps(command)
    def run(**kwargs: Any) -> None:
        settings = {s.name: kwargs.pop(s.name) for s in flagged}
        command(**kwargs, settings=settings)

    del run.__wrapped__  # typer reads the signature below, not the wrapped function's
    run.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run


_BOOL_FLAGS = frozenset(s.flag for s in SETTINGS if s.flag and isinstance(s.default, bool))
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def nvidia_bool_flags(args: list[str]) -> list[str]:
    """``--fail-on-init-error=false`` (NVIDIA's spelling of a boolean flag) -> ``--no-fail-on-init-error``.

    NVIDIA's DaemonSets pass ``--flag=true|false``; click's boolean flags take no value, so each such
    argument of a boolean setting is rewritten before parsing. Arguments after ``--`` are left alone."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        flag, sep, value = arg.partition("=")
        if not sep or flag not in _BOOL_FLAGS:
            out.append(arg)
        elif value.strip().lower() in _TRUE:
            out.append(flag)
        elif value.strip().lower() in _FALSE:
            out.append("--no-" + flag[2:])
        else:
            raise typer.BadParameter(
                f"{shorten(value)} is not a boolean; give true or false", param_hint=flag
            )
    return out


class _AgentCommand(TyperCommand):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer vendors click's Context
        return super().parse_args(ctx, nvidia_bool_flags(args))


def register(app: typer.Typer) -> None:
    """Add the ``agent`` command."""

    @app.command(
        "agent",
        cls=_AgentCommand,
        epilog="Examples: kubegpu agent --node-spec builtin:seed-8gpu --device-plugin-dir /tmp/dp · "
        "kubegpu agent --nvml --config /etc/kubegpu/config.yaml · "
        "kubegpu agent --node-spec node.yaml --fault-file faults.jsonl",
    )
    @_with_setting_options
    def agent(
        *,
        node_spec: Annotated[
            str | None,
            typer.Option(
                "--node-spec",
                help="Simulated GPUs: builtin:NAME (seed-8gpu, dgx-h100, hgx-16 …) or a node spec YAML file.",
            ),
        ] = None,
        nvml: Annotated[
            bool, typer.Option("--nvml", help="Real GPUs through NVML (needs the driver).")
        ] = False,
        device_plugin_dir: Annotated[
            Path,
            typer.Option(
                "--device-plugin-dir", envvar="DEVICE_PLUGIN_DIR", help="kubelet's device-plugin directory."
            ),
        ] = Path("/var/lib/kubelet/device-plugins"),
        config_file: Annotated[
            Path | None,
            typer.Option(
                "--config",
                "--config-file",
                envvar="CONFIG_FILE",
                help="NVIDIA-style config (version: v1, YAML or JSON) with an optional kubegpu: section.",
            ),
        ] = None,
        fault_file: Annotated[
            Path | None,
            typer.Option(
                "--fault-file", help='Follow JSON lines like {"gpu": 3, "xid": 79} as health events.'
            ),
        ] = None,
        kubelet_socket: Annotated[
            str,
            typer.Option(
                "--kubelet-socket",
                envvar="KUBELET_SOCKET",
                help="kubelet's registration socket, relative to the plugin dir; empty skips registration.",
            ),
        ] = "kubelet.sock",
        log_level: Annotated[
            str, typer.Option("--log-level", envvar="LOG_LEVEL", help="debug | info | warning | error")
        ] = "info",
        health_address: Annotated[
            str | None,
            typer.Option(
                "--health-address",
                envvar="HEALTH_ADDRESS",
                help="Serve /healthz (alive) and /readyz (all resources served and registered) over "
                "HTTP on HOST:PORT or :PORT, for kubelet's probes. Default: off.",
            ),
        ] = None,
        init_retry_interval: Annotated[
            float,
            typer.Option(
                "--init-retry-interval",
                envvar="INIT_RETRY_INTERVAL",
                min=0.1,
                help="Seconds between attempts to read the GPUs again after an init failure under "
                "--fail-on-init-error=false (NVIDIA's plugin waits 30 s).",
            ),
        ] = 30.0,
        simulated_nvidia_smi: Annotated[
            bool,
            typer.Option(
                "--simulated-nvidia-smi",
                envvar="SIMULATED_NVIDIA_SMI",
                help="With --node-spec: Allocate mounts a stand-in nvidia-smi (a /bin/sh script written "
                "under the plugin dir) that lists the container's simulated GPUs.",
            ),
        ] = False,
        node_name: Annotated[
            str | None,
            typer.Option(
                "--node-name",
                envvar="NODE_NAME",
                help="This node's name in Kubernetes (the chart passes spec.nodeName): the Node whose GPU "
                "labels and quarantine the agent keeps. Without it both are off.",
            ),
        ] = None,
        kubeconfig: Annotated[
            str | None,
            typer.Option(
                "--kubeconfig",
                envvar="KUBECONFIG",
                help="kubeconfig for the API server. Default: the pod's service account when running "
                "in a pod, else ~/.kube/config.",
            ),
        ] = None,
        settings: Mapping[str, object],
    ) -> None:
        """Run the kubelet device plugin: advertise GPUs, pick topology-aware sets, report health."""
        from kubegpu.agent import Agent, AgentOptions
        from kubegpu.errors import InputError

        if nvml and node_spec:
            raise InputError("--nvml and --node-spec are mutually exclusive: pick real or simulated GPUs")
        if simulated_nvidia_smi and not node_spec:
            raise InputError("--simulated-nvidia-smi needs --node-spec: real GPUs bring the real nvidia-smi")
        _setup_logging(log_level)  # an unknown level is an input error here, before anything starts
        options = AgentOptions(
            node_spec=node_spec,
            use_nvml=nvml,
            device_plugin_dir=device_plugin_dir,
            kubelet_socket=kubelet_socket,
            config_file=config_file,
            cli_overrides=settings,
            fault_file=fault_file,
            env=dict(os.environ),
            health_address=health_address or None,
            init_retry_s=init_retry_interval,
            simulated_nvidia_smi=simulated_nvidia_smi,
            node_name=node_name or None,
            kubeconfig=kubeconfig or None,
        )
        Agent(options).run_until_signalled()

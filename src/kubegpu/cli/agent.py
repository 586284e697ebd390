"""`kubegpu agent`: run the kubelet device plugin for this node's GPUs (real or simulated).

Flags and environment variables carry NVIDIA's k8s-device-plugin names where NVIDIA has them
(``--mig-strategy``/``MIG_STRATEGY``, ``--device-list-strategy``/``DEVICE_LIST_STRATEGY`` …), so a
DaemonSet written for NVIDIA's plugin keeps working. Precedence: flag > environment > config file.
Logs are one JSON object per line when stderr is not a terminal.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]

_STANDARD_LOG_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_LOG_FIELDS:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD_LOG_FIELDS)
        line = f"{record.levelname.lower():7} {record.getMessage()}" + (f"  {extra}" if extra else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TextFormatter() if sys.stderr.isatty() else _JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def register(app: typer.Typer) -> None:
    """Add the ``agent`` command."""

    @app.command(
        "agent",
        epilog="Examples: kubegpu agent --node-spec builtin:seed-8gpu --device-plugin-dir /tmp/dp · "
        "kubegpu agent --nvml --config /etc/kubegpu/config.yaml · "
        "kubegpu agent --node-spec node.yaml --fault-file faults.jsonl",
    )
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
        mig_strategy: Annotated[
            str | None, typer.Option("--mig-strategy", help="none | single | mixed")
        ] = None,
        fail_on_init_error: Annotated[
            bool | None,
            typer.Option("--fail-on-init-error/--no-fail-on-init-error", help="Exit if GPUs cannot be read."),
        ] = None,
        nvidia_driver_root: Annotated[str | None, typer.Option("--nvidia-driver-root")] = None,
        nvidia_dev_root: Annotated[str | None, typer.Option("--nvidia-dev-root")] = None,
        pass_device_specs: Annotated[
            bool | None, typer.Option("--pass-device-specs/--no-pass-device-specs")
        ] = None,
        device_list_strategy: Annotated[
            str | None,
            typer.Option(
                "--device-list-strategy",
                help="envvar | volume-mounts | cdi-annotations | cdi-cri (comma list)",
            ),
        ] = None,
        device_id_strategy: Annotated[
            str | None, typer.Option("--device-id-strategy", help="uuid | index")
        ] = None,
        cdi_annotation_prefix: Annotated[str | None, typer.Option("--cdi-annotation-prefix")] = None,
        mps_root: Annotated[str | None, typer.Option("--mps-root")] = None,
        gds_enabled: Annotated[bool | None, typer.Option("--gds-enabled/--no-gds-enabled")] = None,
        mofed_enabled: Annotated[bool | None, typer.Option("--mofed-enabled/--no-mofed-enabled")] = None,
        gdrcopy_enabled: Annotated[
            bool | None, typer.Option("--gdrcopy-enabled/--no-gdrcopy-enabled")
        ] = None,
        shared_devices_allocation_policy: Annotated[
            str | None,
            typer.Option("--shared-devices-allocation-policy", help="Replica policy: distributed | packed"),
        ] = None,
        allocation_policy: Annotated[
            str | None, typer.Option("--allocation-policy", help="Whole-GPU policy: topology | simple")
        ] = None,
        log_level: Annotated[str, typer.Option("--log-level", envvar="LOG_LEVEL")] = "info",
    ) -> None:
        """Run the kubelet device plugin: advertise GPUs, pick topology-aware sets, report health."""
        from kubegpu.agent import Agent, AgentOptions
        from kubegpu.errors import InputError

        if nvml and node_spec:
            raise InputError("--nvml and --node-spec are mutually exclusive: pick real or simulated GPUs")
        if log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise InputError(
                f"--log-level: {log_level!r} is not allowed; allowed: debug, info, warning, error"
            )
        _setup_logging(log_level)
        overrides: dict[str, object] = {
            "mig_strategy": mig_strategy,
            "fail_on_init_error": fail_on_init_error,
            "nvidia_driver_root": nvidia_driver_root,
            "nvidia_dev_root": nvidia_dev_root,
            "pass_device_specs": pass_device_specs,
            "device_list_strategies": device_list_strategy,
            "device_id_strategy": device_id_strategy,
            "cdi_annotation_prefix": cdi_annotation_prefix,
            "mps_root": mps_root,
            "gds_enabled": gds_enabled,
            "mofed_enabled": mofed_enabled,
            "gdrcopy_enabled": gdrcopy_enabled,
            "replica_policy": shared_devices_allocation_policy,
            "allocation_policy": allocation_policy,
        }
        options = AgentOptions(
            node_spec=node_spec,
            use_nvml=nvml,
            device_plugin_dir=device_plugin_dir,
            kubelet_socket=kubelet_socket,
            config_file=config_file,
            cli_overrides=overrides,
            fault_file=fault_file,
            env=dict(os.environ),
        )
        Agent(options).run_until_signalled()

"""Container-runtime checks: can a container started on this host get the GPU's devices and libraries.

The second link of the chain (seed 001 §1.3, seed 000's row "Pod Running but nvidia-smi fails in the
container"): the NVIDIA Container Toolkit must be installed and containerd (or Docker) must know its
runtime, or CDI specs must describe the GPUs. All reads go through the ``HostProbe``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from kubegpu.doctor.chain import Check
from kubegpu.doctor.finding import CheckId, Layer, Outcome, fail, ok, skip, warn
from kubegpu.doctor.host import ID_GPU_PRESENT, NodeContext
from kubegpu.doctor.hostprobe import HostProbe
from kubegpu.doctor.jsonkind import describe_json
from kubegpu.echo import shorten
from kubegpu.model.cdi import DEFAULT_AGENT_KIND

__all__ = ["RUNTIME_CHECKS"]

ID_TOOLKIT = CheckId("runtime.toolkit")
ID_CONTAINERD = CheckId("runtime.containerd")
ID_CDI = CheckId("runtime.cdi")
ID_DOCKER = CheckId("runtime.docker")

TOOLKIT_BINARIES = (
    "nvidia-ctk",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-container-toolkit",
)
CDI_GPU_KINDS = (
    "nvidia.com/gpu",
    "k8s.device-plugin.nvidia.com/gpu",
    "management.nvidia.com/gpu",
    DEFAULT_AGENT_KIND,
)
CONTAINERD_FIX = (
    "nvidia-ctk runtime configure --runtime=containerd --set-as-default\n"
    "systemctl restart containerd\n"
    "ctr image pull docker.io/nvidia/cuda:12.4.0-base-ubuntu22.04 && "
    "ctr run --rm --gpus 0 docker.io/nvidia/cuda:12.4.0-base-ubuntu22.04 gpu-test nvidia-smi  # verify"
)
RUNTIMECLASS = (
    "kubectl apply -f - <<'EOF'\n"
    "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: nvidia}\nhandler: nvidia\nEOF\n"
    "and set spec.runtimeClassName: nvidia in GPU pods"
)


def check_toolkit(ctx: NodeContext) -> Outcome:
    probe = ctx.facts.probe
    found = {name: path for name in TOOLKIT_BINARIES if (path := probe.find_command(name)) is not None}
    if not found:
        return fail(
            "the NVIDIA Container Toolkit is not installed: containers get no GPU device nodes or driver "
            "libraries",
            f"none of {', '.join(TOOLKIT_BINARIES)} under /usr/bin"
            + (" or on PATH" if probe.is_live else ""),
            fix="install nvidia-container-toolkit from NVIDIA's libnvidia-container repository "
            "(apt-get install -y nvidia-container-toolkit), then nvidia-ctk runtime configure "
            "--runtime=containerd && systemctl restart containerd",
        )
    evidence = [f"{name}: {probe.display(path)}" for name, path in found.items()]
    if "nvidia-ctk" in found:
        version = probe.run("nvidia-ctk", "--version", timeout_s=2.0)
        if version.succeeded and version.stdout.strip():
            evidence.append(version.stdout.strip().splitlines()[0])
    return ok("NVIDIA Container Toolkit installed", *evidence)


def _walk(table: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    if isinstance(table, dict):
        yield path, table
        for key, value in table.items():
            yield from _walk(value, (*path, str(key)))


def _containerd_files(probe: HostProbe) -> tuple[list[Path], list[str]]:
    """The main config and its ``imports`` (drop-ins written by ``nvidia-ctk --drop-in``), parse errors."""
    main = probe.path("etc/containerd/config.toml")
    files, errors, queue, seen = [], [], [main], set()
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        text = probe.read_path(path)
        if text is None:
            continue
        files.append(path)
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            errors.append(f"{probe.display(path)}: {exc}")
            continue
        imports = doc.get("imports")
        for entry in imports if isinstance(imports, list) else []:
            pattern = str(entry)
            host_pattern = pattern if pattern.startswith("/") else f"{probe.display(path.parent)}/{pattern}"
            parent, _, glob = host_pattern.rpartition("/")
            queue.extend(probe.glob(parent or "/", glob))
    return files, errors


def _runtime_binary(spec: Any, where: str, wrong: list[str]) -> str:
    """A runtime table's ``options.BinaryName`` ("" when unset); wrong types are added to ``wrong``."""
    if not isinstance(spec, dict):
        wrong.append(f"{where} = {shorten(spec)} is not a table")
        return ""
    options = spec.get("options", {})
    if not isinstance(options, dict):
        wrong.append(f"{where}.options = {shorten(options)} is not a table")
        return ""
    binary = options.get("BinaryName", "")
    if not isinstance(binary, str):
        wrong.append(f"{where}.options.BinaryName = {shorten(binary)} is not a string")
        return ""
    return binary


def check_containerd(ctx: NodeContext) -> Outcome:
    probe = ctx.facts.probe
    files, errors = _containerd_files(probe)
    uses_containerd = probe.find_command("containerd") is not None or probe.exists(
        "run/containerd/containerd.sock"
    )
    if not files:
        if not uses_containerd:
            return skip("containerd is not used on this host (no /etc/containerd/config.toml, no containerd)")
        return fail(
            "containerd runs with its built-in defaults (no /etc/containerd/config.toml): it has no nvidia "
            "runtime, so GPU containers start without the driver",
            fix=CONTAINERD_FIX,
        )
    if errors:
        return fail(
            "containerd's configuration does not parse, so containerd will not start with it",
            *errors,
            fix="fix the TOML at the line named above, then systemctl restart containerd",
        )
    runtimes: dict[str, tuple[str, str]] = {}
    defaults: list[tuple[str, str]] = []
    cdi: list[str] = []
    wrong: list[str] = []
    for path in files:
        doc = tomllib.loads(probe.read_path(path) or "")
        where = probe.display(path)
        for keys, table in _walk(doc):
            dotted = ".".join(f'"{k}"' if "." in k else k for k in keys)
            if keys and keys[-1] == "runtimes":
                for name, spec in table.items():
                    binary = _runtime_binary(spec, f"{where}: {dotted}.{name}", wrong)
                    if name == "nvidia" or "nvidia-container-runtime" in binary:
                        runtimes[str(name)] = (binary, where)
            if "default_runtime_name" in table:
                default = table["default_runtime_name"]
                if isinstance(default, str):
                    defaults.append((default, where))
                else:
                    wrong.append(
                        f"{where}: {dotted}.default_runtime_name = {shorten(default)} is not a string"
                    )
            if "enable_cdi" in table:
                cdi.append(f"{where}: enable_cdi = {str(table['enable_cdi']).lower()}")
    if wrong:
        return fail(
            f"containerd's configuration has a value of the wrong type ({wrong[0]}): containerd will not"
            " start with it",
            *wrong,
            fix="fix the value named above (nvidia-ctk runtime configure --runtime=containerd writes a"
            " valid one), then systemctl restart containerd",
        )
    evidence = [f"read {probe.display(p)}" for p in files]
    evidence += [f"{w}: runtime {n!r} BinaryName={b or '(default)'}" for n, (b, w) in runtimes.items()]
    evidence += [f"{w}: default_runtime_name = {d!r}" for d, w in defaults]
    evidence += cdi
    if not runtimes:
        return fail(
            "containerd has no nvidia runtime: GPU containers start without device nodes and driver "
            "libraries (nvidia-smi fails inside, or the pod crash-loops)",
            *evidence,
            fix=CONTAINERD_FIX,
        )
    for name, (binary, _where) in runtimes.items():
        if binary.startswith("/") and not probe.exists(binary):
            return fail(
                f"containerd runtime {name!r} points at {binary}, which does not exist",
                *evidence,
                fix="reinstall nvidia-container-toolkit, or rerun nvidia-ctk runtime configure "
                "--runtime=containerd to rewrite the path; systemctl restart containerd",
            )
    default = defaults[-1][0] if defaults else "runc"
    if default not in runtimes:
        return warn(
            f"containerd knows the nvidia runtime but its default is {default!r}: only pods with "
            "runtimeClassName: nvidia (or CDI device injection) get GPUs",
            *evidence,
            fix="either make it the default:\n"
            "nvidia-ctk runtime configure --runtime=containerd --set-as-default && "
            "systemctl restart containerd\nor create the RuntimeClass:\n" + RUNTIMECLASS,
        )
    return ok(f"containerd's default runtime is {default!r} (the NVIDIA Container Runtime)", *evidence)


def _cdi_specs(probe: HostProbe) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    specs, errors = [], []
    for rel in ("etc/cdi", "var/run/cdi"):
        for path in probe.glob(rel, "*"):
            if path.suffix not in (".yaml", ".yml", ".json"):
                continue
            text = probe.read_path(path) or ""
            try:
                doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
            except (json.JSONDecodeError, yaml.YAMLError) as exc:
                errors.append(f"{probe.display(path)}: {str(exc).splitlines()[0]}")
                continue
            if isinstance(doc, dict) and doc.get("kind") in CDI_GPU_KINDS:
                specs.append((probe.display(path), doc))
    return specs, errors


def _full_gpu_names(spec: dict[str, Any]) -> set[str]:
    names = {str(d.get("name", "")) for d in spec.get("devices") or [] if isinstance(d, dict)}
    by_index = {n for n in names if n.isdigit()}
    return by_index or {n for n in names if n.startswith("GPU-")}


def _edits(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if isinstance(spec.get("containerEdits"), dict):
        yield spec["containerEdits"]
    for dev in spec.get("devices") or []:
        if isinstance(dev, dict) and isinstance(dev.get("containerEdits"), dict):
            yield dev["containerEdits"]


def check_cdi(ctx: NodeContext) -> Outcome:
    probe = ctx.facts.probe
    specs, errors = _cdi_specs(probe)
    if errors:
        return fail(
            "a CDI spec does not parse: the runtime rejects every CDI device request",
            *errors,
            fix="nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml  # regenerate it",
        )
    if not specs:
        return warn(
            "no CDI spec for nvidia.com/gpu in /etc/cdi or /var/run/cdi: fine with the nvidia runtime's "
            "legacy injection, required for CDI device lists (the cure for 'NVML: Unknown Error' after "
            "systemctl daemon-reload)",
            fix="nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml && nvidia-ctk cdi list",
        )
    gpus = len(ctx.facts.pci_gpus)
    evidence: list[str] = []
    problems: list[str] = []
    for where, spec in specs:
        names = _full_gpu_names(spec)
        evidence.append(
            f"{where}: kind {spec.get('kind')}, {len(names)} GPU device(s): {', '.join(sorted(names))}"
        )
        # kubegpu's agent rewrites its own spec whenever its devices change, and names what it
        # advertises (MIG devices, index names): its device count is not the host's GPU count
        if spec.get("kind") != DEFAULT_AGENT_KIND and len(names) != gpus:
            problems.append(f"{where} describes {len(names)} GPU(s), the host has {gpus}")
        for edits in _edits(spec):
            for node in edits.get("deviceNodes") or []:
                path = str(node.get("hostPath") or node.get("path") or "") if isinstance(node, dict) else ""
                if path.startswith("/dev/") and not probe.exists(path):
                    problems.append(f"{where}: device node {path} does not exist")
            for mount in edits.get("mounts") or []:
                path = str(mount.get("hostPath", "")) if isinstance(mount, dict) else ""
                if path.startswith("/") and not probe.exists(path):
                    problems.append(f"{where}: mount source {path} does not exist")
    if problems:
        return fail(
            "the CDI spec is stale (GPUs added or removed, or the driver upgraded since it was generated): "
            "containers asking for these devices fail to start",
            *problems[:8],
            *evidence,
            fix="nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml  # after every driver or GPU change",
        )
    return ok(f"CDI spec describes all {gpus} GPU(s)", *evidence)


def _docker_type_errors(conf: Any) -> list[str]:
    """The keys of daemon.json the doctor reads whose value has a type dockerd rejects."""
    if not isinstance(conf, dict):
        return [f"the top level is {describe_json(conf)}, not an object"]
    wrong = []
    if "default-runtime" in conf and not isinstance(conf["default-runtime"], str):
        wrong.append(f"default-runtime is {describe_json(conf['default-runtime'])}, not a string")
    runtimes = conf.get("runtimes", {})
    if not isinstance(runtimes, dict):
        return [*wrong, f"runtimes is {describe_json(runtimes)}, not an object"]
    for name, spec in runtimes.items():
        if not isinstance(spec, dict):
            wrong.append(f"runtimes.{name} is {describe_json(spec)}, not an object with a path")
        elif "path" in spec and not isinstance(spec["path"], str):
            wrong.append(f"runtimes.{name}.path is {describe_json(spec['path'])}, not a string")
    return wrong


def check_docker(ctx: NodeContext) -> Outcome:
    probe = ctx.facts.probe
    text = probe.read_text("etc/docker/daemon.json")
    cri_dockerd = probe.find_command("cri-dockerd") is not None
    if text is None:
        if probe.find_command("dockerd") is None:
            return skip("Docker is not used on this host (no /etc/docker/daemon.json, no dockerd)")
        outcome = fail if cri_dockerd else warn
        return outcome(
            "Docker has no daemon.json, so no nvidia runtime"
            + (": kubelet uses Docker through cri-dockerd, so GPU pods get no driver" if cri_dockerd else ""),
            fix="nvidia-ctk runtime configure --runtime=docker && systemctl restart docker",
        )
    try:
        conf = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; a 5000-digit number; deep nesting
        where = (
            f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
            if isinstance(exc, json.JSONDecodeError)
            else "nested too deeply or a number too long to read"
        )
        return fail(
            f"/etc/docker/daemon.json does not parse ({where}): dockerd refuses to start",
            fix="fix the JSON, then systemctl restart docker",
        )
    wrong = _docker_type_errors(conf)
    if wrong:
        return fail(
            f"/etc/docker/daemon.json has a value of the wrong type ({wrong[0]}): dockerd refuses to start",
            *(f"/etc/docker/daemon.json: {w}" for w in wrong),
            fix="fix the value named above (nvidia-ctk runtime configure --runtime=docker writes a valid"
            " one), then systemctl restart docker",
        )
    runtimes = conf.get("runtimes") if isinstance(conf, dict) else None
    nvidia = runtimes.get("nvidia") if isinstance(runtimes, dict) else None
    default = conf.get("default-runtime", "runc") if isinstance(conf, dict) else "runc"
    evidence = [f"/etc/docker/daemon.json: runtimes={sorted(runtimes) if isinstance(runtimes, dict) else []}"]
    evidence.append(f"/etc/docker/daemon.json: default-runtime={default!r}")
    if nvidia is None:
        outcome = fail if cri_dockerd else warn
        return outcome(
            "Docker has no nvidia runtime in daemon.json"
            + (" and kubelet uses it through cri-dockerd" if cri_dockerd else " (docker run --gpus fails)"),
            *evidence,
            fix="nvidia-ctk runtime configure --runtime=docker && systemctl restart docker",
        )
    return ok(f"Docker knows the nvidia runtime (default {default!r})", *evidence)


RUNTIME_CHECKS: tuple[Check[NodeContext], ...] = (
    Check(id=ID_TOOLKIT, layer=Layer.RUNTIME, needs=(ID_GPU_PRESENT,), run=check_toolkit),
    Check(id=ID_CONTAINERD, layer=Layer.RUNTIME, needs=(ID_GPU_PRESENT,), run=check_containerd),
    Check(id=ID_CDI, layer=Layer.RUNTIME, needs=(ID_GPU_PRESENT,), run=check_cdi),
    Check(id=ID_DOCKER, layer=Layer.RUNTIME, needs=(ID_GPU_PRESENT,), run=check_docker),
)

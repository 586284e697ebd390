"""Every real-GPU path of kubegpu, once, on a machine with an NVIDIA GPU and driver: the device check.

Read-only by construction: nothing here changes a GPU's settings (no MIG mode change, no instance
created or destroyed, no reset, no clocks, no persistence mode). In order, each step with its own
time limit, the whole well under 8 minutes:

0. the preflight: the interpreter imports every module the steps need (versions recorded) and runs one
   CLI command; if not, the run stops here with one reason (``bench/gpu_smoke_wheels.py`` prepares
   the wheels for a machine with no package registry);
1. ``nvidia-smi -q -x`` (the reference the NVML readings are compared with);
2. ``kubegpu doctor node --json --verbose`` (host checks, host.nvml-library among them);
3. ``kubegpu topo nvml``, ``labels nvml``, ``dra devices nvml``, ``mig current nvml`` (``--json``);
4. ``kubegpu agent --nvml`` against the kubelet double (real gRPC on a unix socket) for 30 s: it must
   register, advertise every GPU healthy, arm its XID/ECC health watch on every GPU (its log says
   which events) and keep it running; one pod is admitted
   (Allocate with real device nodes), and ``/metrics`` is scraped once;
5. the comparison: GPU count, bus IDs, UUIDs, product names, memory, MIG mode, MIG
   device count, driver and CUDA versions, NVML's view against nvidia-smi's;
6. with NVIDIA's ``gpu-feature-discovery`` at hand (``--gfd PATH``; by default
   ``build/oracle/gpu-feature-discovery``, which ``make gpu-smoke-prep`` copies from the oracle's
   build so that the device machine's run can carry it), GFD's labels of the real GPUs (``--oneshot``,
   read-only) beside ``kubegpu labels nvml``'s, key by key; a difference is reported, with the ones
   docs/compat.md explains marked, and does not change the exit status;
7. MPS (``bench/gpu_smoke_mps.py``): kubegpu's control-daemon code under a private pipe directory on
   GPU 0 and two share clients held to their limits (no compute-mode change); ``mps.json``.

Writes under ``--out`` (default ``$OUT``): ``summary.md`` (the table a person reads first),
``results.json`` (every command's JSON and the comparison), ``logs.txt`` (stderr, the agent's log,
the doctor's report), ``nvidia-smi.xml`` and ``metrics.txt``. Exit 0 when every step ran and NVML and
nvidia-smi agree on identity (count, bus, UUID); 1 otherwise.

``--standin SOURCE`` is the dry run: the C-level NVML stand-in (``tests/nvml_standin``) plays SOURCE
(``builtin:h100-mig-mixed``, a node spec or a YAML machine) through the real pynvml, and an
``nvidia-smi`` shim prints the same machine as XML, so every step runs here, without a GPU.

    bench/gpu_smoke.sh                                   # on the GPU machine; results in $OUT
    bench/gpu_smoke.sh --standin builtin:h100-mig-mixed --out /tmp/smoke   # the dry run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
AGENT_SECONDS = 30  # --agent-seconds
GFD_DEFAULT = REPO / "build" / "oracle" / "gpu-feature-discovery"  # make gpu-smoke-prep puts it there
# the differences from NVIDIA's binaries kubegpu keeps, with their reasons (docs/compat.md): the oracle
# test's list, read here too so that the device check and the test cannot disagree
ALLOWED = REPO / "tests" / "integration" / "oracle" / "allowed_differences.yaml"


@dataclass
class Step:
    name: str
    argv: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclass
class Smoke:
    out: Path
    env: dict[str, str]
    python: str
    steps: list[Step] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)

    def run(self, name: str, argv: list[str], timeout: float = 60) -> Step:
        step = Step(name=name, argv=argv)
        t0 = time.monotonic()
        shown = " ".join(argv).splitlines()[0][:160]
        print(f"[smoke] {name}: {shown}", flush=True)
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, env=self.env, timeout=timeout, check=False
            )
            step.returncode, step.stdout, step.stderr = proc.returncode, proc.stdout, proc.stderr
        except FileNotFoundError as exc:
            step.returncode, step.stderr = 127, str(exc)
        except subprocess.TimeoutExpired as exc:
            step.returncode = 124
            step.stderr = f"timed out after {timeout:.0f} s\n{(exc.stderr or b'').decode(errors='replace')}"
        step.seconds = time.monotonic() - t0
        print(f"[smoke] {name}: exit {step.returncode} in {step.seconds:.1f} s", flush=True)
        self.steps.append(step)
        self.logs.append(f"===== {name} (exit {step.returncode}, {step.seconds:.1f} s)\n{step.stderr}")
        return step

    def kubegpu(self, name: str, *args: str, timeout: float = 60, findings: bool = False) -> Step:
        """``kubegpu ARGS``; with ``findings`` exit 1 is a report of findings (the doctor), not a failure."""
        step = self.run(name, [self.python, "-m", "kubegpu", *args], timeout=timeout)
        if findings and step.returncode == 1 and step.stdout.strip():
            step.returncode = 0
        if step.ok and "--json" in args:
            try:
                self.results[name] = json.loads(step.stdout)
            except json.JSONDecodeError as exc:
                step.returncode = 1
                self.logs.append(f"{name}: output is not JSON: {exc}")
        elif not step.ok:
            self.results[name] = {"error": step.stderr.strip()[-2000:]}
        return step


# -- nvidia-smi's view ------------------------------------------------------------------------------


def smi_view(xml_text: str) -> dict[str, Any]:
    """The fields compared, from ``nvidia-smi -q -x``."""
    root = ET.fromstring(xml_text)

    def text(node: ET.Element | None, path: str) -> str:
        found = node.find(path) if node is not None else None
        return (found.text or "").strip() if found is not None else ""

    gpus = []
    for gpu in root.findall("gpu"):
        total = text(gpu, "fb_memory_usage/total").split()
        migs = gpu.find("mig_devices")
        gpus.append(
            {
                "bus_id": gpu.get("id", ""),
                "product": text(gpu, "product_name"),
                "uuid": text(gpu, "uuid"),
                "pci_device_id": text(gpu, "pci/pci_device_id").lower(),
                "memory_mib": int(total[0]) if total and total[0].isdigit() else None,
                "mig_mode": text(gpu, "mig_mode/current_mig"),
                "mig_devices": 0 if migs is None else len(migs.findall("mig_device")),
            }
        )
    return {"driver": text(root, "driver_version"), "cuda": text(root, "cuda_version"), "gpus": gpus}


def compare(
    smi: dict[str, Any], topo: dict[str, Any], labels: dict[str, Any], mig: dict[str, Any], dra: list[Any]
) -> list[dict[str, Any]]:
    """One row per compared field: what nvidia-smi says, what kubegpu read through NVML, and whether
    they agree; ``identity`` rows (count, bus, UUID) decide the exit status."""
    rows: list[dict[str, Any]] = []

    def row(field_: str, want: object, got: object, *, identity: bool = False, note: str = "") -> None:
        rows.append({"field": field_, "nvidia-smi": want, "kubegpu (NVML)": got, "agree": want == got,
                     "identity": identity, "note": note})  # fmt: skip

    ours = topo.get("gpus", [])
    row("GPU count", len(smi["gpus"]), len(ours), identity=True)
    row("driver version", smi["driver"], labels.get("nvidia.com/cuda.driver-version.full"))
    row("CUDA version", smi["cuda"], labels.get("nvidia.com/cuda.runtime-version.full"))
    by_bus = {g["pci_bus_id"].lower(): g for g in ours}
    mig_by_index = {g["index"]: g for g in mig.get("gpus", [])}
    products: dict[int, str] = {}  # what the DRA driver publishes as productName, by GPU index
    for device in dra:
        attrs = device.get("attributes", {})
        index = attrs.get("parentIndex", attrs.get("index", {})).get("int")
        if index is not None and "productName" in attrs:
            products.setdefault(int(index), attrs["productName"]["string"])
    for s in smi["gpus"]:
        g = by_bus.get(s["bus_id"].lower())
        tag = f"GPU {s['bus_id']}"
        if g is None:
            row(f"{tag}: present", True, False, identity=True)
            continue
        row(f"{tag}: UUID", s["uuid"], g["uuid"], identity=True)
        row(f"{tag}: product", s["product"], products.get(g["index"]))
        row(f"{tag}: memory MiB", s["memory_mib"], g["memory_mib"])
        mode = mig_by_index.get(g["index"], {})
        enabled = {"Enabled": True, "Disabled": False}.get(s["mig_mode"])
        row(f"{tag}: MIG on", enabled, mode.get("mig_enabled") if enabled is not None else None)
        if enabled:
            row(f"{tag}: MIG devices", s["mig_devices"], len(mode.get("instances", [])))
    return rows


def read_gfd_labels(text: str) -> dict[str, str]:
    """GFD's ``--output-file``: ``key=value`` lines."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key:
            out[key] = value
    return out


def gfd_rows(gfd: dict[str, str], ours: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per label key either side writes under nvidia.com/: GFD's value, kubegpu's, whether they
    agree, and the reason docs/compat.md gives where they differ on purpose ("" where it gives none)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.oracle.harness import Difference, load_allowed

    allowed = [a for a in load_allowed(ALLOWED) if a.area == "labels"]
    rows = []
    keys = sorted(k for k in set(gfd) | set(ours) if k.startswith("nvidia.com/"))
    for key in keys:
        want, got = gfd.get(key), ours.get(key)
        seen = Difference("labels", "real GPU", key, _label_text(want), _label_text(got))
        known = next((a.reason for a in allowed if a.allows(seen)), "")
        rows.append({"label": key, "gfd": want, "kubegpu": got, "agree": want == got, "known": known})
    return rows


def _label_text(value: str | None) -> str:
    """A label value as the oracle's list writes it (an absent label is ``<absent>``)."""
    from tests.oracle.harness import ABSENT

    return ABSENT if value is None else value


def gfd_step(smoke: Smoke, gfd: Path, work: Path) -> list[dict[str, Any]] | None:
    """NVIDIA's GFD once (``--oneshot``: reads NVML and sysfs, writes one file, changes nothing); the
    rows, or ``None`` when it did not run (its stderr is in logs.txt)."""
    out = work / "gfd.labels"
    step = smoke.run(
        "gpu-feature-discovery",
        [
            str(gfd),
            "--oneshot",
            "--no-timestamp",
            "--use-node-feature-api=false",
            "--mig-strategy=none",
            f"--output-file={out}",
        ],
        timeout=90,
    )
    if not step.ok or not out.is_file():
        return None
    labels = read_gfd_labels(out.read_text(encoding="utf-8", errors="replace"))
    (smoke.out / "gfd.labels").write_text(out.read_text(encoding="utf-8", errors="replace"))
    ours = smoke.results.get("labels", {})
    return gfd_rows(labels, ours if isinstance(ours, dict) and "error" not in ours else {})


# -- the agent against the kubelet double ---------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent_step(smoke: Smoke, workdir: Path, seconds: float) -> None:
    sys.path[:0] = [str(REPO), str(REPO / "src")]
    from tests.integration.kubelet_double import Container, KubeletDouble, Pod

    plugin_dir = workdir / "device-plugins"
    plugin_dir.mkdir(parents=True)
    kubelet = KubeletDouble(plugin_dir)
    kubelet.start()
    port = free_port()
    log_path = workdir / "agent.log"
    t0 = time.monotonic()
    report: dict[str, Any] = {"seconds": seconds}
    print(f"[smoke] agent --nvml against the kubelet double for {seconds:g} s", flush=True)
    with log_path.open("wb") as log:
        agent = subprocess.Popen(
            [smoke.python, "-m", "kubegpu", "agent", "--nvml", "--device-plugin-dir", str(plugin_dir),
             "--metrics-address", f"127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, env=smoke.env,
        )  # fmt: skip
        try:
            registered = kubelet.wait_for(lambda: bool(kubelet.device_health("nvidia.com/gpu")), 30)
            report["registered_s"] = round(time.monotonic() - t0, 2) if registered else None
            report["devices"] = kubelet.device_health("nvidia.com/gpu")
            if registered:
                try:
                    env = kubelet.admit_pod(
                        Pod(uid="smoke", containers=[Container(name="main", requests={"nvidia.com/gpu": 1})])
                    )
                    cfg = env["main"]
                    report["allocate"] = {
                        "envs": dict(cfg.envs),
                        "devices": [d.host_path for d in cfg.devices],
                        "mounts": sorted(cfg.mounts),
                        "cdi_devices": list(cfg.cdi_devices),
                    }
                except Exception as exc:  # the smoke records every failure and goes on
                    report["allocate"] = {"error": f"{type(exc).__name__}: {exc}"}
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                    metrics = reply.read().decode()
                (smoke.out / "metrics.txt").write_text(metrics)
                report["metrics_series"] = sum(
                    1 for line in metrics.splitlines() if line.startswith("DCGM_FI_")
                )
            except OSError as exc:
                report["metrics_error"] = str(exc)
            time.sleep(max(0.0, seconds - (time.monotonic() - t0)))  # the health watch keeps running
            report["devices_at_end"] = kubelet.device_health("nvidia.com/gpu")
            report["agent_running_at_end"] = agent.poll() is None
        finally:
            if agent.poll() is None:
                agent.terminate()
                try:
                    agent.wait(15)
                except subprocess.TimeoutExpired:
                    agent.kill()
            kubelet.stop()
    report["agent_exit"] = agent.returncode
    text = log_path.read_text(errors="replace")
    report["tracebacks_in_log"] = text.count("Traceback")
    report["health_watch"] = health_watch(text)
    smoke.logs.append(f"===== agent log\n{text[-20000:]}")
    smoke.results["agent"] = report
    armed = report["health_watch"]
    ok = bool(report.get("registered_s") is not None and report.get("agent_running_at_end")
              and not report["tracebacks_in_log"] and armed is not None and not armed["failing"]
              and len(armed["events"]) == len(smoke.results.get("topo", {}).get("gpus", [])))  # fmt: skip
    smoke.steps.append(Step(name="agent", argv=["kubegpu", "agent", "--nvml"], returncode=0 if ok else 1,
                            seconds=time.monotonic() - t0))  # fmt: skip


def health_watch(agent_log: str) -> dict[str, Any] | None:
    """The agent's "NVML health watch armed" record (event kinds registered per GPU), or None."""
    for line in agent_log.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("msg") == "NVML health watch armed":
            return {"events": record.get("events", {}), "failing": record.get("failing", [])}
    return None


# -- the dry run's stand-ins -----------------------------------------------------------------------


def standin_machine(source: str) -> Any:
    """The machine the C stand-in plays for ``source`` (kubegpu from this checkout's src/, imported
    only for the dry run); ``ValueError`` with the reason when ``source`` is no machine."""
    sys.path[:0] = [str(REPO), str(REPO / "src")]
    from tests.nvml_standin.__main__ import machine_of

    from kubegpu.errors import KubegpuError

    try:
        return machine_of(source)
    except KubegpuError as exc:
        raise ValueError(str(exc)) from None


def standin_env(machine: Any, workdir: Path, python: str) -> dict[str, str]:
    """Environment under which the real pynvml loads the C stand-in playing ``machine``, with an
    ``nvidia-smi`` shim on PATH that prints the same machine as ``nvidia-smi -q -x``."""
    from tests.nvml_standin.build import build

    standin = build()
    machine_file = machine.write(workdir / "machine.txt")
    (workdir / "events").touch()
    bindir = workdir / "bin"
    bindir.mkdir()
    (bindir / "smi.xml").write_text(machine.smi_xml())
    shim = bindir / "nvidia-smi"
    shim.write_text(
        "#!/bin/sh\n# nvidia-smi stand-in for the dry run: only -q -x\n"
        f'if [ "$1" = "-q" ] && [ "$2" = "-x" ]; then cat "{bindir / "smi.xml"}"; exit 0; fi\n'
        'echo "nvidia-smi stand-in: only -q -x" >&2; exit 2\n'
    )
    shim.chmod(0o755)
    env = dict(os.environ)
    env.update(standin.env(machine_file, KUBEGPU_NVML_EVENTS=str(workdir / "events")))
    env["PATH"] = f"{bindir}:{env.get('PATH', '')}"
    return env


# -- the report -------------------------------------------------------------------------------------


def summary(smoke: Smoke, rows: list[dict[str, Any]], dry_run: str | None) -> str:
    lines = [
        f"# kubegpu GPU smoke ({'dry run on the NVML stand-in: ' + dry_run if dry_run else 'real GPU'})",
        "",
    ]
    lines += ["| step | exit | seconds |", "|---|---|---|"]
    lines += [f"| {s.name} | {s.returncode} | {s.seconds:.1f} |" for s in smoke.steps]
    lines += ["", "| field | nvidia-smi | kubegpu (NVML) | agree |", "|---|---|---|---|"]
    for r in rows:
        mark = "yes" if r["agree"] else ("**no**" if r["identity"] else "no")
        note = f" ({r['note']})" if r["note"] and not r["agree"] else ""
        lines.append(f"| {r['field']} | {r['nvidia-smi']} | {r['kubegpu (NVML)']}{note} | {mark} |")
    agent = smoke.results.get("agent", {})
    if agent:
        health = agent.get("devices_at_end") or {}
        healthy = sum(1 for h in health.values() if h == "Healthy")
        lines += [
            "",
            f"agent: registered after {agent.get('registered_s')} s, {len(health)} device(s), {healthy} "
            f"healthy at the end, {agent.get('metrics_series', 0)} DCGM series, "
            f"tracebacks {agent.get('tracebacks_in_log')}",
            f"health watch: {json.dumps(agent.get('health_watch'))}",
        ]
    gfd = smoke.results.get("gfd_comparison", [])
    if gfd is None:
        lines += ["", "GFD's labels: gpu-feature-discovery did not run (logs.txt says why)"]
    elif "gfd_comparison" in smoke.results:
        differ = [r for r in gfd if not r["agree"]]
        lines += ["", f"GFD's labels beside kubegpu's: {len(gfd) - len(differ)} of {len(gfd)} keys agree"]
        if differ:
            lines += ["", "| label | GFD | kubegpu | why |", "|---|---|---|---|"]
            lines += [f"| {r['label']} | {r['gfd']} | {r['kubegpu']} | {r['known'] or '**not explained**'} |"
                      for r in differ]  # fmt: skip
    if "preflight" in smoke.results:
        lines += ["", f"**stopped before the GPU steps:** {smoke.results['preflight']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/gpu_smoke.sh", description=__doc__.splitlines()[0],
        epilog="Read-only: no MIG mode change, no reset, no GPU setting is touched.",
    )  # fmt: skip
    default_out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    parser.add_argument("--out", type=Path, default=default_out, help="where the results go (default: $OUT)")
    parser.add_argument("--standin", metavar="SOURCE", help="dry run: the C NVML stand-in plays SOURCE")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs kubegpu")
    parser.add_argument("--agent-seconds", type=float, default=AGENT_SECONDS, help="the agent's run, seconds")
    parser.add_argument(
        "--gfd", type=Path, default=None,
        help="NVIDIA's gpu-feature-discovery to compare labels with (default: "
        f"{GFD_DEFAULT.relative_to(REPO)} when it is there; never in a dry run unless given)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.out is None:
        parser.error("give --out DIR (or set OUT)")
    if not 0 < args.agent_seconds < float("inf"):
        parser.error(f"--agent-seconds must be above 0, got {args.agent_seconds}")
    machine = None
    if args.standin:
        try:
            machine = standin_machine(args.standin)
        except ValueError as exc:
            parser.error(f"--standin: {exc}")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: cannot create the folder: {exc.strerror or exc}")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kubegpu-smoke.") as tmp:
        work = Path(tmp)
        env = standin_env(machine, work, args.python) if machine is not None else dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")])
        env["PYTHONUNBUFFERED"] = "1"
        smoke = Smoke(out=args.out, env=env, python=args.python)
        if not preflight(smoke):
            return finish(smoke, [], args, t0)
        smi = shutil.which("nvidia-smi", path=env["PATH"]) or "nvidia-smi"
        smi_step = smoke.run("nvidia-smi -q -x", [smi, "-q", "-x"], timeout=60)
        (args.out / "nvidia-smi.xml").write_text(smi_step.stdout)
        smoke.kubegpu("doctor node", "doctor", "node", "--json", "--verbose", timeout=90, findings=True)
        for name, cmd in (("topo", "topo"), ("labels", "labels"), ("dra devices", "dra devices"),
                          ("mig current", "mig current")):  # fmt: skip
            smoke.kubegpu(name, *cmd.split(), "nvml", "--json")
        agent_step(smoke, work, args.agent_seconds)
        mps_argv = [args.python, str(REPO / "bench" / "gpu_smoke_mps.py"), "--out", str(args.out)]
        mps = smoke.run("mps", mps_argv + (["--standin"] if args.standin else []), timeout=180)
        if (args.out / "mps.json").is_file():
            smoke.results["mps"] = json.loads((args.out / "mps.json").read_text())
        elif not mps.ok:
            smoke.results["mps"] = {"error": mps.stderr.strip()[-2000:]}
        gfd = args.gfd if args.gfd is not None else (GFD_DEFAULT if not args.standin else None)
        if gfd is not None and (args.gfd is not None or gfd.is_file()):
            smoke.results["gfd_comparison"] = gfd_step(smoke, gfd, work)
        rows: list[dict[str, Any]] = []
        if smi_step.ok and "topo" in smoke.results and "error" not in smoke.results["topo"]:
            try:
                rows = compare(smi_view(smi_step.stdout), smoke.results["topo"],
                               smoke.results.get("labels", {}), smoke.results.get("mig current", {}),
                               smoke.results.get("dra devices", []))  # fmt: skip
            except ET.ParseError as exc:
                smoke.logs.append(f"nvidia-smi -q -x is not XML: {exc}")
        return finish(smoke, rows, args, t0)


def preflight(smoke: Smoke) -> bool:
    """Can the interpreter run kubegpu at all? One import probe (every module the steps need, with
    versions) and one CLI command through typer; if either fails, the run stops here with one reason
    instead of the same ImportError in every step (the first real run met typer without pydantic)."""
    probe = (
        "import importlib, importlib.metadata as md, json, sys\n"
        "mods = ['pynvml', 'grpc', 'google.protobuf', 'yaml', 'typer', 'pydantic', 'rich', 'numpy',\n"
        "        'prometheus_client', 'urllib3', 'kubegpu.deviceplugin.server', 'kubegpu.metrics.server']\n"
        "missing = []\n"
        "for m in mods:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ImportError as e:\n"
        "        missing.append(f'{m}: {e}')\n"
        "if missing:\n"
        "    sys.exit('cannot import ' + '; '.join(missing))\n"
        "dists = ['nvidia-ml-py', 'grpcio', 'protobuf', 'PyYAML', 'typer', 'pydantic', 'rich', 'numpy',\n"
        "         'prometheus-client', 'urllib3']\n"
        "print(json.dumps({'python': sys.version.split()[0],\n"
        "                  **{d: md.version(d) for d in dists}}))\n"
    )
    versions = smoke.run("versions", [smoke.python, "-c", probe])
    if versions.ok:
        smoke.results["versions"] = json.loads(versions.stdout)
        if smoke.kubegpu("cli", "topo", "builtin:seed-8gpu", "--json").ok:
            return True
    reason = (versions.stderr if not versions.ok else smoke.steps[-1].stderr).strip().splitlines()
    smoke.results["preflight"] = (
        f"{smoke.python} cannot run kubegpu: {reason[-1] if reason else 'no output'}. On a machine "
        "without a package registry, carry the wheels that `bench/gpu_smoke_wheels.py --out .whl` "
        "prepares (docs/gpu-smoke.md)."
    )
    print(f"[smoke] {smoke.results['preflight']}", file=sys.stderr, flush=True)
    return False


def finish(smoke: Smoke, rows: list[dict[str, Any]], args: argparse.Namespace, t0: float) -> int:
    """Write the five files; exit 0 when every step ran and NVML agrees with nvidia-smi on identity."""
    smoke.results["comparison"] = rows
    smoke.results["steps"] = [{"name": s.name, "exit": s.returncode, "seconds": round(s.seconds, 2)}
                              for s in smoke.steps]  # fmt: skip
    smoke.results["total_seconds"] = round(time.monotonic() - t0, 1)
    (args.out / "results.json").write_text(json.dumps(smoke.results, indent=2, default=str))
    (args.out / "logs.txt").write_text("\n".join(smoke.logs))
    text = summary(smoke, rows, args.standin)
    (args.out / "summary.md").write_text(text)
    print(text)
    failed = [s.name for s in smoke.steps if not s.ok]
    disagree = [r["field"] for r in rows if r["identity"] and not r["agree"]]
    if failed or disagree or not rows:
        print(f"[smoke] FAILED: steps {failed or 'none'}, identity disagreements {disagree or 'none'}"
              + ("" if rows else ", no comparison made"), file=sys.stderr)  # fmt: skip
        return 1
    print(f"[smoke] passed in {time.monotonic() - t0:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

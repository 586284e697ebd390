"""Bring a real single-node Kubernetes up and down on this host, as root, without Docker.

Why: kubegpu's end-to-end tests must talk to a real kubelet, scheduler and API server. This module starts
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd and the kubelet as host
processes, each with its own state directory, log file and PID file under the rig's state directory
(`KUBEGPU_RIG_STATE`, default /var/lib/kubegpu-rig), and stops exactly those processes again.

Versions: versions.env beside this file (read by build.sh too); all binaries, containerd's included, are
built from Go modules by build.sh. Debian's containerd package is never used or started.

The kubelet's root directory is /var/lib/kubelet because the kubelet hard-codes its device-plugin
socket directory to /var/lib/kubelet/device-plugins/ (pkg/kubelet/cm/devicemanager NewManagerImpl);
`up` refuses to start if that directory exists without the rig's marker file, and `down` only removes it
when the marker is there.

Facts and flags: the Kubernetes components' own flag references; usage: docs/testing.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from . import images

HERE = Path(__file__).resolve().parent
KUBELET_ROOT = Path("/var/lib/kubelet")
DEVICE_PLUGIN_DIR = KUBELET_ROOT / "device-plugins"
# Where containerd reads CDI specs (static, then dynamic; later wins): a DRA driver writes to the second.
CDI_SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
MARKER = ".kubegpu-rig"
NODE_NAME = "kubegpu-rig"
BRIDGE = "kubegpu0"
POD_SUBNET = "10.88.0.0/16"
SERVICE_RANGE = "10.0.0.0/24"
FIRST_SERVICE_IP = "10.0.0.1"
APISERVER_PORT = 6443
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
# Start order; `down` stops in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet")
REQUIRED_PACKAGES = {
    # command or file that proves the package is there -> Debian package. containerd itself is built
    # (build.sh); its shim runs Debian's runc (1.1.5 on bookworm; see docs/testing.md on the choice).
    "/usr/sbin/runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "/bin/busybox": "busybox-static",
    "/usr/bin/openssl": "openssl",
    "/usr/sbin/iptables": "iptables",
    "/usr/bin/mmdebstrap": "mmdebstrap",  # the kubegpu image's root file system (deploy/image/build.py)
}
# Tools the e2e tests run as their own processes: installed without recommends and without letting the
# package start its service (a policy-rc.d that refuses, for the install only); the suite never uses it.
TOOL_PACKAGES = {
    "/usr/bin/prometheus": "prometheus",  # tests/e2e/test_metrics.py scrapes the agent with it
    "/usr/bin/docker-registry": "docker-registry",  # a local registry for the pre-pull e2e (test_prepull.py)
    "/usr/bin/skopeo": "skopeo",  # pushes a docker-archive into that registry
}
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
APPARMOR_ENABLED = Path("/sys/module/apparmor/parameters/enabled")  # "Y": containerd needs apparmor_parser


# Seconds between two heartbeats of one kwok node (uniform in the range). The node-lifecycle
# controller marks a node NotReady (and taints it) after --node-monitor-grace-period, 50 s by default;
# 30-40 s keeps every node Ready with margin while costing about 1,213 / 35 = 35 status patches a
# second for the openb cluster (kwok's own default, 20-25 s, would be about 54). Measured: docs/testing.md.
KWOK_HEARTBEAT_S = (30.0, 40.0)


def kwok_stages(heartbeat_s: tuple[float, float] = KWOK_HEARTBEAT_S) -> str:
    """kwok's Stage objects for the rig (multi-document YAML; kwok's templates are Go templates).

    node-initialize: a fake node that is not Ready gets Ready (and the pressure conditions False),
    an address and node info; capacity and allocatable stay as the creator wrote them.
    node-heartbeat: a Ready node's conditions are refreshed every ``heartbeat_s`` seconds.
    pod-ready: a pod bound to a fake node, not being deleted and without an IP, becomes Running
    and Ready with an IP from kwok's --cidr. pod-delete: a pod being deleted is removed (what the
    kubelet does once its containers are gone); pods deleted with grace 0 never get here."""
    lo, hi = (round(s * 1000) for s in heartbeat_s)
    conditions = """      conditions:
      - {type: Ready, status: "True", reason: KubeletReady, message: "kwok: fake node",
         lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $since | Quote }}}
      - {type: MemoryPressure, status: "False", reason: KubeletHasSufficientMemory, message: "",
         lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $since | Quote }}}
      - {type: DiskPressure, status: "False", reason: KubeletHasNoDiskPressure, message: "",
         lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $since | Quote }}}
      - {type: PIDPressure, status: "False", reason: KubeletHasSufficientPID, message: "",
         lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $since | Quote }}}
"""
    ready_is = "'.status.conditions.[] | select( .type == \"Ready\" ) | .status'"
    return f"""apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {{name: node-initialize}}
spec:
  resourceRef: {{apiGroup: v1, kind: Node}}
  selector:
    matchExpressions:
    - {{key: {ready_is}, operator: NotIn, values: ["True"]}}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $since := or .metadata.creationTimestamp $now }}}}
{conditions}      addresses:
      - {{type: InternalIP, address: {{{{ NodeIP | Quote }}}}}}
      - {{type: Hostname, address: {{{{ .metadata.name | Quote }}}}}}
      allocatable:
      {{{{ with .status.allocatable }}}}
      {{{{ YAML . 1 }}}}
      {{{{ end }}}}
      capacity:
      {{{{ with .status.capacity }}}}
      {{{{ YAML . 1 }}}}
      {{{{ end }}}}
      daemonEndpoints: {{kubeletEndpoint: {{Port: 0}}}}
      nodeInfo: {{architecture: amd64, operatingSystem: linux, kubeletVersion: kwok, kubeProxyVersion: kwok,
                 bootID: "", containerRuntimeVersion: "", kernelVersion: "", machineID: "", osImage: "",
                 systemUUID: ""}}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {{name: node-heartbeat}}
spec:
  resourceRef: {{apiGroup: v1, kind: Node}}
  selector:
    matchExpressions:
    - {{key: .status.phase, operator: In, values: [Running]}}
    - {{key: {ready_is}, operator: In, values: ["True"]}}
  delay: {{durationMilliseconds: {lo}, jitterDurationMilliseconds: {hi}}}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $since := or .metadata.creationTimestamp $now }}}}
{conditions}  immediateNextStage: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {{name: pod-ready}}
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - {{key: .metadata.deletionTimestamp, operator: DoesNotExist}}
    - {{key: .status.podIP, operator: DoesNotExist}}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - {{type: Initialized, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
      - {{type: Ready, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
      - {{type: ContainersReady, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - {{name: {{{{ .name | Quote }}}}, image: {{{{ .image | Quote }}}}, ready: true, restartCount: 0,
         state: {{running: {{startedAt: {{{{ $now | Quote }}}}}}}}}}
      {{{{ end }}}}
      hostIP: {{{{ NodeIPWith .spec.nodeName | Quote }}}}
      {{{{ $uid := or .metadata.uid "" }}}}{{{{ $name := or .metadata.name "" }}}}
      podIP: {{{{ PodIPWith .spec.nodeName false $uid $name ( or .metadata.namespace "" ) | Quote }}}}
      phase: Running
      startTime: {{{{ $now | Quote }}}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {{name: pod-delete}}
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - {{key: .metadata.deletionTimestamp, operator: Exists}}
  next:
    delete: true
"""


class RigError(RuntimeError):
    """The rig cannot be built, started or used; the message says which step and why."""


def log(msg: str) -> None:
    print(f"[rig {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def log_tail(path: Path, title: str, lines: int = 40) -> str:
    """The last ``lines`` lines of the log at ``path`` under a ``----`` header naming ``title``."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"---- {title}: no log at {path}"
    return f"---- last {min(lines, len(text))} lines of {title} ({path})\n" + "\n".join(text[-lines:])


def _run(argv: Sequence[str | Path], *, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **kw)
    if check and proc.returncode != 0:
        raise RigError(
            f"command failed ({proc.returncode}): {' '.join(map(str, argv))}\n{proc.stderr.strip()}"
        )
    return proc


def _wait(what: str, probe: Callable[[], bool], timeout_s: float, on_timeout: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except RigError:
            raise  # a component died: say so now, not at the timeout
        except Exception:  # not answering yet (connection refused, 404, ...) is expected
            pass
        time.sleep(0.5)
    raise RigError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{on_timeout()}")


def _proc_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime) counted after the ')' that closes the command name.
    return stat.rsplit(")", 1)[1].split()[19]


def has_cap_sys_resource() -> bool:
    """Whether this process may lower oom_score_adj (CAP_SYS_RESOURCE, bit 24 of CapEff)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)
    return False


def node_ip() -> str:
    """The host's non-loopback IPv4 address (kubelet rejects loopback node IPs)."""
    out = _run(["ip", "-4", "-o", "route", "get", "192.0.2.250"], check=False).stdout.split()
    if "src" in out:
        return out[out.index("src") + 1]
    for line in _run(["ip", "-4", "-o", "addr", "show", "scope", "global"]).stdout.splitlines():
        return line.split()[3].split("/")[0]
    raise RigError("no non-loopback IPv4 address on this host; the kubelet needs one for --node-ip")


VERSIONS_FILE = HERE / "versions.env"
VERSION_VARS = {
    "k8s": "KUBEGPU_RIG_K8S_VERSION",
    "etcd": "KUBEGPU_RIG_ETCD_VERSION",
    "containerd": "KUBEGPU_RIG_CONTAINERD_VERSION",
    "kwok": "KUBEGPU_RIG_KWOK_VERSION",
}
CONTAINERD_CMDS = ("containerd", "containerd-shim-runc-v2", "ctr")
# Feature gates the rig sets on every component, beyond the version's defaults (docs/testing.md "DRA
# features" has the table). Empty: v1.37 enables every DRA feature kubegpu's driver uses by default.
# KUBEGPU_RIG_FEATURE_GATES="A=true,B=false" replaces it for one run (to try an alpha gate).
FEATURE_GATES: dict[str, bool] = {}


def feature_gates() -> dict[str, bool]:
    """The feature gates the rig sets on every component ({} when the version's defaults stand)."""
    override = os.environ.get("KUBEGPU_RIG_FEATURE_GATES")
    if override is None:
        return dict(FEATURE_GATES)
    gates: dict[str, bool] = {}
    for item in filter(None, (i.strip() for i in override.split(","))):
        name, sep, value = item.partition("=")
        if not sep or value.lower() not in ("true", "false"):
            raise RigError(f"KUBEGPU_RIG_FEATURE_GATES: {item!r} is not NAME=true or NAME=false")
        gates[name.strip()] = value.lower() == "true"
    return gates


def _gate_flags() -> list[str]:
    """`--feature-gates=A=true,B=false` for the control plane, or nothing."""
    gates = feature_gates()
    return ["--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in gates.items())] if gates else []


def load_versions(path: Path = VERSIONS_FILE, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The rig's component versions ({"k8s": "v1.37.2", ...}): versions.env's NAME=value lines (the
    same file build.sh reads), each overridden by an environment variable of the same name."""
    env = os.environ if environ is None else environ
    found: dict[str, str] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise RigError(f"cannot read the rig's versions file {path}: {exc.strerror}") from exc
    for line in lines:
        key, sep, value = line.split("#", 1)[0].strip().partition("=")
        if sep and key.startswith("KUBEGPU_RIG_") and value.strip():
            found[key] = value.strip()
    versions: dict[str, str] = {}
    for component, var in VERSION_VARS.items():
        value = env.get(var) or found.get(var)
        if not value:
            raise RigError(f"{path} sets no {var} (and the environment does not either)")
        versions[component] = value
    return versions


@dataclasses.dataclass(frozen=True, kw_only=True)
class Paths:
    """Where the rig keeps binaries (cache) and everything it creates (state)."""

    state: Path
    cache: Path
    k8s_version: str
    etcd_version: str
    containerd_version: str
    kwok_version: str

    @classmethod
    def from_env(cls) -> Paths:
        cache = Path(os.environ.get("KUBEGPU_RIG_CACHE", Path.home() / ".cache" / "kubegpu-rig"))
        versions = load_versions()
        return cls(
            state=Path(os.environ.get("KUBEGPU_RIG_STATE", "/var/lib/kubegpu-rig")),
            cache=cache,
            k8s_version=versions["k8s"],
            etcd_version=versions["etcd"],
            containerd_version=versions["containerd"],
            kwok_version=versions["kwok"],
        )

    def bin(self, name: str) -> Path:
        if name == "etcd":
            return self.cache / "bin" / f"etcd-{self.etcd_version}" / "etcd"
        if name in CONTAINERD_CMDS:
            return self.cache / "bin" / f"containerd-{self.containerd_version}" / name
        if name == "kwok":
            return self.cache / "bin" / f"kwok-{self.kwok_version}" / "kwok"
        return self.cache / "bin" / f"k8s-{self.k8s_version}" / name

    def all_bins(self) -> list[Path]:
        """Every binary build.sh makes; the rig needs all of them."""
        k8s = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")
        return [self.bin(n) for n in ("etcd", *CONTAINERD_CMDS, *k8s, "kwok")]

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pids(self) -> Path:
        return self.state / "pids"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def containerd_sock(self) -> Path:
        return self.state / "containerd" / "containerd.sock"

    def component_dir(self, name: str) -> Path:
        return self.state / name

    def log_file(self, name: str) -> Path:
        return self.logs / f"{name}.log"


# ----------------------------------------------------------------------------------------------- build


def build(paths: Paths) -> float:
    """Build (or find cached) binaries; returns seconds spent."""
    t0 = time.monotonic()
    env = dict(os.environ)
    env.setdefault("KUBEGPU_RIG_CACHE", str(paths.cache))
    env[VERSION_VARS["k8s"]] = paths.k8s_version
    env[VERSION_VARS["etcd"]] = paths.etcd_version
    env[VERSION_VARS["containerd"]] = paths.containerd_version
    env[VERSION_VARS["kwok"]] = paths.kwok_version
    if not shutil.which("go", path=env.get("PATH")) and Path("/usr/local/go/bin/go").exists():
        env["PATH"] = "/usr/local/go/bin:" + env.get("PATH", "")
    proc = subprocess.run([str(HERE / "build.sh"), "all"], env=env, check=False)
    if proc.returncode != 0:
        raise RigError(
            f"building Kubernetes/etcd/containerd/kwok failed (exit {proc.returncode}); "
            "see the build output above"
        )
    return time.monotonic() - t0


# ----------------------------------------------------------------------------------------------- setup


RIG_PORTS = {
    ETCD_CLIENT_PORT: "etcd (client)",
    ETCD_PEER_PORT: "etcd (peer)",
    APISERVER_PORT: "kube-apiserver",
    10257: "kube-controller-manager",
    10259: "kube-scheduler",
    10248: "kubelet (healthz)",
    10250: "kubelet",
}


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _foreign_kubelet_root() -> str | None:
    """Why /var/lib/kubelet cannot be used, and how to fix it; None when the rig may use it."""
    if not KUBELET_ROOT.exists() or (KUBELET_ROOT / MARKER).exists():
        return None
    if not KUBELET_ROOT.is_dir():
        return f"{KUBELET_ROOT} is not a directory; remove it"
    entries = sorted(p.name for p in KUBELET_ROOT.iterdir())
    if not entries:
        return None
    shown = ", ".join(entries[:5]) + (", …" if len(entries) > 5 else "")
    hint = ""
    if entries == ["device-plugins"]:
        hint = (
            " (only device-plugins/: typically left by running `kubegpu agent --device-plugin-dir "
            f"{DEVICE_PLUGIN_DIR}` without a kubelet)"
        )
    return (
        f"{KUBELET_ROOT} exists and was not made by the rig; it holds {shown}{hint}. The rig's kubelet "
        f"must own it. If no kubelet runs on this host, remove it (`rm -rf {KUBELET_ROOT}`) and retry"
    )


DEBIAN_CONTAINERD_SOCK = Path("/run/containerd/containerd.sock")


def _socket_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def _containerd_processes() -> list[tuple[int, str, list[str]]]:
    """(pid, executable, argv) of every running containerd daemon (not shims) on this host."""
    found = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            exe = os.readlink(proc_dir / "exe")
            argv = (proc_dir / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if Path(exe.removesuffix(" (deleted)")).name == "containerd":
            found.append((int(proc_dir.name), exe, [a for a in argv if a]))
    return sorted(found)


def _rig_state_of(argv: list[str]) -> Path | None:
    """The state directory of the rig that started this containerd (its --config=<state>/containerd/
    config.toml, with <state>/pids beside it), or None when no rig started it."""
    for arg in argv:
        if arg.startswith("--config="):
            state = Path(arg.removeprefix("--config=")).parent.parent
            if (state / "pids" / "containerd.pid").exists():
                return state
    return None


def _foreign_containerd(paths: Paths) -> list[str]:
    """A containerd the rig did not start (Debian's service, another rig) or a live socket at the rig's
    containerd path: the rig runs its own containerd, found only by its PID file, so either would mean
    two runtimes fighting over containers, mounts and CNI. Called only while the rig is down."""
    problems = []
    own = Rig(paths=paths).pid("containerd")
    for pid, exe, argv in _containerd_processes():
        if pid == own:
            continue
        state = _rig_state_of(argv)
        if state is not None:
            hint = (
                f"another rig's (state {state}): rigs run one at a time (`flock /tmp/kubegpu-rig.lock`); "
                f"stop it with `KUBEGPU_RIG_STATE={state} python3 -m tests.e2e.rig down`"
            )
        elif exe.startswith("/usr/bin/"):
            hint = (
                "Debian's containerd service: stop it (`systemctl stop containerd`, or `kill "
                f"{pid}`) and keep it disabled (`systemctl disable containerd`)"
            )
        else:
            hint = f"stop it (`kill {pid}`) if no other cluster needs it"
        problems.append(f"a containerd the rig did not start is running (pid {pid}, {exe}): {hint}")
    for sock in (paths.containerd_sock, DEBIAN_CONTAINERD_SOCK):
        if not problems and own is None and sock.exists() and _socket_answers(sock):
            problems.append(
                f"a containerd answers on {sock} (the rig starts its own on {paths.containerd_sock}): "
                f"find it with `ss -xlp | grep {sock}` and stop it"
            )
    return problems


def preflight(paths: Paths, *, binaries: bool = True) -> list[str]:
    """Every precondition `up` needs that it will not fix itself, each with how to fix it.

    Checked before any component starts (and, without the binaries, before a build), so a refusal
    leaves nothing running."""
    problems: list[str] = []
    if os.geteuid() != 0:
        return ["the rig needs root (containerd, runc, kubelet, mounts, cgroups): run it with sudo"]
    for b in paths.all_bins() if binaries else ():
        if not (b.is_file() and os.access(b, os.X_OK)):
            problems.append(f"missing binary {b}: run `make rig-build` (tests/e2e/rig/build.sh)")
    problems.extend(_foreign_containerd(paths))
    cg = _run(["stat", "-f", "-c", "%T", "/sys/fs/cgroup"], check=False).stdout.strip()
    if cg not in ("tmpfs", "cgroup2fs"):
        problems.append(f"/sys/fs/cgroup is {cg!r}; the kubelet needs cgroup v1 (tmpfs) or v2 (cgroup2fs)")
    elif cg == "tmpfs":
        for ctl in ("cpu", "cpuacct", "cpuset", "memory", "pids"):
            if not Path("/sys/fs/cgroup", ctl).is_dir():
                problems.append(f"cgroup v1 controller {ctl} is not mounted under /sys/fs/cgroup")
    foreign = _foreign_kubelet_root()
    if foreign:
        problems.append(foreign)
    for port, who in sorted(RIG_PORTS.items()):
        if _port_in_use(port):
            problems.append(
                f"port {port} ({who}) is already in use: another Kubernetes or rig runs here "
                f"(`ss -ltnp 'sport = :{port}'` shows which process); stop it first"
            )
    try:
        node_ip()
    except RigError as exc:
        problems.append(str(exc))
    return problems


def missing_packages() -> tuple[list[str], list[str]]:
    """The Debian packages this host lacks: (REQUIRED_PACKAGES' and AppArmor's, TOOL_PACKAGES')."""
    missing = sorted({pkg for probe, pkg in REQUIRED_PACKAGES.items() if not Path(probe).exists()})
    enabled = APPARMOR_ENABLED.exists() and APPARMOR_ENABLED.read_text().strip() == "Y"
    if enabled and not shutil.which("apparmor_parser"):
        missing.append("apparmor")
    tools = sorted({pkg for probe, pkg in TOOL_PACKAGES.items() if not Path(probe).exists()})
    return missing, tools


def ensure_packages() -> list[str]:
    """Install the Debian packages this host lacks with apt-get (as root); returns what it installed.

    Needed by the rig (runc, CNI plugins, openssl, iptables), the image build (mmdebstrap), the e2e
    tests' own tools and the unit tests of the simulated nvidia-smi (busybox, the image's shell):
    `make test` runs this first (`make rig-packages`), so that `check`, which runs beside the rig
    build on a fresh machine, finds busybox too."""
    missing, tools = missing_packages()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if missing or tools:
        _run(["apt-get", "update", "-q"], env=env)
    if missing:
        log(f"installing Debian packages: {' '.join(missing)}")
        _run(["apt-get", "install", "-y", "-q", *missing], env=env)
    if tools:
        log(f"installing Debian packages (no recommends, services not started): {' '.join(tools)}")
        with _services_not_started():
            _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *tools], env=env)
    return missing + tools


def ensure_host(paths: Paths) -> None:
    """Root, preconditions, Debian packages, kernel settings; installs missing packages with apt-get."""
    problems = preflight(paths)
    if problems:
        raise RigError(
            "the rig cannot start; nothing was started:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    ensure_packages()
    for key, value in (("net/ipv4/ip_forward", "1"), ("net/bridge/bridge-nf-call-iptables", "1")):
        f = Path("/proc/sys", key)
        if f.exists():
            f.write_text(value)


@contextlib.contextmanager
def _services_not_started() -> Iterator[None]:
    """While installing: invoke-rc.d and deb-systemd-invoke start no service (policy-rc.d exit 101).
    An existing policy-rc.d (Debian container images ship one) is left as it is."""
    if POLICY_RC_D.exists():
        yield
        return
    POLICY_RC_D.write_text("#!/bin/sh\n# kubegpu rig: no service starts during this install\nexit 101\n")
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)


def _openssl(*args: str | Path) -> None:
    _run(["openssl", *args])


def make_pki(paths: Paths, ip: str) -> None:
    """A fresh CA, serving and client certificates, and the service-account key (RSA 2048, SHA-256)."""
    d = paths.pki
    d.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-sha256",
        "-days",
        "30",
        "-subj",
        "/CN=kubegpu-rig-ca",
        "-keyout",
        d / "ca.key",
        "-out",
        d / "ca.crt",
    )
    _openssl("genrsa", "-out", d / "sa.key", "2048")
    _openssl("rsa", "-in", d / "sa.key", "-pubout", "-out", d / "sa.pub")
    sans = ",".join(
        [
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
            f"DNS:{NODE_NAME}",
            "IP:127.0.0.1",
            f"IP:{ip}",
            f"IP:{FIRST_SERVICE_IP}",
        ]
    )
    certs = {
        "apiserver": ("/CN=kube-apiserver", "serverAuth", sans),
        "admin": ("/O=system:masters/CN=kubegpu-rig-admin", "clientAuth", None),
        "apiserver-kubelet-client": (
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "clientAuth",
            None,
        ),
        "kube-controller-manager": ("/CN=system:kube-controller-manager", "clientAuth", None),
        "kube-scheduler": ("/CN=system:kube-scheduler", "clientAuth", None),
        "kubelet": (f"/O=system:nodes/CN=system:node:{NODE_NAME}", "clientAuth", None),
    }
    for name, (subj, eku, san) in certs.items():
        ext = d / f"{name}.ext"
        lines = [
            "basicConstraints=CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={eku}",
        ]
        if san:
            lines.append(f"subjectAltName={san}")
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-sha256",
            "-subj",
            subj,
            "-keyout",
            d / f"{name}.key",
            "-out",
            d / f"{name}.csr",
        )
        _openssl(
            "x509",
            "-req",
            "-sha256",
            "-days",
            "30",
            "-in",
            d / f"{name}.csr",
            "-CA",
            d / "ca.crt",
            "-CAkey",
            d / "ca.key",
            "-CAcreateserial",
            "-extfile",
            ext,
            "-out",
            d / f"{name}.crt",
        )
    for f in d.glob("*.key"):
        f.chmod(0o600)


def write_kubeconfig(path: Path, paths: Paths, user: str) -> None:
    """kubectl accepts JSON as YAML; certificates are referenced by path."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "rig",
                "cluster": {
                    "server": f"https://127.0.0.1:{APISERVER_PORT}",
                    "certificate-authority": str(paths.pki / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(paths.pki / f"{user}.crt"),
                    "client-key": str(paths.pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "rig", "context": {"cluster": "rig", "user": user, "namespace": "default"}}],
        "current-context": "rig",
    }
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    path.chmod(0o600)


# ----------------------------------------------------------------------------------------------- processes


@dataclasses.dataclass
class Rig:
    """A handle on a (possibly running) rig: start/stop components, talk to the API."""

    paths: Paths = dataclasses.field(default_factory=Paths.from_env)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    # Popen handles of processes started by this Python process, so they are reaped when stopped.
    _children: dict[str, subprocess.Popen[bytes]] = dataclasses.field(default_factory=dict, repr=False)

    # --- process bookkeeping -------------------------------------------------------------------

    def _pid_file(self, name: str) -> Path:
        return self.paths.pids / f"{name}.pid"

    def pid(self, name: str) -> int | None:
        """PID of a component this rig started and which is still that same process, else None."""
        try:
            pid_s, start = self._pid_file(name).read_text().split()
        except (OSError, ValueError):
            return None
        pid = int(pid_s)
        return pid if _proc_start_time(pid) == start else None

    def _spawn(self, name: str, argv: Sequence[str | Path], env: dict[str, str] | None = None) -> int:
        if self.pid(name):
            raise RigError(f"{name} is already running (pid {self.pid(name)}); run `down` first")
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        self.paths.pids.mkdir(parents=True, exist_ok=True)
        with self.paths.log_file(name).open("ab") as logf:
            logf.write(
                f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} start: {' '.join(map(str, argv))}\n".encode()
            )
            logf.flush()
            proc = subprocess.Popen(
                [str(a) for a in argv],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                cwd=self.paths.state,
            )
        start = None
        for _ in range(50):
            start = _proc_start_time(proc.pid)
            if start:
                break
            time.sleep(0.01)
        self._pid_file(name).write_text(f"{proc.pid} {start}\n")
        self._children[name] = proc
        return proc.pid

    def _check_alive(self, name: str) -> None:
        if self.pid(name) is None:
            raise RigError(f"{name} exited during start-up\n{self.log_tail(name)}")

    def stop(self, name: str, timeout_s: float = 20.0) -> None:
        """SIGTERM the component we started (checked by PID and start time), SIGKILL after timeout_s."""
        pid = self.pid(name)
        if pid is None:
            self._pid_file(name).unlink(missing_ok=True)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.pid(name) == pid:
            self._reap(name)
            time.sleep(0.1)
        if self.pid(name) == pid:
            log(f"{name} (pid {pid}) ignored SIGTERM for {timeout_s:.0f} s; sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while self.pid(name) == pid:
                self._reap(name)
                time.sleep(0.05)
        self._pid_file(name).unlink(missing_ok=True)

    def _reap(self, name: str) -> None:
        child = self._children.get(name)
        if child is not None:
            child.poll()

    def log_tail(self, name: str, lines: int = 40) -> str:
        return log_tail(self.paths.log_file(name), name, lines)

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(self.log_tail(n, lines) for n in COMPONENTS)

    # --- API access ------------------------------------------------------------------------------

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.paths.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.paths.pki / "admin.crt"), str(self.paths.pki / "admin.key"))
        return ctx

    def api(self, path: str, *, timeout_s: float = 10.0) -> Any:
        """GET an API path as the rig's admin; JSON decoded (text for non-JSON answers)."""
        url = f"https://127.0.0.1:{APISERVER_PORT}{path}"
        with urllib.request.urlopen(url, context=self._ssl(), timeout=timeout_s) as resp:
            body = resp.read().decode()
        try:
            return json.loads(body)
        except json.JSONDecodeError:
            return body

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.paths.bin("kubectl")), f"--kubeconfig={self.paths.kubeconfig}", *args]
        proc = subprocess.run(
            argv, input=input_text, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if check and proc.returncode != 0:
            raise RigError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def node(self) -> dict[str, Any]:
        node: dict[str, Any] = self.api(f"/api/v1/nodes/{NODE_NAME}")
        return node

    def node_ready(self) -> bool:
        conds = self.node().get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
        taints = self.node().get("spec", {}).get("taints", [])
        return ready and not any(t["key"] == "node.kubernetes.io/not-ready" for t in taints)

    def is_up(self) -> bool:
        return all(self.pid(n) for n in COMPONENTS)

    # --- components ----------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        d = self.paths.component_dir("etcd")
        d.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "etcd",
            [
                self.paths.bin("etcd"),
                "--name=rig",
                f"--data-dir={d / 'data'}",
                f"--listen-client-urls=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                f"--advertise-client-urls=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                f"--initial-cluster=rig=http://127.0.0.1:{ETCD_PEER_PORT}",
                "--log-level=warn",
                "--unsafe-no-fsync",
            ],
        )

        def healthy() -> bool:
            self._check_alive("etcd")
            with urllib.request.urlopen(f"http://127.0.0.1:{ETCD_CLIENT_PORT}/health", timeout=2) as r:
                return bool(json.loads(r.read()).get("health") == "true")

        _wait("etcd /health", healthy, 60, lambda: self.log_tail("etcd"))

    def _start_apiserver(self, ip: str) -> None:
        pki = self.paths.pki
        self.paths.component_dir("kube-apiserver").mkdir(parents=True, exist_ok=True)
        self._spawn(
            "kube-apiserver",
            [
                self.paths.bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                f"--secure-port={APISERVER_PORT}",
                "--bind-address=0.0.0.0",
                f"--advertise-address={ip}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--allow-privileged=true",
                "--profiling=false",
                *_gate_flags(),
                "--v=1",
            ],
        )

        def ready() -> bool:
            self._check_alive("kube-apiserver")
            return bool(self.api("/readyz", timeout_s=3) == "ok")

        _wait("kube-apiserver /readyz", ready, 120, lambda: self.log_tail("kube-apiserver"))

    def _start_controllers(self) -> None:
        pki = self.paths.pki
        for name in ("kube-controller-manager", "kube-scheduler"):
            d = self.paths.component_dir(name)
            d.mkdir(parents=True, exist_ok=True)
            write_kubeconfig(d / "kubeconfig", self.paths, name)
        kcm_kc = self.paths.component_dir("kube-controller-manager") / "kubeconfig"
        self._spawn(
            "kube-controller-manager",
            [
                self.paths.bin("kube-controller-manager"),
                f"--kubeconfig={kcm_kc}",
                f"--authentication-kubeconfig={kcm_kc}",
                f"--authorization-kubeconfig={kcm_kc}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                "--bind-address=127.0.0.1",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                *_gate_flags(),
                "--v=1",
            ],
        )
        sched_dir = self.paths.component_dir("kube-scheduler")
        (sched_dir / "config.yaml").write_text(
            json.dumps(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(sched_dir / "kubeconfig")},
                    "leaderElection": {"leaderElect": False},
                },
                indent=2,
            )
            + "\n"
        )
        self._spawn(
            "kube-scheduler",
            [
                self.paths.bin("kube-scheduler"),
                f"--config={sched_dir / 'config.yaml'}",
                f"--authentication-kubeconfig={sched_dir / 'kubeconfig'}",
                f"--authorization-kubeconfig={sched_dir / 'kubeconfig'}",
                "--bind-address=127.0.0.1",
                *_gate_flags(),
                "--v=1",
            ],
        )

    # --- extra schedulers (tests that bring their own scheduler profile) --------------------------

    EXTRA_SCHEDULER = "kube-scheduler-extra"
    EXTRA_SCHEDULER_PORT = 10269  # the rig's own scheduler has 10259

    def start_extra_scheduler(self, config: dict[str, Any], timeout_s: float = 60.0) -> int:
        """Start a second kube-scheduler from the rig's binary with ``config`` (a
        KubeSchedulerConfiguration without ``clientConnection``/``leaderElection``, which are added:
        the rig scheduler's kubeconfig, no leader election). It serves its own ``schedulerName``
        profiles beside the rig's default scheduler; stop it with ``stop_extra_scheduler``. Returns
        its PID once ``/healthz`` answers."""
        name = self.EXTRA_SCHEDULER
        d = self.paths.component_dir(name)
        d.mkdir(parents=True, exist_ok=True)
        kubeconfig = self.paths.component_dir("kube-scheduler") / "kubeconfig"
        full = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            **config,
            # qps/burst may be given (a replay of thousands of pods); the kubeconfig is the rig's
            "clientConnection": {**config.get("clientConnection", {}), "kubeconfig": str(kubeconfig)},
            "leaderElection": {"leaderElect": False},
        }
        (d / "config.yaml").write_text(json.dumps(full, indent=2) + "\n")
        pid = self._spawn(
            name,
            [
                self.paths.bin("kube-scheduler"),
                f"--config={d / 'config.yaml'}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.EXTRA_SCHEDULER_PORT}",
                *_gate_flags(),
                "--v=2",
            ],
        )

        def healthy() -> bool:
            self._check_alive(name)
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # its self-signed serving cert
            url = f"https://127.0.0.1:{self.EXTRA_SCHEDULER_PORT}/healthz"
            with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                return bool(r.read().decode().strip() == "ok")

        _wait(f"{name} /healthz", healthy, timeout_s, lambda: self.log_tail(name))
        return pid

    def stop_extra_scheduler(self) -> None:
        self.stop(self.EXTRA_SCHEDULER)

    # --- kwok (fake nodes for scheduler-scale tests, docs/testing.md "kwok") -------------------------

    KWOK = "kwok"
    KWOK_PORT = 10279  # kwok's own /healthz
    KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # value "fake": the nodes kwok manages (and their taint)
    KWOK_POD_CIDR = "10.244.0.0/16"  # fake pod IPs; apart from the rig's real pod subnet

    def start_kwok(
        self, *, heartbeat_s: tuple[float, float] = KWOK_HEARTBEAT_S, timeout_s: float = 60.0
    ) -> int:
        """Start kwok against the rig's API server, managing only the nodes annotated
        ``kwok.x-k8s.io/node=fake`` (the rig's real node is never touched), with the stages of
        ``kwok_stages`` (``heartbeat_s``: the range of seconds between one fake node's heartbeats).
        Nodes are created by the caller (kwok registers none). Returns its PID once ``/healthz``
        answers; stop it with ``stop_kwok``."""
        kwok = self.paths.bin("kwok")
        if not kwok.exists():
            raise RigError(f"no kwok binary at {kwok}; run `python3 -m tests.e2e.rig build`")
        d = self.paths.component_dir(self.KWOK)
        d.mkdir(parents=True, exist_ok=True)
        (d / "stages.yaml").write_text(kwok_stages(heartbeat_s))
        pid = self._spawn(
            self.KWOK,
            [
                kwok,
                f"--kubeconfig={self.paths.kubeconfig}",
                f"--config={d / 'stages.yaml'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={self.KWOK_ANNOTATION}=fake",
                f"--cidr={self.KWOK_POD_CIDR}",
                "--node-ip=10.244.0.1",
                "--node-lease-duration-seconds=0",
                f"--server-address=127.0.0.1:{self.KWOK_PORT}",
            ],
        )

        def healthy() -> bool:
            self._check_alive(self.KWOK)
            with urllib.request.urlopen(f"http://127.0.0.1:{self.KWOK_PORT}/healthz", timeout=2) as r:
                return r.status == 200

        _wait("kwok /healthz", healthy, timeout_s, lambda: self.log_tail(self.KWOK))
        return pid

    def stop_kwok(self) -> None:
        self.stop(self.KWOK)

    def _containerd_config(self) -> str:
        """containerd 2.x, config version 3 (2.4 migrates it to its version 4 in memory at start).

        CDI is always on in containerd >= 2.4 (`enable_cdi` is gone); the spec directories are the
        standard ones, where a DRA driver writes its specs. runc keeps its state under the rig's state
        directory (not /run/containerd/runc), so another containerd on the host cannot see it."""
        d = self.paths.component_dir("containerd")
        cni = self.paths.state / "cni"
        apparmor = Path("/sys/module/apparmor/parameters/enabled")
        no_apparmor = not (apparmor.exists() and apparmor.read_text().strip() == "Y")
        runtime = "plugins.'io.containerd.cri.v1.runtime'"
        cdi_dirs = ", ".join(f"'{p}'" for p in CDI_SPEC_DIRS)
        return f"""version = 3
root = '{d / "root"}'
state = '{d / "state"}'

[grpc]
  address = '{self.paths.containerd_sock}'

[ttrpc]
  address = '{self.paths.containerd_sock}.ttrpc'

[debug]
  address = ''

[metrics]
  address = ''

[plugins.'io.containerd.internal.v1.opt']
  path = '{d / "opt"}'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = '{os.environ.get("KUBEGPU_RIG_SNAPSHOTTER", "overlayfs")}'

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '{images.PAUSE_IMAGE}'

[plugins.'io.containerd.cri.v1.images'.registry]
  # Per-registry hosts.toml files (tests write one to reach a plain-HTTP registry on 127.0.0.1).
  config_path = '{d / "certs.d"}'

[{runtime}]
  netns_mounts_under_state_dir = true
  disable_apparmor = {str(no_apparmor).lower()}
  enable_selinux = false
  cdi_spec_dirs = [{cdi_dirs}]
  # Without CAP_SYS_RESOURCE (some VM sandboxes) runc cannot set the pause container's -998
  # oom_score_adj ("nsexec: failed to update /proc/self/oom_score_adj: Permission denied");
  # containerd then clamps scores to its own (>= current) value instead.
  restrict_oom_score_adj = {str(not has_cap_sys_resource()).lower()}

[{runtime}.containerd]
  default_runtime_name = 'runc'

[{runtime}.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[{runtime}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = '{d / "runc"}'

[{runtime}.cni]
  bin_dirs = ['/usr/lib/cni']
  conf_dir = '{cni / "net.d"}'
  max_conf_num = 1
"""

    def containerd_env(self) -> dict[str, str]:
        """containerd finds its shim on PATH before looking beside itself: the built shim goes first,
        so Debian's /usr/bin/containerd-shim-runc-v2 (containerd 1.6) is never used."""
        return dict(
            os.environ,
            PATH=f"{self.paths.bin('containerd').parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        )

    def _start_containerd(self) -> None:
        d = self.paths.component_dir("containerd")
        d.mkdir(parents=True, exist_ok=True)
        cni = self.paths.state / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-kubegpu-rig.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "kubegpu-rig",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_SUBNET}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(cni / "ipam"),
                            },
                        }
                    ],
                },
                indent=2,
            )
            + "\n"
        )
        (d / "config.toml").write_text(self._containerd_config())
        self._spawn(
            "containerd",
            [self.paths.bin("containerd"), f"--config={d / 'config.toml'}", "--log-level=info"],
            env=self.containerd_env(),
        )

        def cri_ok() -> bool:
            self._check_alive("containerd")
            # containerd 2.x's ctr fails at once while the socket does not exist yet (1.6's waited).
            proc = self.ctr("plugins", "ls", check=False)
            if proc.returncode != 0:
                return False
            out = proc.stdout
            return any(
                line.split()[:2] == ["io.containerd.grpc.v1", "cri"] and line.split()[-1] == "ok"
                for line in out.splitlines()
                if line.strip()
            )

        _wait(
            "containerd's cri plugin",
            cri_ok,
            60,
            lambda: self.ctr("plugins", "ls", check=False).stdout + "\n" + self.log_tail("containerd"),
        )

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(
            [self.paths.bin("ctr"), f"--address={self.paths.containerd_sock}", "-n", "k8s.io", *args],
            check=check,
            env=self.containerd_env(),
        )

    def import_image(self, tar: Path, tag: str) -> None:
        """Import a docker-archive into containerd's ``k8s.io`` namespace (the one the CRI sees) and
        check that ``tag`` is there; used for the rig's own images and for kubegpu's (``make image``)."""
        self.ctr("images", "import", str(tar))
        if tag not in self.ctr("images", "ls", "-q").stdout.split():
            raise RigError(f"image {tag} is not in containerd's k8s.io namespace after import")

    def _import_images(self) -> None:
        for tag, tar in images.write_images(self.paths.state / "images").items():
            self.import_image(tar, tag)

    def _kubelet_config(self, ip: str) -> dict[str, Any]:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.paths.containerd_sock}",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.paths.pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "address": ip,
            "readOnlyPort": 0,
            "clusterDNS": [],
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            "imageGCHighThresholdPercent": 100,
            "evictionHard": {"nodefs.available": "0%", "imagefs.available": "0%", "nodefs.inodesFree": "0%"},
            "podLogsDir": str(self.paths.component_dir("kubelet") / "pod-logs"),
            "shutdownGracePeriod": "0s",
            # kubelet applies a changed ConfigMap to a pod's volume at the pod's next sync; the default
            # (1 minute) made each test of a live config change wait about that long for nothing
            "syncFrequency": "10s",
            # a device plugin's new allocatable reaches the Node object at kubelet's next status update;
            # the default tick (10 s) was most of each e2e wait for allocatable (one node: 1 s is cheap)
            "nodeStatusUpdateFrequency": "1s",
            "rotateCertificates": False,
            "serverTLSBootstrap": False,
        }
        if feature_gates():
            config["featureGates"] = feature_gates()
        return config

    def kubelet_argv(self) -> list[str]:
        d = self.paths.component_dir("kubelet")
        return [
            str(self.paths.bin("kubelet")),
            f"--config={d / 'config.yaml'}",
            f"--kubeconfig={d / 'kubeconfig'}",
            f"--root-dir={KUBELET_ROOT}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={json.loads((d / 'config.yaml').read_text())['address']}",
            "--v=2",
        ]

    def _start_kubelet_process(self) -> None:
        self._spawn("kubelet", self.kubelet_argv())

        def healthy() -> bool:
            self._check_alive("kubelet")
            with urllib.request.urlopen("http://127.0.0.1:10248/healthz", timeout=2) as r:
                return bool(r.read() == b"ok")

        _wait("kubelet /healthz", healthy, 90, lambda: self.log_tail("kubelet"))

    def _start_kubelet(self, ip: str) -> None:
        foreign = _foreign_kubelet_root()  # checked in preflight too; something may have appeared since
        if foreign:
            raise RigError(foreign)
        KUBELET_ROOT.mkdir(parents=True, exist_ok=True)
        (KUBELET_ROOT / MARKER).write_text(str(self.paths.state) + "\n")
        d = self.paths.component_dir("kubelet")
        d.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(d / "kubeconfig", self.paths, "kubelet")
        (d / "config.yaml").write_text(json.dumps(self._kubelet_config(ip), indent=2) + "\n")
        self._start_kubelet_process()

    def restart_kubelet(self) -> None:
        """Stop the kubelet process and start it again with the same configuration (pods keep running)."""
        self.stop("kubelet")
        self._start_kubelet_process()

    def wait_node_ready(self, timeout_s: float = 180) -> None:
        def ready() -> bool:
            self._check_alive("kubelet")
            return self.node_ready()

        def why() -> str:
            try:
                node = self.node()
                conds = json.dumps(node.get("status", {}).get("conditions", []), indent=1)
                taints = json.dumps(node.get("spec", {}).get("taints", []))
            except Exception as exc:
                conds, taints = f"node not readable: {exc}", ""
            tails = f"{self.log_tail('kubelet')}\n{self.log_tail('containerd')}"
            return f"conditions: {conds}\ntaints: {taints}\n{tails}"

        _wait(f"node {NODE_NAME} Ready without the not-ready taint", ready, timeout_s, why)

    def _wait_service_account(self) -> None:
        def present() -> bool:
            self.api("/api/v1/namespaces/default/serviceaccounts/default")
            self.api("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            return True

        _wait(
            "serviceaccount default and configmap kube-root-ca.crt",
            present,
            90,
            lambda: self.log_tail("kube-controller-manager"),
        )

    # --- up / down -----------------------------------------------------------------------------

    def _make_pki(self, ip: str) -> None:
        make_pki(self.paths, ip)
        write_kubeconfig(self.paths.kubeconfig, self.paths, "admin")

    def up(self) -> None:
        t_all = time.monotonic()
        if any(self.pid(n) for n in COMPONENTS):
            raise RigError(f"the rig in {self.paths.state} is (partly) running; run `down` first")
        if self.paths.state.exists():
            log(f"removing stale rig state {self.paths.state}")
            self._remove_state()
        ensure_host(self.paths)
        self.paths.state.mkdir(parents=True, exist_ok=True)
        ip = node_ip()
        steps: list[tuple[str, Callable[[], None]]] = [
            ("pki", lambda: self._make_pki(ip)),
            ("etcd", self._start_etcd),
            ("kube-apiserver", lambda: self._start_apiserver(ip)),
            ("controllers", self._start_controllers),
            ("containerd", self._start_containerd),
            ("images", self._import_images),
            ("kubelet", lambda: self._start_kubelet(ip)),
            ("node-ready", self.wait_node_ready),
            ("service-account", self._wait_service_account),
        ]
        try:
            for name, step in steps:
                t0 = time.monotonic()
                step()
                self.timings[name] = time.monotonic() - t0
                log(f"{name}: {self.timings[name]:.1f} s")
        except BaseException:
            log("start-up failed; component logs follow")
            print(self.log_tails(), file=sys.stderr)
            self.stop_all()
            log(f"stopped what had started; logs kept in {self.paths.logs} until the next `up` or `down`")
            raise
        self.timings["up"] = time.monotonic() - t_all
        (self.paths.state / "rig.json").write_text(
            json.dumps(
                {
                    "node": NODE_NAME,
                    "node_ip": ip,
                    "kubeconfig": str(self.paths.kubeconfig),
                    "kubectl": str(self.paths.bin("kubectl")),
                    "device_plugin_dir": str(DEVICE_PLUGIN_DIR),
                    "k8s_version": self.paths.k8s_version,
                    "etcd_version": self.paths.etcd_version,
                    "containerd_version": self.paths.containerd_version,
                    "timings_s": {k: round(v, 1) for k, v in self.timings.items()},
                },
                indent=2,
            )
            + "\n"
        )
        log(f"rig up in {self.timings['up']:.1f} s; KUBECONFIG={self.paths.kubeconfig}")

    def _delete_pods(self) -> None:
        if not (self.pid("kube-apiserver") and self.pid("kubelet") and self.paths.kubeconfig.exists()):
            return
        proc = self.kubectl(
            "delete",
            "pods",
            "--all",
            "--all-namespaces",
            "--grace-period=1",
            "--wait=true",
            "--timeout=60s",
            check=False,
            timeout_s=90,
        )
        if proc.returncode != 0:
            log(f"deleting pods: {proc.stderr.strip()}")

    def _clean_containers(self) -> None:
        if not self.pid("containerd"):
            return
        for line in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
            self.ctr("tasks", "kill", "-s", "SIGKILL", line, check=False)
        time.sleep(0.5)
        for line in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
            self.ctr("tasks", "delete", "-f", line, check=False)
        for line in self.ctr("containers", "ls", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", line, check=False)

    def _stop_shims(self) -> None:
        """containerd's shims for *our* socket (its path is in their argv) outlive containerd; stop them."""
        needle = str(self.paths.containerd_sock).encode()
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit():
                continue
            try:
                argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc_dir.name), signal.SIGKILL)

    def _unmount_all(self) -> None:
        roots = (str(self.paths.state), str(KUBELET_ROOT))
        for _ in range(3):
            mounts = []
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                mp = line.split()[4].replace("\\040", " ")
                if any(mp == r or mp.startswith(r + "/") for r in roots):
                    mounts.append(mp)
            if not mounts:
                return
            for mp in sorted(mounts, key=len, reverse=True):
                if _run(["umount", mp], check=False).returncode != 0:
                    _run(["umount", "-l", mp], check=False)

    def _remove_state(self) -> None:
        self._unmount_all()
        if (KUBELET_ROOT / MARKER).exists():
            shutil.rmtree(KUBELET_ROOT, ignore_errors=True)
        pod_logs = self.paths.component_dir("kubelet") / "pod-logs"
        containers_logs = Path("/var/log/containers")
        if containers_logs.is_dir():
            for link in containers_logs.iterdir():
                if link.is_symlink() and str(os.readlink(link)).startswith(str(pod_logs)):
                    link.unlink()
        shutil.rmtree(self.paths.state, ignore_errors=True)

    def stop_all(self) -> None:
        """Stop every component this rig started, its containers, shims, mounts and bridge; keep state."""
        self._delete_pods()
        self.stop("kubelet")
        self._clean_containers()
        self.stop_extra_scheduler()  # a test's own scheduler, if one was left running
        self.stop_kwok()  # likewise kwok (fake nodes)
        for name in ("containerd", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            self.stop(name)
        self._stop_shims()
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            _run(["ip", "link", "delete", BRIDGE], check=False)
        self._unmount_all()

    def down(self) -> None:
        t0 = time.monotonic()
        self.stop_all()
        self._remove_state()
        log(f"rig down in {time.monotonic() - t0:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.e2e.rig", description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=["packages", "build", "up", "down", "status", "logs", "restart-kubelet"]
    )
    args = parser.parse_args(argv)
    rig = Rig()
    try:
        if args.command == "packages":
            if os.geteuid() != 0:
                raise RigError("installing the rig's Debian packages needs root: run it with sudo")
            installed = ensure_packages()
            log(f"packages: installed {' '.join(installed)}" if installed else "packages: all present")
        elif args.command == "build":
            log(f"build: {build(rig.paths):.1f} s")
        elif args.command == "up":
            if not rig.is_up():
                problems = preflight(rig.paths, binaries=False)
                if problems:
                    raise RigError(
                        "the rig cannot start; nothing was started:\n"
                        + "\n".join(f"  - {p}" for p in problems)
                    )
            log(f"build (cached binaries are reused): {build(rig.paths):.1f} s")
            rig.up()
        elif args.command == "down":
            rig.down()
        elif args.command == "restart-kubelet":
            rig.restart_kubelet()
        elif args.command == "logs":
            print(rig.log_tails(60))
        else:
            for name in COMPONENTS:
                print(f"{name:24} {rig.pid(name) or '-'}")
            return 0 if rig.is_up() else 1
    except RigError as exc:
        print(f"rig: {exc}", file=sys.stderr)
        return 1
    return 0

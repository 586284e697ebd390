"""Run NVIDIA's nvidia-device-plugin and gpu-feature-discovery beside kubegpu on the C NVML stand-in.

A ``Host`` is one machine the stand-in plays (a builtin node spec), with what NVIDIA's binaries read
besides NVML, laid out in a folder of its own:

* ``pci/<bus>/``: a fake ``/sys/bus/pci/devices`` (vendor, device, class, numa_node, resource, a PCI
  config space without capabilities: not a vGPU), bind-mounted over the real one, so GFD's PCI and vGPU
  scans and both projects' NUMA reads see the machine's GPUs;
* ``root/``: the driver and device root of both projects (``--driver-root``/``--dev-root`` and
  ``--nvidia-driver-root``/``--nvidia-dev-root``): ``dev/nvidia*`` character devices (``mknod``), the
  ``nvidia-caps`` nodes of MIG GPUs, the stand-in as ``libnvidia-ml.so.<driver>``;
* ``/dev``: a tmpfs with the null/zero/random nodes and the same ``nvidia*`` nodes, because NVIDIA's
  plugin checks the control nodes (``/dev/nvidiactl`` …) in its own ``/dev`` (its container's on a node);
* ``node-online``: mounted over ``/sys/devices/system/node/online``: the machine's NUMA nodes (one, 0,
  where its GPUs name none), so the host's own count never changes a result;
* ``mig-minors``: mounted as ``/proc/driver/nvidia-caps/mig-minors``, numbered as the driver numbers them.

Every binary runs through ``NS_SCRIPT`` in a private mount namespace (``unshare --mount``, root): the
mounts above, and for NVIDIA's plugin, whose socket folder is fixed, the test's plugin folder over
``/var/lib/kubelet/device-plugins`` and the test's CDI folder over ``/var/run/cdi``. Nothing outside
the namespace changes. The stand-in library is found through ``LD_LIBRARY_PATH``, as go-nvml's and
pynvml's ``dlopen("libnvidia-ml.so.1")`` find it.

Differences are collected as ``Difference`` rows and checked against ``allowed_differences.yaml``
(next to the tests), whose ids are the rows of docs/compat.md's tables.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kubegpu.model.node import Node, sysfs_bus_id
from kubegpu.sources.spec import load_node
from tests.nvml_standin.build import Standin
from tests.nvml_standin.machine import Machine

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tests/oracle/build.sh"
VERSION = os.environ.get("KUBEGPU_NVIDIA_DP_VERSION", "v0.17.4")
COMPAT_DOC = REPO / "docs/compat.md"
ABSENT = "<absent>"

# What runs inside `unshare --mount --propagation private sh -c NS_SCRIPT kg-oracle ARGV...`.
NS_SCRIPT = r"""
set -e
mount --bind "$KG_ORACLE_PCI" /sys/bus/pci/devices
if [ -n "${KG_ORACLE_DEV:-}" ]; then
  mount -t tmpfs -o mode=755 kg-oracle /dev
  mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/full c 1 7
  mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/urandom c 1 9
  cp -a "$KG_ORACLE_DEV"/. /dev/
fi
online=/sys/devices/system/node/online
[ ! -e "$online" ] || mount --bind "$KG_ORACLE_NODE_ONLINE" "$online"
mount -t tmpfs kg-oracle /proc/driver
mkdir -p /proc/driver/nvidia-caps
cp "$KG_ORACLE_MIG_MINORS" /proc/driver/nvidia-caps/mig-minors
if [ -n "${KG_ORACLE_PLUGIN_DIR:-}" ]; then
  mount -t tmpfs kg-oracle /var/lib
  mkdir -p /var/lib/kubelet/device-plugins
  mount --bind "$KG_ORACLE_PLUGIN_DIR" /var/lib/kubelet/device-plugins
fi
if [ -n "${KG_ORACLE_CDI_DIR:-}" ]; then
  run="$(readlink -f /var/run)"
  mount -t tmpfs kg-oracle "$run"
  mkdir -p "$run/cdi"
  mount --bind "$KG_ORACLE_CDI_DIR" "$run/cdi"
fi
exec "$@"
"""

NVIDIA_CHAR_MAJOR = 195  # /dev/nvidia<N>, nvidiactl (255), nvidia-modeset (254)
UVM_MAJOR = 511  # dynamic on a real host; any major serves here
CAPS_MAJOR = 510
GIS_PER_GPU = 15  # mig-minors: config 1, monitor 2, then per GPU 15 GPU instances of 1 + 8 minors
CIS_PER_GI = 8


class OracleUnavailable(RuntimeError):
    """NVIDIA's binaries cannot be built or run here; the message says why."""


# -- the binaries -----------------------------------------------------------------------------------


def nvidia_binaries(timeout: float = 1500) -> Path:
    """The folder holding NVIDIA's two binaries, built now (minutes, once) if the cache lacks them."""
    if not BUILD_SCRIPT.is_file():
        raise OracleUnavailable(f"{BUILD_SCRIPT} is missing")
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise OracleUnavailable(f"{BUILD_SCRIPT} ran past {timeout:.0f} s") from exc
    if proc.returncode != 0:
        failed = [line.partition("FAILED: ")[2] for line in proc.stderr.splitlines() if "FAILED: " in line]
        raise OracleUnavailable((failed or proc.stderr.strip().splitlines()[-1:] or ["no output"])[-1])
    folder = Path(proc.stdout.strip().splitlines()[-1])
    for name in ("nvidia-device-plugin", "gpu-feature-discovery"):
        if not os.access(folder / name, os.X_OK):
            raise OracleUnavailable(f"{BUILD_SCRIPT} printed {folder}, which has no {name}")
    return folder


def namespace_problem() -> str | None:
    """Why NS_SCRIPT cannot run here (not root, no unshare, mounts refused), or None."""
    if os.geteuid() != 0:
        return "the oracle runs NVIDIA's binaries in a private mount namespace, which needs root"
    if shutil.which("unshare") is None:
        return "no unshare (util-linux) to make a private mount namespace"
    probe = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs kg-oracle /proc/driver",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"cannot mount in a private mount namespace: {probe.stderr.strip()}"
    return None


# -- the machine ------------------------------------------------------------------------------------


def gi_minor(gpu: int, gi: int) -> int:
    return 3 + gpu * GIS_PER_GPU * (1 + CIS_PER_GI) + gi * (1 + CIS_PER_GI)


def ci_minor(gpu: int, gi: int, ci: int) -> int:
    return gi_minor(gpu, gi) + 1 + ci


@dataclass
class Host:
    """One machine for the stand-in, NVIDIA's binaries and kubegpu."""

    source: str
    node: Node
    machine: Machine
    standin: Standin
    base: Path

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def events(self) -> Path:
        return self.base / "nvml-events"

    @classmethod
    def make(cls, source: str, standin: Standin, base: Path) -> Host:
        node = load_node(source)
        machine = Machine.from_node(node)
        host = cls(source=source, node=node, machine=machine, standin=standin, base=base)
        host._lay_out()
        return host

    def _lay_out(self) -> None:
        base = self.base
        self.machine.write(base / "machine.txt")
        self.events.touch()
        (base / "nvml-faults").touch()
        pci = base / "pci"
        for g, spec in zip(self.node.gpus, self.machine.gpus, strict=True):
            d = pci / sysfs_bus_id(spec.bus_id)
            d.mkdir(parents=True)
            device_id = spec.pci_device_id >> 16
            (d / "vendor").write_text("0x10de\n")
            (d / "device").write_text(f"0x{device_id:04x}\n")
            (d / "class").write_text("0x030200\n")
            (d / "numa_node").write_text(f"{g.numa_node if g.numa_node is not None else -1}\n")
            (d / "resource").write_text("0x0000000000000000 0x0000000000000000 0x0000000000000000\n")
            config = bytearray(256)
            config[0:4] = bytes([0xDE, 0x10, device_id & 0xFF, device_id >> 8])
            (d / "config").write_bytes(bytes(config))
        dev = self.root / "dev"
        dev.mkdir(parents=True)
        _mknod(dev / "nvidiactl", NVIDIA_CHAR_MAJOR, 255)
        _mknod(dev / "nvidia-modeset", NVIDIA_CHAR_MAJOR, 254)
        _mknod(dev / "nvidia-uvm", UVM_MAJOR, 0)
        _mknod(dev / "nvidia-uvm-tools", UVM_MAJOR, 1)
        lines = ["config 1", "monitor 2"]
        for i, spec in enumerate(self.machine.gpus):
            minor = spec.minor if spec.minor is not None else i
            _mknod(dev / f"nvidia{minor}", NVIDIA_CHAR_MAJOR, minor)
            for gi in range(GIS_PER_GPU):
                lines.append(f"gpu{minor}/gi{gi}/access {gi_minor(minor, gi)}")
                lines += [
                    f"gpu{minor}/gi{gi}/ci{ci}/access {ci_minor(minor, gi, ci)}" for ci in range(CIS_PER_GI)
                ]
            if spec.mig_enabled:
                caps = dev / "nvidia-caps"
                caps.mkdir(exist_ok=True)
                for m in spec.mig_instances:
                    for n in (gi_minor(minor, m.gi_id), ci_minor(minor, m.gi_id, 0)):
                        _mknod(caps / f"nvidia-cap{n}", CAPS_MAJOR, n)
        (base / "mig-minors").write_text("\n".join(lines) + "\n")
        nodes = sorted({g.numa_node for g in self.node.gpus if g.numa_node is not None}) or [0]
        (base / "node-online").write_text(f"{nodes[0]}-{nodes[-1]}\n" if len(nodes) > 1 else f"{nodes[0]}\n")
        lib = self.root / "usr/lib/x86_64-linux-gnu"
        lib.mkdir(parents=True)
        for name in ("libnvidia-ml.so", "libcuda.so"):  # what NVIDIA's CDI generation requires
            shutil.copy(self.standin.library, lib / f"{name}.{self.machine.driver}")
            (lib / f"{name}.1").symlink_to(f"{name}.{self.machine.driver}")

    def env(self, *, plugin_dir: Path | None = None, cdi_dir: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"CONFIG_FILE", "KUBEGPU_FAKE_NVML"}}
        env.update(
            self.standin.env(
                self.base / "machine.txt",
                KUBEGPU_NVML_EVENTS=str(self.events),
                KUBEGPU_NVML_FAULTS=str(self.base / "nvml-faults"),
            )
        )
        env["KG_ORACLE_PCI"] = str(self.base / "pci")
        env["KG_ORACLE_DEV"] = str(self.root / "dev")
        env["KG_ORACLE_NODE_ONLINE"] = str(self.base / "node-online")
        env["KG_ORACLE_MIG_MINORS"] = str(self.base / "mig-minors")
        env["KG_ORACLE_PLUGIN_DIR"] = str(plugin_dir) if plugin_dir is not None else ""
        env["KG_ORACLE_CDI_DIR"] = str(cdi_dir) if cdi_dir is not None else ""
        return env

    def event(self, gpu: int, kind: str, data: int) -> None:
        """An NVML event for every process playing this machine (the stand-in follows the file)."""
        with self.events.open("a") as f:
            f.write(f"event {gpu} {kind} {data}\n")


def _mknod(path: Path, major: int, minor: int) -> None:
    import stat

    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def in_namespace(argv: Sequence[str]) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", NS_SCRIPT, "kg-oracle", *argv]


class Process:
    """A long-running binary in its own mount namespace (the PID is the binary's: sh and unshare exec)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(in_namespace(argv), stdout=self._log, stderr=subprocess.STDOUT, env=env)

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        with contextlib.suppress(Exception):
            self._log.close()


def run_once(
    argv: Sequence[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        in_namespace(argv), capture_output=True, text=True, env=env, check=False, timeout=timeout
    )


def kubegpu_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "kubegpu", *args]


# -- NVIDIA's pair scores (go-gpuallocator's best-effort policy), to judge two different picks ---------

# nvmlGpuTopologyLevel_t -> points: INTERNAL 60, SINGLE 50, MULTIPLE 40, HOSTBRIDGE 30, NODE 20, SYSTEM 10
_LEVEL_POINTS = {0: 60, 10: 50, 20: 40, 30: 30, 40: 20, 50: 10}


def nvidia_pair_scores(machine: Machine) -> list[list[int]]:
    """go-gpuallocator's score of every GPU pair on ``machine``, from what NVML tells it: the PCIe
    common ancestor's points plus 100 per NVLink lane whose remote is the other GPU (a lane to an
    NVSwitch earns nothing, as in go-gpuallocator)."""
    n = len(machine.gpus)
    level = {(a, b): lv for a, b, lv in machine.ancestors}
    by_bus = {g.bus_id.lower(): i for i, g in enumerate(machine.gpus)}
    scores = [[0] * n for _ in range(n)]
    for i, j in itertools.permutations(range(n), 2):
        lv = level.get((min(i, j), max(i, j)), 50)
        lanes = sum(
            1 for k in machine.gpus[i].nvlinks if k.to == "gpu" and k.up and by_bus.get(k.remote.lower()) == j
        )
        scores[i][j] = _LEVEL_POINTS.get(lv, 10) + 100 * lanes
    return scores


def set_score(scores: list[list[int]], indexes: Iterable[int]) -> int:
    chosen = sorted(indexes)
    return sum(scores[a][b] for a, b in itertools.combinations(chosen, 2))


def partition_count(n: int, size: int) -> int:
    """How many partitions go-gpuallocator's best-effort policy walks for ``size`` of ``n`` devices
    (``n`` padded up to a multiple of ``size``): its run time, roughly."""
    if size <= 1 or size >= n:
        return 1
    m = math.ceil(n / size) * size
    groups = m // size
    return int(math.factorial(m) // (math.factorial(size) ** groups * math.factorial(groups)))


# -- differences --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    area: str  # labels | devices | preferred | allocate | health | cdi | startup
    scenario: str  # e.g. "seed-8gpu/none/envvar"
    key: str  # a label key, a device ID's field, an Allocate field
    nvidia: str
    kubegpu: str

    def row(self) -> str:
        return f"| {self.area} | {self.scenario} | {self.key} | {self.nvidia} | {self.kubegpu} |"


@dataclass(frozen=True)
class Allowed:
    id: str
    area: str
    key: str
    reason: str
    scenario: str = "*"
    nvidia: str = "*"
    kubegpu: str = "*"

    def allows(self, d: Difference) -> bool:
        return (
            self.area == d.area
            and matches(self.key, d.key)
            and matches(self.scenario, d.scenario)
            and matches(self.nvidia, d.nvidia)
            and matches(self.kubegpu, d.kubegpu)
        )


def matches(pattern: str, text: str) -> bool:
    """``*`` matches any text (brackets, ``?`` and everything else are themselves: values are JSON)."""
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, text, flags=re.DOTALL) is not None


def load_allowed(path: Path) -> list[Allowed]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    out = []
    for raw in doc:
        unknown = set(raw) - {"id", "area", "key", "reason", "scenario", "nvidia", "kubegpu"}
        if unknown or not raw.get("reason") or not raw.get("id"):
            raise ValueError(
                f"{path}: entry {raw!r} needs id, area, key and reason (unknown: {sorted(unknown)})"
            )
        out.append(Allowed(**{k: str(v) for k, v in raw.items()}))
    return out


@dataclass
class Comparison:
    """Differences of one scenario, split into allowed and unexplained."""

    allowed_list: list[Allowed]
    found: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # differences that are none (a pick as good as NVIDIA's)
    used: set[str] = field(default_factory=set)

    def differ(self, area: str, scenario: str, key: str, nvidia: object, kubegpu: object) -> None:
        n, k = _text(nvidia), _text(kubegpu)
        if n != k:
            self.found.append(Difference(area, scenario, key, n, k))

    def unexplained(self) -> list[Difference]:
        out = []
        for d in self.found:
            match = next((a for a in self.allowed_list if a.allows(d)), None)
            if match is None:
                out.append(d)
            else:
                self.used.add(match.id)
        return out

    def report(self) -> str:
        bad = self.unexplained()
        head = "| area | scenario | key | NVIDIA v0.17.4 | kubegpu |\n|---|---|---|---|---|"
        return (
            f"{len(bad)} difference(s) from NVIDIA's binaries not listed in "
            "tests/integration/oracle/allowed_differences.yaml (docs/compat.md):\n"
            + head
            + "\n"
            + "\n".join(d.row() for d in bad)
        )


def _text(value: object) -> str:
    if value is None:
        return ABSENT
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


UUID_TAIL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def normalise_annotation_key(key: str) -> str:
    """``cdi.k8s.io/nvidia-device-plugin_<random UUID>`` -> ``cdi.k8s.io/nvidia-device-plugin_<uuid>``."""
    return UUID_TAIL.sub("<uuid>", key)


def read_labels_file(path: Path) -> dict[str, str]:
    """GFD's ``--output-file``: ``key=value`` lines."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "=" in line:
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


@contextlib.contextmanager
def stopping(*procs: Process) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            p.stop()

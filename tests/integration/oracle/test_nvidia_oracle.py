"""NVIDIA's own binaries as the oracle (issue 56): kubegpu beside nvidia-device-plugin and
gpu-feature-discovery v0.17.4 on the same C NVML stand-in machine.

For every builtin machine (and an all-MIG one of the oracle's own) and each MIG strategy:

* labels: GFD ``--oneshot --output-file`` against ``kubegpu labels nvml --json`` with the same config;
* the device plugin, each behind its own kubelet double: resource names and plugin options, the
  ListAndWatch devices (IDs, health, NUMA topology), GetPreferredAllocation (the same set, or one at
  least as good by NVIDIA's own pair scores), Allocate under every device-list strategy (envvar,
  volume-mounts, cdi-annotations, cdi-cri, and passDeviceSpecs), the CDI specs both write, and health
  (a fatal XID and an application XID delivered through NVML events to both).

A difference fails unless ``allowed_differences.yaml`` lists it; each entry there is a row of
docs/compat.md's tables with its reason (``test_every_allowed_difference_is_a_row_of_docs_compat``).
Needs root (a private mount namespace, ``mknod``) and NVIDIA's binaries (``tests/oracle/build.sh``,
minutes once, cached): without them the tests say NOT RUN, and fail under CI=true.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.sources.spec import builtin_names
from tests.integration.kubelet_double import KubeletDouble
from tests.integration.oracle.conftest import ALLOWED_FILE
from tests.nvml_standin.build import Standin
from tests.oracle.harness import (
    COMPAT_DOC,
    Allowed,
    Comparison,
    Host,
    Process,
    kubegpu_argv,
    load_allowed,
    nvidia_pair_scores,
    partition_count,
    read_labels_file,
    run_once,
    set_score,
    stopping,
)

# the first test may build NVIDIA's binaries (minutes, once)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

HERE = Path(__file__).resolve().parent
BUILTINS = sorted(builtin_names())  # every machine kubegpu ships, as the stand-in plays it
ALL_MIG = str(HERE / "nodes/a100-mig-single.yaml")
NO_NUMA = str(HERE / "nodes/vm-no-numa.yaml")
MAX_PARTITIONS = 20_000  # NVIDIA's best-effort policy walks every partition on every call
START_S = 40.0
# What this session's comparisons used of the allowed list, and which of them ran (the last test checks
# that every entry still describes a difference, once the whole suite has run).
USED: set[str] = set()
RAN: set[str] = set()


def source_of(machine: str) -> str:
    return machine if machine.endswith(".yaml") else f"builtin:{machine}"


def short(machine: str) -> str:
    return Path(machine).stem if machine.endswith(".yaml") else machine


def config_file(base: Path, mig: str) -> Path:
    path = base / "config.yaml"
    path.write_text(f"version: v1\nflags:\n  migStrategy: {mig}\n", encoding="utf-8")
    return path


# -- the allowed list and the doc ------------------------------------------------------------------


def test_every_allowed_difference_is_a_row_of_docs_compat() -> None:
    """The test's list and the doc's tables cannot drift: every entry is a documented row, and the doc
    names the file."""
    entries = load_allowed(ALLOWED_FILE)
    doc = COMPAT_DOC.read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip() for line in doc.splitlines() if line.startswith("| ")}
    assert "tests/integration/oracle/allowed_differences.yaml" in doc
    missing = sorted({e.id for e in entries} - rows)
    assert not missing, f"allowed differences without a row in docs/compat.md: {missing}"
    for e in entries:
        assert e.area in {"labels", "devices", "preferred", "allocate", "cdi", "health", "startup"}, e


# -- labels -----------------------------------------------------------------------------------------

LABEL_CASES = [(m, "none") for m in BUILTINS] + [
    ("h100-mig-mixed", "single"),
    ("h100-mig-mixed", "mixed"),
    ("dgx-a100", "mixed"),
    (ALL_MIG, "none"),
    (ALL_MIG, "single"),
    (ALL_MIG, "mixed"),
    (NO_NUMA, "none"),
]


@pytest.mark.parametrize(("machine", "mig"), LABEL_CASES, ids=[f"{short(m)}-{s}" for m, s in LABEL_CASES])
def test_labels_match_gfds(
    machine: str,
    mig: str,
    *,
    nvidia_bin: Path,
    oracle_standin: Standin,
    oracle_dir: Path,
    allowed: list[Allowed],
) -> None:
    host = Host.make(source_of(machine), oracle_standin, oracle_dir)
    scenario = f"{short(machine)}/{mig}"
    out = oracle_dir / "gfd-labels"
    env = host.env()
    gfd = run_once(
        [
            str(nvidia_bin / "gpu-feature-discovery"),
            "--oneshot",
            "--no-timestamp",
            "--use-node-feature-api=false",
            f"--mig-strategy={mig}",
            f"--output-file={out}",
        ],
        env,
    )
    assert gfd.returncode == 0 and out.is_file(), f"GFD failed on {scenario}:\n{gfd.stderr[-3000:]}"
    nvidia = read_labels_file(out)
    ours = run_once(
        kubegpu_argv("labels", "nvml", "--json", "--config", str(config_file(oracle_dir, mig))), env
    )
    c = Comparison(allowed)
    c.differ("labels", scenario, "(exit status)", 0, ours.returncode)
    if ours.returncode == 0:
        kubegpu = json.loads(ours.stdout)
        for key in sorted(set(nvidia) | set(kubegpu)):
            c.differ("labels", scenario, key, nvidia.get(key), kubegpu.get(key))
    bad = c.unexplained()
    USED.update(c.used)
    RAN.add(f"labels {scenario}")
    if bad:
        pytest.fail(c.report() + f"\nkubegpu's stderr: {ours.stderr[-1000:]}", pytrace=False)


# -- the device plugin ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plugin:
    machine: str
    mig: str = "none"
    lists: str = "envvar"
    pass_specs: bool = False
    health: bool = False
    preferred: bool = False
    sharing: int = 0  # time-slicing replicas per GPU (a config file for both), 0: none
    xid_gpu: int = 1  # the GPU that gets the fatal XID of the health check

    @property
    def tail(self) -> str:
        return f"{'+specs' if self.pass_specs else ''}{f'+timeslicing{self.sharing}' if self.sharing else ''}"

    @property
    def id(self) -> str:
        return f"{short(self.machine)}-{self.mig}-{self.lists}{self.tail.replace('+', '-')}"

    @property
    def scenario(self) -> str:
        return f"{short(self.machine)}/{self.mig}/{self.lists}{self.tail}"

    def config(self, base: Path) -> list[str]:
        """The config file both plugins read, as the NVIDIA-style file they share (sharing only)."""
        if not self.sharing:
            return []
        path = base / "plugin-config.yaml"
        path.write_text(
            "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
            f"      - name: nvidia.com/gpu\n        replicas: {self.sharing}\n",
            encoding="utf-8",
        )
        return [str(path)]


PLUGIN_CASES = [
    *(Plugin(m, health=True, preferred=True) for m in BUILTINS),
    *(Plugin("seed-8gpu", lists=s) for s in ("volume-mounts", "cdi-annotations", "cdi-cri")),
    Plugin("seed-8gpu", pass_specs=True),
    Plugin("seed-8gpu", sharing=2, health=True, preferred=True),
    Plugin("h100-mig-mixed", mig="mixed", health=True, preferred=True, xid_gpu=0),  # the MIG-enabled GPU
    Plugin("h100-mig-mixed", mig="mixed", lists="cdi-cri"),
    Plugin("h100-mig-mixed", mig="mixed", pass_specs=True),
    Plugin("h100-mig-mixed", mig="single"),
    Plugin("dgx-a100", mig="mixed"),
    Plugin(ALL_MIG, mig="single", health=True, preferred=True),
    Plugin(ALL_MIG, mig="single", lists="cdi-cri", pass_specs=True),
    Plugin(NO_NUMA),
]


@dataclass
class Side:
    """One project's plugin: its process and the kubelet double it registered with."""

    name: str
    process: Process
    kubelet: KubeletDouble
    cdi: Path

    def served(self) -> bool:
        return any(ep.devices for ep in self.kubelet.endpoints.values())

    def resources(self) -> dict[str, int]:
        return {r: len(ep.devices) for r, ep in self.kubelet.endpoints.items()}

    def exited(self) -> bool:
        return self.process.proc.poll() is not None


def _start(case: Plugin, host: Host, base: Path, nvidia_bin: Path) -> tuple[Side, Side]:
    root = str(host.root)
    sides = []
    for name in ("nvidia", "kubegpu"):
        plugin_dir, cdi = base / f"dp-{name}", base / f"cdi-{name}"
        plugin_dir.mkdir(mode=0o700)
        cdi.mkdir()
        kubelet = KubeletDouble(plugin_dir)
        kubelet.start()
        if name == "nvidia":
            argv = [
                str(nvidia_bin / "nvidia-device-plugin"),
                f"--mig-strategy={case.mig}",
                f"--device-list-strategy={case.lists}",
                f"--pass-device-specs={str(case.pass_specs).lower()}",
                f"--driver-root={root}",
                f"--dev-root={root}",
                f"--driver-root-ctr-path={root}",
                *(f"--config-file={f}" for f in case.config(base)),
            ]
            env = host.env(plugin_dir=plugin_dir, cdi_dir=cdi)
        else:
            argv = kubegpu_argv(
                "agent",
                "--nvml",
                "--device-plugin-dir",
                str(plugin_dir),
                "--mig-strategy",
                case.mig,
                "--device-list-strategy",
                case.lists,
                "--pass-device-specs" if case.pass_specs else "--no-pass-device-specs",
                "--nvidia-driver-root",
                root,
                "--nvidia-dev-root",
                root,
                "--cdi-spec-dir",
                str(cdi),
                *(f"--config={f}" for f in case.config(base)),
            )
            env = host.env()
        sides.append(Side(name, Process(argv, env, base / f"{name}.log"), kubelet, cdi))
    return sides[0], sides[1]


def _wait(sides: tuple[Side, Side]) -> None:
    """Until each side serves devices (or has exited) and the resources of both stay the same for 1 s
    (a plugin registers one resource after another)."""
    for side in sides:
        side.kubelet.wait_for(lambda s=side: s.served() or s.exited(), START_S)  # type: ignore[misc]
    deadline = time.monotonic() + START_S
    last, since = [s.resources() for s in sides], time.monotonic()
    while time.monotonic() - since < 1.0 and time.monotonic() < deadline:
        time.sleep(0.1)
        now = [s.resources() for s in sides]
        if now != last:
            last, since = now, time.monotonic()


def _devices(ep: object) -> dict[str, str]:
    """Each device's health and NUMA nodes, as two fields: ``<id> health``, ``<id> numa``."""
    out = {}
    for i, d in ep.devices.items():  # type: ignore[attr-defined]
        out[f"{i} health"] = d.health
        out[f"{i} numa"] = json.dumps(sorted(n.ID for n in d.topology.nodes))
    return out


def _cdi_names(names: list[str], out: dict[str, object], field: str) -> None:
    """CDI device names compared in two parts: the devices (``=<id>``) and the kinds apart, so that the
    allowed difference of kinds can never hide a difference of devices."""
    out[field] = [n.partition("=")[2] for n in names]
    out[f"{field} kind"] = sorted({n.partition("=")[0] for n in names})


def _response(r: pb.ContainerAllocateResponse) -> dict[str, object]:
    out: dict[str, object] = {
        **{f"envs.{k}": v for k, v in r.envs.items() if k != "NVIDIA_VISIBLE_DEVICES"},
        "mounts": sorted(
            f"{m.container_path}<-{m.host_path}{' ro' if m.read_only else ''}" for m in r.mounts
        ),
    }
    if "NVIDIA_VISIBLE_DEVICES" in r.envs:
        ids = r.envs["NVIDIA_VISIBLE_DEVICES"].split(",")
        out["envs.NVIDIA_VISIBLE_DEVICES"] = ",".join(dict.fromkeys(ids))
        if len(set(ids)) < len(ids):  # one GPU named twice (NVIDIA: two replicas of it)
            out["envs.NVIDIA_VISIBLE_DEVICES repeated"] = sorted({i for i in ids if ids.count(i) > 1})
    specs = [f"{d.container_path}<-{d.host_path} {d.permissions}" for d in r.devices]
    out["devices"] = sorted(set(specs))
    repeated = sorted({x for x in specs if specs.count(x) > 1})
    if repeated:  # a node listed twice (NVIDIA: the parent GPU of two MIG devices)
        out["devices repeated"] = repeated
    for k, v in r.annotations.items():
        # the key's name part is each plugin's own (a random UUID in NVIDIA's): only the prefix compares
        if k.startswith("cdi.k8s.io/"):
            out["annotations.cdi.k8s.io/ key"] = k.partition("/")[0] + "/"
            _cdi_names(v.split(","), out, "annotations.cdi.k8s.io/")
        else:
            out[f"annotations.{k}"] = v
    if r.cdi_devices:
        _cdi_names([d.name for d in r.cdi_devices], out, "cdi_devices")
    return out


def _requests(ids: list[str]) -> list[list[str]]:
    out = [ids[:1]]
    if len(ids) >= 2:
        out.append(ids[:2])
    if len(ids) > 2:
        out.append(ids)
    return out


def _compare_allocate(c: Comparison, case: Plugin, resource: str, nv: object, kg: object) -> None:
    ids = sorted(nv.devices)  # type: ignore[attr-defined]
    for request in _requests(ids):
        req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=request)])
        answers = []
        for ep in (nv, kg):
            try:
                answers.append(_response(ep.stub.Allocate(req, timeout=30).container_responses[0]))  # type: ignore[attr-defined]
            except grpc.RpcError as exc:  # compared as the answer
                answers.append({"error": f"{exc.code().name}: {exc.details()}"})
        a, b = answers
        for field in sorted(set(a) | set(b)):
            c.differ(
                "allocate",
                case.scenario,
                f"{resource} Allocate({len(request)}).{field}",
                a.get(field),
                b.get(field),
            )


def _compare_preferred(
    c: Comparison, case: Plugin, host: Host, resource: str, *, nv: object, kg: object
) -> None:
    ids = sorted(nv.devices)  # type: ignore[attr-defined]
    index = {g.uuid: i for i, g in enumerate(host.machine.gpus)}
    scores = nvidia_pair_scores(host.machine)
    sizes = sorted({1, 2, 4, len(ids) // 2, len(ids)} - {0})
    requests: list[tuple[int, list[str]]] = [
        (size, []) for size in sizes if size <= len(ids) and partition_count(len(ids), size) <= MAX_PARTITIONS
    ]
    if len(ids) >= 4 and partition_count(len(ids), 2) <= MAX_PARTITIONS:
        requests.append((2, [ids[3]]))
    for size, must in requests:
        req = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=ids, must_include_deviceIDs=must, allocation_size=size
                )
            ]
        )
        picks = []
        for ep in (nv, kg):
            reply = ep.stub.GetPreferredAllocation(req, timeout=120)  # type: ignore[attr-defined]
            picks.append(sorted(reply.container_responses[0].deviceIDs))
        a, b = picks
        key = f"{resource} GetPreferredAllocation(size={size}, must={len(must)})"
        if a == b:
            continue
        whole = all(i in index for i in a + b)
        replicas = all("::" in i for i in a + b)
        if replicas and len(b) == size and set(must) <= set(b):
            # the distributed replica policy of both: the fewest replicas on one GPU is as good
            spread = [max(Counter(i.partition("::")[0] for i in pick).values()) for pick in (a, b)]
            if spread[1] <= spread[0]:
                c.notes.append(
                    f"{case.scenario} {key}: another pick, as spread ({spread[1]} per GPU at most)"
                )
                continue
            c.differ(
                "preferred",
                case.scenario,
                key,
                f"at most {spread[0]} per GPU: {a}",
                f"at most {spread[1]} per GPU: {b}",
            )
        elif whole and len(b) == size and set(must) <= set(b):
            ours, theirs = set_score(scores, (index[i] for i in b)), set_score(scores, (index[i] for i in a))
            if ours >= theirs:  # as good by NVIDIA's own measure: not a difference
                c.notes.append(f"{case.scenario} {key}: another pick, score {ours} (NVIDIA's {theirs})")
                continue
            c.differ("preferred", case.scenario, key, f"score {theirs}: {a}", f"score {ours}: {b}")
        else:
            c.differ("preferred", case.scenario, key, a, b)


def _compare_cdi(c: Comparison, case: Plugin, nv: Side, kg: Side) -> None:
    specs = []
    for side in (nv, kg):
        files = sorted(side.cdi.glob("*.json")) + sorted(side.cdi.glob("*.yaml"))
        spec = json.loads(files[0].read_text()) if files else {}
        specs.append(spec)
    a, b = specs
    c.differ("cdi", case.scenario, "kind", a.get("kind"), b.get("kind"))
    c.differ("cdi", case.scenario, "cdiVersion", a.get("cdiVersion"), b.get("cdiVersion"))

    def nodes(edits: dict[str, object]) -> list[str]:
        return sorted(f"{n['path']}<-{n.get('hostPath', n['path'])}" for n in edits.get("deviceNodes", []))  # type: ignore[attr-defined]

    da = {d["name"]: nodes(d["containerEdits"]) for d in a.get("devices", [])}
    db = {d["name"]: nodes(d["containerEdits"]) for d in b.get("devices", [])}
    for name in sorted(set(da) | set(db)):
        c.differ("cdi", case.scenario, f"device {name}.deviceNodes", da.get(name), db.get(name))
    ea, eb = a.get("containerEdits", {}), b.get("containerEdits", {})
    c.differ("cdi", case.scenario, "common.env", sorted(ea.get("env", [])), sorted(eb.get("env", [])))
    c.differ("cdi", case.scenario, "common.deviceNodes", nodes(ea), nodes(eb))
    ma = {m["containerPath"]: m["hostPath"] for m in ea.get("mounts", [])}
    mb = {m["containerPath"]: m["hostPath"] for m in eb.get("mounts", [])}
    for path in sorted(set(ma) | set(mb)):
        c.differ("cdi", case.scenario, f"common.mount {path}", ma.get(path), mb.get(path))
    hooks = [sorted(" ".join(h.get("args", [])[1:4]) for h in e.get("hooks", [])) for e in (ea, eb)]
    c.differ("cdi", case.scenario, "common.hooks", hooks[0], hooks[1])


def physical(host: Host, device_id: str) -> str:
    """The physical GPU (its UUID) of a device ID: a GPU, a replica ``<UUID>::<n>``, a MIG device."""
    device_id = device_id.partition("::")[0]
    for g in host.machine.gpus:
        if device_id == g.uuid or any(m.uuid == device_id for m in g.mig_instances):
            return g.uuid
    return device_id


def _unhealthy(side: Side) -> dict[str, list[str]]:
    return {
        r: sorted(i for i, h in side.kubelet.device_health(r).items() if h != "Healthy")
        for r in sorted(side.kubelet.endpoints)
    }


def _settle(side: Side, *, quiet_s: float = 1.5, limit_s: float = 15.0) -> None:
    """Wait until the side's unhealthy devices stop changing for ``quiet_s`` (at most ``limit_s``)."""
    deadline = time.monotonic() + limit_s
    seen, since = _unhealthy(side), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.1)
        now = _unhealthy(side)
        if now != seen:
            seen, since = now, time.monotonic()


def _compare_health(c: Comparison, case: Plugin, host: Host, nv: Side, kg: Side) -> None:
    other = 1 - case.xid_gpu if case.xid_gpu < 2 else 0
    host.event(case.xid_gpu, "xid", 79)  # "GPU has fallen off the bus": fatal for both
    host.event(other, "xid", 13)  # "Graphics engine exception": the application's, ignored by both
    for side in (nv, kg):
        side.kubelet.wait_for(lambda s=side: any(_unhealthy(s).values()), 20)  # type: ignore[misc]
        _settle(side)  # each resource streams its own update: one marked is not all of them marked
    a, b = _unhealthy(nv), _unhealthy(kg)
    assert any(a.values()), (
        f"NVIDIA's plugin marked nothing unhealthy after XID 79:\n{nv.process.log[-2000:]}"
    )
    for resource in sorted(set(a) | set(b)):
        key = f"{resource} unhealthy after XID 79 on GPU {case.xid_gpu}"
        gpus = [sorted({physical(host, i) for i in side.get(resource, [])}) for side in (a, b)]
        c.differ("health", case.scenario, f"{key}: GPUs", gpus[0], gpus[1])
        c.differ("health", case.scenario, f"{key}: devices", a.get(resource), b.get(resource))


@pytest.mark.parametrize("case", PLUGIN_CASES, ids=[p.id for p in PLUGIN_CASES])
def test_the_device_plugin_matches_nvidias(
    case: Plugin, *, nvidia_bin: Path, oracle_standin: Standin, oracle_dir: Path, allowed: list[Allowed]
) -> None:
    host = Host.make(source_of(case.machine), oracle_standin, oracle_dir)
    nv, kg = _start(case, host, oracle_dir, nvidia_bin)
    c = Comparison(allowed)
    with stopping(nv.process, kg.process):
        try:
            _wait((nv, kg))
            c.differ("startup", case.scenario, "serves devices", nv.served(), kg.served())
            if nv.served() and kg.served():
                _compare_plugins(c, case, host, nv, kg)
            else:  # a refused configuration: both must stop, neither hang
                c.differ("startup", case.scenario, "exited", nv.exited(), kg.exited())
                assert nv.exited(), (
                    f"NVIDIA's plugin neither served nor exited in {START_S:.0f} s{nv.process.log[-2000:]}"
                )
        finally:
            nv.kubelet.stop()
            kg.kubelet.stop()
    for note in c.notes:
        print(note)
    bad = c.unexplained()
    USED.update(c.used)
    RAN.add(f"plugin {case.scenario}")
    if bad:
        logs = f"\n--- NVIDIA's log:\n{nv.process.log[-2500:]}\n--- kubegpu's log:\n{kg.process.log[-2500:]}"
        pytest.fail(c.report() + logs, pytrace=False)


def _compare_plugins(c: Comparison, case: Plugin, host: Host, nv: Side, kg: Side) -> None:
    both = (nv.kubelet.endpoints, kg.kubelet.endpoints)
    c.differ("devices", case.scenario, "resources", sorted(both[0]), sorted(both[1]))
    for resource in sorted(set(both[0]) & set(both[1])):
        a, b = both[0][resource], both[1][resource]
        c.differ(
            "devices", case.scenario, f"{resource} options", str(a.options).strip(), str(b.options).strip()
        )
        c.differ("devices", case.scenario, f"{resource} IDs", sorted(a.devices), sorted(b.devices))
        da, db = _devices(a), _devices(b)
        for i in sorted(set(da) | set(db)):
            c.differ("devices", case.scenario, f"{resource} device {i}", da.get(i), db.get(i))
        _compare_allocate(c, case, resource, a, b)
        if case.preferred:
            _compare_preferred(c, case, host, resource, nv=a, kg=b)
    if case.lists.startswith("cdi"):
        _compare_cdi(c, case, nv, kg)
    if case.health:
        _compare_health(c, case, host, nv, kg)


def test_every_allowed_difference_still_occurs(allowed: list[Allowed]) -> None:
    """An entry no comparison needs any more is stale: kubegpu and NVIDIA now agree there, so the entry
    (and its row in docs/compat.md) goes. Checked only after the whole suite ran in this session."""
    everything = {f"labels {short(m)}/{s}" for m, s in LABEL_CASES} | {
        f"plugin {p.scenario}" for p in PLUGIN_CASES
    }
    if everything != RAN:
        left = len(everything - RAN)
        pytest.skip(f"the stale-entry check needs the whole oracle suite; {left} comparisons did not run")
    stale = sorted({a.id for a in allowed} - USED)
    assert not stale, (
        f"allowed differences no comparison needs any more (remove them and their rows): {stale}"
    )

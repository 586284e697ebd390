"""NVIDIA's own config test cases, as a table: each row is one case from NVIDIA k8s-device-plugin's
``api/config/v1`` tests (or an example of its README), given to kubegpu as a whole ``version: v1``
file, with the outcome NVIDIA's plugin gives it.

Only the facts are carried over (which input, accepted or refused, and what it advertises); the rows
are written for kubegpu's loader. Where NVIDIA's unit test feeds a fragment (one ``devices`` value, one
resource entry), the row puts that fragment into an otherwise minimal file. Accepted rows also build the
inventory of a two-GPU node, because what counts is what the plugin advertises: NVIDIA's plugin
parses ``rename`` and ``devices`` but then ignores them (``DisableResourceNamingInConfig``), so every GPU
is shared under ``<name>`` or ``<name>.shared``. Refused rows check that the error names the key path.
Where kubegpu chose to differ, the row says so and docs/config.md lists the difference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kubegpu.deviceplugin.config import load_config
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.errors import ConfigError
from kubegpu.model.node import Gpu, GpuUuid, Node

UUID = "4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"


@dataclass(frozen=True)
class Accepted:
    """The file loads; ``advertised`` maps resource name -> device count on the two-GPU node."""

    advertised: dict[str, int]
    shared: dict[str, int] = field(default_factory=dict)  # parsed sharing.*.resources name -> replicas
    warns: tuple[str, ...] = ()  # each appears in some warning


@dataclass(frozen=True)
class Refused:
    """The file is refused; the message names ``path`` and contains each of ``says``."""

    path: str
    says: tuple[str, ...] = ()


Outcome = Accepted | Refused


def _node() -> Node:
    gpus = tuple(
        Gpu(
            index=i,
            uuid=GpuUuid(f"GPU-{i}0000000-0000-0000-0000-000000000000"),
            model="A100-SXM4-40GB",
            memory_mib=40960,
            numa_node=0,
            pci_bus_id=f"00000000:{i + 1:02x}:00.0",
        )
        for i in range(2)
    )
    return Node(name="n", gpus=gpus, topology=None)


def ts(entry: str, *, head: str = "") -> str:
    """A file whose ``sharing.timeSlicing`` holds ``head`` keys and the single resource ``entry``."""
    return f"version: v1\nsharing:\n  timeSlicing:\n{head}    resources:\n    - {entry}\n"


def devices(value: str) -> str:
    """A file sharing nvidia.com/gpu twice with ``devices: value`` (NVIDIA's ReplicatedDevices cases)."""
    return ts(f'{{"name": "nvidia.com/gpu", "replicas": 2, "devices": {value}}}')


RES = "sharing.timeSlicing.resources[0]"
MPS = "version: v1\nflags: {mpsRoot: /m}\nsharing:\n  mps:\n"  # kubegpu needs mpsRoot for MPS
SHARED_ALL = {"nvidia.com/gpu": 4}  # both GPUs, 2 replicas each
WHOLE = {"nvidia.com/gpu": 2}  # both GPUs, unshared

CASES: list[tuple[str, str, Outcome]] = [
    # --- replicas_test.go TestUnmarshalReplicatedDevices: the `devices` value -----------------------
    ("ReplicatedDevices: empty string", devices('""'), Refused(f"{RES}.devices", ("'all'",))),
    ("ReplicatedDevices: a string other than all", devices('"not-all"'),
     Refused(f"{RES}.devices", ("'all'",))),
    ("ReplicatedDevices: negative count", devices("-2"), Refused(f"{RES}.devices", ("greater than 0",))),
    ("ReplicatedDevices: count 2.0", devices("2.0"), Refused(f"{RES}.devices")),
    ("ReplicatedDevices: negative index", devices("[-1]"), Refused(f"{RES}.devices[0]")),
    ("ReplicatedDevices: negative index string", devices('["-1"]'), Refused(f"{RES}.devices[0]")),
    ("ReplicatedDevices: invalid-UUID", devices('["invalid-UUID"]'), Refused(f"{RES}.devices[0]", ("MIG",))),
    ("ReplicatedDevices: GPU-UUID", devices('["GPU-UUID"]'), Refused(f"{RES}.devices[0]")),
    ("ReplicatedDevices: MIG-UUID", devices('["MIG-UUID"]'), Refused(f"{RES}.devices[0]")),
    ("ReplicatedDevices: MIG-GPU-<uuid> without /gi/ci", devices(f'["MIG-GPU-{UUID}"]'),
     Refused(f"{RES}.devices[0]")),
    ("ReplicatedDevices: a list item that is neither", devices("[true]"), Refused(f"{RES}.devices[0]")),
    ("ReplicatedDevices: all", devices('"all"'), Accepted(SHARED_ALL, {"nvidia.com/gpu": 2})),
    # NVIDIA's plugin resets every `devices` other than all to all, with a warning.
    ("ReplicatedDevices: count", devices("2"), Accepted(SHARED_ALL, warns=(f"{RES}.devices",))),
    ("ReplicatedDevices: count larger than the node", devices("5"), Accepted(SHARED_ALL, warns=("devices",))),
    ("ReplicatedDevices: [0]", devices("[0]"), Accepted(SHARED_ALL, warns=("devices",))),
    ('ReplicatedDevices: ["0"]', devices('["0"]'), Accepted(SHARED_ALL, warns=("devices",))),
    ('ReplicatedDevices: MIG index ["0:0"]', devices('["0:0"]'), Accepted(SHARED_ALL, warns=("devices",))),
    ("ReplicatedDevices: GPU UUID", devices(f'["GPU-{UUID}"]'), Accepted(SHARED_ALL, warns=("devices",))),
    ("ReplicatedDevices: MIG UUID", devices(f'["MIG-{UUID}"]'), Accepted(SHARED_ALL, warns=("devices",))),
    ("ReplicatedDevices: MIG-GPU-<uuid>/0/0", devices(f'["MIG-GPU-{UUID}/0/0"]'),
     Accepted(SHARED_ALL, warns=("devices",))),
    ("ReplicatedDevices: mixed list with an integer", devices(f'[0, "0:0", "GPU-{UUID}"]'),
     Accepted(SHARED_ALL, warns=("devices",))),
    ("ReplicatedDevices: mixed list of strings", devices(f'["0", "0:0", "GPU-{UUID}"]'),
     Accepted(SHARED_ALL, warns=("devices",))),
    # --- replicas_test.go TestUnmarshalReplicatedResource: one resources[] entry -----------------------
    ("ReplicatedResource: {}", ts("{}"), Refused(f"{RES}.name", ("missing",))),
    ("ReplicatedResource: name only", ts('{"name": "valid"}'), Refused(f"{RES}.replicas", ("missing",))),
    ("ReplicatedResource: name, devices", ts('{"name": "valid", "devices": "all"}'),
     Refused(f"{RES}.replicas")),
    ("ReplicatedResource: name, devices, rename",
     ts('{"name": "valid", "devices": "all", "rename": "valid-shared"}'), Refused(f"{RES}.replicas")),
    # the short name `valid` is nvidia.com/valid: not on this node, so nothing is shared
    ("ReplicatedResource: name, devices, replicas", ts('{"name": "valid", "devices": "all", "replicas": 2}'),
     Accepted(WHOLE, {"nvidia.com/valid": 2}, warns=("nvidia.com/valid",))),
    ("ReplicatedResource: with rename", ts('{"name": "valid", "replicas": 2, "rename": "valid-shared"}'),
     Accepted(WHOLE, {"nvidia.com/valid": 2}, warns=(f"{RES}.rename",))),
    ("ReplicatedResource: rename equal to name", ts('{"name": "valid", "replicas": 2, "rename": "valid"}'),
     Accepted(WHOLE, {"nvidia.com/valid": 2}, warns=(f"{RES}.rename",))),
    ("ReplicatedResource: replicas -1", ts('{"name": "valid", "replicas": -1}'),
     Refused(f"{RES}.replicas", ("at least 2",))),
    ("ReplicatedResource: replicas 0", ts('{"name": "valid", "replicas": 0}'),
     Refused(f"{RES}.replicas", ("at least 2",))),
    ("ReplicatedResource: replicas 1 (replicas.go: must be >= 2)", ts('{"name": "valid", "replicas": 1}'),
     Refused(f"{RES}.replicas", ("at least 2",))),
    ("ReplicatedResource: name and replicas", ts('{"name": "valid", "replicas": 2}'),
     Accepted(WHOLE, {"nvidia.com/valid": 2})),
    ("ReplicatedResource: invalid name", ts('{"name": "$invalid$", "replicas": 2, "rename": "valid-shared"}'),
     Refused(f"{RES}.name", ("nvidia.com/$invalid$", "DNS"))),
    ("ReplicatedResource: invalid rename", ts('{"name": "valid", "replicas": 2, "rename": "$invalid$"}'),
     Refused(f"{RES}.rename", ("nvidia.com/$invalid$",))),
    # --- replicas_test.go TestUnmarshalReplicatedResources: the section --------------------------------
    # NVIDIA's plugin prints its resolved config at start; with nothing shared the dump has
    # `sharing.timeSlicing: {}`, and the plugin runs that very file unshared: no sharing, no error.
    ("ReplicatedResources: {} (the plugin's resolved-config dump)",
     "version: v1\nsharing:\n  timeSlicing: {}\n",
     Accepted(WHOLE)),
    ("resolved-config dump as JSON", '{"version": "v1", "flags": {"migStrategy": "none"}, '
     '"sharing": {"timeSlicing": {}}}\n', Accepted(WHOLE)),
    ("ReplicatedResources: resources []", "version: v1\nsharing:\n  timeSlicing:\n    resources: []\n",
     Accepted(WHOLE, warns=("sharing.timeSlicing.resources is empty",))),
    ("ReplicatedResources: one resource", ts('{"name": "valid", "replicas": 2}'),
     Accepted(WHOLE, {"nvidia.com/valid": 2})),
    ("ReplicatedResources: two resources",
     "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
     "    - {name: valid1, replicas: 2}\n    - {name: valid2, replicas: 2}\n",
     Accepted(WHOLE, {"nvidia.com/valid1": 2, "nvidia.com/valid2": 2})),
    ("ReplicatedResources: invalid name", ts('{"name": "$invalid$", "replicas": 2}'), Refused(f"{RES}.name")),
    # An empty `timeSlicing:` (null) is the same empty section; an empty `mps:` is a nil pointer
    # there, that is: absent.
    ("ReplicatedResources: timeSlicing null", "version: v1\nsharing:\n  timeSlicing:\n", Accepted(WHOLE)),
    ("ReplicatedResources: mps null", "version: v1\nsharing:\n  mps:\n", Accepted(WHOLE)),
    ("ReplicatedResources: mps resources []", MPS + "    resources: []\n",
     Refused("sharing.mps.resources", ("at least one",))),
    # --- resources.go NewResourceName: the name rule (nvidia.com/ prefix, <= 63, DNS subdomain) ---------
    ("NewResourceName: short name gpu is nvidia.com/gpu", ts("{name: gpu, replicas: 2}"),
     Accepted(SHARED_ALL, {"nvidia.com/gpu": 2})),
    ("NewResourceName: another domain is put under nvidia.com/", ts("{name: example.com/gpu, replicas: 2}"),
     Refused(f"{RES}.name", ("nvidia.com/example.com/gpu",))),
    ("NewResourceName: upper case", ts("{name: nvidia.com/GPU, replicas: 2}"),
     Refused(f"{RES}.name", ("DNS",))),
    ("NewResourceName: underscore", ts("{name: gpu_shared, replicas: 2}"), Refused(f"{RES}.name")),
    ("NewResourceName: 64 characters", ts(f"{{name: nvidia.com/{'g' * 53}, replicas: 2}}"),
     Refused(f"{RES}.name", ("63",))),
    ("NewResourceName: 63 characters", ts(f"{{name: nvidia.com/{'g' * 52}, replicas: 2}}"),
     Accepted(WHOLE, {f"nvidia.com/{'g' * 52}": 2})),
    ("NewResourceName: empty name", ts("{name: '', replicas: 2}"), Refused(f"{RES}.name")),
    ("NewResourceName: null name", ts("{name: null, replicas: 2}"), Refused(f"{RES}.name")),
    # --- renameByDefault and the default rename (<name>.shared) -------------------------------------
    ("renameByDefault: name.shared", ts("{name: gpu, replicas: 2}", head="    renameByDefault: true\n"),
     Accepted({"nvidia.com/gpu.shared": 4})),
    ("renameByDefault: explicit default rename is kept",
     ts("{name: gpu, replicas: 2, rename: gpu.shared}", head="    renameByDefault: true\n"),
     Accepted({"nvidia.com/gpu.shared": 4})),
    ("renameByDefault: other renames are ignored",
     ts("{name: gpu, replicas: 2, rename: gpu-ts}", head="    renameByDefault: true\n"),
     Accepted({"nvidia.com/gpu.shared": 4}, warns=(f"{RES}.rename",))),
    # Go's JSON decoder leaves a bool unset on null: renameByDefault stays false
    ("renameByDefault: null is false", ts("{name: gpu, replicas: 2}", head="    renameByDefault:\n"),
     Accepted(SHARED_ALL)),
    ("rename without renameByDefault is ignored", ts("{name: gpu, replicas: 2, rename: gpu-ts}"),
     Accepted(SHARED_ALL, warns=(f"{RES}.rename",))),
    # --- config_test.go: MPS defaults failRequestsGreaterThanOne to true (checked below) ---------------
    ("MPS: failRequestsGreaterThanOne defaults to true",
     MPS + "    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n",
     Accepted(SHARED_ALL)),
    # --- imex_test.go TestImexUnmarshal ----------------------------------------------------------------
    ("Imex: {}", "version: v1\nimex: {}\n", Accepted(WHOLE)),
    ("Imex: channelIDs null", "version: v1\nimex: {channelIDs: null}\n", Accepted(WHOLE)),
    ("Imex: channelIDs []", "version: v1\nimex: {channelIDs: []}\n", Accepted(WHOLE)),
    ("Imex: channelIDs [0]", "version: v1\nimex: {channelIDs: [0]}\n", Accepted(WHOLE, warns=("imex",))),
    ("Imex: channelIDs [2]", "version: v1\nimex: {channelIDs: [2]}\n", Refused("imex.channelIDs", ("[0]",))),
    ("Imex: channelIDs [0, 1]", "version: v1\nimex: {channelIDs: [0, 1]}\n", Refused("imex.channelIDs")),
    ("Imex: required must be a boolean", "version: v1\nimex: {required: sometimes}\n",
     Refused("imex.required")),
    # --- resources.go Resource: the top-level `resources` section (parsed, then dropped with a warning) -
    ("Resources: pattern and name", "version: v1\nresources:\n  gpus:\n  - {pattern: '*', name: gpu}\n",
     Accepted(WHOLE, warns=("resources",))),
    ("Resources: a list instead of {gpus, mig}", "version: v1\nresources: []\n",
     Refused("resources", ("gpus", "mig"))),
    ("Resources: missing pattern", "version: v1\nresources:\n  gpus:\n  - {name: gpu}\n",
     Refused("resources.gpus[0].pattern")),
    ("Resources: missing name", "version: v1\nresources:\n  mig:\n  - {pattern: '1g.10gb'}\n",
     Refused("resources.mig[0].name")),
    ("Resources: invalid name", "version: v1\nresources:\n  gpus:\n  - {pattern: '*', name: $bad$}\n",
     Refused("resources.gpus[0].name")),
    # --- flags_test.go TestUnmarshalFlags and strategy_test.go ------------------------------------------
    ("Flags: {}", "version: v1\nflags: {}\n", Accepted(WHOLE)),
    ("Flags: gfd {}", "version: v1\nflags: {gfd: {}}\n", Accepted(WHOLE, warns=("flags.gfd",))),
    ("Flags: gfd sleepInterval 5s", "version: v1\nflags: {gfd: {sleepInterval: 5s}}\n",
     Accepted(WHOLE, warns=("flags.gfd",))),
    ("Flags: deviceListStrategy string", "version: v1\nflags: {plugin: {deviceListStrategy: envvar}}\n",
     Accepted(WHOLE)),
    ("Flags: deviceListStrategy list",
     "version: v1\nflags: {plugin: {deviceListStrategy: [envvar, cdi-annotations]}}\n", Accepted(WHOLE)),
    ("DeviceListStrategies: unknown", "version: v1\nflags: {plugin: {deviceListStrategy: [pigeon]}}\n",
     Refused("flags.plugin.deviceListStrategy[0]", ("envvar",))),
    ("DeviceListStrategies: empty list", "version: v1\nflags: {plugin: {deviceListStrategy: []}}\n",
     Refused("flags.plugin.deviceListStrategy", ("at least one",))),
    # --- config.go parseConfigFrom: version --------------------------------------------------------------
    ("parseConfigFrom: empty version is v1", "flags: {}\n", Accepted(WHOLE)),
    ("parseConfigFrom: unknown version", "version: v2\n", Refused("version", ("v1",))),
    # --- README examples ----------------------------------------------------------------------------------
    ("README: time-slicing 10 replicas", ts("{name: nvidia.com/gpu, replicas: 10}"),
     Accepted({"nvidia.com/gpu": 20})),
    ("README: time-slicing with failRequestsGreaterThanOne",
     ts("{name: nvidia.com/gpu, replicas: 10}", head="    failRequestsGreaterThanOne: true\n"),
     Accepted({"nvidia.com/gpu": 20})),
]  # fmt: skip


@pytest.mark.parametrize(("case", "text", "outcome"), CASES, ids=[c[0] for c in CASES])
def test_nvidia_config_case(tmp_path: Path, case: str, text: str, outcome: Outcome) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    if isinstance(outcome, Refused):
        with pytest.raises(ConfigError) as err:
            build_inventory(_node(), load_config(path))
        message = str(err.value)
        assert f"{path}: {outcome.path}:" in message or f"{outcome.path}:" in message, message
        for fragment in outcome.says:
            assert fragment in message, message
        return
    config = load_config(path)
    inventory = build_inventory(_node(), config)
    assert {str(r.name): len(r.devices) for r in inventory.resources} == outcome.advertised
    if outcome.shared:
        assert config.sharing is not None
        assert {r.name: r.replicas for r in config.sharing.resources} == outcome.shared
    warnings = [*config.warnings, *inventory.warnings]
    for fragment in outcome.warns:
        assert any(fragment in w for w in warnings), warnings


def test_refusals_name_the_file_and_the_key_path(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(devices('"not-all"'))
    with pytest.raises(ConfigError, match="^" + re.escape(f"{path}: {RES}.devices: ")):
        load_config(path)


def test_mps_fail_requests_default_true_and_explicit_false_is_kept(tmp_path: Path) -> None:
    # config_test.go: TestNewConfigDefaultsMPSFailRequestsGreaterThanOne and
    # TestNewConfigHonorsExplicitMPSFailRequestsGreaterThanOneFalse
    resources = "    resources:\n    - {name: gpu, replicas: 2}\n"
    path = tmp_path / "config.yaml"
    path.write_text(MPS + resources)
    sharing = load_config(path).sharing
    assert sharing is not None and sharing.fail_requests_greater_than_one is True
    path.write_text(MPS + "    failRequestsGreaterThanOne: false\n" + resources)
    sharing = load_config(path).sharing
    assert sharing is not None and sharing.fail_requests_greater_than_one is False


def test_ignored_rename_and_devices_leave_the_parsed_config_as_nvidia_runs_it(tmp_path: Path) -> None:
    # DisableResourceNamingInConfig: devices becomes all, rename becomes "" (or <name>.shared)
    path = tmp_path / "config.yaml"
    path.write_text(ts("{name: gpu, replicas: 3, rename: gpu-ts, devices: [1]}"))
    config = load_config(path)
    assert config.sharing is not None
    [resource] = config.sharing.resources
    assert (resource.name, resource.replicas, resource.rename) == ("nvidia.com/gpu", 3, None)
    [advertised] = build_inventory(_node(), config).resources
    assert advertised.replicas_per_gpu == {0: 3, 1: 3}

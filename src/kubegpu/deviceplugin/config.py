"""The agent's configuration: NVIDIA's ``version: v1`` file as is, plus kubegpu's ``kubegpu:`` section.

Every setting has one place in the file, and most have NVIDIA's environment variable and command-line
flag as well. Precedence is CLI flag > environment variable > config file > default, as in NVIDIA's
plugin. Loading is all-or-nothing: the first invalid value raises ``ConfigError`` naming where it came
from (``config.yaml: flags.plugin.deviceListStrategy[1]``, ``env DEVICE_ID_STRATEGY``,
``--mig-strategy``) and the allowed values; nothing is half-applied. Keys NVIDIA defines but kubegpu
does not act on (``flags.gfd``, ``resources``, ``imex`` …) are accepted and reported as warnings;
unknown keys inside ``kubegpu:`` are errors, because that schema is ours.

The ``kubegpu:`` section (documented in docs/config.md)::

    kubegpu:
      allocationPolicy: topology        # topology | simple
      replicaPolicy: distributed        # distributed | packed (= flags.plugin.sharedDevicesAllocationPolicy)
      cdiKind: nvidia.com/gpu           # CDI device kind used by cdi-annotations / cdi-cri
      preStartCheck: false              # ask kubelet for PreStartContainer; fail starts on unhealthy GPUs
      health:
        disabled: false
        ignoredXids: [13, 31, 43, 45, 68, 109]
        fatalXids: []                   # or "all"
        ecc: {doubleBit: fatal, singleBit: ignore}
        watcherFailure: unhealthy       # or keep: what a failed NVML health watcher does to its GPUs
      sharing:
        replicas: {"0": 4, "GPU-…": 2}  # per-GPU replica counts (index or UUID)
        exclusive: [6, 7]               # GPUs kept whole while the others are shared
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kubegpu.deviceplugin.policies import ALLOCATION_POLICIES, REPLICA_POLICIES
from kubegpu.errors import ConfigError
from kubegpu.health.policy import EccAction, HealthPolicy, WatcherFailureAction
from kubegpu.health.xid import DEFAULT_IGNORED_XIDS, XidPolicy

__all__ = [
    "CLI_FLAGS",
    "ENV_VARS",
    "AgentConfig",
    "DeviceIdStrategy",
    "DeviceListStrategy",
    "MigStrategy",
    "SharedResource",
    "Sharing",
    "SharingKind",
    "load_config",
]

E = TypeVar("E", bound=Enum)


class MigStrategy(Enum):
    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


class DeviceListStrategy(Enum):
    ENVVAR = "envvar"
    VOLUME_MOUNTS = "volume-mounts"
    CDI_ANNOTATIONS = "cdi-annotations"
    CDI_CRI = "cdi-cri"


class DeviceIdStrategy(Enum):
    UUID = "uuid"
    INDEX = "index"


class SharingKind(Enum):
    TIME_SLICING = "timeSlicing"
    MPS = "mps"


@dataclass(frozen=True, kw_only=True)
class SharedResource:
    """One ``sharing.<kind>.resources[]`` entry; ``devices`` None means every device of the resource."""

    name: str
    replicas: int
    rename: str | None = None
    devices: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class Sharing:
    """The node's sharing: one kind for all GPUs, as NVIDIA, plus kubegpu's per-GPU additions."""

    kind: SharingKind
    rename_by_default: bool
    fail_requests_greater_than_one: bool
    resources: tuple[SharedResource, ...]
    per_gpu_replicas: tuple[tuple[str, int], ...] = ()
    exclusive: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """Everything the device plugin needs, resolved and validated."""

    mig_strategy: MigStrategy = MigStrategy.NONE
    fail_on_init_error: bool = True
    nvidia_driver_root: str = "/"
    nvidia_dev_root: str = "/"
    mps_root: str = ""
    gds_enabled: bool = False
    mofed_enabled: bool = False
    gdrcopy_enabled: bool = False
    pass_device_specs: bool = False
    device_list_strategies: tuple[DeviceListStrategy, ...] = (DeviceListStrategy.ENVVAR,)
    device_id_strategy: DeviceIdStrategy = DeviceIdStrategy.UUID
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    cdi_kind: str = "nvidia.com/gpu"
    allocation_policy: str = "topology"
    replica_policy: str = "distributed"
    pre_start_check: bool = False
    health: HealthPolicy = field(default_factory=HealthPolicy)
    sharing: Sharing | None = None
    source_file: str | None = None
    warnings: tuple[str, ...] = ()


# --- where each setting can come from ------------------------------------------------------------

# setting -> (file key path, env var, CLI flag); None where that layer has no such setting.
_SETTINGS: dict[str, tuple[str | None, str | None, str | None]] = {
    "mig_strategy": ("flags.migStrategy", "MIG_STRATEGY", "--mig-strategy"),
    "fail_on_init_error": ("flags.failOnInitError", "FAIL_ON_INIT_ERROR", "--fail-on-init-error"),
    "nvidia_driver_root": ("flags.nvidiaDriverRoot", "NVIDIA_DRIVER_ROOT", "--nvidia-driver-root"),
    "nvidia_dev_root": ("flags.nvidiaDevRoot", "NVIDIA_DEV_ROOT", "--nvidia-dev-root"),
    "mps_root": ("flags.mpsRoot", "MPS_ROOT", "--mps-root"),
    "gds_enabled": ("flags.gdsEnabled", "GDS_ENABLED", "--gds-enabled"),
    "mofed_enabled": ("flags.mofedEnabled", "MOFED_ENABLED", "--mofed-enabled"),
    "gdrcopy_enabled": ("flags.gdrcopyEnabled", "GDRCOPY_ENABLED", "--gdrcopy-enabled"),
    "pass_device_specs": ("flags.plugin.passDeviceSpecs", "PASS_DEVICE_SPECS", "--pass-device-specs"),
    "device_list_strategies": (
        "flags.plugin.deviceListStrategy",
        "DEVICE_LIST_STRATEGY",
        "--device-list-strategy",
    ),
    "device_id_strategy": ("flags.plugin.deviceIDStrategy", "DEVICE_ID_STRATEGY", "--device-id-strategy"),
    "cdi_annotation_prefix": (
        "flags.plugin.cdiAnnotationPrefix",
        "CDI_ANNOTATION_PREFIX",
        "--cdi-annotation-prefix",
    ),
    "replica_policy": (
        "flags.plugin.sharedDevicesAllocationPolicy",
        "SHARED_DEVICES_ALLOCATION_POLICY",
        "--shared-devices-allocation-policy",
    ),
    "allocation_policy": ("kubegpu.allocationPolicy", "KUBEGPU_ALLOCATION_POLICY", "--allocation-policy"),
    "cdi_kind": ("kubegpu.cdiKind", None, None),
    "pre_start_check": ("kubegpu.preStartCheck", None, None),
}

ENV_VARS: tuple[str, ...] = tuple(
    sorted(
        [env for _, env, _ in _SETTINGS.values() if env]
        + ["DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS"]
    )
)
CLI_FLAGS: Mapping[str, str] = {name: flag for name, (_, _, flag) in _SETTINGS.items() if flag}

# Keys NVIDIA's v1 schema defines; the ones kubegpu does not act on only produce a warning.
MAX_REPLICAS = 1024  # replicas per GPU; each is a device kubelet lists, so the bound keeps that finite
_NVIDIA_FLAGS = {
    "migStrategy", "failOnInitError", "nvidiaDriverRoot", "nvidiaDevRoot", "mpsRoot", "gdsEnabled",
    "mofedEnabled", "gdrcopyEnabled", "useNodeFeatureAPI", "deviceDiscoveryStrategy", "plugin", "gfd",
    "driverRootCtrPath", "devRootCtrPath",
}  # fmt: skip
_NVIDIA_PLUGIN = {
    "passDeviceSpecs", "deviceListStrategy", "deviceIDStrategy", "cdiAnnotationPrefix", "nvidiaCTKPath",
    "containerDriverRoot", "sharedDevicesAllocationPolicy",
}  # fmt: skip
_NVIDIA_TOP = {"version", "flags", "resources", "sharing", "imex", "kubegpu"}
_KUBEGPU_TOP = {"allocationPolicy", "replicaPolicy", "cdiKind", "preStartCheck", "health", "sharing"}
_KUBEGPU_HEALTH = {"disabled", "ignoredXids", "fatalXids", "ecc", "watcherFailure"}
_KUBEGPU_ECC = {"doubleBit", "singleBit"}
_KUBEGPU_SHARING = {"replicas", "exclusive"}
_SHARING_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
_SHARED_RESOURCE_KEYS = {"name", "replicas", "rename", "devices"}
_UNUSED_NVIDIA = {
    "flags.useNodeFeatureAPI", "flags.deviceDiscoveryStrategy", "flags.gfd", "flags.driverRootCtrPath",
    "flags.devRootCtrPath", "flags.plugin.nvidiaCTKPath", "flags.plugin.containerDriverRoot", "resources",
    "imex",
}  # fmt: skip


# --- value parsers -------------------------------------------------------------------------------

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _allowed(values: Sequence[str]) -> str:
    return ", ".join(values)


def _bool(where: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(f"{where}: {value!r} is not a boolean; allowed: true, false")


def _str(where: str, value: object) -> str:
    if isinstance(value, str):
        return value
    raise ConfigError(f"{where}: {value!r} is not a string")


def _enum(cls: type[E], where: str, value: object) -> E:
    allowed = [m.value for m in cls]
    if isinstance(value, str):
        for member in cls:
            if member.value == value.strip():
                return member
    raise ConfigError(f"{where}: {value!r} is not allowed; allowed: {_allowed(allowed)}")


def _strategies(where: str, value: object) -> tuple[DeviceListStrategy, ...]:
    if isinstance(value, str):
        items: list[object] = [v for v in value.split(",") if v.strip()]
        wheres = [where] * len(items)
    elif isinstance(value, list):
        items = list(value)
        wheres = [f"{where}[{i}]" for i in range(len(items))]
    else:
        raise ConfigError(f"{where}: {value!r} must be a strategy name, a comma list or a list")
    if not items:
        raise ConfigError(f"{where}: at least one strategy is needed; allowed: "
                          f"{_allowed([m.value for m in DeviceListStrategy])}")  # fmt: skip
    out = tuple(_enum(DeviceListStrategy, w, v) for w, v in zip(wheres, items, strict=True))
    return tuple(dict.fromkeys(out))


def _registered(names: Mapping[str, object]) -> Callable[[str, object], str]:
    def parse(where: str, value: object) -> str:
        if isinstance(value, str) and value.strip() in names:
            return value.strip()
        raise ConfigError(f"{where}: unknown policy {value!r}; allowed: {_allowed(sorted(names))}")

    return parse


_PARSERS: dict[str, Callable[[str, object], object]] = {
    "mig_strategy": lambda w, v: _enum(MigStrategy, w, v),
    "fail_on_init_error": _bool,
    "nvidia_driver_root": _str,
    "nvidia_dev_root": _str,
    "mps_root": _str,
    "gds_enabled": _bool,
    "mofed_enabled": _bool,
    "gdrcopy_enabled": _bool,
    "pass_device_specs": _bool,
    "device_list_strategies": _strategies,
    "device_id_strategy": lambda w, v: _enum(DeviceIdStrategy, w, v),
    "cdi_annotation_prefix": _str,
    "replica_policy": _registered(REPLICA_POLICIES),
    "allocation_policy": _registered(ALLOCATION_POLICIES),
    "cdi_kind": _str,
    "pre_start_check": _bool,
}


def _xids(where: str, value: object) -> frozenset[int]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: must be a list of XID numbers")
    out: set[int] = set()
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise ConfigError(f"{where}[{i}]: {item!r} is not an XID number")
        out.add(item)
    return frozenset(out)


def _env_xids(where: str, value: str) -> frozenset[int]:
    out: set[int] = set()
    for raw in value.split(","):
        part = raw.strip()
        if not part:
            continue
        if not part.isdigit():
            raise ConfigError(f"{where}: {part!r} is not an XID number; expected a comma list or 'all'")
        out.add(int(part))
    return frozenset(out)


# --- the file ------------------------------------------------------------------------------------


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file (YAML or JSON expected): {exc.reason}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}{line}: not valid YAML: {problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping with 'version: v1' at the top")
    return data


def _mapping(where: str, value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a mapping, not {type(value).__name__}")
    return value


def _lookup(data: dict[str, Any], dotted: str) -> tuple[bool, object]:
    node: object = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _check_keys(where: str, mapping: dict[str, Any], allowed: set[str], *, strict: bool) -> list[str]:
    warnings = []
    for key in mapping:
        if key in allowed:
            continue
        path = f"{where}.{key}" if where else str(key)
        if strict:
            raise ConfigError(f"{path}: unknown key; allowed: {_allowed(sorted(allowed))}")
        warnings.append(f"{path}: unknown key, ignored")
    return warnings


def _parse_sharing_kind(prefix: str, kind: SharingKind, raw: dict[str, Any]) -> Sharing:
    where = f"{prefix}sharing.{kind.value}"
    _check_keys(where, raw, _SHARING_KEYS, strict=True)
    rename_by_default = _bool(f"{where}.renameByDefault", raw.get("renameByDefault", False))
    fail_default = kind is SharingKind.MPS
    fail = _bool(f"{where}.failRequestsGreaterThanOne", raw.get("failRequestsGreaterThanOne", fail_default))
    resources_raw = raw.get("resources") or []
    if not isinstance(resources_raw, list):
        raise ConfigError(f"{where}.resources: must be a list of {{name, replicas}} entries")
    resources = []
    for i, raw_entry in enumerate(resources_raw):
        ew = f"{where}.resources[{i}]"
        entry = _mapping(ew, raw_entry)
        _check_keys(ew, entry, _SHARED_RESOURCE_KEYS, strict=True)
        if "name" not in entry:
            raise ConfigError(f"{ew}.name: missing; e.g. nvidia.com/gpu")
        name = _str(f"{ew}.name", entry["name"])
        replicas = entry.get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 2 <= replicas <= MAX_REPLICAS:
            raise ConfigError(
                f"{ew}.replicas: {replicas!r} must be an integer of at least 2 and at most {MAX_REPLICAS}"
            )
        rename = entry.get("rename")
        if rename is not None:
            rename = _str(f"{ew}.rename", rename)
        devices_raw = entry.get("devices", "all")
        devices: tuple[str, ...] | None
        if devices_raw == "all" or devices_raw is None:
            devices = None
        elif isinstance(devices_raw, list):
            for j, d in enumerate(devices_raw):
                if isinstance(d, bool) or not isinstance(d, int | str):
                    raise ConfigError(f"{ew}.devices[{j}]: {d!r} must be a GPU index or UUID")
            devices = tuple(str(d) for d in devices_raw)
        else:
            raise ConfigError(f"{ew}.devices: {devices_raw!r} must be 'all' or a list of GPU indices/UUIDs")
        resources.append(SharedResource(name=name, replicas=replicas, rename=rename, devices=devices))
    names = [r.name for r in resources]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{where}.resources: {name} is listed more than once")
    return Sharing(
        kind=kind,
        rename_by_default=rename_by_default,
        fail_requests_greater_than_one=fail,
        resources=tuple(resources),
    )


def _parse_sharing(prefix: str, data: dict[str, Any], kubegpu: dict[str, Any]) -> Sharing | None:
    sharing = _mapping(f"{prefix}sharing", data.get("sharing"))
    _check_keys(f"{prefix}sharing", sharing, {s.value for s in SharingKind}, strict=True)
    parsed = {
        kind: _parse_sharing_kind(
            prefix, kind, _mapping(f"{prefix}sharing.{kind.value}", sharing.get(kind.value))
        )
        for kind in SharingKind
        if sharing.get(kind.value) is not None
    }
    # NVIDIA: MPS wins if it has any resource with replicas > 1, else time-slicing.
    chosen = parsed.get(SharingKind.MPS)
    if chosen is None or not chosen.resources:
        chosen = parsed.get(SharingKind.TIME_SLICING) or chosen
    extra = _mapping(f"{prefix}kubegpu.sharing", kubegpu.get("sharing"))
    _check_keys(f"{prefix}kubegpu.sharing", extra, _KUBEGPU_SHARING, strict=True)
    per_gpu: list[tuple[str, int]] = []
    for key, value in _mapping(f"{prefix}kubegpu.sharing.replicas", extra.get("replicas")).items():
        where = f"{prefix}kubegpu.sharing.replicas.{key}"
        if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= MAX_REPLICAS:
            raise ConfigError(
                f"{where}: {value!r} must be an integer of at least 2 and at most {MAX_REPLICAS} (list the"
                f" GPU under kubegpu.sharing.exclusive to keep it unshared)"
            )
        per_gpu.append((str(key), value))
    exclusive_raw = extra.get("exclusive") or []
    if not isinstance(exclusive_raw, list):
        raise ConfigError(f"{prefix}kubegpu.sharing.exclusive: must be a list of GPU indices or UUIDs")
    exclusive = []
    for j, d in enumerate(exclusive_raw):
        if isinstance(d, bool) or not isinstance(d, int | str):
            raise ConfigError(f"{prefix}kubegpu.sharing.exclusive[{j}]: {d!r} must be a GPU index or UUID")
        exclusive.append(str(d))
    if (per_gpu or exclusive) and (chosen is None or not chosen.resources):
        raise ConfigError(
            f"{prefix}kubegpu.sharing: per-GPU replicas and exclusive GPUs need "
            f"sharing.timeSlicing or sharing.mps with at least one resource"
        )
    clash = {g for g, _ in per_gpu} & set(exclusive)
    if clash:
        raise ConfigError(
            f"{prefix}kubegpu.sharing: GPU {sorted(clash)[0]} is both exclusive and given replicas"
        )
    if chosen is None:
        return None
    if exclusive and chosen is not None:
        for i, res in enumerate(chosen.resources):
            if not (chosen.rename_by_default or res.rename):
                raise ConfigError(
                    f"{prefix}sharing.{chosen.kind.value}.resources[{i}]: exclusive GPUs and shared "
                    f"replicas of {res.name} would have the same resource name; set renameByDefault: "
                    f"true or a rename"
                )
    return Sharing(
        kind=chosen.kind,
        rename_by_default=chosen.rename_by_default,
        fail_requests_greater_than_one=chosen.fail_requests_greater_than_one,
        resources=chosen.resources,
        per_gpu_replicas=tuple(per_gpu),
        exclusive=tuple(exclusive),
    )


def _parse_health(prefix: str, kubegpu: dict[str, Any], env: Mapping[str, str]) -> HealthPolicy:
    raw = _mapping(f"{prefix}kubegpu.health", kubegpu.get("health"))
    _check_keys(f"{prefix}kubegpu.health", raw, _KUBEGPU_HEALTH, strict=True)
    disabled = _bool(f"{prefix}kubegpu.health.disabled", raw.get("disabled", False))
    ignored = DEFAULT_IGNORED_XIDS
    if "ignoredXids" in raw:
        ignored = _xids(f"{prefix}kubegpu.health.ignoredXids", raw["ignoredXids"])
    forced: frozenset[int] = frozenset()
    all_fatal = False
    if "fatalXids" in raw:
        if raw["fatalXids"] == "all":
            all_fatal = True
        else:
            forced = _xids(f"{prefix}kubegpu.health.fatalXids", raw["fatalXids"])
    ecc = _mapping(f"{prefix}kubegpu.health.ecc", raw.get("ecc"))
    _check_keys(f"{prefix}kubegpu.health.ecc", ecc, _KUBEGPU_ECC, strict=True)
    dbe = _enum(EccAction, f"{prefix}kubegpu.health.ecc.doubleBit", ecc.get("doubleBit", "fatal"))
    sbe = _enum(EccAction, f"{prefix}kubegpu.health.ecc.singleBit", ecc.get("singleBit", "ignore"))
    watcher = _enum(
        WatcherFailureAction, f"{prefix}kubegpu.health.watcherFailure", raw.get("watcherFailure", "unhealthy")
    )
    # NVIDIA's env vars win over the file.
    off = env.get("DP_DISABLE_HEALTHCHECKS", "").strip()
    if off:
        if off.lower() in {"all", "xids"}:
            disabled = True
        else:
            ignored = ignored | _env_xids("env DP_DISABLE_HEALTHCHECKS", off)
    on = env.get("DP_ENABLE_HEALTHCHECKS", "").strip()
    if on:
        if on.lower() == "all":
            all_fatal = True
        else:
            forced = forced | _env_xids("env DP_ENABLE_HEALTHCHECKS", on)
    xid = XidPolicy(ignored=ignored, forced_fatal=forced, all_fatal=all_fatal, disabled=disabled)
    return HealthPolicy(xid=xid, ecc_double_bit=dbe, ecc_single_bit=sbe, watcher_failure=watcher)


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cli: Mapping[str, object] | None = None,
) -> AgentConfig:
    """Resolve the configuration from ``path`` (optional), ``env`` and ``cli`` overrides.

    ``cli`` maps setting names (``mig_strategy``, ``device_list_strategies`` …, see ``CLI_FLAGS``) to
    the raw flag value; ``None`` values mean "not given". Raises ``ConfigError`` on the first bad value.
    """
    env = dict(env or {})
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    unknown = set(cli) - set(CLI_FLAGS)
    if unknown:
        raise ConfigError(f"unknown CLI setting(s): {', '.join(sorted(unknown))}")
    data: dict[str, Any] = {}
    prefix = ""
    warnings: list[str] = []
    if path is not None:
        path = Path(path)
        data = _read_file(path)
        prefix = f"{path}: "
        version = data.get("version")
        if version not in (None, "", "v1"):
            raise ConfigError(f"{prefix}version: {version!r} is not supported; allowed: v1")
        warnings += [prefix + w for w in _check_keys("", data, _NVIDIA_TOP, strict=False)]
        flags = _mapping(f"{prefix}flags", data.get("flags"))
        warnings += [prefix + w for w in _check_keys("flags", flags, _NVIDIA_FLAGS, strict=False)]
        plugin = _mapping(f"{prefix}flags.plugin", flags.get("plugin"))
        warnings += [prefix + w for w in _check_keys("flags.plugin", plugin, _NVIDIA_PLUGIN, strict=False)]
        for dotted in sorted(_UNUSED_NVIDIA):
            found, _ = _lookup(data, dotted)
            if found:
                warnings.append(f"{prefix}{dotted}: accepted for compatibility, not used by kubegpu")
    kubegpu = _mapping(f"{prefix}kubegpu", data.get("kubegpu"))
    _check_keys(f"{prefix}kubegpu", kubegpu, _KUBEGPU_TOP, strict=True)

    values: dict[str, object] = {}
    for name, (file_key, env_var, _flag) in _SETTINGS.items():
        parse = _PARSERS[name]
        if file_key is not None:
            found, raw = _lookup(data, file_key)
            if found and raw is not None:
                values[name] = parse(f"{prefix}{file_key}", raw)
        if name == "replica_policy":
            found, raw = _lookup(data, "kubegpu.replicaPolicy")
            if found and raw is not None:
                alias = parse(f"{prefix}kubegpu.replicaPolicy", raw)
                if "replica_policy" in values and values["replica_policy"] != alias:
                    raise ConfigError(
                        f"{prefix}kubegpu.replicaPolicy: {alias!r} contradicts "
                        f"flags.plugin.sharedDevicesAllocationPolicy {values['replica_policy']!r}"
                    )
                values[name] = alias
        if env_var is not None and env.get(env_var, "") != "":
            values[name] = parse(f"env {env_var}", env[env_var])
        if name in cli:
            values[name] = parse(CLI_FLAGS[name], cli[name])
    if "nvidia_dev_root" not in values and "nvidia_driver_root" in values:
        values["nvidia_dev_root"] = values["nvidia_driver_root"]

    health = _parse_health(prefix, kubegpu, env)
    sharing = _parse_sharing(prefix, data, kubegpu)
    config = AgentConfig(
        health=health,
        sharing=sharing,
        source_file=str(path) if path is not None else None,
        warnings=tuple(warnings),
        **values,  # type: ignore[arg-type]
    )
    if sharing is not None and sharing.kind is SharingKind.MPS:
        if config.mig_strategy is MigStrategy.MIXED:
            raise ConfigError(f"{prefix}sharing.mps: MPS sharing is not supported with migStrategy=mixed")
        if not config.mps_root:
            raise ConfigError(
                f"{prefix}sharing.mps: MPS sharing needs flags.mpsRoot (or MPS_ROOT, --mps-root)"
            )
    return config

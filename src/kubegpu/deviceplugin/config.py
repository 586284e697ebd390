"""The agent's configuration: NVIDIA's ``version: v1`` file as is, plus kubegpu's ``kubegpu:`` section.

Every setting has one place in the file, and most have NVIDIA's environment variable and command-line
flag as well. Precedence is CLI flag > environment variable > config file > default, as in NVIDIA's
plugin. Loading is all-or-nothing: the first invalid value raises ``ConfigError`` naming where it came
from (``config.yaml: flags.plugin.deviceListStrategy[1]``, ``env DEVICE_ID_STRATEGY``,
``--mig-strategy``) and the allowed values; nothing is half-applied. Keys NVIDIA defines but kubegpu
does not act on (``flags.gfd``, ``resources``, ``imex`` …) are checked as NVIDIA checks them, then
reported as warnings; unknown keys inside ``kubegpu:`` are errors, because that schema is ours.

NVIDIA's own keys mean what NVIDIA's plugin makes of them: resource names follow its rule (``gpu`` is
``nvidia.com/gpu``), and ``rename`` and ``devices`` of ``sharing.*.resources[]`` are checked, then
ignored with a warning, as NVIDIA's plugin ignores them. What kubegpu adds lives under ``kubegpu:``.

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
      sharing:
        replicas: {"0": 4, "GPU-…": 2}  # per-GPU replica counts (index or UUID)
        exclusive: [6, 7]               # GPUs kept whole while the others are shared
        rename: {nvidia.com/gpu: nvidia.com/gpu-ts}   # the shared resource's name
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kubegpu.deviceplugin.policies import ALLOCATION_POLICIES, REPLICA_POLICIES
from kubegpu.echo import clip, shorten
from kubegpu.errors import ConfigError
from kubegpu.health.policy import EccAction, HealthPolicy
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
    "resource_name",
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
    """One ``sharing.<kind>.resources[]`` entry, as NVIDIA's plugin runs it: every device of ``name``
    is shared. ``rename`` is kubegpu's ``kubegpu.sharing.rename`` for it (None: NVIDIA's naming)."""

    name: str
    replicas: int
    rename: str | None = None


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
_KUBEGPU_HEALTH = {"disabled", "ignoredXids", "fatalXids", "ecc"}
_KUBEGPU_ECC = {"doubleBit", "singleBit"}
_KUBEGPU_SHARING = {"replicas", "exclusive", "rename"}
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
    raise ConfigError(f"{where}: {shorten(value)} is not a boolean; allowed: true, false")


def _str(where: str, value: object) -> str:
    if isinstance(value, str):
        return value
    raise ConfigError(f"{where}: {shorten(value)} is not a string")


def _enum(cls: type[E], where: str, value: object) -> E:
    allowed = [m.value for m in cls]
    if isinstance(value, str):
        for member in cls:
            if member.value == value.strip():
                return member
    raise ConfigError(f"{where}: {shorten(value)} is not allowed; allowed: {_allowed(allowed)}")


def _strategies(where: str, value: object) -> tuple[DeviceListStrategy, ...]:
    if isinstance(value, str):
        items: list[object] = [v for v in value.split(",") if v.strip()]
        wheres = [where] * len(items)
    elif isinstance(value, list):
        items = list(value)
        wheres = [f"{where}[{i}]" for i in range(len(items))]
    else:
        raise ConfigError(f"{where}: {shorten(value)} must be a strategy name, a comma list or a list")
    if not items:
        raise ConfigError(f"{where}: at least one strategy is needed; allowed: "
                          f"{_allowed([m.value for m in DeviceListStrategy])}")  # fmt: skip
    out = tuple(_enum(DeviceListStrategy, w, v) for w, v in zip(wheres, items, strict=True))
    return tuple(dict.fromkeys(out))


def _registered(names: Mapping[str, object]) -> Callable[[str, object], str]:
    def parse(where: str, value: object) -> str:
        if isinstance(value, str) and value.strip() in names:
            return value.strip()
        raise ConfigError(f"{where}: unknown policy {shorten(value)}; allowed: {_allowed(sorted(names))}")

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
            raise ConfigError(f"{where}[{i}]: {shorten(item)} is not an XID number")
        out.add(item)
    return frozenset(out)


def _env_xids(where: str, value: str) -> frozenset[int]:
    out: set[int] = set()
    for raw in value.split(","):
        part = raw.strip()
        if not part:
            continue
        if not part.isdigit():
            raise ConfigError(
                f"{where}: {shorten(part)} is not an XID number; expected a comma list or 'all'"
            )
        out.add(int(part))
    return frozenset(out)


# --- NVIDIA's rules for resource names and device references -------------------------------------

RESOURCE_NAME_PREFIX = "nvidia.com"
MAX_RESOURCE_NAME_LENGTH = 63  # the whole name, prefix included
SHARED_SUFFIX = ".shared"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_UINT = re.compile(r"^[0-9]+$")
_HEX_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_HEX32 = re.compile(r"^[0-9a-fA-F]{32}$")
_DEVICES_ALLOWED = (
    "allowed: 'all', a count of devices greater than 0, or a list of GPU indices, MIG indices "
    '("<gpu>:<mig>") and GPU or MIG UUIDs'
)


def resource_name(where: str, value: object) -> str:
    """A resource name as NVIDIA reads it: without the ``nvidia.com/`` prefix it is added (``gpu`` is
    ``nvidia.com/gpu``); the whole name has at most 63 characters and the part after the prefix is a
    DNS subdomain (lower-case letters, digits, ``-`` and ``.``)."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {shorten(value)} is not a resource name; e.g. nvidia.com/gpu")
    full = value if value.startswith(RESOURCE_NAME_PREFIX + "/") else f"{RESOURCE_NAME_PREFIX}/{value}"
    if len(full) > MAX_RESOURCE_NAME_LENGTH:
        raise ConfigError(
            f"{where}: {shorten(full)} has {len(full)} characters; a resource name has at most "
            f"{MAX_RESOURCE_NAME_LENGTH}"
        )
    short = full.split("/", 1)[1]
    if len(short) > 253 or not _DNS_SUBDOMAIN.match(short):
        raise ConfigError(
            f"{where}: {shorten(full)} is not a valid resource name: after {RESOURCE_NAME_PREFIX}/ "
            f"it must be a DNS subdomain (lower-case letters, digits, '-' and '.', starting and ending "
            f"with a letter "
            f"or digit); names without {RESOURCE_NAME_PREFIX}/ are put under it"
        )
    return full


def _is_uint(text: str) -> bool:
    return bool(_UINT.match(text)) and int(text) < 2**64


def _is_uuid(text: str) -> bool:
    """The forms NVIDIA's UUID parser accepts: canonical, 32 hex digits, ``{canonical}``, ``urn:uuid:``."""
    if text.lower().startswith("urn:uuid:"):
        return bool(_HEX_UUID.match(text[9:]))
    if text.startswith("{") and text.endswith("}"):
        return bool(_HEX_UUID.match(text[1:-1]))
    return bool(_HEX_UUID.match(text) or _HEX32.match(text))


def _is_device_ref(text: str) -> bool:
    """A GPU index (``0``), a MIG index (``0:1``), a GPU UUID (``GPU-<uuid>``) or a MIG UUID
    (``MIG-<uuid>`` or ``MIG-GPU-<uuid>/<gi>/<ci>``)."""
    if _is_uint(text):
        return True
    gpu, colon, mig = text.partition(":")
    if colon and _is_uint(gpu) and _is_uint(mig):
        return True
    if text.startswith("GPU-"):
        return _is_uuid(text[4:])
    if text.startswith("MIG-"):
        rest = text[4:]
        if _is_uuid(rest):
            return True
        parts = rest.split("/", 2)
        return (
            len(parts) == 3
            and parts[0].startswith("GPU-")
            and _is_uuid(parts[0][4:])
            and all(_is_uint(p) for p in parts[1:])
        )
    return False


def _check_devices(where: str, value: object) -> bool:
    """Check ``devices`` as NVIDIA does; True when it is ``all``."""
    if isinstance(value, str):
        if value != "all":
            raise ConfigError(f"{where}: {shorten(value)} is not allowed; {_DEVICES_ALLOWED}")
        return True
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ConfigError(f"{where}: {shorten(value)} is not allowed; {_DEVICES_ALLOWED}")
        return False
    if isinstance(value, list):
        for j, item in enumerate(value):
            if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                continue
            if isinstance(item, str) and _is_device_ref(item):
                continue
            raise ConfigError(
                f'{where}[{j}]: {shorten(item)} is not a GPU index, a MIG index ("<gpu>:<mig>"), a GPU UUID '
                f"(GPU-<uuid>) or a MIG UUID (MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci>)"
            )
        return False
    raise ConfigError(f"{where}: {shorten(value)} is not allowed; {_DEVICES_ALLOWED}")


def _check_resources_section(prefix: str, value: object) -> None:
    """NVIDIA's top-level ``resources`` (``gpus``/``mig`` lists of ``{pattern, name}``): its plugin
    checks it, then drops it; so does kubegpu."""
    if value is None:
        return
    where = f"{prefix}resources"
    if not isinstance(value, dict):
        raise ConfigError(
            f"{where}: must be a mapping with 'gpus' and 'mig' lists of {{pattern, name}}, "
            f"not {type(value).__name__}"
        )
    for key in ("gpus", "mig"):
        items = value.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ConfigError(f"{where}.{key}: must be a list of {{pattern, name}} entries")
        for i, raw in enumerate(items):
            ew = f"{where}.{key}[{i}]"
            entry = _mapping(ew, raw)
            if "pattern" not in entry:
                raise ConfigError(f"{ew}.pattern: missing; e.g. '*'")
            if not isinstance(entry["pattern"], str):
                raise ConfigError(f"{ew}.pattern: {shorten(entry['pattern'])} is not a string")
            if "name" not in entry:
                raise ConfigError(f"{ew}.name: missing; e.g. gpu")
            resource_name(f"{ew}.name", entry["name"])


def _check_imex(prefix: str, value: object) -> None:
    """NVIDIA's ``imex``: ``channelIDs`` is ``[]`` or ``[0]``, ``required`` a boolean."""
    imex = _mapping(f"{prefix}imex", value)
    ids = imex.get("channelIDs")
    if ids is not None and not (
        isinstance(ids, list) and (ids == [] or (len(ids) == 1 and type(ids[0]) is int and ids[0] == 0))
    ):
        raise ConfigError(f"{prefix}imex.channelIDs: {shorten(ids)} is not allowed; allowed: [] or [0]")
    if imex.get("required") is not None:
        _bool(f"{prefix}imex.required", imex["required"])


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
        path = f"{where}.{clip(str(key))}" if where else clip(str(key))
        if strict:
            raise ConfigError(f"{path}: unknown key; allowed: {_allowed(sorted(allowed))}")
        warnings.append(f"{path}: unknown key, ignored")
    return warnings


def _replicas(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= MAX_REPLICAS:
        raise ConfigError(
            f"{where}: {shorten(value)} must be an integer of at least 2 and at most {MAX_REPLICAS}"
        )
    return value


def _parse_shared_resource(
    ew: str, raw: object, *, rename_by_default: bool, warnings: list[str]
) -> SharedResource:
    """One ``resources[]`` entry, checked as NVIDIA checks it and then run as NVIDIA's plugin runs it:
    ``rename`` and ``devices`` are dropped with a warning (its ``DisableResourceNamingInConfig``)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{ew}: must be a mapping with name and replicas, not {type(raw).__name__}")
    entry: dict[str, Any] = raw
    _check_keys(ew, entry, _SHARED_RESOURCE_KEYS, strict=True)
    if "name" not in entry:
        raise ConfigError(f"{ew}.name: missing; e.g. nvidia.com/gpu")
    name = resource_name(f"{ew}.name", entry["name"])
    all_devices = _check_devices(f"{ew}.devices", entry.get("devices", "all"))
    if "replicas" not in entry:
        raise ConfigError(f"{ew}.replicas: missing; e.g. replicas: 4 (at least 2)")
    replicas = _replicas(f"{ew}.replicas", entry["replicas"])
    shared_name = name + SHARED_SUFFIX if rename_by_default else name
    if "rename" in entry:
        rename = resource_name(f"{ew}.rename", entry["rename"])
        if not (rename_by_default and rename == shared_name):
            warnings.append(
                f"{ew}.rename: {rename} is ignored, as NVIDIA's plugin ignores it; the shared resource "
                f"is {shared_name} (renameByDefault picks {name}{SHARED_SUFFIX}; kubegpu.sharing.rename "
                f"any name)"
            )
    if not all_devices:
        warnings.append(
            f"{ew}.devices: {shorten(entry['devices'])} is ignored, as NVIDIA's plugin ignores it: "
            f"every device of {name} is shared (kubegpu.sharing.exclusive keeps chosen GPUs whole)"
        )
    return SharedResource(name=name, replicas=replicas)


def _parse_sharing_kind(prefix: str, kind: SharingKind, raw: object, warnings: list[str]) -> Sharing:
    where = f"{prefix}sharing.{kind.value}"
    # An empty ``timeSlicing:`` (null) reaches NVIDIA's reader like ``{}``: no resources, refused.
    section = _mapping(where, raw)
    _check_keys(where, section, _SHARING_KEYS, strict=True)
    rename_raw = section.get("renameByDefault")
    rename_by_default = False if rename_raw is None else _bool(f"{where}.renameByDefault", rename_raw)
    fail_raw = section.get("failRequestsGreaterThanOne")
    fail_default = kind is SharingKind.MPS
    fail = fail_default if fail_raw is None else _bool(f"{where}.failRequestsGreaterThanOne", fail_raw)
    if "resources" not in section:
        raise ConfigError(
            f"{where}.resources: missing; list at least one {{name, replicas}} entry, or remove {where}"
        )
    resources_raw = section["resources"]
    if resources_raw is not None and not isinstance(resources_raw, list):
        raise ConfigError(f"{where}.resources: must be a list of {{name, replicas}} entries")
    if not resources_raw:
        raise ConfigError(
            f"{where}.resources: at least one {{name, replicas}} entry is needed, or remove {where}"
        )
    resources = [
        _parse_shared_resource(
            f"{where}.resources[{i}]", entry, rename_by_default=rename_by_default, warnings=warnings
        )
        for i, entry in enumerate(resources_raw)
    ]
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


def _parse_renames(where: str, raw: object, shared: Sequence[str]) -> dict[str, str]:
    renames: dict[str, str] = {}
    for key, value in _mapping(where, raw).items():
        kw = f"{where}.{key}"
        name = resource_name(kw, key)
        if name not in shared:
            raise ConfigError(
                f"{kw}: {name} is not shared; shared: {_allowed(shared) or 'none'} (sharing.*.resources)"
            )
        renames[name] = resource_name(kw, value)
    return renames


def _parse_sharing(
    prefix: str, data: dict[str, Any], kubegpu: dict[str, Any], warnings: list[str]
) -> Sharing | None:
    sharing = _mapping(f"{prefix}sharing", data.get("sharing"))
    _check_keys(f"{prefix}sharing", sharing, {s.value for s in SharingKind}, strict=True)
    parsed = {
        kind: _parse_sharing_kind(prefix, kind, sharing[kind.value], warnings)
        for kind in SharingKind
        # NVIDIA: an empty ``mps:`` is no MPS section; an empty ``timeSlicing:`` is an empty one.
        if kind.value in sharing and (kind is SharingKind.TIME_SLICING or sharing[kind.value] is not None)
    }
    # NVIDIA: a given MPS section (it always has a resource with replicas >= 2) wins over time-slicing.
    chosen = parsed.get(SharingKind.MPS) or parsed.get(SharingKind.TIME_SLICING)
    extra = _mapping(f"{prefix}kubegpu.sharing", kubegpu.get("sharing"))
    _check_keys(f"{prefix}kubegpu.sharing", extra, _KUBEGPU_SHARING, strict=True)
    per_gpu: list[tuple[str, int]] = []
    for key, value in _mapping(f"{prefix}kubegpu.sharing.replicas", extra.get("replicas")).items():
        where = f"{prefix}kubegpu.sharing.replicas.{clip(str(key))}"
        if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= MAX_REPLICAS:
            raise ConfigError(
                f"{where}: {shorten(value)} must be an integer of at least 2 and at most {MAX_REPLICAS} "
                "(list the GPU under kubegpu.sharing.exclusive to keep it unshared)"
            )
        per_gpu.append((str(key), value))
    exclusive_raw = extra.get("exclusive") or []
    if not isinstance(exclusive_raw, list):
        raise ConfigError(f"{prefix}kubegpu.sharing.exclusive: must be a list of GPU indices or UUIDs")
    exclusive = []
    for j, d in enumerate(exclusive_raw):
        if isinstance(d, bool) or not isinstance(d, int | str):
            raise ConfigError(
                f"{prefix}kubegpu.sharing.exclusive[{j}]: {shorten(d)} must be a GPU index or UUID"
            )
        exclusive.append(str(d))
    if (per_gpu or exclusive or extra.get("rename")) and chosen is None:
        raise ConfigError(
            f"{prefix}kubegpu.sharing: per-GPU replicas, exclusive GPUs and renames need "
            f"sharing.timeSlicing or sharing.mps with at least one resource"
        )
    clash = {g for g, _ in per_gpu} & set(exclusive)
    if clash:
        raise ConfigError(
            f"{prefix}kubegpu.sharing: GPU {sorted(clash)[0]} is both exclusive and given replicas"
        )
    if chosen is None:
        return None
    renames = _parse_renames(
        f"{prefix}kubegpu.sharing.rename", extra.get("rename"), [r.name for r in chosen.resources]
    )
    resources = tuple(
        SharedResource(name=r.name, replicas=r.replicas, rename=renames.get(r.name)) for r in chosen.resources
    )
    if exclusive:
        for i, res in enumerate(resources):
            if not (chosen.rename_by_default or res.rename):
                raise ConfigError(
                    f"{prefix}sharing.{chosen.kind.value}.resources[{i}]: exclusive GPUs and shared "
                    f"replicas of {res.name} would have the same resource name; set renameByDefault: "
                    f"true or kubegpu.sharing.rename"
                )
    return Sharing(
        kind=chosen.kind,
        rename_by_default=chosen.rename_by_default,
        fail_requests_greater_than_one=chosen.fail_requests_greater_than_one,
        resources=resources,
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
    return HealthPolicy(xid=xid, ecc_double_bit=dbe, ecc_single_bit=sbe)


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
            raise ConfigError(f"{prefix}version: {shorten(version)} is not supported; allowed: v1")
        warnings += [prefix + w for w in _check_keys("", data, _NVIDIA_TOP, strict=False)]
        flags = _mapping(f"{prefix}flags", data.get("flags"))
        warnings += [prefix + w for w in _check_keys("flags", flags, _NVIDIA_FLAGS, strict=False)]
        plugin = _mapping(f"{prefix}flags.plugin", flags.get("plugin"))
        warnings += [prefix + w for w in _check_keys("flags.plugin", plugin, _NVIDIA_PLUGIN, strict=False)]
        _check_resources_section(prefix, data.get("resources"))
        _check_imex(prefix, data.get("imex"))
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
                        f"{prefix}kubegpu.replicaPolicy: {shorten(alias)} contradicts "
                        f"flags.plugin.sharedDevicesAllocationPolicy {shorten(values['replica_policy'])}"
                    )
                values[name] = alias
        if env_var is not None and env.get(env_var, "") != "":
            values[name] = parse(f"env {env_var}", env[env_var])
        if name in cli:
            values[name] = parse(CLI_FLAGS[name], cli[name])
    if "nvidia_dev_root" not in values and "nvidia_driver_root" in values:
        values["nvidia_dev_root"] = values["nvidia_driver_root"]

    health = _parse_health(prefix, kubegpu, env)
    sharing_warnings: list[str] = []
    sharing = _parse_sharing(prefix, data, kubegpu, sharing_warnings)
    warnings += sharing_warnings
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

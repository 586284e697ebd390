"""The agent's configuration: NVIDIA's ``version: v1`` file as is, plus kubegpu's ``kubegpu:`` section.

Every setting is one row of ``SETTINGS`` (its ``AgentConfig`` field, parser, default, file key(s),
environment variable(s), ``kubegpu agent`` flag, help and allowed values); ``AgentConfig``'s defaults,
the flags of ``kubegpu agent`` and the file's known keys come from that table, and ``load_config``
resolves every row the same way: CLI flag > environment variable > config file > default, as in
NVIDIA's plugin. The sharing sections are read from the file as a whole. Loading is all-or-nothing:
the first invalid value raises ``ConfigError`` naming where it came from
(``config.yaml: flags.plugin.deviceListStrategy[1]``, ``env DEVICE_ID_STRATEGY``, ``--mig-strategy``)
and the allowed values; nothing is half-applied. Keys NVIDIA defines but kubegpu
does not act on (``flags.gfd``, ``resources``, ``imex`` …) are checked as NVIDIA checks them, then
reported as warnings; unknown keys inside ``kubegpu:`` are errors, because that schema is ours.

NVIDIA's own keys mean what NVIDIA's plugin makes of them: resource names follow its rule (``gpu`` is
``nvidia.com/gpu``), and ``rename`` and ``devices`` of ``sharing.*.resources[]`` are checked, then
ignored with a warning, as NVIDIA's plugin ignores them. What kubegpu adds lives under ``kubegpu:``.

The ``kubegpu:`` section (documented in docs/config.md)::

    kubegpu:
      allocationPolicy: topology        # topology | simple
      replicaPolicy: distributed        # distributed | packed (= flags.plugin.sharedDevicesAllocationPolicy)
      cdiKind: k8s.device-plugin.kubegpu.io/gpu  # CDI device kind used by cdi-annotations / cdi-cri
      cdiSpecDir: /var/run/cdi          # where the agent writes its CDI spec ("": another tool does)
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
        rename: {nvidia.com/gpu: nvidia.com/gpu-ts}   # the shared resource's name
      mps:
        daemon: true                    # run nvidia-cuda-mps-control -d per MPS resource
        control: ""                     # its path; "": PATH, then under the driver root
        shares: false                   # kubegpu.io/gpu-milli shares get MPS limits (needs fractional)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any, Generic, TypeVar

from kubegpu.accounts import MAX_REPLICAS
from kubegpu.deviceplugin.policies import ALLOCATION_POLICIES, REPLICA_POLICIES
from kubegpu.echo import clip, shorten
from kubegpu.errors import ConfigError
from kubegpu.health.policy import EccAction, HealthPolicy, WatcherFailureAction
from kubegpu.health.quarantine import EvictionPolicy, QuarantinePolicy, QuarantineSettings, TaintEffect
from kubegpu.health.xid import DEFAULT_IGNORED_XIDS, XidPolicy
from kubegpu.model.cdi import DEFAULT_AGENT_KIND
from kubegpu.model.dra import DraGpus
from kubegpu.model.migplan import MigManagerSettings
from kubegpu.model.names import is_dns_subdomain
from kubegpu.sources.yamlfile import load_located

__all__ = [
    "CLI_FLAGS",
    "DOCUMENT_FIELDS",
    "ENV_VARS",
    "SETTINGS",
    "AgentConfig",
    "DeviceIdStrategy",
    "DeviceListStrategy",
    "EnvVar",
    "MigStrategy",
    "Setting",
    "SharedResource",
    "Sharing",
    "SharingKind",
    "load_config",
    "resource_name",
]

E = TypeVar("E", bound=Enum)
T = TypeVar("T")


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


_KUBEGPU_HEALTH = {"disabled", "ignoredXids", "fatalXids", "ecc", "watcherFailure", "recoverAfter"}
_KUBEGPU_MIG_MANAGER = {"enabled", "configFile", "drain", "stateFile", "recheckSeconds"}
_KUBEGPU_QUARANTINE = {
    "enabled",
    "taintKey",
    "taintEffect",
    "eviction",
    "maxShare",
    "lease",
    "xids",
    "neverXids",
}
_KUBEGPU_ECC = {"doubleBit", "singleBit"}
_KUBEGPU_SHARING = {"replicas", "exclusive", "rename"}
_SHARING_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
_SHARED_RESOURCE_KEYS = {"name", "replicas", "rename", "devices"}
# Keys NVIDIA's v1 schema defines that kubegpu does not act on: accepted with a warning.
_UNUSED_NVIDIA = {
    "flags.useNodeFeatureAPI", "flags.deviceDiscoveryStrategy", "flags.gfd", "flags.devRootCtrPath",
    "flags.plugin.nvidiaCTKPath", "resources", "imex",
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


# The CDI spec's device kind ``vendor/class`` (container-device-interface's parser): the vendor is a
# letter, then letters, digits, '_', '-' and '.', ending with a letter or digit (``nvidia.com``);
# the class the same without '.' (``gpu``).
_CDI_KIND_RE = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?/[A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9])?")


def _cdi_kind(where: str, value: object) -> str:
    text = _str(where, value)
    if not _CDI_KIND_RE.fullmatch(text):
        raise ConfigError(
            f"{where}: {shorten(text)} is not a CDI device kind VENDOR/CLASS like nvidia.com/gpu "
            "(letters, digits, '_', '-'; '.' in the vendor; each starts with a letter)"
        )
    return text


def _address(where: str, value: object) -> str:
    """``HOST:PORT``, ``:PORT`` or ``[V6]:PORT``; empty = off."""
    text = _str(where, value).strip()
    _host, sep, port = text.rpartition(":")
    if text and (not sep or not port.isdigit() or int(port) > 65535):
        raise ConfigError(f"{where}: {shorten(text)} is not HOST:PORT or :PORT (e.g. :9400); empty = off")
    return text


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
    if not is_dns_subdomain(short):
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
    if path.suffix == ".json":
        try:
            data = json.loads(text, object_pairs_hook=partial(_unique_keys, path))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
        except RecursionError as exc:
            raise ConfigError(f"{path}: nested too deeply to be a config file") from exc
    else:  # a key given twice is refused there too, naming both lines
        data = load_located(text, str(path), ConfigError).data
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping with 'version: v1' at the top")
    return data


def _some_keys(mapping: Mapping[str, object], most: int = 5) -> str:
    """The first ``most`` keys of ``mapping``, each clipped, for a message."""
    keys = [clip(str(key)) for key in mapping]
    more = f" and {len(keys) - most} more" if len(keys) > most else ""
    return _allowed(keys[:most]) + more


def _unique_keys(path: Path, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """One JSON object, refusing a key given twice (``json`` would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"{path}: key {key!r} appears twice in one object")
        out[key] = value
    return out


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


def _parse_sharing_kind(prefix: str, kind: SharingKind, raw: object, warnings: list[str]) -> Sharing | None:
    """One ``sharing.<kind>`` section; ``None`` for a time-slicing section that shares nothing.

    NVIDIA's plugin prints the config it resolved at start, and with nothing shared that dump has
    ``sharing.timeSlicing: {}`` (time-slicing is a plain struct there, MPS a pointer that is left
    out); the plugin runs that same file unshared. So an empty ``timeSlicing`` (``{}``, null, or
    ``resources`` null or ``[]``) means no sharing here too. An MPS section must list a resource."""
    where = f"{prefix}sharing.{kind.value}"
    section = _mapping(where, raw)
    _check_keys(where, section, _SHARING_KEYS, strict=True)
    rename_raw = section.get("renameByDefault")
    rename_by_default = False if rename_raw is None else _bool(f"{where}.renameByDefault", rename_raw)
    fail_raw = section.get("failRequestsGreaterThanOne")
    fail_default = kind is SharingKind.MPS
    fail = fail_default if fail_raw is None else _bool(f"{where}.failRequestsGreaterThanOne", fail_raw)
    resources_raw = section.get("resources")
    if resources_raw is not None and not isinstance(resources_raw, list):
        raise ConfigError(f"{where}.resources: must be a list of {{name, replicas}} entries")
    if not resources_raw and kind is SharingKind.TIME_SLICING:
        if "resources" in section:
            warnings.append(f"{where}.resources is empty: no GPU is time-sliced")
        return None
    if "resources" not in section:
        raise ConfigError(
            f"{where}.resources: missing; list at least one {{name, replicas}} entry, or remove {where}"
        )
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
    parsed: dict[SharingKind, Sharing | None] = {
        kind: _parse_sharing_kind(prefix, kind, sharing[kind.value], warnings)
        for kind in SharingKind
        # NVIDIA: an empty ``mps:`` is no MPS section; an empty ``timeSlicing:`` shares nothing.
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


def _parse_health(where: str, value: object) -> HealthPolicy:
    """``kubegpu.health``: the XID lists and the ECC actions."""
    raw = _mapping(where, value)
    _check_keys(where, raw, _KUBEGPU_HEALTH, strict=True)
    disabled = _bool(f"{where}.disabled", raw.get("disabled", False))
    ignored = DEFAULT_IGNORED_XIDS
    if "ignoredXids" in raw:
        ignored = _xids(f"{where}.ignoredXids", raw["ignoredXids"])
    forced: frozenset[int] = frozenset()
    all_fatal = False
    if "fatalXids" in raw:
        if raw["fatalXids"] == "all":
            all_fatal = True
        else:
            forced = _xids(f"{where}.fatalXids", raw["fatalXids"])
    ecc = _mapping(f"{where}.ecc", raw.get("ecc"))
    _check_keys(f"{where}.ecc", ecc, _KUBEGPU_ECC, strict=True)
    dbe = _enum(EccAction, f"{where}.ecc.doubleBit", ecc.get("doubleBit", "fatal"))
    sbe = _enum(EccAction, f"{where}.ecc.singleBit", ecc.get("singleBit", "ignore"))
    watcher = _enum(WatcherFailureAction, f"{where}.watcherFailure", raw.get("watcherFailure", "unhealthy"))
    recover = raw.get("recoverAfter")
    if recover is not None and (
        isinstance(recover, bool) or not isinstance(recover, int | float) or recover <= 0
    ):
        raise ConfigError(
            f"{where}.recoverAfter: {shorten(recover)} must be a number of seconds > 0 (or null: off)"
        )
    xid = XidPolicy(ignored=ignored, forced_fatal=forced, all_fatal=all_fatal, disabled=disabled)
    return HealthPolicy(
        xid=xid,
        ecc_double_bit=dbe,
        ecc_single_bit=sbe,
        watcher_failure=watcher,
        recover_after_s=None if recover is None else float(recover),
    )


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # fmt: skip


def _parse_dra_gpus(where: str, value: object) -> DraGpus:
    """``kubegpu.dra.gpus``: ``none`` (default), ``all``, or GPU indexes (a list or ``"4,5,6,7"``)."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "none"):
            return DraGpus()
        if text == "all":
            return DraGpus(all=True)
        items: list[object] = [v.strip() for v in text.split(",")]
    elif isinstance(value, list):
        items = list(value)
    else:
        raise ConfigError(f"{where}: {shorten(value)} must be none, all, or a list of GPU indexes")
    indexes: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not (
            isinstance(item, int) or (isinstance(item, str) and item.isdigit())
        ):
            raise ConfigError(
                f"{where}: {shorten(item)} is not a GPU index; use none, all, or indexes like 4,5,6,7"
            )
        indexes.add(int(item))
    return DraGpus(indexes=frozenset(indexes))


def _parse_quarantine(where: str, value: object) -> QuarantineSettings:
    """``kubegpu.quarantine``: what the agent does to its Node when a GPU fails (docs/node.md)."""
    raw = _mapping(where, value)
    _check_keys(where, raw, _KUBEGPU_QUARANTINE, strict=True)
    base = QuarantineSettings()
    enabled = _bool(f"{where}.enabled", raw.get("enabled", base.enabled))
    key = _str(f"{where}.taintKey", raw.get("taintKey", base.taint_key))
    if not _LABEL_KEY.match(key) or len(key) > 316:
        raise ConfigError(
            f"{where}.taintKey: {shorten(key)} is not a valid taint key (e.g. nvidia.com/gpu.unhealthy)"
        )
    effect = _enum(TaintEffect, f"{where}.taintEffect", raw.get("taintEffect", base.taint_effect.value))
    eviction = _enum(EvictionPolicy, f"{where}.eviction", raw.get("eviction", base.eviction.value))
    share = raw.get("maxShare", base.max_share)
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise ConfigError(f"{where}.maxShare: {shorten(share)} must be a fraction > 0 and <= 1 (e.g. 0.1)")
    lease = _lease(f"{where}.lease", raw.get("lease", base.lease))
    extra = _xids(f"{where}.xids", raw["xids"]) if "xids" in raw else frozenset()
    never = _xids(f"{where}.neverXids", raw["neverXids"]) if "neverXids" in raw else frozenset()
    return QuarantineSettings(
        enabled=enabled,
        taint_key=key,
        taint_effect=effect,
        eviction=eviction,
        max_share=float(share),
        lease=lease,
        policy=QuarantinePolicy(extra_xids=extra, never_xids=never),
    )


def _parse_mig_manager(where: str, value: object) -> MigManagerSettings:
    """``kubegpu.migManager``: repartition the GPUs by the node label nvidia.com/mig.config (docs/mig.md)."""
    raw = _mapping(where, value)
    _check_keys(where, raw, _KUBEGPU_MIG_MANAGER, strict=True)
    base = MigManagerSettings()
    source = _str(f"{where}.configFile", raw.get("configFile", base.config_file))
    if not source.strip():
        raise ConfigError(f"{where}.configFile: give a mig-parted file (or builtin:mig-parted-default)")
    recheck = raw.get("recheckSeconds", base.recheck_s)
    if isinstance(recheck, bool) or not isinstance(recheck, int | float) or not 0.1 <= recheck <= 3600:
        raise ConfigError(f"{where}.recheckSeconds: {shorten(recheck)} must be 0.1 to 3600 seconds")
    return MigManagerSettings(
        enabled=_bool(f"{where}.enabled", raw.get("enabled", base.enabled)),
        config_file=source,
        drain=_bool(f"{where}.drain", raw.get("drain", base.drain)),
        state_file=_str(f"{where}.stateFile", raw.get("stateFile", base.state_file) or ""),
        recheck_s=float(recheck),
    )


def _lease(where: str, value: object) -> str:
    text = _str(where, value)
    ns, sep, name = text.partition("/")
    if not sep or not is_dns_subdomain(ns) or not is_dns_subdomain(name):
        raise ConfigError(
            f"{where}: {shorten(text)} must be NAMESPACE/NAME of a Lease, e.g. kube-system/kubegpu-quarantine"
        )
    return text


def _quarantine_lease_env(where: str, value: str, settings: QuarantineSettings) -> QuarantineSettings:
    """``KUBEGPU_QUARANTINE_LEASE``: the Lease's NAMESPACE/NAME (the chart sets its own namespace)."""
    return replace(settings, lease=_lease(where, value.strip()))


def _disable_healthchecks(where: str, value: str, policy: HealthPolicy) -> HealthPolicy:
    """NVIDIA's ``DP_DISABLE_HEALTHCHECKS``: ``all``/``xids`` (no XID is fatal) or more XIDs to ignore."""
    off = value.strip()
    if not off:
        return policy
    if off.lower() in {"all", "xids"}:
        return replace(policy, xid=replace(policy.xid, disabled=True))
    return replace(policy, xid=replace(policy.xid, ignored=policy.xid.ignored | _env_xids(where, off)))


def _enable_healthchecks(where: str, value: str, policy: HealthPolicy) -> HealthPolicy:
    """NVIDIA's ``DP_ENABLE_HEALTHCHECKS``: ``all`` or XIDs that are always fatal."""
    on = value.strip()
    if not on:
        return policy
    if on.lower() == "all":
        return replace(policy, xid=replace(policy.xid, all_fatal=True))
    return replace(
        policy, xid=replace(policy.xid, forced_fatal=policy.xid.forced_fatal | _env_xids(where, on))
    )


# --- the settings table: every setting, where it can come from, and what it means -----------------


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    """An environment variable of a setting. Without ``apply`` its value replaces the value below it
    (parsed by the setting's parser); with ``apply`` it changes that value (``apply(where, raw, value)``),
    as NVIDIA's ``DP_DISABLE_HEALTHCHECKS`` adds XIDs to the file's list."""

    name: str
    apply: Callable[[str, str, T], T] | None = None


@dataclass(frozen=True, kw_only=True)
class Setting(Generic[T]):
    """One setting of the agent: the ``AgentConfig`` field, its parser and default, and where it can
    come from. ``load_config`` resolves every row the same way: default < file < environment < CLI.

    ``file_keys``: dotted key paths in the config file; later ones are aliases (each given alias must
    agree with the others). ``env``: environment variables, applied in order. ``flag``: the
    ``kubegpu agent`` option (a ``--x/--no-x`` pair when the default is a bool); None: no flag.
    ``allowed``: the values the parser accepts, when they are a fixed set (shown in ``--help``).
    ``default_from``: when given nowhere, the value of that other setting (if it was given).
    """

    name: str
    parse: Callable[[str, object], T]
    default: T
    help: str
    file_keys: tuple[str, ...] = ()
    env: tuple[EnvVar[T], ...] = ()
    flag: str | None = None
    allowed: tuple[str, ...] = ()
    default_from: str | None = None


def _values(cls: type[Enum]) -> tuple[str, ...]:
    return tuple(str(m.value) for m in cls)


_MIG_STRATEGY = Setting[MigStrategy](
    name="mig_strategy",
    parse=lambda w, v: _enum(MigStrategy, w, v),
    default=MigStrategy.NONE,
    help="How MIG devices are advertised.",
    file_keys=("flags.migStrategy",),
    env=(EnvVar("MIG_STRATEGY"),),
    flag="--mig-strategy",
    allowed=_values(MigStrategy),
)
_FAIL_ON_INIT_ERROR = Setting[bool](
    name="fail_on_init_error",
    parse=_bool,
    default=True,
    help="Exit if GPUs cannot be read.",
    file_keys=("flags.failOnInitError",),
    env=(EnvVar("FAIL_ON_INIT_ERROR"),),
    flag="--fail-on-init-error",
)
_NVIDIA_DRIVER_ROOT = Setting[str](
    name="nvidia_driver_root",
    parse=_str,
    default="/",
    help="Root of the NVIDIA driver installation.",
    file_keys=("flags.nvidiaDriverRoot",),
    env=(EnvVar("NVIDIA_DRIVER_ROOT"),),
    flag="--nvidia-driver-root",
)
_NVIDIA_DEV_ROOT = Setting[str](
    name="nvidia_dev_root",
    parse=_str,
    default="/",
    help="Root of the NVIDIA device nodes.",
    file_keys=("flags.nvidiaDevRoot",),
    env=(EnvVar("NVIDIA_DEV_ROOT"),),
    flag="--nvidia-dev-root",
    default_from="nvidia_driver_root",
)
_CONTAINER_DRIVER_ROOT = Setting[str](
    name="container_driver_root",
    parse=_str,
    default="",
    help=(
        "Where the agent sees the driver root when it runs in a pod that mounts it elsewhere; the CDI "
        "spec's files are searched there and named by their host paths. Empty: at the driver root."
    ),
    file_keys=("flags.driverRootCtrPath", "flags.plugin.containerDriverRoot"),
    env=(EnvVar("CONTAINER_DRIVER_ROOT"), EnvVar("DRIVER_ROOT_CTR_PATH")),
    flag="--driver-root-ctr-path",
)
_MPS_ROOT = Setting[str](
    name="mps_root",
    parse=_str,
    default="",
    help="Host directory of the MPS control daemons; required for sharing.mps.",
    file_keys=("flags.mpsRoot",),
    env=(EnvVar("MPS_ROOT"),),
    flag="--mps-root",
)
_MPS_DAEMON = Setting[bool](
    name="mps_daemon",
    parse=_bool,
    default=True,
    help=(
        "Run NVIDIA's MPS control daemon (nvidia-cuda-mps-control -d) for every MPS resource, under "
        "flags.mpsRoot, before it is advertised; false: another tool runs it."
    ),
    file_keys=("kubegpu.mps.daemon",),
    env=(EnvVar("KUBEGPU_MPS_DAEMON"),),
    flag="--mps-daemon",
)
_MPS_CONTROL = Setting[str](
    name="mps_control",
    parse=_str,
    default="",
    help=(
        "Path of nvidia-cuda-mps-control; empty: found on PATH, then under the driver root (usr/bin, bin)."
    ),
    file_keys=("kubegpu.mps.control",),
    env=(EnvVar("KUBEGPU_MPS_CONTROL"),),
    flag="--mps-control",
)
_MPS_SHARES = Setting[bool](
    name="mps_shares",
    parse=_bool,
    default=False,
    help=(
        "Enforce kubegpu.io/gpu-milli shares with MPS: one control daemon over the shared GPUs, and each "
        "share's container gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT "
        "for its thousandths (applies to kubegpu.fractional's shares; needs flags.mpsRoot)."
    ),
    file_keys=("kubegpu.mps.shares",),
    env=(EnvVar("KUBEGPU_MPS_SHARES"),),
    flag="--mps-shares",
)
_GDS_ENABLED = Setting[bool](
    name="gds_enabled",
    parse=_bool,
    default=False,
    help="Give containers GPUDirect Storage.",
    file_keys=("flags.gdsEnabled",),
    env=(EnvVar("GDS_ENABLED"),),
    flag="--gds-enabled",
)
_MOFED_ENABLED = Setting[bool](
    name="mofed_enabled",
    parse=_bool,
    default=False,
    help="Give containers the MOFED (InfiniBand) devices.",
    file_keys=("flags.mofedEnabled",),
    env=(EnvVar("MOFED_ENABLED"),),
    flag="--mofed-enabled",
)
_GDRCOPY_ENABLED = Setting[bool](
    name="gdrcopy_enabled",
    parse=_bool,
    default=False,
    help="Give containers the GDRCopy device.",
    file_keys=("flags.gdrcopyEnabled",),
    env=(EnvVar("GDRCOPY_ENABLED"),),
    flag="--gdrcopy-enabled",
)
_PASS_DEVICE_SPECS = Setting[bool](
    name="pass_device_specs",
    parse=_bool,
    default=False,
    help="Put the /dev/nvidia* device specs into Allocate responses.",
    file_keys=("flags.plugin.passDeviceSpecs",),
    env=(EnvVar("PASS_DEVICE_SPECS"),),
    flag="--pass-device-specs",
)
_DEVICE_LIST_STRATEGIES = Setting[tuple[DeviceListStrategy, ...]](
    name="device_list_strategies",
    parse=_strategies,
    default=(DeviceListStrategy.ENVVAR,),
    help="How containers are told their devices (a comma list).",
    file_keys=("flags.plugin.deviceListStrategy",),
    env=(EnvVar("DEVICE_LIST_STRATEGY"),),
    flag="--device-list-strategy",
    allowed=_values(DeviceListStrategy),
)
_DEVICE_ID_STRATEGY = Setting[DeviceIdStrategy](
    name="device_id_strategy",
    parse=lambda w, v: _enum(DeviceIdStrategy, w, v),
    default=DeviceIdStrategy.UUID,
    help="How devices are named to the container runtime.",
    file_keys=("flags.plugin.deviceIDStrategy",),
    env=(EnvVar("DEVICE_ID_STRATEGY"),),
    flag="--device-id-strategy",
    allowed=_values(DeviceIdStrategy),
)
_CDI_ANNOTATION_PREFIX = Setting[str](
    name="cdi_annotation_prefix",
    parse=_str,
    default="cdi.k8s.io/",
    help="Prefix of the CDI annotations of cdi-annotations.",
    file_keys=("flags.plugin.cdiAnnotationPrefix",),
    env=(EnvVar("CDI_ANNOTATION_PREFIX"),),
    flag="--cdi-annotation-prefix",
)
_REPLICA_POLICY = Setting[str](
    name="replica_policy",
    parse=_registered(REPLICA_POLICIES),
    default="distributed",
    help="Replica policy: which replicas a shared request gets.",
    file_keys=("flags.plugin.sharedDevicesAllocationPolicy", "kubegpu.replicaPolicy"),
    env=(EnvVar("SHARED_DEVICES_ALLOCATION_POLICY"),),
    flag="--shared-devices-allocation-policy",
    allowed=tuple(sorted(REPLICA_POLICIES)),
)
_ALLOCATION_POLICY = Setting[str](
    name="allocation_policy",
    parse=_registered(ALLOCATION_POLICIES),
    default="topology",
    help="Whole-GPU policy: which GPUs a request gets.",
    file_keys=("kubegpu.allocationPolicy",),
    env=(EnvVar("KUBEGPU_ALLOCATION_POLICY"),),
    flag="--allocation-policy",
    allowed=tuple(sorted(ALLOCATION_POLICIES)),
)
_CDI_KIND = Setting[str](
    name="cdi_kind",
    parse=_cdi_kind,
    default=DEFAULT_AGENT_KIND,
    help="CDI device kind in cdi-annotations and cdi-cri device names (the agent's own spec declares it).",
    file_keys=("kubegpu.cdiKind",),
)
_CDI_SPEC_DIR = Setting[str](
    name="cdi_spec_dir",
    parse=_str,
    default="/var/run/cdi",
    help=(
        "Where the agent writes the CDI spec of its devices under cdi-annotations / cdi-cri; "
        "empty: it writes none (another tool writes the spec of kubegpu.cdiKind)."
    ),
    file_keys=("kubegpu.cdiSpecDir",),
    env=(EnvVar("KUBEGPU_CDI_SPEC_DIR"),),
    flag="--cdi-spec-dir",
)
_PRE_START_CHECK = Setting[bool](
    name="pre_start_check",
    parse=_bool,
    default=False,
    help="Ask kubelet for PreStartContainer, which fails if a GPU went bad.",
    file_keys=("kubegpu.preStartCheck",),
)
_HEALTH = Setting[HealthPolicy](
    name="health",
    parse=_parse_health,
    default=HealthPolicy(),
    help="Which XID and ECC events mark a GPU unhealthy.",
    file_keys=("kubegpu.health",),
    env=(
        EnvVar("DP_DISABLE_HEALTHCHECKS", apply=_disable_healthchecks),
        EnvVar("DP_ENABLE_HEALTHCHECKS", apply=_enable_healthchecks),
    ),
)
# Metrics (docs/metrics.md): read when the agent starts; a reload does not move the endpoint.
_METRICS_ADDRESS = Setting[str](
    name="metrics_address",
    parse=_address,
    default="",
    help="Serve dcgm-exporter-compatible /metrics on HOST:PORT or :PORT (the chart uses :9400); empty: off.",
    env=(EnvVar("KUBEGPU_METRICS_ADDRESS"),),
    flag="--metrics-address",
)
_POD_RESOURCES_SOCKET = Setting[str](
    name="pod_resources_socket",
    parse=_str,
    default="/var/lib/kubelet/pod-resources/kubelet.sock",
    help="kubelet's PodResources socket, for the pod labels of /metrics.",
    env=(EnvVar("KUBEGPU_POD_RESOURCES_SOCKET"),),
    flag="--pod-resources-socket",
)

_NODE_LABELS = Setting[bool](
    name="node_labels",
    parse=_bool,
    default=True,
    help="Write GFD-compatible GPU labels on the agent's Node (needs --node-name and API access).",
    file_keys=("kubegpu.node.labels",),
    env=(EnvVar("KUBEGPU_NODE_LABELS"),),
    flag="--node-labels",
)
_DRA_GPUS = Setting[DraGpus](
    name="dra_gpus",
    parse=_parse_dra_gpus,
    default=DraGpus(),
    help="GPUs the DRA driver (kubegpu dra serve) serves instead of the device plugin: none, all, indexes.",
    file_keys=("kubegpu.dra.gpus",),
    env=(EnvVar("KUBEGPU_DRA_GPUS"),),
    flag="--dra-gpus",
)
_FRACTIONAL = Setting[bool](
    name="fractional",
    parse=_bool,
    default=False,
    help="Also serve kubegpu.io/gpu-milli (1000 devices per whole GPU) for `kubegpu extender`'s shares "
    "of one GPU; Allocate hands out the GPU the pod's kubegpu.io/gpu-assignment names (needs --node-name "
    "and API access).",
    file_keys=("kubegpu.fractional",),
    env=(EnvVar("KUBEGPU_FRACTIONAL"),),
    flag="--fractional",
)
_QUARANTINE = Setting[QuarantineSettings](
    name="quarantine",
    parse=_parse_quarantine,
    default=QuarantineSettings(),
    help="What a fatal GPU failure does to the Node: condition, taint, evictions, fleet cap.",
    file_keys=("kubegpu.quarantine",),
    env=(EnvVar("KUBEGPU_QUARANTINE_LEASE", apply=_quarantine_lease_env),),
)
_MIG_MANAGER = Setting[MigManagerSettings](
    name="mig_manager",
    parse=_parse_mig_manager,
    default=MigManagerSettings(),
    help="Repartition MIG GPUs by the node label nvidia.com/mig.config (needs --node-name and API access).",
    file_keys=("kubegpu.migManager",),
)

SETTINGS: tuple[Setting[Any], ...] = (
    _MIG_STRATEGY,
    _FAIL_ON_INIT_ERROR,
    _NVIDIA_DRIVER_ROOT,
    _NVIDIA_DEV_ROOT,
    _CONTAINER_DRIVER_ROOT,
    _MPS_ROOT,
    _MPS_DAEMON,
    _MPS_CONTROL,
    _MPS_SHARES,
    _GDS_ENABLED,
    _MOFED_ENABLED,
    _GDRCOPY_ENABLED,
    _PASS_DEVICE_SPECS,
    _DEVICE_LIST_STRATEGIES,
    _DEVICE_ID_STRATEGY,
    _CDI_ANNOTATION_PREFIX,
    _REPLICA_POLICY,
    _ALLOCATION_POLICY,
    _CDI_KIND,
    _CDI_SPEC_DIR,
    _PRE_START_CHECK,
    _HEALTH,
    _METRICS_ADDRESS,
    _POD_RESOURCES_SOCKET,
    _NODE_LABELS,
    _FRACTIONAL,
    _QUARANTINE,
    _DRA_GPUS,
    _MIG_MANAGER,
)
ENV_VARS: tuple[str, ...] = tuple(sorted({e.name for s in SETTINGS for e in s.env}))
CLI_FLAGS: Mapping[str, str] = {s.name: s.flag for s in SETTINGS if s.flag}

# AgentConfig's fields that are not settings: read from the file as a whole, or about the reading.
DOCUMENT_FIELDS = ("sharing", "source_file", "warnings")


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """Everything the device plugin needs, resolved and validated: one field per ``SETTINGS`` row
    (its default is the row's), plus the ``DOCUMENT_FIELDS``."""

    mig_strategy: MigStrategy = _MIG_STRATEGY.default
    fail_on_init_error: bool = _FAIL_ON_INIT_ERROR.default
    nvidia_driver_root: str = _NVIDIA_DRIVER_ROOT.default
    nvidia_dev_root: str = _NVIDIA_DEV_ROOT.default
    container_driver_root: str = _CONTAINER_DRIVER_ROOT.default
    mps_root: str = _MPS_ROOT.default
    mps_daemon: bool = _MPS_DAEMON.default
    mps_control: str = _MPS_CONTROL.default
    mps_shares: bool = _MPS_SHARES.default
    gds_enabled: bool = _GDS_ENABLED.default
    mofed_enabled: bool = _MOFED_ENABLED.default
    gdrcopy_enabled: bool = _GDRCOPY_ENABLED.default
    pass_device_specs: bool = _PASS_DEVICE_SPECS.default
    device_list_strategies: tuple[DeviceListStrategy, ...] = _DEVICE_LIST_STRATEGIES.default
    device_id_strategy: DeviceIdStrategy = _DEVICE_ID_STRATEGY.default
    cdi_annotation_prefix: str = _CDI_ANNOTATION_PREFIX.default
    cdi_kind: str = _CDI_KIND.default
    cdi_spec_dir: str = _CDI_SPEC_DIR.default
    allocation_policy: str = _ALLOCATION_POLICY.default
    replica_policy: str = _REPLICA_POLICY.default
    pre_start_check: bool = _PRE_START_CHECK.default
    health: HealthPolicy = _HEALTH.default
    metrics_address: str = _METRICS_ADDRESS.default
    pod_resources_socket: str = _POD_RESOURCES_SOCKET.default
    node_labels: bool = _NODE_LABELS.default
    fractional: bool = _FRACTIONAL.default
    quarantine: QuarantineSettings = _QUARANTINE.default
    dra_gpus: DraGpus = _DRA_GPUS.default
    mig_manager: MigManagerSettings = _MIG_MANAGER.default
    sharing: Sharing | None = None
    source_file: str | None = None
    warnings: tuple[str, ...] = ()


# The file's known keys: the settings' keys, the sections read as a whole, and NVIDIA's keys kubegpu
# accepts without acting on them. Unknown keys warn under NVIDIA's mappings, fail under ``kubegpu:``.
_SECTIONS = ("version", "sharing", "kubegpu.sharing")
_FILE_KEYS = (*(k for s in SETTINGS for k in s.file_keys), *_SECTIONS, *_UNUSED_NVIDIA)


def _known_keys(parent: str) -> set[str]:
    """The keys directly under ``parent`` ("" for the top level) that the file may hold."""
    depth = parent.count(".") + 1 if parent else 0
    return {key.split(".")[depth] for key in _FILE_KEYS if not parent or key.startswith(parent + ".")}


def _resolve(
    setting: Setting[T], data: dict[str, Any], prefix: str, env: Mapping[str, str], cli: Mapping[str, object]
) -> tuple[bool, T]:
    """``setting``'s value from the file, then the environment, then the CLI; (False, default) when
    none of them gives it."""
    given, value = False, setting.default
    first_key = ""
    for key in setting.file_keys:
        found, raw = _lookup(data, key)
        if not found or raw is None:
            continue
        parsed = setting.parse(f"{prefix}{key}", raw)
        if given and parsed != value:
            raise ConfigError(f"{prefix}{key}: {shorten(parsed)} contradicts {first_key} {shorten(value)}")
        given, value, first_key = True, parsed, first_key or key
    for var in setting.env:
        raw_env = env.get(var.name, "")
        if raw_env == "":
            continue
        where = f"env {var.name}"
        value = var.apply(where, raw_env, value) if var.apply else setting.parse(where, raw_env)
        given = True
    if setting.flag is not None and setting.name in cli:
        given, value = True, setting.parse(setting.flag, cli[setting.name])
    return given, value


def _check_combinations(prefix: str, config: AgentConfig) -> None:
    """Rules between settings, checked once all are resolved."""
    sharing = config.sharing
    if config.fractional and sharing is not None:
        raise ConfigError(
            f"{prefix}kubegpu.fractional: shares of one GPU (kubegpu.io/gpu-milli) cannot be combined with "
            f"sharing.{sharing.kind.value}; turn one of them off"
        )
    if config.mps_shares and config.fractional and not config.mps_root:
        # (without kubegpu.fractional there are no shares and kubegpu.mps.shares does nothing)
        raise ConfigError(
            f"{prefix}kubegpu.mps.shares: MPS limits for shares need flags.mpsRoot (or MPS_ROOT, --mps-root)"
        )
    if sharing is not None and sharing.kind is SharingKind.MPS:
        if config.mig_strategy is MigStrategy.MIXED:
            raise ConfigError(f"{prefix}sharing.mps: MPS sharing is not supported with migStrategy=mixed")
        if not config.mps_root:
            raise ConfigError(
                f"{prefix}sharing.mps: MPS sharing needs flags.mpsRoot (or MPS_ROOT, --mps-root)"
            )


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cli: Mapping[str, object] | None = None,
) -> AgentConfig:
    """Resolve the configuration from ``path`` (optional), ``env`` and ``cli`` overrides.

    Every ``SETTINGS`` row is resolved the same way: CLI > environment > file > default. ``cli`` maps
    setting names (``mig_strategy``, ``device_list_strategies`` …, see ``CLI_FLAGS``) to the raw flag
    value; ``None`` values mean "not given". Raises ``ConfigError`` on the first bad value.
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
        top = _known_keys("")
        if data and not any(key in top for key in data):
            # NVIDIA's loader would take this as an empty config; it is far likelier the wrong file
            # (a node spec, a values file), and running on defaults would hide that
            raise ConfigError(
                f"{prefix}none of its top-level keys ({_some_keys(data)}) is a config key:"
                f" is this the agent's config file? allowed: {_allowed(sorted(top))}"
            )
        warnings += [prefix + w for w in _check_keys("", data, top, strict=False)]
        flags = _mapping(f"{prefix}flags", data.get("flags"))
        warnings += [prefix + w for w in _check_keys("flags", flags, _known_keys("flags"), strict=False)]
        plugin = _mapping(f"{prefix}flags.plugin", flags.get("plugin"))
        warnings += [
            prefix + w for w in _check_keys("flags.plugin", plugin, _known_keys("flags.plugin"), strict=False)
        ]
        _check_resources_section(prefix, data.get("resources"))
        _check_imex(prefix, data.get("imex"))
        for dotted in sorted(_UNUSED_NVIDIA):
            found, _ = _lookup(data, dotted)
            if found:
                warnings.append(f"{prefix}{dotted}: accepted for compatibility, not used by kubegpu")
    kubegpu = _mapping(f"{prefix}kubegpu", data.get("kubegpu"))
    _check_keys(f"{prefix}kubegpu", kubegpu, _known_keys("kubegpu"), strict=True)

    values: dict[str, object] = {}
    for setting in SETTINGS:
        given, value = _resolve(setting, data, prefix, env, cli)
        if given:
            values[setting.name] = value
    for setting in SETTINGS:
        if setting.name not in values and setting.default_from in values:
            values[setting.name] = values[setting.default_from]

    sharing_warnings: list[str] = []
    sharing = _parse_sharing(prefix, data, kubegpu, sharing_warnings)
    warnings += sharing_warnings
    config = AgentConfig(
        sharing=sharing,
        source_file=str(path) if path is not None else None,
        warnings=tuple(warnings),
        **values,  # type: ignore[arg-type]
    )
    _check_combinations(prefix, config)
    return config

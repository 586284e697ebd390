"""Read NVIDIA mig-parted ``version: v1`` files, as strictly as mig-parted does.

Unknown keys, wrong types, empty lists and malformed device IDs or profile names are refused with
``file:line: key: message`` (a ``ConfigError``). ``builtin:mig-parted-default`` is kubegpu's own file of
NVIDIA's named configs (``all-disabled``, ``all-enabled``, ``all-<profile>`` and ``all-balanced`` per
SKU), the defaults the MIG manager offers; docs/mig.md lists them.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

from kubegpu.echo import shorten
from kubegpu.errors import ConfigError
from kubegpu.model.migparted import MigConfig, MigConfigEntry, MigPartedConfig
from kubegpu.sources.yamlfile import LocatedDoc, load_located

__all__ = [
    "BUILTIN_DEFAULT",
    "builtin_mig_configs",
    "load_mig_parted",
    "looks_like_mig_parted",
    "parse_mig_parted",
]

BUILTIN_PREFIX = "builtin:"
BUILTIN_DEFAULT = "builtin:mig-parted-default"
_BUILTIN_DIR = "builtin_mig"
_TOP_KEYS = {"version", "mig-configs"}
_ENTRY_KEYS = {"device-filter", "devices", "mig-enabled", "mig-devices"}
_DEVICE_ID_RE = re.compile(r"^0x[0-9A-Fa-f]{8}$")
# <c>g.<m>gb with an optional compute-instance prefix (1c.) and attribute suffixes (+me, +gfx, -me).
_PROFILE_RE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb([+-][a-z]+(\.[a-z]+)*)*$")

Path_ = tuple[str | int, ...]


def builtin_mig_configs() -> tuple[str, ...]:
    """Names of kubegpu's builtin mig-parted files (``builtin:NAME``)."""
    files = resources.files("kubegpu.sources").joinpath(_BUILTIN_DIR)
    return tuple(sorted(p.name.removesuffix(".yaml") for p in files.iterdir() if p.name.endswith(".yaml")))


def looks_like_mig_parted(source: str) -> bool:
    """Whether ``source`` names a mig-parted file (a builtin, or an existing file) rather than a model."""
    if source.startswith(BUILTIN_PREFIX):
        return True
    return Path(source).is_file()


def load_mig_parted(source: str) -> MigPartedConfig:
    """Load ``builtin:NAME`` or a file; every problem is one ``ConfigError`` naming file, line and key."""
    if source.startswith(BUILTIN_PREFIX):
        name = source.removeprefix(BUILTIN_PREFIX)
        if name not in builtin_mig_configs():
            raise ConfigError(
                f"unknown builtin mig-parted config {shorten(source)}; builtins: "
                + ", ".join(BUILTIN_PREFIX + n for n in builtin_mig_configs())
            )
        text = resources.files("kubegpu.sources").joinpath(_BUILTIN_DIR, f"{name}.yaml").read_text("utf-8")
        return parse_mig_parted(text, origin=source)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{source}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read: {exc}") from exc
    return parse_mig_parted(text, origin=str(path))


def _check_keys(doc: LocatedDoc, path: Path_, value: Any, allowed: set[str], what: str) -> None:
    if not isinstance(value, dict):
        raise doc.error(path, f"{what} must be a mapping, got {_kind(value)}", ConfigError)
    for key in value:
        if key not in allowed:
            raise doc.error(
                (*path, str(key)),
                f"unknown key {shorten(key)}; allowed: {', '.join(sorted(allowed))}",
                ConfigError,
            )


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {shorten(value)}"


def _device_filter(doc: LocatedDoc, path: Path_, raw: Any) -> tuple[int, ...]:
    items = raw if isinstance(raw, list) else [raw]
    if isinstance(raw, list) and not raw:
        raise doc.error(path, "an empty list: name at least one PCI device ID, or drop the key", ConfigError)
    ids: list[int] = []
    for i, item in enumerate(items):
        where = (*path, i) if isinstance(raw, list) else path
        if not isinstance(item, str) or not _DEVICE_ID_RE.match(item):
            raise doc.error(
                where, f"expected a PCI device ID such as 0x233010DE, got {_kind(item)}", ConfigError
            )
        ids.append(int(item, 16))
    return tuple(ids)


def _devices(doc: LocatedDoc, path: Path_, raw: Any) -> tuple[int, ...] | None:
    if raw == "all":
        return None
    if not isinstance(raw, list):
        raise doc.error(path, f"expected 'all' or a list of GPU indices, got {_kind(raw)}", ConfigError)
    if not raw:
        raise doc.error(path, "an empty list: name at least one GPU index, or use 'all'", ConfigError)
    seen: list[int] = []
    for i, item in enumerate(raw):
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise doc.error(
                (*path, i), f"expected a GPU index (an integer >= 0), got {_kind(item)}", ConfigError
            )
        if item in seen:
            raise doc.error((*path, i), f"GPU {item} is listed twice", ConfigError)
        seen.append(item)
    return tuple(seen)


def _mig_devices(doc: LocatedDoc, path: Path_, raw: Any) -> tuple[tuple[str, int], ...]:
    if not isinstance(raw, dict):
        raise doc.error(path, f"expected a mapping of MIG profile to count, got {_kind(raw)}", ConfigError)
    out: list[tuple[str, int]] = []
    for key, count in raw.items():
        kpath = (*path, str(key))
        if not isinstance(key, str) or not _PROFILE_RE.match(key):
            raise doc.error(
                kpath, f"{shorten(key)} is not a MIG profile name such as 1g.10gb or 1c.3g.40gb", ConfigError
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise doc.error(kpath, f"expected a count (an integer >= 0), got {_kind(count)}", ConfigError)
        out.append((key, count))
    return tuple(out)


def _entry(doc: LocatedDoc, path: Path_, raw: Any) -> MigConfigEntry:
    _check_keys(doc, path, raw, _ENTRY_KEYS, "an entry")
    if "mig-enabled" not in raw:
        raise doc.error(path, "every entry needs mig-enabled (true or false)", ConfigError)
    enabled = raw["mig-enabled"]
    if not isinstance(enabled, bool):
        raise doc.error((*path, "mig-enabled"), f"expected true or false, got {_kind(enabled)}", ConfigError)
    if "devices" not in raw:
        raise doc.error(path, "every entry needs devices ('all' or a list of GPU indices)", ConfigError)
    devices = _devices(doc, (*path, "devices"), raw["devices"])
    device_filter = (
        _device_filter(doc, (*path, "device-filter"), raw["device-filter"]) if "device-filter" in raw else ()
    )
    mig_devices: tuple[tuple[str, int], ...] = ()
    if enabled:
        if "mig-devices" not in raw:
            raise doc.error(
                path, "mig-enabled: true needs mig-devices (profile -> count; {} for none)", ConfigError
            )
        mig_devices = _mig_devices(doc, (*path, "mig-devices"), raw["mig-devices"])
    elif raw.get("mig-devices") not in (None, {}):
        raise doc.error((*path, "mig-devices"), "must be empty when mig-enabled is false", ConfigError)
    return MigConfigEntry(
        device_filter=device_filter,
        devices=devices,
        mig_enabled=enabled,
        mig_devices=mig_devices,
        where=f"{doc.origin}:{doc.lines.get(path, 1)}",
    )


def parse_mig_parted(text: str, *, origin: str = "<mig-parted config>") -> MigPartedConfig:
    """Parse a mig-parted file (the text of a file, or of a ConfigMap's ``config.yaml`` key)."""
    doc = load_located(text, origin, ConfigError)
    _check_keys(doc, (), doc.data, _TOP_KEYS, "a mig-parted config")
    version = doc.data.get("version")
    if version != "v1":
        raise doc.error(("version",), f"expected v1, got {_kind(version)}", ConfigError)
    raw_configs = doc.data.get("mig-configs")
    if not isinstance(raw_configs, dict) or not raw_configs:
        raise doc.error(
            ("mig-configs",),
            f"expected a non-empty mapping of config name to entries, got {_kind(raw_configs)}",
            ConfigError,
        )
    configs: list[MigConfig] = []
    for name, raw_entries in raw_configs.items():
        path: Path_ = ("mig-configs", str(name))
        if not isinstance(name, str) or not name:
            raise doc.error(path, "a config name must be a non-empty string", ConfigError)
        if not isinstance(raw_entries, list) or not raw_entries:
            raise doc.error(
                path, f"expected a non-empty list of entries, got {_kind(raw_entries)}", ConfigError
            )
        entries = tuple(_entry(doc, (*path, i), e) for i, e in enumerate(raw_entries))
        configs.append(MigConfig(name=name, entries=entries))
    return MigPartedConfig(version="v1", configs=tuple(configs), origin=origin)

"""NVIDIA mig-parted's ``version: v1`` config as data, and the MIG layout it asks of a node.

A mig-parted file names configs (``all-1g.10gb``, ``all-balanced``, ...); each is a list of entries
that pick GPUs (an optional PCI device filter and ``devices: all`` or an index list) and say whether
MIG is on and which profiles, how many of each. The node label ``nvidia.com/mig.config`` selects one
name. ``desired_mig_layout`` turns a named config and a ``Node`` into the layout each GPU must get,
checked against kubegpu's placement rules (``kubegpu.model.mig``); ``check_config`` checks a named
config for one GPU model, as ``kubegpu mig validate FILE`` does for every model.

PCI device IDs are mig-parted's ``0xDDDDVVVV`` (device ID, then vendor ``10DE``). ``PCI_SKUS`` maps
the IDs of the MIG-capable SKUs to catalogue models; only IDs public sources agree on are listed
(docs/mig.md, "PCI device IDs", cites them). An ID outside the table matches no GPU of a node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from kubegpu.echo import shorten
from kubegpu.errors import InputError, MigLayoutError
from kubegpu.model.mig import MigPlacement, mig_models, profile, validate_layout
from kubegpu.model.node import Node

__all__ = [
    "NVIDIA_VENDOR",
    "PCI_SKUS",
    "CheckStatus",
    "ConfigCheck",
    "DesiredMigLayout",
    "EntryCheck",
    "GpuMigTarget",
    "MigConfig",
    "MigConfigEntry",
    "MigPartedConfig",
    "PciSku",
    "check_config",
    "desired_mig_layout",
    "entry_models",
    "format_device_id",
    "gi_profile_name",
    "placement_for",
    "profile_model",
    "sku_for",
]

NVIDIA_VENDOR = 0x10DE


@dataclass(frozen=True, kw_only=True)
class PciSku:
    """One board as its PCI device ID names it; ``model`` is its catalogue model, ``None`` when kubegpu
    has no MIG profiles for it (A30, H100 NVL: their profile names differ from the catalogue's)."""

    device_id: int
    product: str
    model: str | None


def _sku(device: int, product: str, model: str | None) -> PciSku:
    return PciSku(device_id=(device << 16) | NVIDIA_VENDOR, product=product, model=model)


# Sources per ID in docs/mig.md ("PCI device IDs"): NVIDIA mig-parted's config-default.yaml groups
# (which SKUs share a profile set), pci.ids-format product names, NVIDIA gpu-admin-tools' devid table,
# and NVIDIA k8s-test-infra's mock GPU table.
PCI_SKUS: dict[int, PciSku] = {
    s.device_id: s
    for s in (
        _sku(0x20B0, "A100-SXM4-40GB", "A100-40GB"),
        _sku(0x20F1, "A100-PCIE-40GB", "A100-40GB"),
        _sku(0x20B2, "A100-SXM4-80GB", "A100-80GB"),
        _sku(0x20B5, "A100 80GB PCIe", "A100-80GB"),
        _sku(0x2330, "H100 SXM5 80GB", "H100-80GB"),
        _sku(0x2331, "H100 PCIe", "H100-80GB"),
        _sku(0x2335, "H200 SXM 141GB", "H200-141GB"),
        _sku(0x233B, "H200 NVL", "H200-141GB"),
        _sku(0x2321, "H100 NVL", None),
        _sku(0x20B7, "A30", None),
    )
}


def format_device_id(device_id: int) -> str:
    """mig-parted's spelling: ``0x233010DE``."""
    return f"0x{device_id:08X}"


def sku_for(device_id: int) -> PciSku | None:
    return PCI_SKUS.get(device_id)


@dataclass(frozen=True, kw_only=True)
class MigConfigEntry:
    """One entry of a named config: which GPUs it applies to, and what they become.

    ``device_filter`` empty means any GPU; ``devices`` ``None`` means ``all``. ``mig_devices`` keeps the
    file's order; keys are as written (``1g.10gb``, ``1g.10gb+me``, ``1c.3g.40gb``). ``where`` is
    ``file:line`` of the entry, for messages.
    """

    device_filter: tuple[int, ...] = ()
    devices: tuple[int, ...] | None = None
    mig_enabled: bool
    mig_devices: tuple[tuple[str, int], ...] = ()
    where: str = ""

    def describe_devices(self) -> str:
        picked = "all GPUs" if self.devices is None else "GPUs " + ",".join(map(str, self.devices))
        if self.device_filter:
            picked += " with device ID " + "|".join(map(format_device_id, self.device_filter))
        return picked

    def describe_layout(self) -> str:
        if not self.mig_enabled:
            return "MIG disabled"
        if not self.mig_devices:
            return "MIG enabled, no instances"
        return " + ".join(f"{count} x {name}" for name, count in self.mig_devices if count)


@dataclass(frozen=True, kw_only=True)
class MigConfig:
    """A named config (the value of the ``nvidia.com/mig.config`` label): its entries in file order."""

    name: str
    entries: tuple[MigConfigEntry, ...]


@dataclass(frozen=True, kw_only=True)
class MigPartedConfig:
    """A whole mig-parted ``version: v1`` file."""

    version: str
    configs: tuple[MigConfig, ...]
    origin: str = ""

    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.configs)

    def config(self, name: str) -> MigConfig:
        """The named config, or an input error listing the names the file has."""
        for c in self.configs:
            if c.name == name:
                return c
        raise InputError(
            f"{self.origin or 'the mig-parted config'} has no config {shorten(name)}; "
            f"it has: {', '.join(self.names())}"
        )


_CI_RE = re.compile(r"^(\d+)c\.(\d+g\..+)$")


def gi_profile_name(key: str) -> tuple[str, int | None]:
    """``1c.3g.40gb`` -> (``3g.40gb``, 1); ``3g.40gb`` -> (``3g.40gb``, None)."""
    match = _CI_RE.match(key)
    if match is None:
        return key, None
    return match.group(2), int(match.group(1))


def placement_for(model: str, mig_devices: Sequence[tuple[str, int]]) -> MigPlacement:
    """Place ``count`` instances of each profile on one GPU of ``model`` (placement search of
    ``validate_layout``). Unknown profile names raise ``InputError``; broken rules ``MigLayoutError``.
    A compute-instance prefix (``1c.3g.40gb``) places its GPU instance; the prefix may not exceed it."""
    layout: list[str] = []
    for key, count in mig_devices:
        name, ci = gi_profile_name(key)
        p = profile(model, name)
        if ci is not None and not 1 <= ci <= p.compute_slices:
            raise MigLayoutError(
                f"{key}: a {ci}-slice compute instance does not fit in {p.name}, which has "
                f"{p.compute_slices} compute slice(s)"
            )
        if count > p.max_count:  # refused before the list is built: a count may be any integer
            raise MigLayoutError(
                f"{p.name} appears {count} times, but at most {p.max_count} fit on one {p.model}"
            )
        layout.extend([p.name] * count)
    if not layout:
        return MigPlacement(model=profile_model(model), instances=())
    return validate_layout(model, layout)


def profile_model(model: str) -> str:
    """The catalogue spelling of a MIG-capable model (raises ``InputError`` for others)."""
    for m in mig_models():
        if m.lower() == model.strip().lower():
            return m
    raise InputError(f"{shorten(model)} has no MIG profiles; MIG-capable models: {', '.join(mig_models())}")


def entry_models(entry: MigConfigEntry) -> tuple[str, ...]:
    """The catalogue models an entry can apply to: every MIG-capable one without a device filter, else
    the models of the filter's known IDs (IDs kubegpu has no model for contribute none)."""
    if not entry.device_filter:
        return mig_models()
    wanted = {s.model for d in entry.device_filter if (s := PCI_SKUS.get(d)) is not None and s.model}
    return tuple(m for m in mig_models() if m in wanted)


def _matches_gpu(entry: MigConfigEntry, index: int, model: str, device_id: int | None) -> bool:
    if entry.devices is not None and index not in entry.devices:
        return False
    if not entry.device_filter:
        return True
    if device_id is not None:
        return device_id in entry.device_filter
    return model in entry_models(entry)


@dataclass(frozen=True, kw_only=True)
class GpuMigTarget:
    """What one GPU must become: MIG on or off and, when on, the placed instances (``placement``)."""

    index: int
    model: str
    entry: int
    mig_enabled: bool
    mig_devices: tuple[tuple[str, int], ...]
    placement: MigPlacement | None


@dataclass(frozen=True, kw_only=True)
class DesiredMigLayout:
    """A named config applied to a node: a target per matched GPU, and the GPUs that keep their layout."""

    config: str
    targets: tuple[GpuMigTarget, ...]
    unchanged: tuple[int, ...]


def desired_mig_layout(
    node: Node, config: MigConfig, *, device_ids: Mapping[int, int] | None = None
) -> DesiredMigLayout:
    """The MIG layout ``config`` asks of ``node``'s GPUs, or ``MigLayoutError`` saying why it cannot be.

    An entry matches a GPU by index (``devices``) and device filter: by the exact PCI device ID when
    ``device_ids`` (GPU index -> ``0xDDDDVVVV``, as NVML reports it) knows the GPU, else by the GPU's
    catalogue model. GPUs no entry matches keep their layout (``unchanged``). Refused, with GPU,
    profile and rule named: a GPU matched by two entries, MIG asked of a GPU without MIG, a profile
    the GPU's model does not have, and a layout that breaks a placement rule. Nothing is refused for
    one GPU while others are accepted: the caller applies all targets or none.
    """
    ids = device_ids or {}
    targets: list[GpuMigTarget] = []
    unchanged: list[int] = []
    capable = set(mig_models())
    for gpu in node.gpus:
        matched = [
            i
            for i, e in enumerate(config.entries)
            if _matches_gpu(e, gpu.index, gpu.model, ids.get(gpu.index))
        ]
        if not matched:
            unchanged.append(gpu.index)
            continue
        if len(matched) > 1:
            raise MigLayoutError(
                f"{config.name}: GPU {gpu.index} ({gpu.model}) is matched by entries "
                f"{' and '.join(map(str, matched))}; give each GPU one entry"
            )
        entry = config.entries[matched[0]]
        where = f"{config.name} entry {matched[0]}"
        if not entry.mig_enabled:
            targets.append(
                GpuMigTarget(
                    index=gpu.index,
                    model=gpu.model,
                    entry=matched[0],
                    mig_enabled=False,
                    mig_devices=(),
                    placement=None,
                )
            )
            continue
        if gpu.model not in capable:
            raise MigLayoutError(f"{where}: GPU {gpu.index} is a {gpu.model}, which does not support MIG")
        try:
            placement = placement_for(gpu.model, entry.mig_devices)
        except (MigLayoutError, InputError) as exc:  # a broken rule, or a profile the model lacks
            raise MigLayoutError(f"{where}: GPU {gpu.index} ({gpu.model}): {exc}") from exc
        targets.append(
            GpuMigTarget(
                index=gpu.index,
                model=gpu.model,
                entry=matched[0],
                mig_enabled=True,
                mig_devices=entry.mig_devices,
                placement=placement,
            )
        )
    return DesiredMigLayout(config=config.name, targets=tuple(targets), unchanged=tuple(unchanged))


class CheckStatus(Enum):
    VALID = "valid"
    INVALID = "invalid"
    NOT_APPLICABLE = "not applicable"


@dataclass(frozen=True, kw_only=True)
class EntryCheck:
    """One entry of a config checked on one model: its placement, or why not."""

    entry: int
    status: CheckStatus
    placement: MigPlacement | None
    reason: str


@dataclass(frozen=True, kw_only=True)
class ConfigCheck:
    """A named config checked for one GPU model: the entries that apply to it and what each gives.

    ``status`` is INVALID if any applicable entry breaks a rule, NOT_APPLICABLE if no entry applies
    (no entry's filter names the model, or every entry names profiles the model does not have, as
    NVIDIA's per-SKU ``all-<profile>`` configs do), else VALID.
    """

    config: str
    model: str
    status: CheckStatus
    entries: tuple[EntryCheck, ...]


def _has_profile(model: str, key: str) -> bool:
    try:
        profile(model, gi_profile_name(key)[0])
    except InputError:
        return False
    return True


def _missing_profiles(model: str, mig_devices: Sequence[tuple[str, int]]) -> list[str]:
    return [key for key, _ in mig_devices if not _has_profile(model, key)]


def _unknown_profile_reason(model: str, entry: MigConfigEntry, missing: Sequence[str]) -> str | None:
    """Why an entry naming profiles ``model`` lacks is invalid, or ``None`` when it merely does not
    apply. Without a device filter an entry none of whose profiles ``model`` has does not apply to
    it: NVIDIA's per-SKU ``all-<profile>`` configs name the profiles of one board, and a file written
    for many GPUs names boards kubegpu has no profiles for (RTX PRO 6000 Blackwell's ``1g.24gb+gfx``,
    ``2g.48gb``), so a well-formed profile name kubegpu does not know is not an error (the loader
    already refused malformed names). A filter that picks ``model``, or a mix of ``model``'s profiles
    and others', is a mistake."""
    names = ", ".join(shorten(k) for k in missing)
    where = f"entry at {entry.where}" if entry.where else "the entry"
    if entry.device_filter:
        return f"{where}: its device filter picks {model}, which has no MIG profile {names}"
    if len(missing) < len(entry.mig_devices):
        return f"{where}: {model} has some of its profiles but not {names}"
    return None


def _not_applicable_reason(model: str, missing: Sequence[str]) -> str:
    unknown = [k for k in missing if not any(_has_profile(m, k) for m in mig_models())]
    if unknown:
        names = ", ".join(shorten(k) for k in unknown)
        return f"{model} has no MIG profile {', '.join(missing)} ({names}: a GPU kubegpu has no profiles for)"
    return f"{model} has no MIG profile {', '.join(missing)}"


def check_config(config: MigConfig, model: str) -> ConfigCheck:
    """Check every entry of ``config`` that can apply to a GPU of ``model`` (a MIG-capable catalogue
    model) against the placement rules."""
    key = profile_model(model)
    checks: list[EntryCheck] = []
    for i, entry in enumerate(config.entries):
        if key not in entry_models(entry):
            continue
        if not entry.mig_enabled:
            checks.append(
                EntryCheck(entry=i, status=CheckStatus.VALID, placement=None, reason="MIG disabled")
            )
            continue
        missing = _missing_profiles(key, entry.mig_devices)
        if missing:
            invalid = _unknown_profile_reason(key, entry, missing)
            status = CheckStatus.NOT_APPLICABLE if invalid is None else CheckStatus.INVALID
            reason = invalid or _not_applicable_reason(key, missing)
            checks.append(EntryCheck(entry=i, status=status, placement=None, reason=reason))
            continue
        try:
            placement = placement_for(key, entry.mig_devices)
        except (MigLayoutError, InputError) as exc:
            checks.append(EntryCheck(entry=i, status=CheckStatus.INVALID, placement=None, reason=str(exc)))
            continue
        checks.append(EntryCheck(entry=i, status=CheckStatus.VALID, placement=placement, reason=""))
    statuses = {c.status for c in checks}
    if CheckStatus.INVALID in statuses:
        status = CheckStatus.INVALID
    elif CheckStatus.VALID in statuses:
        status = CheckStatus.VALID
    else:
        status = CheckStatus.NOT_APPLICABLE
    return ConfigCheck(config=config.name, model=key, status=status, entries=tuple(checks))

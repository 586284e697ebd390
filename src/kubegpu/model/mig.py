"""MIG profiles and the rules for placing them on a GPU.

A100, H100, H200 and B200 split into 8 memory slices and 7 compute slices. A profile ``<c>g.<m>gb`` takes
``c`` compute slices and a fixed run of memory slices starting at one of its valid start slots; runs
of different instances may not overlap, no profile may exceed its max count, and a GPU holds at most
one ``+me`` (media extensions) instance. Geometry from NVIDIA's MIG user guide and ``nvidia-smi mig
-lgipp`` transcripts (see ``docs/mig.md``); H200, H100 NVL/PCIe and B200 placements are presumed
identical to H100's. This table describes *simulated* GPUs; on a real GPU the profile names, memory and
SMs come from NVML (``nvidia_profile_name``, ``kubegpu.sources.nvml``). A30 (4 slices) and GB200 are
MIG-capable but have no simulated profiles yet.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kubegpu.echo import shorten
from kubegpu.errors import InputError, MigLayoutError

__all__ = [
    "COMPUTE_SLICES",
    "GI_PROFILE_SHAPES",
    "MEMORY_SLICES",
    "MigPlacement",
    "MigProfile",
    "PlacedInstance",
    "mig_models",
    "nvidia_memory_gb",
    "nvidia_profile_name",
    "profile",
    "profiles",
    "validate_layout",
]

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True, kw_only=True)
class _Class:
    gi_profile_id: int
    max_count: int
    memory_slices: int
    compute_slices: int
    start_slots: tuple[int, ...]
    media_extensions: bool = False


_ONE = _Class(
    gi_profile_id=19, max_count=7, memory_slices=1, compute_slices=1, start_slots=(0, 1, 2, 3, 4, 5, 6)
)
_ONE_ME = _Class(
    gi_profile_id=20,
    max_count=1,
    memory_slices=1,
    compute_slices=1,
    start_slots=(0, 1, 2, 3, 4, 5, 6),
    media_extensions=True,
)
_ONE_DOUBLE = _Class(
    gi_profile_id=15, max_count=4, memory_slices=2, compute_slices=1, start_slots=(0, 2, 4, 6)
)
_TWO = _Class(gi_profile_id=14, max_count=3, memory_slices=2, compute_slices=2, start_slots=(0, 2, 4))
_THREE = _Class(gi_profile_id=9, max_count=2, memory_slices=4, compute_slices=3, start_slots=(0, 4))
_FOUR = _Class(gi_profile_id=5, max_count=1, memory_slices=4, compute_slices=4, start_slots=(0,))
_SEVEN = _Class(gi_profile_id=0, max_count=1, memory_slices=8, compute_slices=7, start_slots=(0,))
_CLASSES = (_ONE, _ONE_ME, _ONE_DOUBLE, _TWO, _THREE, _FOUR, _SEVEN)


@dataclass(frozen=True, kw_only=True)
class MigProfile:
    """One MIG GPU-instance profile of one GPU model."""

    name: str
    model: str
    gi_profile_id: int
    compute_slices: int
    memory_slices: int
    memory_gb: int
    memory_gib: float | None
    sm_count: int | None
    max_count: int
    start_slots: tuple[int, ...]
    media_extensions: bool

    @property
    def sm_share(self) -> float:
        """Share of the GPU's compute this profile gets (compute slices out of 7)."""
        return self.compute_slices / COMPUTE_SLICES

    @property
    def resource_suffix(self) -> str:
        """Name used in ``nvidia.com/mig-<suffix>``: ``+`` becomes ``.``."""
        return self.name.replace("+", ".")


# (name, reported GiB, SMs) per class, in _CLASSES order.
_SKU: dict[str, tuple[tuple[str, float | None, int | None], ...]] = {
    "A100-40GB": (
        ("1g.5gb", 4.75, 14),
        ("1g.5gb+me", 4.75, 14),
        ("1g.10gb", 9.62, 14),
        ("2g.10gb", 9.62, 28),
        ("3g.20gb", 19.50, 42),
        ("4g.20gb", 19.50, 56),
        ("7g.40gb", 39.25, 98),
    ),
    "A100-80GB": (
        ("1g.10gb", 9.75, 14),
        ("1g.10gb+me", 9.75, 14),
        ("1g.20gb", 19.5, 14),
        ("2g.20gb", 19.5, 28),
        ("3g.40gb", 39.3, 42),
        ("4g.40gb", 39.3, 56),
        ("7g.80gb", 79.0, 98),
    ),
    "H100-80GB": (
        ("1g.10gb", 9.75, 16),
        ("1g.10gb+me", 9.75, 16),
        ("1g.20gb", 19.62, 26),
        ("2g.20gb", 19.62, 32),
        ("3g.40gb", 39.50, 60),
        ("4g.40gb", 39.50, 64),
        ("7g.80gb", 79.25, 132),
    ),
    "H200-141GB": (
        ("1g.18gb", None, None),
        ("1g.18gb+me", None, None),
        ("1g.35gb", None, None),
        ("2g.35gb", None, None),
        ("3g.71gb", None, None),
        ("4g.71gb", None, None),
        ("7g.141gb", None, None),
    ),
}

# GPUs added with issue 56 (memory as NVML reports it is not known for them: .memory is left out).
_SKU["H100-NVL"] = (
    ("1g.12gb", None, 16),
    ("1g.12gb+me", None, 16),
    ("1g.24gb", None, 26),
    ("2g.24gb", None, 32),
    ("3g.47gb", None, 60),
    ("4g.47gb", None, 64),
    ("7g.94gb", None, 132),
)
_SKU["H100-PCIe"] = (
    ("1g.10gb", None, None),
    ("1g.10gb+me", None, None),
    ("1g.20gb", None, None),
    ("2g.20gb", None, None),
    ("3g.40gb", None, None),
    ("4g.40gb", None, None),
    ("7g.80gb", None, None),
)
_SKU["B200"] = (
    ("1g.23gb", None, None),
    ("1g.23gb+me", None, None),
    ("1g.45gb", None, None),
    ("2g.45gb", None, None),
    ("3g.90gb", None, None),
    ("4g.90gb", None, None),
    ("7g.180gb", None, None),
)
# The PCIe cards share their SXM siblings' MIG profiles (names, SMs, memory).
_SKU["A100-PCIe-40GB"] = _SKU["A100-40GB"]
_SKU["A100-PCIe-80GB"] = _SKU["A100-80GB"]

_NAME_RE = re.compile(r"^\d+g\.(\d+)gb(\+me)?$")

# NVML's GPU-instance profile constants (``NVML_GPU_INSTANCE_PROFILE_*``, nvml.h) -> GPU-instance
# slices and the attribute NVIDIA's tools (go-nvlib, so the device plugin, GFD and mig-parted) append
# to the profile name: ``_REV1`` has the media engines (``+me``), ``_REV2`` is one slice with double
# memory (no attribute: its memory tells it apart), ``_GFX`` graphics, ``_NO_ME`` none of the media
# engines (``-me``), ``_ALL_ME`` all of them.
GI_PROFILE_SHAPES: dict[int, tuple[int, str]] = {
    0x0: (1, ""),
    0x1: (2, ""),
    0x2: (3, ""),
    0x3: (4, ""),
    0x4: (7, ""),
    0x5: (8, ""),
    0x6: (6, ""),
    0x7: (1, "+me"),
    0x8: (2, "+me"),
    0x9: (1, ""),
    0xA: (1, "+gfx"),
    0xB: (2, "+gfx"),
    0xC: (4, "+gfx"),
    0xD: (1, "-me"),
    0xE: (2, "-me"),
    0xF: (1, "+me.all"),
    0x10: (2, "+me.all"),
}
_MIB = 2**20
_GIB = 2**30


def nvidia_memory_gb(device_total_bytes: int, mig_memory_mib: int) -> int:
    """The ``<N>gb`` NVIDIA writes in a MIG profile name, from NVML's figures: the instance's share of
    the GPU's memory rounded *up* to eighths, times the GPU's memory in whole GiB (rounded up), rounded
    half up. So an H100 NVL (95830 MiB) 1g instance of 11008 MiB is ``12gb`` (1/8 of 94), not 11, and
    an H200's 4-slice instance is ``71gb`` (70.5 rounded up). Integer arithmetic, so no float edge."""
    if device_total_bytes <= 0 or mig_memory_mib <= 0:
        return 0
    eighths = -(-mig_memory_mib * _MIB * 8 // device_total_bytes)
    total_gb = -(-device_total_bytes // _GIB)
    return (eighths * total_gb * 2 + 8) // 16


def nvidia_profile_name(gi_slices: int, gb: int, *, attribute: str = "", ci_slices: int | None = None) -> str:
    """A MIG profile as NVIDIA names it: ``<g>g.<N>gb`` plus its attribute (``1g.12gb+me``), with a
    ``<c>c.`` prefix for a compute instance smaller than its GPU instance (``1c.3g.40gb``)."""
    base = f"{gi_slices}g.{gb}gb{attribute}"
    if ci_slices is not None and ci_slices != gi_slices:
        return f"{ci_slices}c.{base}"
    return base


def _build() -> dict[str, tuple[MigProfile, ...]]:
    table: dict[str, tuple[MigProfile, ...]] = {}
    for model, rows in _SKU.items():
        built = []
        for cls, (name, gib, sms) in zip(_CLASSES, rows, strict=True):
            match = _NAME_RE.match(name)
            assert match is not None, name
            built.append(
                MigProfile(
                    name=name,
                    model=model,
                    gi_profile_id=cls.gi_profile_id,
                    compute_slices=cls.compute_slices,
                    memory_slices=cls.memory_slices,
                    memory_gb=int(match.group(1)),
                    memory_gib=gib,
                    sm_count=sms,
                    max_count=cls.max_count,
                    start_slots=cls.start_slots,
                    media_extensions=cls.media_extensions,
                )
            )
        table[model] = tuple(built)
    return table


_PROFILES = _build()


def mig_models() -> tuple[str, ...]:
    """GPU models (catalogue names) that support MIG."""
    return tuple(_PROFILES)


def _model_key(model: str) -> str:
    for key in _PROFILES:
        if key.lower() == model.strip().lower():
            return key
    raise InputError(f"{shorten(model)} has no MIG profiles; MIG-capable models: {', '.join(_PROFILES)}")


def profiles(model: str) -> tuple[MigProfile, ...]:
    """All MIG profiles of ``model``, smallest first."""
    return _PROFILES[_model_key(model)]


def profile(model: str, name: str) -> MigProfile:
    """One profile by name (``2g.20gb``; the resource spelling ``1g.10gb.me`` is accepted too)."""
    key = _model_key(model)
    wanted = name.strip().lower()
    for p in _PROFILES[key]:
        if wanted in (p.name, p.resource_suffix):
            return p
    known = ", ".join(p.name for p in _PROFILES[key])
    raise InputError(f"{key} has no MIG profile {shorten(name)}; its profiles are: {known}")


@dataclass(frozen=True, kw_only=True)
class PlacedInstance:
    """A profile placed at a start slot; it holds memory slices ``[start_slot, end_slot)``."""

    profile: MigProfile
    start_slot: int

    @property
    def end_slot(self) -> int:
        return self.start_slot + self.profile.memory_slices

    def __str__(self) -> str:
        return f"{self.profile.name}@{self.start_slot}"


@dataclass(frozen=True, kw_only=True)
class MigPlacement:
    """A valid layout: every instance with its start slot, in the order they were asked for."""

    model: str
    instances: tuple[PlacedInstance, ...]

    @property
    def compute_slices(self) -> int:
        return sum(i.profile.compute_slices for i in self.instances)

    @property
    def memory_slices(self) -> int:
        return sum(i.profile.memory_slices for i in self.instances)


def _parse_request(model: str, item: str) -> tuple[MigProfile, int | None]:
    text = item.strip()
    if "@" in text:
        name, _, slot_text = text.partition("@")
        if not (slot_text.strip().isascii() and slot_text.strip().isdigit()):  # not '٤'
            raise InputError(f"{shorten(item)}: the start slot after '@' must be a number")
        return profile(model, name), int(slot_text)
    return profile(model, text), None


def _slots(a: int, b: int) -> str:
    return f"{a}" if b - a == 1 else f"{a}-{b - 1}"


def validate_layout(model: str, layout: Iterable[str]) -> MigPlacement:
    """Check a mixed MIG layout and return a placement, or raise ``MigLayoutError`` saying why.

    Items are profile names (``3g.40gb``) or pinned placements (``3g.40gb@4``). Unpinned instances are
    placed by an exhaustive search, so a layout is rejected only when no placement exists.
    """
    key = _model_key(model)
    requests = [_parse_request(key, item) for item in layout if item.strip()]
    if not requests:
        raise InputError("an empty MIG layout: name at least one profile")

    counts = Counter(p.name for p, _ in requests)
    for name, count in counts.items():
        p = profile(key, name)
        if count > p.max_count:
            raise MigLayoutError(f"{name} appears {count} times, but at most {p.max_count} fit on one {key}")
    media = [p.name for p, _ in requests if p.media_extensions]
    if len(media) > 1:
        raise MigLayoutError(f"{' and '.join(media)}: at most one +me instance fits on one GPU")
    compute = sum(p.compute_slices for p, _ in requests)
    if compute > COMPUTE_SLICES:
        raise MigLayoutError(f"the layout needs {compute} compute slices, but a {key} has {COMPUTE_SLICES}")
    memory = sum(p.memory_slices for p, _ in requests)
    if memory > MEMORY_SLICES:
        raise MigLayoutError(f"the layout needs {memory} memory slices, but a {key} has {MEMORY_SLICES}")

    # Pinned instances: valid slots, no overlap between them.
    taken: list[PlacedInstance] = []
    for p, slot in requests:
        if slot is None:
            continue
        if slot not in p.start_slots:
            raise MigLayoutError(
                f"{p.name}@{slot}: {slot} is not a valid start slot for {p.name} "
                f"(valid: {', '.join(map(str, p.start_slots))})"
            )
        placed = PlacedInstance(profile=p, start_slot=slot)
        for other in taken:
            lo, hi = max(placed.start_slot, other.start_slot), min(placed.end_slot, other.end_slot)
            if lo < hi:
                raise MigLayoutError(f"{other} overlaps {placed} on memory slices {_slots(lo, hi)}")
        taken.append(placed)

    free_idx = [i for i, (_, slot) in enumerate(requests) if slot is None]
    # Largest first makes the search short; ties keep the caller's order.
    free_idx.sort(key=lambda i: -requests[i][0].memory_slices)
    used = [False] * MEMORY_SLICES
    for t in taken:
        for s in range(t.start_slot, t.end_slot):
            used[s] = True
    chosen: dict[int, int] = {}
    deepest: list[int] = [0]

    def search(k: int) -> bool:
        deepest[0] = max(deepest[0], k)
        if k == len(free_idx):
            return True
        p = requests[free_idx[k]][0]
        for slot in p.start_slots:
            span = range(slot, slot + p.memory_slices)
            if span.stop <= MEMORY_SLICES and not any(used[s] for s in span):
                for s in span:
                    used[s] = True
                chosen[free_idx[k]] = slot
                if search(k + 1):
                    return True
                for s in span:
                    used[s] = False
                del chosen[free_idx[k]]
        return False

    if not search(0):
        stuck = requests[free_idx[deepest[0]]][0] if deepest[0] < len(free_idx) else requests[free_idx[-1]][0]
        raise MigLayoutError(
            f"no placement fits: {stuck.name} can start only at slots "
            f"{', '.join(map(str, stuck.start_slots))} and needs {stuck.memory_slices} free memory "
            f"slice(s) there, which the other instances always occupy"
        )
    placed_all = tuple(
        PlacedInstance(profile=p, start_slot=slot if slot is not None else chosen[i])
        for i, (p, slot) in enumerate(requests)
    )
    return MigPlacement(model=key, instances=placed_all)

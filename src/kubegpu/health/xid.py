"""XID classification: which NVIDIA XID errors make a GPU unhealthy.

An XID is the driver's error code for a GPU fault, logged as ``NVRM: Xid (PCI:0000:3b:00): 79, ...``.
NVIDIA's device plugin ignores 13, 31, 43, 45, 68 and 109 by default (application faults, not device
faults) and treats every other XID as fatal for the device; kubegpu keeps that default and lets the
policy be changed (extra ignored XIDs, XIDs forced fatal, or checks disabled).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

__all__ = [
    "DEFAULT_IGNORED_XIDS",
    "XID_MEANINGS",
    "XidEvent",
    "XidPolicy",
    "XidVerdict",
    "parse_xid_line",
]

DEFAULT_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})

# Short operator-facing meanings of the XIDs seen most often in production.
XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception (usually an application bug)",
    31: "GPU memory page fault (usually an application bug)",
    43: "GPU stopped processing (application reset)",
    45: "preemptive cleanup after an earlier error",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remap recorded",
    64: "ECC page retirement or row remap failed",
    68: "video processor exception",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
}


class XidVerdict(Enum):
    """What an XID means for the device it was reported on."""

    IGNORED = "ignored"
    FATAL = "fatal"


@dataclass(frozen=True, kw_only=True)
class XidPolicy:
    """Which XIDs mark a GPU unhealthy.

    ``ignored`` XIDs are application faults; ``forced_fatal`` wins over ``ignored``; when
    ``disabled`` nothing is fatal (NVIDIA's ``DP_DISABLE_HEALTHCHECKS=all``).
    """

    ignored: frozenset[int] = DEFAULT_IGNORED_XIDS
    forced_fatal: frozenset[int] = field(default_factory=frozenset)
    all_fatal: bool = False
    disabled: bool = False

    def classify(self, xid: int) -> XidVerdict:
        """Say whether ``xid`` makes the GPU unhealthy under this policy."""
        if self.all_fatal or xid in self.forced_fatal:
            return XidVerdict.FATAL
        if self.disabled or xid in self.ignored:
            return XidVerdict.IGNORED
        return XidVerdict.FATAL


@dataclass(frozen=True, kw_only=True)
class XidEvent:
    """One XID report as read from a kernel log line."""

    pci_bus_id: str
    xid: int
    text: str

    @property
    def meaning(self) -> str:
        return XID_MEANINGS.get(self.xid, "see NVIDIA's XID catalogue")


_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F:.]+)\): (?P<xid>\d+)")


def parse_xid_line(line: str) -> XidEvent | None:
    """Return the XID event in a kernel log line, or ``None`` if the line holds none."""
    match = _XID_RE.search(line)
    if match is None:
        return None
    return XidEvent(pci_bus_id=match["bus"].lower(), xid=int(match["xid"]), text=line.strip())

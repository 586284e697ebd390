"""Fault injection for simulated nodes: a file of JSON lines the agent follows like ``tail -f``.

Each line is one event about one GPU (by index or UUID)::

    {"gpu": 3, "xid": 79}            an XID (judged by the health policy: 79 is fatal, 13 ignored)
    {"gpu": 3, "ecc": "dbe"}         an ECC error, "dbe" (double-bit) or "sbe" (single-bit)
    {"gpu": 3, "healthy": false}     the GPU is lost (as if it fell off the bus)
    {"gpu": 3, "healthy": true}      the GPU works again

Optional ``"detail"`` text is carried into the reason kubegpu logs. Blank lines and lines starting
with ``#`` are skipped. A bad line is reported with its line number and skipped; the follower keeps
going, because a typo in a test script must not take the node's device plugin down.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from kubegpu.echo import shorten
from kubegpu.errors import InputError
from kubegpu.sources.events import GpuEvent, GpuEventKind

__all__ = ["FaultFileFollower", "parse_fault_line"]

log = logging.getLogger(__name__)

_KEYS = {"gpu", "xid", "ecc", "healthy", "detail"}


def parse_fault_line(line: str, *, where: str = "fault file") -> GpuEvent | None:
    """The event on ``line``; ``None`` for blank and comment lines; ``InputError`` if malformed."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not a JSON object: {exc.msg}") from exc
    if not isinstance(raw, dict):
        raise InputError(f'{where}: expected a JSON object like {{"gpu": 3, "xid": 79}}')
    unknown = set(raw) - _KEYS
    if unknown:
        key = shorten(sorted(unknown)[0])
        raise InputError(f"{where}: unknown key {key}; allowed: {', '.join(sorted(_KEYS))}")
    gpu = raw.get("gpu")
    if isinstance(gpu, bool) or not isinstance(gpu, int | str):
        raise InputError(f"{where}: 'gpu' must be a GPU index or UUID, not {shorten(gpu)}")
    detail = raw.get("detail", "")
    if not isinstance(detail, str):
        raise InputError(f"{where}: 'detail' must be a string")
    kinds = [k for k in ("xid", "ecc", "healthy") if k in raw]
    if len(kinds) != 1:
        raise InputError(f"{where}: give exactly one of 'xid', 'ecc' or 'healthy'")
    source = "fault-file"
    if "xid" in raw:
        xid = raw["xid"]
        if isinstance(xid, bool) or not isinstance(xid, int) or xid < 0:
            raise InputError(f"{where}: 'xid' must be a non-negative integer, not {shorten(xid)}")
        return GpuEvent(gpu=gpu, kind=GpuEventKind.XID, xid=xid, detail=detail, source=source)
    if "ecc" in raw:
        ecc = raw["ecc"]
        if ecc not in ("dbe", "sbe"):
            raise InputError(f'{where}: \'ecc\' must be "dbe" or "sbe", not {shorten(ecc)}')
        kind = GpuEventKind.ECC_DOUBLE_BIT if ecc == "dbe" else GpuEventKind.ECC_SINGLE_BIT
        return GpuEvent(gpu=gpu, kind=kind, detail=detail, source=source)
    healthy = raw["healthy"]
    if not isinstance(healthy, bool):
        raise InputError(f"{where}: 'healthy' must be true or false, not {shorten(healthy)}")
    kind = GpuEventKind.HEALTHY if healthy else GpuEventKind.LOST
    return GpuEvent(gpu=gpu, kind=kind, detail=detail, source=source)


class FaultFileFollower:
    """Follows ``path`` in a thread, from its first line (or from when it appears).

    Lines already in the file when the agent starts are applied too: a node spec plus a fault file
    describes the node's state, whenever the agent (re)starts. Truncation starts over from the top.
    """

    def __init__(
        self,
        path: Path,
        on_event: Callable[[GpuEvent], None],
        *,
        poll_s: float = 0.02,
    ) -> None:
        self._path = path
        self._on_event = on_event
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-file", daemon=True)
        self._offset = 0
        self._line_no = 0
        self._partial = b""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def poll_once(self) -> None:
        """Read and apply whatever was appended since the last call."""
        try:
            size = self._path.stat().st_size
        except FileNotFoundError:
            return
        if size < self._offset:
            self._offset, self._line_no, self._partial = 0, 0, b""
        if size == self._offset:
            return
        with self._path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read(size - self._offset)
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for its newline
        for raw in lines:
            self._line_no += 1
            where = f"{self._path}:{self._line_no}"
            try:
                event = parse_fault_line(raw.decode("utf-8", errors="replace"), where=where)
            except InputError as exc:
                log.error("bad fault line skipped", extra={"error": str(exc)})
                continue
            if event is not None:
                self._on_event(event)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:
                log.exception("fault file follower failed; retrying")
            self._stop.wait(self._poll_s)

"""Fault injection for simulated nodes: a file of JSON lines the agent follows like ``tail -f``.

Each line is one event about one GPU (by index or UUID)::

    {"gpu": 3, "xid": 79}            an XID (judged by the health policy: 79 is fatal, 13 ignored)
    {"gpu": 3, "ecc": "dbe"}         an ECC error, "dbe" (double-bit) or "sbe" (single-bit)
    {"gpu": 3, "healthy": false}     the GPU is lost (as if it fell off the bus)
    {"gpu": 3, "healthy": true}      the GPU works again

Optional ``"detail"`` text is carried into the reason kubegpu logs. Blank lines and lines starting
with ``#`` are skipped. A bad line is reported with its line number and skipped; the follower keeps
going, because a typo in a test script must not take the node's device plugin down.

The file is followed like ``tail -F``: by name, so a file replaced by rename (a new device/inode) or
truncated is read again from its first line. It is read in chunks and a line longer than
``MAX_LINE_BYTES`` is skipped without ever being held whole, so memory stays bounded whatever the file
holds; every line is parsed on its own, so no line can take the ones after it down.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from kubegpu.backoff import Backoff, describe
from kubegpu.echo import shorten
from kubegpu.errors import InputError
from kubegpu.model.event import GpuEvent, GpuEventKind

__all__ = ["MAX_LINE_BYTES", "FaultFileFollower", "parse_fault_line"]

log = logging.getLogger(__name__)

_KEYS = {"gpu", "xid", "ecc", "healthy", "detail"}
MAX_LINE_BYTES = 64 * 1024  # an event is a few dozen bytes; anything longer is not one
_CHUNK_BYTES = 64 * 1024


def parse_fault_line(line: str, *, where: str = "fault file") -> GpuEvent | None:
    """The event on ``line``; ``None`` for blank and comment lines; ``InputError`` if malformed."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not a JSON object: {exc.msg}") from exc
    except RecursionError as exc:
        raise InputError(f"{where}: not a JSON object: nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer beyond Python's 4300-digit conversion limit
        raise InputError(f"{where}: not a JSON object: a number has too many digits") from exc
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
    describes the node's state, whenever the agent (re)starts. Truncation, or a new file under the
    same name, starts over from the top. A file that cannot be read is retried with backoff
    (0.5 s doubling to 30 s), one log line per failure.
    """

    def __init__(
        self,
        path: Path,
        on_event: Callable[[GpuEvent], None],
        *,
        poll_s: float = 0.02,
        backoff: Backoff | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self._path = path
        self._on_event = on_event
        self._poll_s = poll_s
        self._backoff = backoff if backoff is not None else Backoff(initial_s=0.5, max_s=30.0)
        self._stop = stop if stop is not None else threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-file", daemon=True)
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._line_no = 0
        self._partial = b""
        self._skipping = False  # inside a line longer than MAX_LINE_BYTES, until its newline

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _start_over(self, identity: tuple[int, int], why: str | None) -> None:
        if why is not None:
            log.info("fault file %s; reading it from its first line", why, extra={"file": str(self._path)})
        self._identity = identity
        self._offset, self._line_no, self._partial, self._skipping = 0, 0, b"", False

    def poll_once(self) -> None:
        """Read and apply whatever was appended since the last call."""
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) == self._identity and st.st_size == self._offset:
            return
        try:
            f = self._path.open("rb")
        except FileNotFoundError:
            return
        with f:
            st = os.fstat(f.fileno())  # what was opened is the truth (the name may have moved on)
            identity = (st.st_dev, st.st_ino)
            if identity != self._identity:
                self._start_over(identity, None if self._identity is None else "replaced")
            elif st.st_size < self._offset:
                self._start_over(identity, "truncated")
            f.seek(self._offset)
            left = st.st_size - self._offset
            while left > 0:
                chunk = f.read(min(_CHUNK_BYTES, left))
                if not chunk:
                    break
                left -= len(chunk)
                self._offset += len(chunk)
                self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                rest = chunk[start:]
                if self._skipping:
                    return
                if len(self._partial) + len(rest) > MAX_LINE_BYTES:
                    self._too_long(self._partial + rest[:80])
                else:
                    self._partial += rest  # an unfinished last line waits for its newline
                return
            piece, start = chunk[start:end], end + 1
            if self._skipping:
                self._line_no += 1
                self._skipping = False
                continue
            line, self._partial = self._partial + piece, b""
            if len(line) > MAX_LINE_BYTES:
                self._too_long(line[:80])
                self._line_no += 1
                self._skipping = False
                continue
            self._line_no += 1
            self._apply(line)

    def _too_long(self, head: bytes) -> None:
        where = f"{self._path}:{self._line_no + 1}"
        text = head[:60].decode("utf-8", errors="replace")
        log.error(
            "fault line too long, skipped",
            extra={"error": f"{where}: longer than {MAX_LINE_BYTES} bytes; starts {text!r}"},
        )
        self._partial, self._skipping = b"", True

    def _apply(self, raw: bytes) -> None:
        where = f"{self._path}:{self._line_no}"
        try:
            event = parse_fault_line(raw.decode("utf-8", errors="replace"), where=where)
        except InputError as exc:
            log.error("bad fault line skipped", extra={"error": str(exc)[:300]})
            return
        except Exception as exc:  # a parser failure takes only its own line down
            log.error("bad fault line skipped", extra={"error": f"{where}: {describe(exc)}"})
            log.debug("fault line parser failure", exc_info=True)
            return
        if event is None:
            return
        try:
            self._on_event(event)
        except Exception as exc:
            log.error("fault event not applied", extra={"error": f"{where}: {describe(exc)}"})
            log.debug("fault event failure", exc_info=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:
                delay = self._backoff.failed()
                log.warning(
                    "fault file unreadable; retrying",
                    extra={
                        "file": str(self._path),
                        "error": describe(exc),
                        "failures": self._backoff.failures,
                        "retry_in_s": round(delay, 2),
                    },
                )
                log.debug("fault file follower failure", exc_info=True)
                self._stop.wait(delay)
                continue
            if self._backoff.failures:
                log.info("fault file readable again", extra={"file": str(self._path)})
                self._backoff.reset()
            self._stop.wait(self._poll_s)

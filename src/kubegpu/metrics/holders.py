"""Who holds which device, from kubelet's PodResources API, cached for a short interval.

kubelet rate-limits PodResources to 100 requests/s with a burst of 10, and several Prometheus servers
may scrape the agent at once, so one ``List`` answer serves every scrape for ``ttl_s`` (1 s by
default). When kubelet cannot answer (no socket: no cluster; an error; the rate limit), the scrape goes
on without pod labels: ``holders()`` returns ``None``, the failure is counted, and one log line says
why (again only when the reason changes, or after it recovered).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from kubegpu.errors import PodResourcesUnavailable
from kubegpu.model.holder import DeviceHolder

__all__ = ["CachedHolders", "HolderSource"]

log = logging.getLogger(__name__)


class HolderSource(Protocol):
    def holders(self) -> list[DeviceHolder]: ...


class CachedHolders:
    """Thread-safe; ``on_failure()`` is called once per failed ``List``."""

    def __init__(
        self,
        source: HolderSource,
        *,
        ttl_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self._source = source
        self._ttl_s = ttl_s
        self._clock = clock
        self._on_failure = on_failure
        self._lock = threading.Lock()
        self._at: float | None = None
        self._value: Sequence[DeviceHolder] | None = None
        self._last_error: str | None = None

    def holders(self) -> Sequence[DeviceHolder] | None:
        """The holders as of at most ``ttl_s`` ago; ``None`` if kubelet could not say."""
        with self._lock:
            now = self._clock()
            if self._at is not None and now - self._at < self._ttl_s:
                return self._value
            try:
                value: Sequence[DeviceHolder] | None = tuple(self._source.holders())
            except PodResourcesUnavailable as exc:
                value = None
                self._on_failure()
                if str(exc) != self._last_error:
                    log.warning(
                        "metrics without pod labels: PodResources unavailable", extra={"error": str(exc)}
                    )
                    self._last_error = str(exc)
            else:
                if self._last_error is not None:
                    log.info("PodResources answers again; pod labels are back")
                    self._last_error = None
            self._at, self._value = now, value
            return value

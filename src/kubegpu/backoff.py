"""Exponential backoff for retry loops: one delay per failure, doubling up to a cap, reset on success.

Every loop that retries something that failed (registration, a restart of a plugin server, the NVML
health watcher, the fault-file follower) asks one ``Backoff`` how long to wait, so none of them spins
and logs on every tick while the cause persists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Backoff", "describe"]


@dataclass(kw_only=True)
class Backoff:
    """Delays ``initial_s``, ``2 * initial_s`` … capped at ``max_s``; ``failures`` counts since a reset."""

    initial_s: float = 0.5
    max_s: float = 30.0
    factor: float = 2.0
    failures: int = field(default=0, init=False)
    _next_s: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.max_s or self.factor < 1:
            raise ValueError(f"invalid backoff {self.initial_s} s .. {self.max_s} s x{self.factor}")
        self._next_s = self.initial_s

    def failed(self) -> float:
        """Record a failure; the delay to wait before the next try."""
        delay = self._next_s
        self.failures += 1
        self._next_s = min(self._next_s * self.factor, self.max_s)
        return delay

    def reset(self) -> None:
        """A try succeeded: the next failure waits ``initial_s`` again."""
        self.failures = 0
        self._next_s = self.initial_s


def describe(error: BaseException, *, limit: int = 300) -> str:
    """One line for a log: the error, then each cause (``raise … from e``), at most ``limit`` chars."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(parts) < 4:
        seen.add(id(current))
        text = " ".join(str(current).split())
        parts.append(f"{type(current).__name__}: {text}" if text else type(current).__name__)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    line = " <- caused by ".join(parts)
    return line if len(line) <= limit else line[: limit - 1] + "…"

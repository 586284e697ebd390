"""Log output of the long-running commands (``agent``, ``dra serve``): one JSON object per line when
stderr is not a terminal (what log collectors parse), readable text when it is."""

from __future__ import annotations

import json
import logging
import sys

from kubegpu.echo import shorten
from kubegpu.errors import InputError

__all__ = ["LOG_LEVELS", "check_log_level", "setup_logging"]

LOG_LEVELS = ("debug", "info", "warning", "error")

_STANDARD_LOG_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_LOG_FIELDS:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD_LOG_FIELDS)
        line = f"{record.levelname.lower():7} {record.getMessage()}" + (f"  {extra}" if extra else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def check_log_level(level: str, flag: str = "--log-level") -> str:
    """``level`` in upper case (as ``logging`` wants it), or an input error listing the valid ones."""
    if level.strip().lower() not in LOG_LEVELS:
        raise InputError(f"{flag}: {shorten(level)} is not a log level; allowed: {', '.join(LOG_LEVELS)}")
    return level.strip().upper()


def setup_logging(level: str) -> None:
    """Log to stderr at ``level`` (one of ``LOG_LEVELS``; anything else is an input error)."""
    checked = check_log_level(level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TextFormatter() if sys.stderr.isatty() else _JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(checked)

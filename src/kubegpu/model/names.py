"""Kubernetes' name rules, in one place: a DNS-1123 subdomain (object names such as a Node's, a Lease's
namespace and name, a resource name's prefix) and a DNS-1123 label (a namespace, a label value's shape)."""

from __future__ import annotations

import re

__all__ = ["MAX_LABEL", "MAX_SUBDOMAIN", "is_dns_label", "is_dns_subdomain"]

MAX_SUBDOMAIN = 253
MAX_LABEL = 63
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def is_dns_subdomain(text: str) -> bool:
    """Lower-case letters, digits, '-' and '.', each dot-separated part starting and ending with a letter
    or digit, at most ``MAX_SUBDOMAIN`` characters."""
    return len(text) <= MAX_SUBDOMAIN and _SUBDOMAIN_RE.fullmatch(text) is not None


def is_dns_label(text: str) -> bool:
    """Lower-case letters, digits and '-', starting and ending with a letter or digit, at most
    ``MAX_LABEL`` characters."""
    return len(text) <= MAX_LABEL and _LABEL_RE.fullmatch(text) is not None

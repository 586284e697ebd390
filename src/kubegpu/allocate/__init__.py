"""Choosing devices: exact topology-aware subset selection (``choose``) and the simple fallback."""

from kubegpu.allocate.exact import Choice, choose, choose_scored
from kubegpu.allocate.simple import choose_simple

__all__ = ["Choice", "choose", "choose_scored", "choose_simple"]

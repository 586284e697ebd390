"""YAML with line numbers: parse a document and remember where every key and item came from.

Spec and config loaders use it so that an error can say ``node.yaml:12: gpus[3].model: ...``. A key
given twice in one mapping is an error naming both lines (YAML's loader would keep the last silently).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from kubegpu.echo import clip
from kubegpu.errors import InputError

__all__ = ["LocatedDoc", "format_path", "load_located"]

Path = tuple[str | int, ...]


def format_path(path: Path) -> str:
    out = ""
    for part in path:  # a key is file text: a 16 KB key must not make a 16 KB message
        out += f"[{part}]" if isinstance(part, int) else (f".{clip(part)}" if out else clip(str(part)))
    return out or "(top level)"


@dataclass(frozen=True)
class LocatedDoc:
    """A parsed document plus the 1-based line of every path in it."""

    origin: str
    data: Any
    lines: dict[Path, int]

    def where(self, path: Path) -> str:
        """``origin:line: path`` for the deepest known prefix of ``path``."""
        probe = path
        while probe and probe not in self.lines:
            probe = probe[:-1]
        line = self.lines.get(probe, 1)
        return f"{self.origin}:{line}: {format_path(path)}"

    def error(self, path: Path, message: str, cls: type[InputError] = InputError) -> InputError:
        return cls(f"{self.where(path)}: {message}")


class _DuplicateKey(Exception):
    def __init__(self, path: Path, line: int, first: int) -> None:
        super().__init__(path)
        self.path, self.line, self.first = path, line, first


def _walk(node: yaml.Node, path: Path, lines: dict[Path, int], done: set[int], active: set[int]) -> None:
    lines[path] = node.start_mark.line + 1
    if id(node) in active:  # an anchor used inside itself: &a [*a]
        raise RecursionError("recursive anchor")
    if id(node) in done:  # an alias of a node already walked: walk it once, not 9**9 times
        return
    active.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen and key != "<<":  # YAML's loader would keep the last value silently
                raise _DuplicateKey((*path, key), line, seen[key])
            seen[key] = line
            lines[(*path, key)] = key_node.start_mark.line + 1
            _walk(value_node, (*path, key), lines, done, active)
            lines[(*path, key)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), lines, done, active)
    active.discard(id(node))
    done.add(id(node))


def load_located(text: str, origin: str, cls: type[InputError] = InputError) -> LocatedDoc:
    """Parse YAML (or JSON) text; syntax errors name the origin and line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else 1
        raise cls(f"{origin}:{line}: not valid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise cls(f"{origin}: not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise cls(f"{origin}: the YAML refers to itself (a recursive anchor)") from exc
    lines: dict[Path, int] = {}
    if node is not None:
        try:
            _walk(node, (), lines, set(), set())
        except RecursionError as exc:  # an anchor used inside itself: &a [*a]
            raise cls(f"{origin}: the YAML refers to itself (a recursive anchor)") from exc
        except _DuplicateKey as exc:
            where = f"{origin}:{exc.line}: {format_path(exc.path)}"
            raise cls(f"{where}: the key appears twice in one mapping (first on line {exc.first})") from exc
    return LocatedDoc(origin=origin, data=data, lines=lines)

"""The error tree is part of the public API: sorted ``__all__``, input errors exit 2."""

from __future__ import annotations

from enum import Enum

from kubegpu import errors


def _public(kind: type) -> set[str]:
    return {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, kind) and not name.startswith("_")
    }


def test_all_is_sorted_and_complete() -> None:
    assert list(errors.__all__) == sorted(errors.__all__)
    exported = _public(Exception) | (_public(Enum) - {"Enum"})  # the enums errors carry
    assert exported == set(errors.__all__)


def test_every_input_error_exits_2_and_others_exit_1() -> None:
    for name in _public(Exception):
        cls = getattr(errors, name)
        assert issubclass(cls, errors.KubegpuError)
        expected = 2 if issubclass(cls, errors.InputError) else 1
        assert cls.exit_code == expected, name


def test_every_error_is_drawn_in_the_tree_with_a_docstring() -> None:
    tree = errors.__doc__ or ""
    for name in _public(Exception):
        assert f" {name} " in tree, name
        assert (getattr(errors, name).__doc__ or "").strip(), name

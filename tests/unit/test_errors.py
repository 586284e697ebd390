"""The error tree is part of the public API: sorted ``__all__``, input errors exit 2."""

from __future__ import annotations

from kubegpu import errors


def test_all_is_sorted_and_complete() -> None:
    assert list(errors.__all__) == sorted(errors.__all__)
    exported = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, Exception) and not name.startswith("_")
    }
    assert exported == set(errors.__all__)


def test_every_input_error_exits_2_and_others_exit_1() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.KubegpuError)
        expected = 2 if issubclass(cls, errors.InputError) else 1
        assert cls.exit_code == expected, name

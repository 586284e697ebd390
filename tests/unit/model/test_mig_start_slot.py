"""A pinned MIG start slot (``NAME@SLOT``) is written in ASCII digits."""

from __future__ import annotations

import pytest

from kubegpu.errors import InputError
from kubegpu.model.mig import validate_layout


def test_a_mig_start_slot_is_written_in_ascii_digits() -> None:
    with pytest.raises(InputError, match="the start slot after '@' must be a number"):
        validate_layout("H100-80GB", ["3g.40gb@٤"])
    assert validate_layout("H100-80GB", ["3g.40gb@4"]).instances[0].start_slot == 4

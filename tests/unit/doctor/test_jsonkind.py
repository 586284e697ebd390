"""What a message calls a JSON value that is not what the file should hold."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.doctor.jsonkind import describe_json


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (None, "null"),
        (True, "a boolean"),
        (5, "the number 5"),
        (1.5, "the number 1.5"),
        ("nvidia", "a string"),
        ({"path": "x"}, "an object"),
        (["nvidia"], "a list"),
    ],
)
def test_each_json_type_has_its_name(value: Any, named: str) -> None:
    assert describe_json(value) == named

"""The assignment annotation reads back exactly what was written, and bad values say what is wrong."""

from __future__ import annotations

import pytest

from kubegpu.errors import PlacementError
from kubegpu.extender.assignment import ANNOTATION, Assignment, assignment_of, decode, encode


def test_round_trip() -> None:
    a = Assignment(node="gpu-1", gpus=(3, 1), uuids=("GPU-a", "GPU-b"), milli=1000)
    assert decode(encode(a)) == a
    assert assignment_of({"metadata": {"annotations": {ANNOTATION: encode(a)}}}) == a


def test_a_pod_without_the_annotation_has_none() -> None:
    assert assignment_of({"metadata": {}}) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "JSON object"),
        ('{"node":"","gpus":[0],"milli":500}', "node"),
        ('{"node":"n","gpus":[0,0],"milli":500}', "twice"),
        ('{"node":"n","gpus":[-1],"milli":500}', "indices"),
        ('{"node":"n","gpus":[0],"milli":0}', "milli"),
        ('{"node":"n","gpus":[0],"uuids":["a","b"],"milli":500}', "uuids"),
    ],
)
def test_bad_annotations_name_the_field(text: str, message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        decode(text)

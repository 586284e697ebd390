"""The fault file: one JSON object per line, bad lines named by line number, followed as it grows."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.errors import InputError
from kubegpu.sources.events import GpuEvent, GpuEventKind
from kubegpu.sources.faults import FaultFileFollower, parse_fault_line


@pytest.mark.parametrize(
    ("line", "kind", "gpu"),
    [
        ('{"gpu": 3, "xid": 79}', GpuEventKind.XID, 3),
        ('{"gpu": "GPU-abc", "ecc": "dbe"}', GpuEventKind.ECC_DOUBLE_BIT, "GPU-abc"),
        ('{"gpu": 3, "ecc": "sbe"}', GpuEventKind.ECC_SINGLE_BIT, 3),
        ('{"gpu": 3, "healthy": true}', GpuEventKind.HEALTHY, 3),
        ('{"gpu": 3, "healthy": false, "detail": "pulled"}', GpuEventKind.LOST, 3),
    ],
)
def test_each_event_kind_parses(line: str, kind: GpuEventKind, gpu: int | str) -> None:
    event = parse_fault_line(line)
    assert event is not None and event.kind is kind and event.gpu == gpu


def test_blank_and_comment_lines_are_skipped() -> None:
    assert parse_fault_line("   ") is None
    assert parse_fault_line("# GPU 3 dies next") is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{gpu: 3}", "not a JSON object"),
        ("[3, 79]", "expected a JSON object"),
        ('{"gpu": 3}', "exactly one of"),
        ('{"gpu": 3, "xid": 79, "healthy": true}', "exactly one of"),
        ('{"gpu": true, "xid": 79}', "'gpu' must be"),
        ('{"gpu": 3, "xid": "79"}', "'xid' must be"),
        ('{"gpu": 3, "ecc": "triple"}', "'ecc' must be"),
        ('{"gpu": 3, "xid": 79, "colour": "red"}', "unknown key 'colour'"),
    ],
)
def test_bad_lines_say_what_is_wrong_and_where(line: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as err:
        parse_fault_line(line, where="faults.jsonl:7")
    assert str(err.value).startswith("faults.jsonl:7:")


def test_follower_applies_appended_lines_waits_for_newlines_and_survives_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    seen: list[GpuEvent] = []
    follower = FaultFileFollower(path, seen.append)
    follower.poll_once()  # the file does not exist yet: nothing happens
    path.write_text('{"gpu": 1, "xid": 79}\nnot json\n{"gpu": 2, "xi')
    follower.poll_once()
    assert [(e.gpu, e.kind) for e in seen] == [(1, GpuEventKind.XID)]
    with path.open("a") as f:
        f.write('d": 48}\n')
    follower.poll_once()
    assert [(e.gpu, e.xid) for e in seen] == [(1, 79), (2, 48)]
    path.write_text('{"gpu": 1, "healthy": true}\n')  # truncated and rewritten: start over
    follower.poll_once()
    assert seen[-1].kind is GpuEventKind.HEALTHY

"""The fault file: one JSON object per line, bad lines named by line number, followed as it grows."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from kubegpu.errors import InputError
from kubegpu.model.event import GpuEvent, GpuEventKind
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


@pytest.mark.parametrize(
    "poison",
    ["[" * 50_000, '{"gpu": 1, "xid": ' + "9" * 5_000 + "}"],
    ids=["deeply-nested", "5000-digit-number"],
)
def test_a_line_that_breaks_the_json_parser_is_skipped_and_later_lines_still_apply(
    tmp_path: Path, poison: str
) -> None:
    path = tmp_path / "faults.jsonl"
    seen: list[GpuEvent] = []
    follower = FaultFileFollower(path, seen.append)
    path.write_text(f'{{"gpu": 0, "xid": 79}}\n{poison}\n{{"gpu": 2, "xid": 79}}\n')
    follower.poll_once()
    assert [e.gpu for e in seen] == [0, 2]


@pytest.mark.parametrize("poison", ["[" * 50_000, "9" * 5_000], ids=["deeply-nested", "5000-digit-number"])
def test_parser_errors_of_any_kind_are_input_errors(poison: str) -> None:
    with pytest.raises(InputError, match=r"^faults\.jsonl:4: not a JSON object"):
        parse_fault_line(poison, where="faults.jsonl:4")


def test_a_file_replaced_by_a_longer_one_is_read_from_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    seen: list[GpuEvent] = []
    follower = FaultFileFollower(path, seen.append)
    path.write_text("# " + "x" * 100 + '\n{"gpu": 1, "xid": 79}\n')
    follower.poll_once()
    assert [e.gpu for e in seen] == [1]
    new = tmp_path / "faults.jsonl.new"
    new.write_text('{"gpu": 2, "xid": 79}\n# ' + "y" * 200 + "\n")
    new.replace(path)  # write-and-rename: a new inode, longer than the old file
    follower.poll_once()
    assert [e.gpu for e in seen] == [1, 2]


def test_an_overlong_line_is_skipped_with_one_short_log_line_and_bounded_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import tracemalloc

    path = tmp_path / "faults.jsonl"
    seen: list[GpuEvent] = []
    follower = FaultFileFollower(path, seen.append)
    with path.open("w") as f:
        f.write('{"gpu": 0, "xid": 79}\n{"gpu": 1, "detail": "' + "z" * 5_000_000 + '", "xid": 79}\n')
        f.write('{"gpu": 2, "xid": 79}\n')
    tracemalloc.start()
    try:
        follower.poll_once()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [e.gpu for e in seen] == [0, 2]
    assert peak < 1_000_000  # the 5 MB line is never held in memory
    too_long = [r for r in caplog.records if "too long" in r.getMessage()]
    assert len(too_long) == 1
    assert len(str(too_long[0].__dict__.get("error", ""))) < 300
    assert ":2:" in str(too_long[0].__dict__.get("error", ""))


def test_an_overlong_line_split_across_polls_is_skipped_as_one_line(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    seen: list[GpuEvent] = []
    follower = FaultFileFollower(path, seen.append)
    path.write_text("[" * 100_000)
    follower.poll_once()
    with path.open("a") as f:
        f.write("]" * 100_000 + '\n{"gpu": 3, "xid": 79}\n')
    follower.poll_once()
    assert [e.gpu for e in seen] == [3]


class _RecordingStop(threading.Event):
    """A stop event whose waits return at once and are recorded; it sets itself after ``n`` waits."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0))
        if len(self.waits) >= self.n:
            self.set()
        return self.is_set()


def test_an_unreadable_fault_file_is_retried_with_backoff_and_one_line_per_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "faults.jsonl"
    path.mkdir()  # opening it fails on every try
    stop = _RecordingStop(8)
    follower = FaultFileFollower(path, lambda e: None, stop=stop)
    caplog.set_level(logging.INFO)
    follower._run()
    assert stop.waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 8
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in failures)
    assert "IsADirectoryError" in str(failures[0].__dict__["error"])

"""``kubegpu.atomicfile``: whole-or-nothing writes, and the early "can results go there?" probe."""

from __future__ import annotations

from pathlib import Path

from kubegpu.atomicfile import writable_folder_error, write_atomically


def test_a_folder_to_be_created_is_probed_at_its_nearest_existing_parent_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    assert writable_folder_error(tmp_path / "a" / "b") is None
    assert list(tmp_path.iterdir()) == []  # neither the folders nor the probe file stay


def test_a_folder_below_a_file_or_in_proc_cannot_take_results(tmp_path: Path) -> None:
    afile = tmp_path / "f.txt"
    afile.write_text("x")
    assert writable_folder_error(afile / "out") == f"{afile} is not a folder"
    problem = writable_folder_error(Path("/proc/kubegpu-out"))
    assert problem is not None and problem.startswith("cannot write in /proc")


def test_write_atomically_replaces_the_whole_file_and_creates_parents(tmp_path: Path) -> None:
    target = tmp_path / "state" / "ledger.json"
    write_atomically(target, "{}\n", mode=0o600)
    write_atomically(target, '{"a": 1}\n', mode=0o600)
    assert target.read_text() == '{"a": 1}\n' and oct(target.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in target.parent.iterdir()] == ["ledger.json"]  # no temporary file left

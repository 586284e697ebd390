"""The default trace ships with kubegpu, whole and unchanged, and is what the simulator uses by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.errors import InputError
from kubegpu.sim import openb
from kubegpu.sim.trace import load_nodes, load_pods


def test_the_shipped_files_match_their_recorded_checksums() -> None:
    assert openb.verify() == openb.SHA256


def test_the_shipped_trace_is_the_full_default_trace() -> None:
    trace = openb.default_trace()
    nodes, pods = load_nodes(trace.nodes), load_pods(trace.pods)
    assert len(nodes) == 1213 and sum(n.gpu_count for n in nodes) == 6212
    assert len(pods) == 8152


def test_the_data_readme_records_the_same_checksums_as_the_code() -> None:
    readme = (openb.DATA_DIR / "README.md").read_text(encoding="utf-8")
    for name, digest in openb.SHA256.items():
        assert f"`{name}`" in readme and digest in readme


def test_missing_flags_fall_back_to_the_shipped_files_one_by_one(tmp_path: Path) -> None:
    mine = tmp_path / "pods.csv"
    both = openb.resolve(None, None)
    assert (both.nodes, both.pods) == (openb.DATA_DIR / openb.NODES_FILE, openb.DATA_DIR / openb.PODS_FILE)
    assert openb.resolve(None, mine).pods == mine
    assert openb.resolve(None, mine).nodes == both.nodes


def test_a_folder_without_the_trace_names_the_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nodes\.csv|node_list_gpu_node\.csv: the default openb trace"):
        openb.default_trace(tmp_path)

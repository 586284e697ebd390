"""Recorded API objects: the directory layout `--from-recorded` reads, and bad files named precisely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubegpu.doctor import RecordedCluster
from kubegpu.errors import InputError
from tests.unit.doctor.conftest import RECORDED


def test_directory_with_lists_single_objects_and_logs_loads(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text(
        json.dumps({"kind": "NodeList", "items": [{"metadata": {"name": "n1"}}]})
    )
    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}}
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    logs = tmp_path / "logs" / "ns" / "p"
    logs.mkdir(parents=True)
    (logs / "app.log").write_text("now\n")
    (logs / "app.previous.log").write_text("before\n")
    rec = RecordedCluster.from_dir(tmp_path)
    assert [n["metadata"]["name"] for n in rec.list_nodes()] == ["n1"]
    assert rec.list_pods(node_name="n1") == [pod]
    assert rec.read_log("ns", "p", "app") == "now"
    assert rec.read_log("ns", "p", "app", previous=True) == "before"
    assert rec.read_log("ns", "p", "other") is None


def test_bad_json_names_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "pods.json").write_text('{"kind": "List",\n "items": [,]}')
    with pytest.raises(InputError, match=r"pods\.json: line 2"):
        RecordedCluster.from_dir(tmp_path)


def test_binary_json_file_is_an_input_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_bytes(b"\xc5\xff\x00 not text")
    with pytest.raises(InputError, match=r"nodes\.json: not UTF-8 text"):
        RecordedCluster.from_dir(tmp_path)


def test_log_path_that_is_a_directory_is_an_input_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "logs" / "ns" / "p" / "app.log").mkdir(parents=True)
    with pytest.raises(InputError, match=r"app\.log: cannot read"):
        RecordedCluster.from_dir(tmp_path)


def test_log_with_invalid_utf8_still_loads(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text('{"kind": "List", "items": []}')
    (tmp_path / "pods.json").write_text('{"kind": "List", "items": []}')
    logs = tmp_path / "logs" / "ns" / "p"
    logs.mkdir(parents=True)
    (logs / "app.log").write_bytes(b"CUDA error \xff\xfe\n")
    rec = RecordedCluster.from_dir(tmp_path)
    assert rec.logs["ns/p/app"].startswith("CUDA error")


def _healthy_copy(tmp_path: Path) -> Path:
    for f in RECORDED.glob("*.json"):
        (tmp_path / f.name).write_text(f.read_text())
    return tmp_path


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"items": [' + "1" * 5000 + "]}", "a number of 5000 digits"),
        ("null", "null, not a Kubernetes object or list"),
        ('{"kind": "PodList", "items": null}', "items is null, not a list"),
        ('{"metadata": {}}', "without kind or items"),
    ],
)
def test_a_pods_file_that_cannot_be_read_as_api_objects_names_the_file(
    tmp_path: Path, text: str, why: str
) -> None:
    (_healthy_copy(tmp_path) / "pods.json").write_text(text)
    with pytest.raises(InputError, match=rf"pods\.json: .*{why}"):
        RecordedCluster.from_dir(tmp_path)


def test_a_recording_without_its_pods_file_is_incomplete(tmp_path: Path) -> None:
    (_healthy_copy(tmp_path) / "pods.json").unlink()
    with pytest.raises(InputError, match=r"pods\.json: missing.*kubectl get pods -A -o json"):
        RecordedCluster.from_dir(tmp_path)


def test_an_empty_pod_list_is_a_cluster_without_pods(tmp_path: Path) -> None:
    (_healthy_copy(tmp_path) / "pods.json").write_text('{"kind": "List", "items": []}')
    assert RecordedCluster.from_dir(tmp_path).list_pods() == []

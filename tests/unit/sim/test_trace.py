"""Trace loading: the schema is read exactly, and a bad row names its file, line and column."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kubegpu.errors import InputError, TraceError
from kubegpu.sim.trace import MAX_CPU_MILLI, MAX_MEMORY_MIB, load_nodes, load_pods, load_trace

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,8000,16384,0,\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time\n"
    "p0,4000,8192,1,500,,LS,Running,0,10,0\n"
    "p1,2000,1024,0,0,,BE,Running,0,,0\n"
    "p2,8000,4096,2,1000,T4|V100M16,LS,Pending,5,,\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_every_column_of_the_default_schema(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "n.csv", NODES), write(tmp_path, "p.csv", PODS))
    assert [n.gpu_count for n in trace.nodes] == [2, 0]
    assert trace.nodes[1].gpu_model == ""
    assert trace.total_gpus == 2
    p0, p1, p2 = trace.pods
    assert (p0.cpu_milli, p0.memory_mib, p0.num_gpu, p0.gpu_milli) == (4000, 8192, 1, 500)
    assert p1.num_gpu == 0 and p1.total_gpu_milli == 0
    assert p2.gpu_spec == ("T4", "V100M16") and p2.total_gpu_milli == 2000


def test_multi_gpu_variant_files_without_gpu_spec_load(tmp_path: Path) -> None:
    pods = load_pods(
        write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,10,4,1000\n")
    )
    assert pods[0].num_gpu == 4 and pods[0].gpu_spec == ()


@pytest.mark.parametrize(
    ("row", "where"),
    [
        ("p9,abc,1,1,500,", "column 'cpu_milli': 'abc' is not an integer"),
        ("p9,1000,1,1,1500,", "column 'gpu_milli': 1500 is out of range"),
        ("p9,1000,-5,1,500,", "column 'memory_mib': -5 is out of range"),
        ("p9,1000,1,0,500,", "column 'gpu_milli': 500 for a pod with num_gpu 0"),
        ("p9,1000,1,2,500,", "column 'gpu_milli': 500; a pod with 2 GPUs takes whole GPUs"),
        ("p9,1000,1,1,0,", "column 'gpu_milli': 0 for a pod with num_gpu 1"),
        (",1000,1,1,500,", "column 'name': empty pod name"),
        ("p9,1000,1,1", "4 fields, the header has 6"),
    ],
)
def test_bad_pod_row_names_file_line_and_column(tmp_path: Path, row: str, where: str) -> None:
    text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\nok,1000,1,1,500,\n" + row + "\n"
    path = write(tmp_path, "pods.csv", text)
    with pytest.raises(TraceError) as info:
        load_pods(path)
    assert f"{path}:3: {where}" in str(info.value)
    assert isinstance(info.value, InputError)  # exit code 2 on the command line


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("sn,cpu_milli,memory_mib,gpu\nn0,1,1,1\n", ":1: missing column 'model'"),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,\n",
            ":2: column 'model': empty, but the node has 1 GPUs",
        ),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,99,T4\n", ":2: column 'gpu': 99 is out of range"),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,T4\nn0,1,1,1,T4\n",
            ":3: column 'sn': node 'n0' already",
        ),
        ("", ": empty file"),
        ("sn,cpu_milli,memory_mib,gpu,model\n", ": no nodes"),
    ],
)
def test_bad_node_file_is_rejected_with_its_location(tmp_path: Path, text: str, fragment: str) -> None:
    path = write(tmp_path, "nodes.csv", text)
    with pytest.raises(TraceError) as info:
        load_nodes(path)
    assert f"{path}{fragment}" in str(info.value)


@pytest.mark.parametrize(
    ("name", "text", "loader"),
    [
        ("pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,name\np0,1000,1000,1,1000,x\n", load_pods),
        ("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model,gpu\nn0,1,1,1,T4,2\n", load_nodes),
    ],
)
def test_a_column_named_twice_is_refused(
    tmp_path: Path, name: str, text: str, loader: Callable[[Path], object]
) -> None:
    # which of the two a row means would be a guess: the fast loader took the first, csv the last
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError, match=r":1: column '(name|gpu)' appears twice in the header"):
        loader(path)


def test_missing_file_is_an_input_error_not_a_traceback(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_pods(tmp_path / "absent.csv")


def test_cluster_without_gpus_is_rejected(tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,10,0,\n")
    with pytest.raises(TraceError, match="no GPUs"):
        load_trace(nodes, write(tmp_path, "p.csv", PODS))


HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


@pytest.mark.parametrize(
    ("row", "where"),
    [
        ("p9,1_000,1,1,500,", "column 'cpu_milli': '1_000' is not an integer"),
        ("p9,\u0661\u0662\u0663,1,1,500,", "column 'cpu_milli': '\u0661\u0662\u0663' is not an integer"),
        ("p9,+5,1,1,500,", "column 'cpu_milli': '+5' is not an integer"),
        ("p9,1000,1,1,5_0,", "column 'gpu_milli': '5_0' is not an integer"),
        (
            "p9,1" + "0" * 400 + ",1,1,500,",
            "column 'cpu_milli': 10000000000000000000... (401 characters) is above the limit",
        ),
        ("p9,9223372036854775808,1,1,500,", "column 'cpu_milli': 9223372036854775808 is above the limit of"),
        ("p9,1000,1099511627777,1,500,", "column 'memory_mib': 1099511627777 is above the limit of 1,099,"),
        (
            "p9,1000,1,1" + "0" * 5000 + ",1000,",
            "column 'num_gpu': 10000000000000000000... (5001 characters) is out of range (0..16)",
        ),
    ],
)
def test_pod_integers_are_plain_ascii_and_below_the_limits(tmp_path: Path, row: str, where: str) -> None:
    path = write(tmp_path, "pods.csv", HEADER + "ok,1000,1,1,500,\n" + row + "\n")
    with pytest.raises(TraceError) as info:
        load_pods(path)
    assert f"{path}:3: {where}" in str(info.value)
    assert len(str(info.value)) < 200  # a huge cell is cut short in the message


@pytest.mark.parametrize(
    ("row", "where"),
    [
        ("n0,9223372036854775807,1,1,T4", "column 'cpu_milli': 9223372036854775807 is above the limit"),
        ("n0,1000,9223372036854775808,1,T4", "column 'memory_mib': 9223372036854775808 is above the limit"),
        ("n0,1_000,1,1,T4", "column 'cpu_milli': '1_000' is not an integer"),
        ("n0,1000,1,\u0968,T4", "column 'gpu': '\u0968' is not an integer"),
    ],
)
def test_node_integers_are_plain_ascii_and_below_the_limits(tmp_path: Path, row: str, where: str) -> None:
    path = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n" + row + "\n")
    with pytest.raises(TraceError) as info:
        load_nodes(path)
    assert f"{path}:2: {where}" in str(info.value)


def test_values_at_the_limits_load(tmp_path: Path) -> None:
    pods = load_pods(write(tmp_path, "p.csv", HEADER + f"a,{MAX_CPU_MILLI},{MAX_MEMORY_MIB},1,500,\n"))
    assert (pods[0].cpu_milli, pods[0].memory_mib) == (MAX_CPU_MILLI, MAX_MEMORY_MIB)
    nodes = load_nodes(
        write(
            tmp_path,
            "n.csv",
            f"sn,cpu_milli,memory_mib,gpu,model\nn0,{MAX_CPU_MILLI},{MAX_MEMORY_MIB},1,T4\n",
        )
    )
    assert nodes[0].cpu_milli == MAX_CPU_MILLI

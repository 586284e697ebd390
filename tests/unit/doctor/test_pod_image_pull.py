"""pod.image-pull: a GPU pod stuck in ContainerCreating while its node pulls a large image gets the
pre-pull chart option as its fix, with the image named; the clock is injected."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubegpu.doctor import RecordedCluster, Status, pod_report
from kubegpu.doctor.chain import Finding
from tests.unit.doctor.apiobjects import event, gpu_container, running_pod

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
PULL_STARTED = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def creating_pod(cluster: RecordedCluster, *, gpus: int = 1) -> None:
    p = running_pod(
        "ml", "big", [gpu_container("trainer", gpus=gpus, image=IMAGE)], waiting="ContainerCreating"
    )
    p["status"]["phase"] = "Pending"
    if gpus == 0:
        p["spec"]["containers"][0]["resources"] = {}
    cluster.pods.append(p)


def pulling(cluster: RecordedCluster, image: str = IMAGE) -> None:
    e = event("ml", "Pod", "big", "Pulling", f'Pulling image "{image}"', type_="Normal")
    e["firstTimestamp"] = e["lastTimestamp"] = PULL_STARTED.isoformat().replace("+00:00", "Z")
    cluster.events.append(e)


def finding(cluster: RecordedCluster, after: timedelta) -> Finding:
    report = pod_report(lambda: cluster, "ml", "big", now=lambda: PULL_STARTED + after)
    return report.by_id("pod.image-pull")


def test_a_gpu_pod_pulling_for_minutes_is_told_to_pre_pull_the_image(cluster: RecordedCluster) -> None:
    creating_pod(cluster)
    pulling(cluster)
    f = finding(cluster, timedelta(minutes=7))
    assert f.status is Status.WARN
    assert IMAGE in f.summary and "7 min" in f.summary
    assert f"prepull.images={{{IMAGE}}}" in f.fix


def test_a_short_pull_is_fine(cluster: RecordedCluster) -> None:
    creating_pod(cluster)
    pulling(cluster)
    f = finding(cluster, timedelta(seconds=30))
    assert f.status is Status.OK and "under 2 min" in f.summary


def test_a_finished_pull_is_not_reported(cluster: RecordedCluster) -> None:
    creating_pod(cluster)
    pulling(cluster)
    done = event(
        "ml", "Pod", "big", "Pulled", f'Successfully pulled image "{IMAGE}" in 6m2.1s', type_="Normal"
    )
    cluster.events.append(done)
    assert finding(cluster, timedelta(minutes=7)).status is Status.OK


def test_a_pod_without_a_gpu_request_is_skipped(cluster: RecordedCluster) -> None:
    creating_pod(cluster, gpus=0)
    pulling(cluster)
    assert finding(cluster, timedelta(minutes=7)).status is Status.SKIP


def test_a_running_gpu_pod_has_nothing_to_report(cluster: RecordedCluster) -> None:
    report = pod_report(lambda: cluster, "ml", "train-a", now=lambda: PULL_STARTED + timedelta(hours=1))
    assert report.by_id("pod.image-pull").status is Status.OK

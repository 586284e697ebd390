"""A pod list page decoded for placement only (``extender.podpage``) gives exactly the facts the
standard reading of whole objects gives, hostile pods included: the schema only skips what placement
never reads, and a pod it cannot take is read whole, alone."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from kubegpu.extender import podpage
from kubegpu.extender.podfacts import facts_of
from tests.unit.extender.test_fuzz import hostile_pod


def page(items: list[Any], **meta: str) -> bytes:
    return json.dumps({"kind": "PodList", "metadata": meta, "items": items}).encode()


def realistic(pod: Any, rng: random.Random) -> Any:
    """``pod`` with the fields placement never reads, as the API server sends them; some fields it
    reads absent or null."""
    if isinstance(pod, dict) and rng.random() < 0.3:
        where, key = rng.choice(
            [("metadata", "namespace"), ("metadata", "name"), ("metadata", "annotations"),
             ("spec", "nodeName"), ("spec", "containers"), ("status", "phase"), (None, "status"),
             (None, "spec")]
        )  # fmt: skip
        holder = pod if where is None else pod.get(where)
        if isinstance(holder, dict):
            if rng.random() < 0.5:
                holder.pop(key, None)
            else:
                holder[key] = None
    if isinstance(pod, dict) and isinstance(pod.get("metadata"), dict) and isinstance(pod.get("spec"), dict):
        pod["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {"f:x": {}}}}]
        pod["spec"]["volumes"] = [{"name": "v", "configMap": {"name": "c"}}]
        if isinstance(pod["spec"].get("containers"), list):
            for c in pod["spec"]["containers"]:
                if isinstance(c, dict):
                    c["env"] = [{"name": "A", "value": "b"}]
    return pod


def test_the_fast_reading_gives_the_standard_readings_facts_for_hostile_pods() -> None:
    rng = random.Random(57)
    for round_ in range(40):
        items = [realistic(hostile_pod(rng, round_ * 100 + k), rng) for k in range(25)]
        raw = page(items, resourceVersion="9", **({"continue": "tok"} if round_ % 2 else {}))
        fast, version, token = podpage.pod_page(raw)
        assert fast == [facts_of(i) for i in items if isinstance(i, dict)]
        assert version == "9" and token == ("tok" if round_ % 2 else "")


def test_an_odd_list_falls_back_to_the_standard_reading() -> None:
    assert podpage.pod_page(b'{"items": "nope"}') == ([], "", "")
    assert podpage.pod_page(b'{"metadata": {"resourceVersion": 7}, "items": []}') == ([], "7", "")
    with pytest.raises(ValueError):
        podpage.pod_page(b"not json")

"""The MIG manager on the rig (issue 17): relabel a simulated ``h100-mig-mixed`` node and watch what a user
sees with kubectl: the ``nvidia.com/mig.config.state`` label, the Node events, allocatable, the GFD
labels, and pods.

1. ``nvidia.com/mig.config=all-1g.10gb`` -> ``success``, 7 x ``nvidia.com/mig-1g.10gb`` per GPU (both
   H100s are MIG-capable: 14), the old MIG resources and ``nvidia.com/gpu`` at 0 allocatable, and a
   pod asking for one runs. The time from relabel to the new allocatable is printed (docs/mig.md).
2. An invalid named config -> ``failed``, the reason in a Warning event, the old layout still served.
3. A pod holding a MIG device of a GPU the config changes, no drain: ``pending`` while it runs, the
   change applied once it is deleted.

The agent runs as a host process with ``--node-name`` and the rig's admin kubeconfig (as in
test_node_hygiene.py) and ``kubegpu.migManager`` on in its config file.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import AgentProcess, Cluster, in_ns, pod, say, wait_until
from tests.e2e.rig.rig import NODE_NAME, Rig

pytestmark = pytest.mark.e2e

SPEC = "builtin:h100-mig-mixed"  # GPU 0: 3g.40gb + 2g.20gb + 2 x 1g.10gb; GPU 1 whole
CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
ONE_G = "nvidia.com/mig-1g.10gb"
OLD = ("nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb", "nvidia.com/gpu")
StartAgent = Callable[..., AgentProcess]
MIG_FILE = """version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  four-2g:
    - devices: all
      mig-enabled: true
      mig-devices: {"2g.20gb": 4}
"""


def agent_config(tmp_path: Path, mig_file: str = "builtin:mig-parted-default") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        "version: v1\nflags: {migStrategy: mixed}\n"
        f"kubegpu:\n  migManager: {{enabled: true, configFile: '{mig_file}', recheckSeconds: 0.5}}\n"
    )
    return path


def start(rig: Rig, start_agent: StartAgent, config: Path) -> AgentProcess:
    return start_agent(
        SPEC, config=config, extra_args=["--node-name", NODE_NAME, "--kubeconfig", str(rig.paths.kubeconfig)]
    )


def clear_labels(rig: Rig) -> None:
    rig.kubectl("label", "node", NODE_NAME, f"{CONFIG_LABEL}-", f"{STATE_LABEL}-", check=False)


@pytest.fixture(autouse=True)
def no_mig_labels(rig: Rig) -> Iterator[None]:
    clear_labels(rig)
    yield
    clear_labels(rig)


def relabel(rig: Rig, value: str) -> float:
    rig.kubectl("label", "node", NODE_NAME, "--overwrite", f"{CONFIG_LABEL}={value}")
    return time.monotonic()


def labels(cluster: Cluster) -> dict[str, str]:
    out: dict[str, str] = cluster.get("node", NODE_NAME)["metadata"].get("labels", {})
    return out


def alloc(cluster: Cluster) -> dict[str, str]:
    return cluster.node_resources()[1]


def zero_or_absent(allocatable: dict[str, str], resource: str) -> bool:
    return allocatable.get(resource, "0") == "0"


def now_utc() -> str:
    """Event timestamps' format (second precision), one second back: events of this test only."""
    return (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_events(cluster: Cluster, reason: str, since: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.events("default", NODE_NAME)
        if e.get("reason") == reason and str(e.get("lastTimestamp") or e.get("eventTime") or "") >= since
    ]


def wait_spec_layout(cluster: Cluster) -> None:
    cluster.wait_resource("nvidia.com/mig-3g.40gb", allocatable=1)
    cluster.wait_resource(ONE_G, allocatable=2)
    cluster.wait_resource("nvidia.com/gpu", allocatable=1)


def test_relabel_to_all_1g_10gb_repartitions_and_a_pod_gets_a_new_slice(
    rig: Rig, cluster: Cluster, start_agent: StartAgent, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    start(rig, start_agent, agent_config(tmp_path))
    wait_spec_layout(cluster)
    assert labels(cluster).get("nvidia.com/mig-3g.40gb.count") == "1"
    since = now_utc()
    t0 = relabel(rig, "all-1g.10gb")
    seen: dict[str, float] = {}

    def progress() -> dict[str, float]:
        now = time.monotonic() - t0
        if labels(cluster).get(STATE_LABEL) == "success":
            seen.setdefault("state success", now)
        a = alloc(cluster)
        if a.get(ONE_G) == "14":
            seen.setdefault("allocatable 14 x 1g.10gb", now)
        if all(zero_or_absent(a, r) for r in OLD):
            seen.setdefault("old resources 0", now)
        return seen

    wait_until(
        "state success and the new allocatable", progress, 60, accept=lambda s: len(s) == 3, interval_s=0.1
    )
    say(request.config, "[e2e] relabel -> " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(seen.items())))
    a = alloc(cluster)
    assert a[ONE_G] == "14" and all(zero_or_absent(a, r) for r in OLD), a
    wait_until(
        "GFD labels of the new layout",
        lambda: labels(cluster),
        30,
        accept=lambda ls: (
            ls.get("nvidia.com/mig-1g.10gb.count") == "14" and "nvidia.com/mig-3g.40gb.count" not in ls
        ),
    )
    applied = wait_until(
        "a MigConfigApplied event", lambda: node_events(cluster, "MigConfigApplied", since), 30
    )
    assert "all-1g.10gb" in applied[0]["message"] and applied[0]["type"] == "Normal"
    cap = cluster.node_resources()[0]
    say(
        request.config,
        "[e2e] event: "
        + applied[0]["message"][-40:]
        + "; old resources capacity/allocatable: "
        + ", ".join(f"{r} {cap.get(r, '-')}/{a.get(r, '-')}" for r in OLD),
    )

    ns = cluster.namespace("mig")
    cluster.apply(in_ns(pod("slice", resources={ONE_G: 1}), ns))
    cluster.wait_running(ns, "slice")
    visible = cluster.env(ns, "slice")["NVIDIA_VISIBLE_DEVICES"]
    assert visible.startswith("MIG-") and "," not in visible


def test_an_invalid_config_fails_with_the_reason_and_keeps_the_old_layout(
    rig: Rig, cluster: Cluster, start_agent: StartAgent, tmp_path: Path
) -> None:
    mig_file = tmp_path / "mig-parted.yaml"
    mig_file.write_text(MIG_FILE)
    start(rig, start_agent, agent_config(tmp_path, str(mig_file)))
    wait_spec_layout(cluster)
    since = now_utc()
    relabel(rig, "four-2g")
    wait_until("state failed", lambda: labels(cluster).get(STATE_LABEL), 30, accept=lambda s: s == "failed")
    failed = wait_until("a MigConfigFailed event", lambda: node_events(cluster, "MigConfigFailed", since), 30)
    assert failed[0]["type"] == "Warning"
    assert "four-2g" in failed[0]["message"] and "at most 3" in failed[0]["message"], failed[0]["message"]
    time.sleep(2)  # nothing is applied later either
    a = alloc(cluster)
    assert (a.get("nvidia.com/mig-3g.40gb"), a.get(ONE_G), a.get("nvidia.com/gpu")) == ("1", "2", "1"), a
    assert labels(cluster).get(STATE_LABEL) == "failed"


def test_a_pod_on_an_affected_gpu_holds_the_change_pending_until_it_ends(
    rig: Rig, cluster: Cluster, start_agent: StartAgent, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    start(rig, start_agent, agent_config(tmp_path))
    wait_spec_layout(cluster)
    ns = cluster.namespace("mig")
    cluster.apply(in_ns(pod("holder", resources={ONE_G: 1}), ns))
    cluster.wait_running(ns, "holder")
    since = now_utc()
    relabel(rig, "all-1g.10gb")
    wait_until("state pending", lambda: labels(cluster).get(STATE_LABEL), 30, accept=lambda s: s == "pending")
    pending = wait_until(
        "a MigConfigPending event", lambda: node_events(cluster, "MigConfigPending", since), 30
    )
    assert f"{ns}/holder" in pending[0]["message"], pending[0]["message"]
    time.sleep(3)  # it waits: no drain
    assert labels(cluster).get(STATE_LABEL) == "pending"
    assert alloc(cluster).get("nvidia.com/mig-3g.40gb") == "1"
    assert cluster.pod_phase(ns, "holder") == "Running"

    t0 = time.monotonic()
    rig.kubectl("delete", "pod", "-n", ns, "holder", "--wait=true", "--timeout=60s", timeout_s=90)
    wait_until("state success", lambda: labels(cluster).get(STATE_LABEL), 60, accept=lambda s: s == "success")
    cluster.wait_resource(ONE_G, allocatable=14)
    say(
        request.config,
        f"[e2e] pod deleted -> state success and 14 x 1g.10gb in {time.monotonic() - t0:.2f} s",
    )
    a = alloc(cluster)
    assert all(zero_or_absent(a, r) for r in OLD), a

"""Property: the agent's answers keep its invariants under concurrent calls, faults and reloads.

Many threads call the real agent's socket directly (no kubelet double in between, so no lock of the
double orders or filters anything) with random GetPreferredAllocation and Allocate requests drawn from
the IDs the double last received from ListAndWatch, while GPUs fail and recover through
``--fault-file`` and SIGHUP reloads alternate between a config that keeps ``nvidia.com/gpu`` as it is
(the server and socket are kept, only ``deviceIDStrategy`` changes) and one that changes its devices
(whole GPUs <-> replicas, a new server on a new socket). Every answer is checked by
``preferred_problems`` / ``allocate_problems``:

* GetPreferredAllocation: answer ⊆ available, ⊆ advertised, must-include ⊆ answer, no ID twice, never
  more than ``allocation_size``, exactly that many when enough surely-healthy IDs were offered, and no
  device of a GPU that is unhealthy for the whole batch unless it is must-include;
* Allocate: one container answer whose ``NVIDIA_VISIBLE_DEVICES`` names exactly the GPUs behind the
  IDs, once each, in the form of a ``deviceIDStrategy`` in force;
* refusals are only the documented ones, and each only where it applies: ``INVALID_ARGUMENT`` exactly
  when the request names an ID that server does not advertise (one from another config), Allocate's
  ``FAILED_PRECONDITION`` only for devices of GPUs that are (or may be) unhealthy, and required for a
  GPU unhealthy throughout; ``UNAVAILABLE``/``CANCELLED`` only from a server the reload replaced.
  Anything else (``UNKNOWN``, ``INTERNAL``, a deadline) is a failure.

``test_the_invariant_checkers_catch_bad_answers`` feeds the checkers wrong answers, so the property
cannot pass just because the checkers see nothing.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc
from kubegpu.sources.spec import load_node
from tests.integration.conftest import AgentProcess
from tests.integration.helpers import allocate, messages, plugin_stub
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
UUIDS = [g.uuid for g in sorted(load_node("builtin:seed-8gpu").gpus, key=lambda g: g.index)]
INDEX_OF_UUID = {u: i for i, u in enumerate(UUIDS)}
OK = "OK"
REPLACED_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}


@dataclass(frozen=True)
class Config:
    name: str
    replicas: int | None  # None: whole GPUs
    strategy: str  # deviceIDStrategy

    @property
    def text(self) -> str:
        text = f"version: v1\nflags:\n  plugin:\n    deviceIDStrategy: {self.strategy}\n"
        if self.replicas is not None:
            text += (
                "sharing:\n  timeSlicing:\n    resources:\n"
                f"    - name: {GPU}\n      replicas: {self.replicas}\n"
            )
        return text

    @property
    def ids(self) -> frozenset[str]:
        if self.replicas is None:
            return frozenset(UUIDS)
        return frozenset(f"{u}::{i}" for u in UUIDS for i in range(self.replicas))


# Each step alternates: same devices (kept server, new strategy), then other devices (new server).
CYCLE = [
    Config("replicas-2/uuid", 2, "uuid"),
    Config("replicas-2/index", 2, "index"),
    Config("whole/index", None, "index"),
    Config("whole/uuid", None, "uuid"),
    Config("replicas-3/uuid", 3, "uuid"),
    Config("replicas-3/index", 3, "index"),
]
ALL_IDS = frozenset().union(*(c.ids for c in CYCLE))


def gpu_of(device_id: str) -> int:
    """The GPU index behind a whole-GPU or replica ID; -1 for an ID of no GPU of the node."""
    return INDEX_OF_UUID.get(device_id.split("::", maxsplit=1)[0], -1)


def visible_form(gpus: set[int], strategy: str) -> set[str]:
    return {UUIDS[g] if strategy == "uuid" else str(g) for g in gpus}


# -- the invariants, as pure functions ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Served:
    """What was true of the server a request went to, for the whole batch it was part of."""

    ids: frozenset[str]  # every ID that server advertises
    replaced: bool  # the reload replaced that server (its socket is gone afterwards)
    held: frozenset[int]  # GPUs unhealthy from before the batch until after it
    flapping: frozenset[int]  # GPUs that failed and recovered during the batch
    strategies: frozenset[str]  # deviceIDStrategy values in force at some point of the batch


Outcome = list[str] | pb.AllocateResponse | grpc.StatusCode


def _refusal_problems(
    served: Served, outcome: grpc.StatusCode, *, expected: set[grpc.StatusCode], allowed: set[grpc.StatusCode]
) -> list[str]:
    ok_codes = expected | allowed | (REPLACED_CODES if served.replaced else set())
    if outcome not in ok_codes:
        return [f"refused with {outcome.name}; allowed here: {sorted(c.name for c in ok_codes) or 'none'}"]
    return []


def preferred_problems(
    served: Served, available: list[str], must: list[str], size: int, outcome: Outcome
) -> list[str]:
    """Every way ``outcome`` breaks the agent's GetPreferredAllocation contract (empty: none)."""
    stale = [i for i in (*available, *must) if i not in served.ids]
    if isinstance(outcome, grpc.StatusCode):
        expected = {grpc.StatusCode.INVALID_ARGUMENT} if stale else set()
        return _refusal_problems(served, outcome, expected=expected, allowed=set())
    if isinstance(outcome, pb.AllocateResponse):
        return ["an Allocate answer to GetPreferredAllocation"]
    answer = outcome
    problems: list[str] = []
    if stale:
        problems.append(f"answered although {stale[0]} is not advertised (INVALID_ARGUMENT expected)")
    if len(answer) != len(set(answer)):
        problems.append(f"an ID twice in one answer: {answer}")
    if not set(answer) <= set(available):
        problems.append(f"IDs not in available: {sorted(set(answer) - set(available))}")
    if not set(answer) <= served.ids:
        problems.append(f"IDs the plugin never advertised: {sorted(set(answer) - served.ids)}")
    if not set(must) <= set(answer):
        problems.append(f"must-include IDs dropped: {sorted(set(must) - set(answer))}")
    if len(answer) > max(size, len(set(must))):
        problems.append(f"{len(answer)} IDs for allocation_size {size}")
    maybe_unhealthy = served.held | served.flapping
    surely_usable = set(must) | {i for i in available if gpu_of(i) not in maybe_unhealthy}
    if len(surely_usable) >= size and len(answer) != size:
        problems.append(f"{len(answer)} IDs although {len(surely_usable)} usable for allocation_size {size}")
    held_given = [i for i in answer if gpu_of(i) in served.held and i not in must]
    if held_given:
        problems.append(f"devices of an unhealthy GPU preferred: {held_given}")
    return problems


def allocate_problems(served: Served, ids: list[str], outcome: Outcome) -> list[str]:
    """Every way ``outcome`` breaks the agent's Allocate contract (empty: none)."""
    stale = [i for i in ids if i not in served.ids]
    gpus = {gpu_of(i) for i in ids}
    if stale:
        expected, allowed = {grpc.StatusCode.INVALID_ARGUMENT}, set()
    elif gpus & served.held:
        expected, allowed = {grpc.StatusCode.FAILED_PRECONDITION}, set()
    elif gpus & served.flapping:
        expected, allowed = set(), {grpc.StatusCode.FAILED_PRECONDITION}
    else:
        expected, allowed = set(), set()
    if isinstance(outcome, grpc.StatusCode):
        return _refusal_problems(served, outcome, expected=expected, allowed=allowed)
    if not isinstance(outcome, pb.AllocateResponse):
        return ["a GetPreferredAllocation answer to Allocate"]
    problems: list[str] = []
    if expected:
        problems.append(f"answered although {sorted(c.name for c in expected)} was due")
    if len(outcome.container_responses) != 1:
        return [*problems, f"{len(outcome.container_responses)} container answers for one request"]
    value = outcome.container_responses[0].envs.get("NVIDIA_VISIBLE_DEVICES", "")
    named = value.split(",")
    if len(named) != len(set(named)):
        problems.append(f"NVIDIA_VISIBLE_DEVICES names a GPU twice: {value!r}")
    if not any(set(named) == visible_form(gpus, s) for s in served.strategies):
        problems.append(
            f"NVIDIA_VISIBLE_DEVICES={value!r} is not GPUs {sorted(gpus)} in {sorted(served.strategies)}"
        )
    return problems


# -- the agent and the batch ---------------------------------------------------------------------------


@dataclass
class Node:
    kubelet: KubeletDouble
    agent: AgentProcess
    config_file: Path
    faults: Path
    step: int = 0
    paths: dict[str, int] = field(default_factory=lambda: {"kept": 0, "new": 0})
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def config(self) -> Config:
        return CYCLE[self.step % len(CYCLE)]

    def fault(self, gpu: int, **what: object) -> None:
        with self.faults.open("a") as f:
            f.write(json.dumps({"gpu": gpu, **what}) + "\n")

    def current(self) -> tuple[Path, frozenset[str]] | None:
        """The socket kubelet knows for ``nvidia.com/gpu`` and the IDs it last listed there."""
        endpoint = self.kubelet.endpoints.get(GPU)
        if endpoint is None or endpoint.socket is None or endpoint.stopped_at is not None:
            return None
        ids = frozenset(endpoint.devices)
        return (endpoint.socket, ids) if ids else None

    def settled(self, config: Config, healthy: int) -> bool:
        now = self.current()
        return now is not None and now[1] == config.ids and self.kubelet.allocatable(GPU) == healthy


@pytest.fixture
def node(kubelet: KubeletDouble, plugin_dir: Path, start_agent) -> Iterator[Node]:
    config_file = plugin_dir.parent / f"{plugin_dir.name}-invariants.yaml"
    faults = plugin_dir.parent / f"{plugin_dir.name}-invariants-faults.jsonl"
    config_file.write_text(CYCLE[0].text)
    faults.write_text("")
    agent = start_agent(
        "--node-spec", "builtin:seed-8gpu", "--config", str(config_file), "--fault-file", str(faults)
    )
    state = Node(kubelet=kubelet, agent=agent, config_file=config_file, faults=faults)
    assert kubelet.wait_for(lambda: state.settled(CYCLE[0], len(CYCLE[0].ids)), 20), agent.log
    yield state
    config_file.unlink(missing_ok=True)
    faults.unlink(missing_ok=True)


@dataclass(frozen=True)
class Call:
    kind: str  # "preferred" | "allocate"
    seed: int
    stale: bool  # name one ID from another config, which this server does not advertise


@dataclass
class Record:
    call: Call
    socket: Path
    ids: frozenset[str]
    available: list[str]
    must: list[str]
    size: int
    outcome: Outcome


def _draw(call: Call, ids: frozenset[str]) -> tuple[list[str], list[str], int]:
    """(available or allocate IDs, must-include, allocation_size) for ``call`` from the listed ``ids``."""
    rng = random.Random(call.seed)
    listed = sorted(ids)
    foreign = sorted(ALL_IDS - ids)
    if call.kind == "allocate":
        chosen = rng.sample(listed, rng.randint(1, min(4, len(listed))))
        if call.stale:
            chosen[rng.randrange(len(chosen))] = rng.choice(foreign)
        return chosen, [], len(chosen)
    available = rng.sample(listed, rng.randint(1, len(listed)))
    size = rng.randint(1, len(available))
    must = rng.sample(available, rng.randint(0, min(size, 3)))
    if call.stale:
        available[rng.randrange(len(available))] = rng.choice(foreign)
    return available, must, size


def _send(
    stub: pb_grpc.DevicePluginStub, call: Call, available: list[str], must: list[str], size: int
) -> Outcome:
    try:
        if call.kind == "allocate":
            request = pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=available)]
            )
            return stub.Allocate(request, timeout=20)
        preferred = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
                )
            ]
        )
        return list(stub.GetPreferredAllocation(preferred, timeout=20).container_responses[0].deviceIDs)
    except grpc.RpcError as exc:
        return exc.code()


def _run_batch(node: Node, calls: list[Call], held: int, flapping: set[int], threads: int) -> None:
    before, after = node.config, CYCLE[(node.step + 1) % len(CYCLE)]
    kept = before.ids == after.ids
    reloads = messages(node.agent.log).count("config reloaded")
    start = node.kubelet.wait_for(lambda: node.settled(before, len(before.ids)), 10) and node.current()
    assert start, node.agent.log
    healthy_outside_held = len(before.ids) - len(before.ids) // len(UUIDS)
    node.fault(held, healthy=False)
    assert node.kubelet.wait_for(lambda: node.kubelet.allocatable(GPU) == healthy_outside_held, 10)

    records: list[Record] = []
    lock = threading.Lock()
    done = threading.Event()

    def work(mine: list[Call]) -> None:
        channels: dict[Path, tuple[grpc.Channel, pb_grpc.DevicePluginStub]] = {}
        try:
            for passes in range(200):
                if passes and done.is_set():
                    return
                for call in mine:
                    now = node.current()
                    while now is None:  # between a registration and the first ListAndWatch message
                        time.sleep(0.005)
                        now = node.current()
                    socket, ids = now
                    if socket not in channels:
                        channel = grpc.insecure_channel(f"unix://{socket}")
                        channels[socket] = (channel, pb_grpc.DevicePluginStub(channel))
                    available, must, size = _draw(call, ids)
                    outcome = _send(channels[socket][1], call, available, must, size)
                    with lock:
                        records.append(Record(call, socket, ids, available, must, size, outcome))
        finally:
            for channel, _ in channels.values():
                channel.close()

    workers = [threading.Thread(target=work, args=(calls[i::threads],)) for i in range(threads)]
    for w in workers:
        w.start()
    try:
        for g in flapping:
            node.fault(g, xid=79)
        # Replaced atomically, as kubelet updates a mounted ConfigMap (the agent also watches the file).
        staged = node.config_file.with_suffix(".next")
        staged.write_text(after.text)
        staged.replace(node.config_file)
        os.kill(node.agent.proc.pid, signal.SIGHUP)
        time.sleep(0.05)
        for g in flapping:
            node.fault(g, healthy=True)
        reloaded = node.kubelet.wait_for(
            lambda: (
                # >=: the agent also reloads by itself when it sees the file change (ConfigMap
                # updates); that second reload finds the same config and keeps every server.
                messages(node.agent.log).count("config reloaded") >= reloads + 1
                and node.settled(after, len(after.ids) - len(after.ids) // len(UUIDS))
            ),
            20,
        )
    finally:
        done.set()
        for w in workers:
            w.join(60)
    assert reloaded, node.agent.log
    node.step += 1
    final = node.current()
    assert final is not None
    # the reload took the path its config calls for
    assert (final[0] == start[0]) is kept, (start, final)
    node.paths["kept" if kept else "new"] += 1

    node.fault(held, healthy=True)
    assert node.kubelet.wait_for(lambda: node.settled(after, len(after.ids)), 10), node.agent.log
    # once the reload is done, calls answer with the new config, on a kept server too
    channel, stub = plugin_stub(final[0])
    with channel:
        one = sorted(after.ids)[0]
        assert (
            allocate(stub, [one]).envs["NVIDIA_VISIBLE_DEVICES"]
            == visible_form({gpu_of(one)}, after.strategy).pop()
        )

    problems: list[str] = []
    for r in records:
        served = Served(
            ids=r.ids,
            replaced=r.socket != final[0],
            held=frozenset({held}),
            flapping=frozenset(flapping),
            strategies=frozenset({before.strategy, after.strategy}),
        )
        if r.call.kind == "allocate":
            found = allocate_problems(served, r.available, r.outcome)
        else:
            found = preferred_problems(served, r.available, r.must, r.size, r.outcome)
        problems += [f"{r.call.kind} {r.available} must={r.must} size={r.size}: {p}" for p in found]
        key = f"{r.call.kind}:{r.outcome.name if isinstance(r.outcome, grpc.StatusCode) else OK}"
        node.outcomes[key] = node.outcomes.get(key, 0) + 1
    assert not problems, "\n".join(list(dict.fromkeys(problems))[:20])


def test_every_answer_keeps_the_agents_invariants_under_concurrent_calls_faults_and_reloads(
    node: Node,
) -> None:
    @settings(max_examples=8, deadline=None, database=None)
    @given(
        calls=st.lists(
            st.builds(
                Call,
                kind=st.sampled_from(["preferred", "allocate"]),
                seed=st.integers(0, 2**32 - 1),
                stale=st.sampled_from([False, False, False, True]),
            ),
            min_size=8,
            max_size=24,
        ),
        held=st.integers(0, 7),
        flapping=st.sets(st.integers(0, 7), max_size=2),
    )
    def batch(calls: list[Call], held: int, flapping: set[int]) -> None:
        _run_batch(node, calls, held, flapping - {held}, threads=8)

    batch()

    # both reload paths ran, and every kind of answer the checkers judge occurred
    assert node.paths["kept"] > 0 and node.paths["new"] > 0, node.paths
    for key in (
        "preferred:OK",
        "allocate:OK",
        "preferred:INVALID_ARGUMENT",
        "allocate:INVALID_ARGUMENT",
        "allocate:FAILED_PRECONDITION",
    ):
        assert node.outcomes.get(key, 0) > 0, (key, node.outcomes)


# -- the checkers themselves ---------------------------------------------------------------------------

SERVED = Served(
    ids=CYCLE[0].ids,
    replaced=False,
    held=frozenset({7}),
    flapping=frozenset({6}),
    strategies=frozenset({"uuid"}),
)
A, B, C = (f"{UUIDS[g]}::0" for g in (0, 1, 2))


def _allocated(value: str, containers: int = 1) -> pb.AllocateResponse:
    return pb.AllocateResponse(
        container_responses=[pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": value})]
        * containers
    )


def test_the_invariant_checkers_catch_bad_answers() -> None:
    foreign = f"{UUIDS[0]}::2"  # a replicas-3 ID, not advertised by a replicas-2 server
    held_id = f"{UUIDS[7]}::0"
    # good answers pass
    assert preferred_problems(SERVED, [A, B, C], [B], 2, [B, A]) == []
    assert allocate_problems(SERVED, [A, f"{UUIDS[0]}::1"], _allocated(UUIDS[0])) == []
    assert preferred_problems(SERVED, [A, foreign], [], 1, grpc.StatusCode.INVALID_ARGUMENT) == []
    assert allocate_problems(SERVED, [held_id], grpc.StatusCode.FAILED_PRECONDITION) == []
    # each broken invariant is reported
    other = f"{UUIDS[3]}::0"  # advertised, but not offered
    bad_preferred = {
        "not in available": ([A, B, C], [B, other]),
        "twice": ([A, B, C], [B, B]),
        "never advertised": ([A, B, "GPU-x::0"], [B, "GPU-x::0"]),
        "must-include": ([A, B, C], [A, C]),
        "IDs for allocation_size": ([A, B, C], [B, A, C]),
        "usable for allocation_size": ([A, B, C], [B]),
    }
    for why, (available, answer) in bad_preferred.items():
        found = preferred_problems(SERVED, available, [B], 2, answer)
        assert any(why in p for p in found), (why, found)
    assert preferred_problems(SERVED, [A, held_id], [], 2, [A, held_id])  # an unhealthy GPU preferred
    assert preferred_problems(SERVED, [A, foreign], [], 1, [A])  # answered a stale request
    assert preferred_problems(SERVED, [A], [], 1, grpc.StatusCode.UNKNOWN)
    assert preferred_problems(SERVED, [A], [], 1, grpc.StatusCode.INTERNAL)
    assert preferred_problems(SERVED, [A], [], 1, grpc.StatusCode.UNAVAILABLE)  # the server was not replaced
    assert preferred_problems(SERVED, [A, foreign], [], 1, grpc.StatusCode.FAILED_PRECONDITION)
    assert allocate_problems(SERVED, [A, B], _allocated(UUIDS[0]))  # a GPU missing
    assert allocate_problems(SERVED, [A], _allocated(f"{UUIDS[0]},{UUIDS[0]}"))  # named twice
    assert allocate_problems(SERVED, [A], _allocated("0"))  # index form while uuid is in force
    assert allocate_problems(SERVED, [A], _allocated(UUIDS[0], containers=2))
    assert allocate_problems(SERVED, [held_id], _allocated(UUIDS[7]))  # an unhealthy device granted
    assert allocate_problems(SERVED, [A], grpc.StatusCode.FAILED_PRECONDITION)  # a healthy one refused
    assert allocate_problems(SERVED, [foreign], grpc.StatusCode.FAILED_PRECONDITION)  # wrong code
    assert allocate_problems(SERVED, [A], grpc.StatusCode.UNKNOWN)
    # a replaced server may go away; a flapping GPU may be refused
    replaced = Served(
        ids=SERVED.ids,
        replaced=True,
        held=SERVED.held,
        flapping=SERVED.flapping,
        strategies=SERVED.strategies,
    )
    assert allocate_problems(replaced, [A], grpc.StatusCode.UNAVAILABLE) == []
    assert allocate_problems(SERVED, [f"{UUIDS[6]}::1"], grpc.StatusCode.FAILED_PRECONDITION) == []

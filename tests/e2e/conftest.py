"""Fixtures for the end-to-end suite: the real single-node rig, the agent process, pods and node reads.

Why here: every e2e test needs the same rig (started once per session, or reused when `make rig-up`
already started it) and the same way of failing loudly. The suite only runs when selected with
`pytest -m e2e` (or KUBEGPU_E2E=1); plain `pytest`/`make test` deselects it. A test that cannot run
(not root, no Go toolchain and no cached binaries) skips with the reason on a developer machine and
fails under CI=true. Failing tests get the rig components' and the agent's last log lines appended.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.rig import images
from tests.e2e.rig.rig import DEVICE_PLUGIN_DIR, NODE_NAME, Rig, RigError, build, log_tail, preflight

E2E_DIR = Path(__file__).resolve().parent
HELM_BUILD = E2E_DIR.parents[1] / "deploy" / "tools" / "build-helm.sh"
IN_CI = os.environ.get("CI", "").lower() == "true"
_current_logs: list[Callable[[], str]] = []
_build: dict[str, Any] = {}  # outcome of the binary build done before the first test (seconds or error)


def _selected(config: pytest.Config) -> bool:
    return "e2e" in (config.option.markexpr or "") or os.environ.get("KUBEGPU_E2E") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect e2e tests unless asked for: they need root and a rig (see docs/testing.md)."""
    for item in items:
        if E2E_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)
    if _selected(config):
        return
    dropped = [i for i in items if i.get_closest_marker("e2e")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if not i.get_closest_marker("e2e")]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Check the host and build (or find cached) binaries before any test starts: a cold build takes
    about 20 minutes, far beyond the per-test timeout that would otherwise cover the session fixture's
    set-up. A host the rig cannot use or a failed build ends the session here with one message, rather
    than erroring every test with the same one. ``--collect-only`` runs no test: nothing is checked
    or built then."""
    if session.config.option.collectonly:
        return
    if not any(i.get_closest_marker("e2e") for i in session.items) or os.geteuid() != 0:
        return
    rig = Rig()
    paths = rig.paths
    if not rig.is_up():
        problems = preflight(paths, binaries=False)
        if problems:
            _stop_session("the rig cannot start on this host:\n" + "\n".join(f"  - {p}" for p in problems))
    if not all(b.exists() for b in paths.all_bins()):
        if not (shutil.which("go") or Path("/usr/local/go/bin/go").exists()):
            return  # the rig fixture reports it (a skip on a developer machine, a failure in CI)
        say(
            session.config,
            f"[e2e] building Kubernetes {paths.k8s_version}, etcd {paths.etcd_version} and containerd "
            f"{paths.containerd_version} into {paths.cache} (cold: about 20 minutes on 2 cores)",
        )
    capman = session.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
        try:
            _build["seconds"] = build(paths)  # build.sh's progress goes straight to the terminal
        except RigError as exc:
            _stop_session(f"the rig's binaries could not be built: {exc}")
        if any(Path(str(i.path)).name == "test_deploy.py" for i in session.items):
            # helm takes about 11 minutes cold: built here, not inside a test's timeout.
            proc = subprocess.run([str(HELM_BUILD)], stdout=subprocess.PIPE, text=True, check=False)
            if proc.returncode != 0:
                _stop_session(f"helm could not be built ({HELM_BUILD} exit {proc.returncode}; output above)")
            _build["helm"] = proc.stdout.strip()


def prebuilt_helm() -> str | None:
    """The helm binary the session built before its first test, if it did."""
    helm = _build.get("helm")
    return str(helm) if helm else None


def _stop_session(message: str) -> None:
    """End the e2e session before the first test with one message and a failing exit status."""
    pytest.exit(f"E2E NOT RUN: {message}", returncode=pytest.ExitCode.TESTS_FAILED)


def cannot_run(reason: str) -> None:
    """Skip loudly on a developer machine; fail in CI, where nothing may silently skip."""
    msg = f"E2E NOT RUN: {reason}"
    if IN_CI:
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def say(config: pytest.Config, line: str) -> None:
    """Print past pytest's output capture, so build/start times show in every run's output."""
    capman = config.pluginmanager.getplugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    with ctx:
        print(line, file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    """The running rig: reused when already up, else built (cached) and started, and stopped at the end."""
    if os.geteuid() != 0:
        cannot_run("the rig needs root (containerd, runc, kubelet); run `sudo make e2e`")
    r = Rig()
    have_bins = all(b.exists() for b in r.paths.all_bins())
    if not have_bins and not (shutil.which("go") or Path("/usr/local/go/bin/go").exists()):
        cannot_run(f"no cached Kubernetes binaries under {r.paths.cache} and no Go toolchain to build them")
    _current_logs.append(r.log_tails)
    started_here = False
    try:
        if r.is_up() and r.node_ready():
            say(request.config, f"[e2e] reusing the running rig in {r.paths.state}")
        else:
            if r.is_up() or r.paths.state.exists():
                r.down()
            build_s = _build["seconds"] if "seconds" in _build else build(r.paths)
            say(
                request.config,
                f"[e2e] rig build (Kubernetes {r.paths.k8s_version}, etcd {r.paths.etcd_version}, "
                f"containerd {r.paths.containerd_version}): {build_s:.1f} s",
            )
            r.up()
            started_here = True
            steps = ", ".join(f"{k} {v:.1f}" for k, v in r.timings.items())
            say(request.config, f"[e2e] rig start: {r.timings['up']:.1f} s ({steps})")
    except RigError as exc:
        with contextlib.suppress(RigError):
            r.down()
        # One failure for the suite, not one per test: stop the session after this test.
        request.session.shouldfail = "the rig could not be started (the first error above says why)"
        pytest.fail(f"the rig could not be started: {exc}", pytrace=False)
    yield r
    _current_logs.remove(r.log_tails)
    if started_here and os.environ.get("KUBEGPU_RIG_KEEP") != "1":
        t0 = time.monotonic()
        r.down()
        say(request.config, f"[e2e] rig down: {time.monotonic() - t0:.1f} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("e2e") and _current_logs:
        text = "\n".join(fn() for fn in list(_current_logs))
        report.sections.append(("rig and agent logs (last lines)", text))


# ----------------------------------------------------------------------------------------------- helpers


LONG_WAIT_S = 5.0
LONG_WAITS: list[tuple[float, str, str]] = []  # (seconds, what, test): waits of LONG_WAIT_S or more


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The longest waits of the session (``wait_until``), after pytest's slowest durations."""
    if not LONG_WAITS:
        return
    terminalreporter.section("longest waits (wait_until, 5 s or more)")
    for seconds, what, test in sorted(LONG_WAITS, reverse=True)[:25]:
        terminalreporter.write_line(f"{seconds:7.1f}s  {what[:70]:<70}  {test.split('::')[-1][:60]}")
    total = sum(w for w, _, _ in LONG_WAITS)
    terminalreporter.write_line(f"{len(LONG_WAITS)} waits of 5 s or more, {total:.0f} s in all")


def wait_until(
    what: str,
    probe: Callable[[], Any],
    timeout_s: float,
    *,
    accept: Callable[[Any], bool] = bool,
    interval_s: float = 0.5,
) -> Any:
    """Poll probe until accept(value) holds; return that value, or fail showing the last value seen.

    Waits of 5 s or more are recorded (``LONG_WAITS``) and the longest are listed at the end of the
    session, so the e2e suite's time can be read wait by wait, not only test by test."""
    started = time.monotonic()
    deadline = started + timeout_s
    last: Any = None
    while True:
        try:
            last = probe()
            if accept(last):
                waited = time.monotonic() - started
                if waited >= LONG_WAIT_S:
                    LONG_WAITS.append((waited, what, os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]))
                return last
        except (RigError, subprocess.SubprocessError, KeyError, json.JSONDecodeError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            pytest.fail(
                f"timed out after {timeout_s:.0f} s waiting for {what}; last seen: {last!r}", pytrace=False
            )
        time.sleep(interval_s)


@dataclass
class Cluster:
    """What a test does with the rig: namespaces, pods, node resources, events."""

    rig: Rig
    namespaces: list[str] = field(default_factory=list)

    def namespace(self, prefix: str = "e2e") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.rig.kubectl("create", "namespace", name)
        self.namespaces.append(name)
        wait_until(
            f"serviceaccount default in {name}",
            lambda: self.rig.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
            60,
        )
        return name

    def apply(self, obj: dict[str, Any], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.rig.kubectl("create", "-f", "-", input_text=json.dumps(obj), check=check)

    def get(self, kind: str, name: str, ns: str | None = None) -> dict[str, Any]:
        args = ["get", kind, name, "-o", "json"] + (["-n", ns] if ns else [])
        obj: dict[str, Any] = json.loads(self.rig.kubectl(*args).stdout)
        return obj

    def node_resources(self) -> tuple[dict[str, str], dict[str, str]]:
        status = self.get("node", NODE_NAME)["status"]
        return status.get("capacity", {}), status.get("allocatable", {})

    def wait_resource(
        self, resource: str, *, allocatable: int, capacity: int | None = None, timeout_s: float = 60
    ) -> None:
        def ok(seen: tuple[dict[str, str], dict[str, str]]) -> bool:
            cap, alloc = seen
            good = alloc.get(resource) == str(allocatable)
            return good and (capacity is None or cap.get(resource) == str(capacity))

        wait_until(
            f"node {resource} allocatable={allocatable} capacity={capacity}",
            self.node_resources,
            timeout_s,
            accept=ok,
        )

    def pod_phase(self, ns: str, name: str) -> str:
        return str(self.get("pod", name, ns).get("status", {}).get("phase", ""))

    def wait_running(self, ns: str, name: str, timeout_s: float = 90) -> None:
        def status() -> dict[str, Any]:
            st: dict[str, Any] = self.get("pod", name, ns).get("status", {})
            if st.get("phase") in ("Failed", "Succeeded"):
                pytest.fail(f"pod {ns}/{name} ended: {json.dumps(st)[:2000]}", pytrace=False)
            return st

        wait_until(
            f"pod {ns}/{name} Running", status, timeout_s, accept=lambda st: st.get("phase") == "Running"
        )

    def logs(self, ns: str, name: str) -> str:
        return self.rig.kubectl("logs", "-n", ns, name).stdout

    def env(self, ns: str, name: str) -> dict[str, str]:
        """The container's environment as its `env` printed it (pods here run `env; sleep ...`)."""

        def printed() -> dict[str, str]:
            out = self.logs(ns, name)
            if "KUBEGPU_ENV_END=1" not in out:
                return {}
            return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

        env: dict[str, str] = wait_until(f"environment printed by {ns}/{name}", printed, 60)
        return env

    def events(self, ns: str, name: str) -> list[dict[str, Any]]:
        out = self.rig.kubectl(
            "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
        ).stdout
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def wait_event(self, ns: str, name: str, reason: str, contains: str, timeout_s: float = 60) -> str:
        def matching(evs: list[dict[str, Any]]) -> list[str]:
            return [
                e["message"] for e in evs if e.get("reason") == reason and contains in e.get("message", "")
            ]

        evs = wait_until(
            f"event {reason} containing {contains!r} on {ns}/{name}",
            lambda: self.events(ns, name),
            timeout_s,
            accept=lambda evs: bool(matching(evs)),
        )
        return matching(evs)[0]

    def delete_namespace(self, ns: str) -> None:
        """Delete ``ns`` and wait until its pods and ResourceClaims are gone: their GPUs, devices and
        prepared claims are then released on the node, which is what the next test needs. Not for
        the namespace object itself: kube-controller-manager starts on a deleted namespace only after
        a fixed 5 s (its namespace controller's grace for HA API servers), which costs every test
        that waits for it 5 s and protects nothing here (each test's namespaces are its own)."""
        self.rig.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        self.rig.kubectl(
            "delete", "pods,resourceclaims", "--all", "-n", ns, "--wait=true", "--timeout=120s",
            "--ignore-not-found", check=False, timeout_s=150,
        )  # fmt: skip


def pod(
    name: str,
    *,
    resources: dict[str, int] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    command: str = "env; echo KUBEGPU_ENV_END=1; sleep 3600",
) -> dict[str, Any]:
    """A busybox pod from the rig's local image that prints its environment and sleeps."""
    container: dict[str, Any] = {
        "name": "main",
        "image": images.TEST_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", command],
    }
    if resources:
        limits = {k: str(v) for k, v in resources.items()}
        container["resources"] = {"limits": limits}
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
    }
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def in_ns(obj: dict[str, Any], ns: str) -> dict[str, Any]:
    obj["metadata"]["namespace"] = ns
    return obj


@pytest.fixture(scope="session")
def image_archive(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make image` once per session: the docker-archive every test that deploys the image imports.

    The build is deterministic (``make image-reproducible`` checks it), so one archive serves every
    test; building it again per test module only cost time (a minute or more each)."""
    out = tmp_path_factory.mktemp("image") / "kubegpu.tar"
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[2] / "deploy/image/build.py"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    say(request.config, f"[e2e] image built once for the session in {time.monotonic() - t0:.0f} s: {out}")
    return out


@pytest.fixture
def cluster(rig: Rig) -> Iterator[Cluster]:
    c = Cluster(rig=rig)
    yield c
    for ns in c.namespaces:
        c.delete_namespace(ns)


# ----------------------------------------------------------------------------------------------- the agent


@dataclass
class AgentProcess:
    """A `kubegpu agent` host process pointed at the rig kubelet's device-plugin directory."""

    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes]

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, f"the agent log ({' '.join(self.argv)})", lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def kubegpu_argv(*args: str) -> list[str]:
    """`python -m kubegpu ARGS`; KUBEGPU_E2E_PYTHON picks another interpreter (another checkout's venv)."""
    return [os.environ.get("KUBEGPU_E2E_PYTHON", sys.executable), "-m", "kubegpu", *args]


@pytest.fixture
def start_agent(rig: Rig, tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    """Start `kubegpu agent --node-spec SPEC --device-plugin-dir <rig>` (+ --config/--fault-file)."""
    started: list[AgentProcess] = []

    def start(
        node_spec: str = "builtin:seed-8gpu",
        *,
        config: Path | None = None,
        fault_file: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> AgentProcess:
        probe = subprocess.run(
            kubegpu_argv("agent", "--help"), capture_output=True, text=True, timeout=60, check=False
        )
        if probe.returncode != 0:
            pytest.fail(
                f"`kubegpu agent` is not available (exit {probe.returncode}): {probe.stderr.strip()[-500:]}",
                pytrace=False,
            )
        # The node status of an earlier agent lingers up to one status period (10 s) after it stopped:
        # wait until kubelet reports no allocatable nvidia.com/* devices so the next wait_resource is real.
        wait_until(
            "kubelet to report no allocatable nvidia.com/* devices before starting the agent",
            lambda: Cluster(rig=rig).node_resources()[1],
            45,
            accept=lambda alloc: all(v == "0" for k, v in alloc.items() if k.startswith("nvidia.com/")),
        )
        argv = kubegpu_argv("agent", "--node-spec", node_spec, "--device-plugin-dir", str(DEVICE_PLUGIN_DIR))
        if config is not None:
            argv += ["--config", str(config)]
        if fault_file is not None:
            argv += ["--fault-file", str(fault_file)]
        argv += list(extra_args)
        log_path = tmp_path / f"agent-{len(started)}.log"
        with log_path.open("wb") as logf:
            proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        agent = AgentProcess(argv=argv, log_path=log_path, proc=proc)
        started.append(agent)
        _current_logs.append(agent.log_tail)
        time.sleep(0.5)
        if proc.poll() is not None:
            pytest.fail(
                f"kubegpu agent exited at once ({proc.returncode})\n{agent.log_tail()}", pytrace=False
            )
        return agent

    yield start
    for agent in started:
        agent.stop()
        _current_logs.remove(agent.log_tail)


def gpu_index_by_uuid(node_spec: str) -> dict[str, int]:
    """UUID -> index for a node spec, from `kubegpu topo SOURCE --json`."""
    out = subprocess.run(
        kubegpu_argv("topo", node_spec, "--json"), capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return {g["uuid"]: int(g["index"]) for g in json.loads(out)["gpus"]}


# ----------------------------------------------------------------------------------------------- Prometheus

PROMETHEUS = Path("/usr/bin/prometheus")  # Debian's package, installed by the rig (rig.py TOOL_PACKAGES)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrometheusProcess:
    """A real Prometheus scraping fixed targets every second, its data under the test's tmp dir."""

    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` selects now (``data.result``), through the HTTP API."""
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as reply:
            body = json.loads(reply.read())
        if body.get("status") != "success":
            raise RigError(f"Prometheus query {promql!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as reply:
            active: list[dict[str, Any]] = json.loads(reply.read())["data"]["activeTargets"]
        return active

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, "the prometheus log", lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[Sequence[str]], PrometheusProcess]]:
    """Start ``prometheus`` (by PID, own port and data dir) scraping ``targets`` (HOST:PORT) every 1 s."""
    started: list[PrometheusProcess] = []

    def start(targets: Sequence[str]) -> PrometheusProcess:
        if not PROMETHEUS.exists():
            cannot_run(f"{PROMETHEUS} is missing (Debian's prometheus package; the rig installs it on `up`)")
        config = tmp_path / "prometheus.yml"
        config.write_text(
            json.dumps(  # JSON is YAML
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": "kubegpu",
                            "scrape_interval": "1s",
                            "scrape_timeout": "1s",
                            "static_configs": [{"targets": list(targets)}],
                        }
                    ],
                }
            )
        )
        port = free_port()
        log_path = tmp_path / f"prometheus-{len(started)}.log"
        argv = [
            str(PROMETHEUS),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / f'prometheus-data-{len(started)}'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        with log_path.open("wb") as logf:
            proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        prom = PrometheusProcess(url=f"http://127.0.0.1:{port}", proc=proc, log_path=log_path)
        started.append(prom)
        _current_logs.append(prom.log_tail)

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited ({proc.returncode})\n{prom.log_tail()}", pytrace=False)
            try:
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as reply:
                    return int(reply.status) == 200
            except (urllib.error.URLError, ConnectionError):
                return False

        wait_until("prometheus to be ready", ready, 60)
        return prom

    yield start
    for prom in started:
        prom.stop()
        _current_logs.remove(prom.log_tail)

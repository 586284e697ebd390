"""The C-level NVML stand-in for these tests: built once per session, played per test.

``nvml_host`` gives a child process the stand-in (through ``LD_LIBRARY_PATH``, as the real pynvml
finds ``libnvidia-ml.so.1``) and a machine; ``in_process`` binds this process's real pynvml to it for
the tests that drive ``NvmlSource`` and ``NvmlMigBackend`` directly. No test here may silently skip:
without a C compiler the session fails, naming what to install.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubegpu.sources.spec import load_node
from tests.nvml_standin.build import Standin, StandinBuildError, build
from tests.nvml_standin.machine import Machine


@pytest.fixture(scope="session")
def standin() -> Standin:
    try:
        return build()
    except StandinBuildError as exc:
        pytest.fail(f"NOT RUN: the NVML stand-in cannot be built: {exc}", pytrace=False)


@dataclass
class NvmlHost:
    """A machine for the stand-in, with the files a test writes to inject events and faults."""

    standin: Standin
    machine_file: Path
    events: Path
    faults: Path

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a child process that sees this machine through the real pynvml."""
        base = {
            k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "KUBEGPU_FAKE_NVML", "CONFIG_FILE"}
        }
        base.update(
            self.standin.env(
                self.machine_file, KUBEGPU_NVML_EVENTS=str(self.events), KUBEGPU_NVML_FAULTS=str(self.faults)
            )
        )
        base.update(extra)
        return base

    def kubegpu(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kubegpu", *args],
            capture_output=True,
            text=True,
            env=self.env(**extra),
            check=False,
            timeout=60,
        )

    def event(self, gpu: int, kind: str, data: int = 0) -> None:
        """Deliver an NVML event (xid, dbe, sbe) to every event set that registered the GPU."""
        with self.events.open("a") as f:
            f.write(f"event {gpu} {kind} {data}\n")

    def fail(self, *faults: tuple[str, int, int]) -> None:
        """From now on (replacing earlier injections): (symbol, nvmlReturn_t, GPU or -1) fail."""
        tmp = self.faults.with_suffix(".tmp")
        tmp.write_text("".join(f"fail {s} {code} {gpu}\n" for s, code, gpu in faults))
        tmp.replace(self.faults)


@pytest.fixture
def nvml_host(standin: Standin, tmp_path: Path):  # type: ignore[no-untyped-def]
    """``nvml_host(SOURCE or Machine)``: that machine, ready for child processes."""

    def make(machine: str | Machine) -> NvmlHost:
        m = machine if isinstance(machine, Machine) else Machine.from_node(load_node(machine))
        events = tmp_path / "nvml-events"
        events.touch()
        return NvmlHost(
            standin=standin,
            machine_file=m.write(tmp_path / "machine.txt"),
            events=events,
            faults=tmp_path / "nvml-faults",
        )

    return make


@pytest.fixture
def in_process(standin: Standin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Bind this process's real ``pynvml`` to the stand-in; ``in_process(machine)`` selects the machine.

    The library is loaded by path first; pynvml's own ``CDLL("libnvidia-ml.so.1")`` then finds it by
    its soname. NVML is shut down after the test, so the next ``nvmlInit`` reads the next machine."""
    ours = ctypes.CDLL(str(standin.library), mode=ctypes.RTLD_GLOBAL)
    import pynvml

    def use(machine: str | Machine, *, faults: list[tuple[str, int, int]] | None = None) -> Machine:
        m = machine if isinstance(machine, Machine) else Machine.from_node(load_node(machine))
        if faults:
            m.faults = list(faults)
        monkeypatch.setenv("KUBEGPU_NVML_MACHINE", str(m.write(tmp_path / "machine.txt")))
        monkeypatch.setenv("KUBEGPU_NVML_EVENTS", str(tmp_path / "nvml-events"))
        monkeypatch.setenv("KUBEGPU_NVML_FAULTS", str(tmp_path / "nvml-faults"))
        (tmp_path / "nvml-events").touch()
        return m

    yield use
    if pynvml.nvmlLib is not None:
        assert pynvml.nvmlLib._handle == ours._handle, "pynvml loaded another libnvidia-ml.so.1"
    with contextlib.suppress(pynvml.NVMLError):
        for _ in range(8):
            pynvml.nvmlShutdown()

"""A relative --device-plugin-dir works: gRPC's ``unix://`` needs an absolute socket path.

It once failed at start with gRPC's RuntimeError and a traceback; the agent now serves on the
directory relative to where it was started, as every other path flag is read.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_agent_serves_on_a_relative_device_plugin_dir(plugin_dir: Path) -> None:
    log = plugin_dir / "agent.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kubegpu", "agent", "--node-spec", "builtin:seed-8gpu",
             "--kubelet-socket", "", "--device-plugin-dir", "rel/plugins"],
            cwd=plugin_dir, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc.poll() is None:
                if "agent started" in log.read_text(errors="replace"):
                    break
                time.sleep(0.2)
            text = log.read_text(errors="replace")
            assert proc.poll() is None, text
            assert "agent started" in text
            assert any(p.suffix == ".sock" for p in (plugin_dir / "rel" / "plugins").iterdir())
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(15)
    assert "Traceback" not in log.read_text(errors="replace")

"""Ctrl-C on a multi-worker `kubegpu sim`: the run stops at once with one line and exit 130; its
workers print no traceback, are not waited for to finish their replays, and do not outlive it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.cli.test_sim_cli import trace_files

# `kubegpu sim` whose every replay, once started in a worker, marks a file and then runs for an hour:
# the stand-in for a long replay (the workers are forked, so they inherit the patched module)
SCRIPT = """\
import os, sys, time
import kubegpu.sim.run as run

def endless(*args, **kwargs):
    open(os.path.join(sys.argv[1], f"replay-{os.getpid()}"), "w").close()
    time.sleep(3600)

run.replay = endless
from kubegpu.cli.app import main
main(sys.argv[2:])
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_ctrl_c_stops_a_multi_worker_sim_with_one_line_and_exit_130(tmp_path: Path) -> None:
    nodes, pods = trace_files(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "sim_endless.py"
    script.write_text(SCRIPT)
    argv = ["sim", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "0-9", "--workers", "2"]
    proc = subprocess.Popen(
        [sys.executable, str(script), str(marks), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
            workers = {int(p.name.split("-")[1]) for p in marks.iterdir()}
            time.sleep(0.05)
        assert len(workers) == 2, f"the two workers never started their replays: {proc.stderr}"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        # an hour-long replay left to finish would hang here: the timeout is a hang detector
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    try:
        assert proc.returncode == 130, err[-2000:]
        assert "Traceback" not in err, err[-2000:]
        assert err.strip().splitlines()[-1] == "kubegpu: interrupted"
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(w) for w in workers), "a worker outlived the interrupted run"
    finally:
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)

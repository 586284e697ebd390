"""The device check's MPS step (issue 60): kubegpu's control-daemon code and MPS share limits on a real GPU.

Read-only on the GPU: the daemon runs under a private pipe and log directory (a temporary folder), over
GPU 0 only (``CUDA_VISIBLE_DEVICES`` = its UUID); the compute mode and every other GPU setting stay as
they are; the daemon is quit at the end and, should ``quit`` not end it, signalled by its PID.

1. ``kubegpu.deviceplugin.mps_daemon.ControlDaemon`` starts ``nvidia-cuda-mps-control -d`` as the agent
   does (no default limits: the ``kubegpu.mps.shares`` daemon);
2. two clients, each a fresh Python process calling ``libcuda.so.1`` through ctypes, get the
   environment Allocate gives a 300 and a 700 thousandths share of that GPU
   (``kubegpu.deviceplugin.mps.share_limits``: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``,
   ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``); each creates a context, reads its SM count and memory, allocates
   half its limit (must work) and 512 MiB above its limit (must fail: ``CUDA_ERROR_OUT_OF_MEMORY``);
3. ``get_server_list`` (recorded) shows the MPS server the clients went through; ``quit`` stops the
   daemon, which must then be gone.

Writes ``mps.json`` under ``--out``; exit 0 when every check held. ``--standin`` is the dry run: the
stand-in ``nvidia-cuda-mps-control`` (tests/mps_standin) plays the daemon and the clients are skipped.
``bench/gpu_smoke.py`` runs it as its MPS step (``--standin`` in its dry run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CUDA_ERROR_OUT_OF_MEMORY = 2
SHARES = (300, 700)
ABOVE_MIB = 512

CLIENT = r"""
import ctypes, json, os
cuda = ctypes.CDLL("libcuda.so.1")
out = {}
def call(name, *args):
    rc = getattr(cuda, name)(*args)
    out.setdefault("calls", {})[name] = rc
    return rc
if call("cuInit", 0) == 0:
    dev = ctypes.c_int()
    call("cuDeviceGet", ctypes.byref(dev), 0)
    sms = ctypes.c_int()
    call("cuDeviceGetAttribute", ctypes.byref(sms), 16, dev)  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    ctx = ctypes.c_void_p()
    if call("cuCtxCreate_v2", ctypes.byref(ctx), 0, dev) == 0:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        limit = int(os.environ["SMOKE_LIMIT_MIB"])
        ptr = ctypes.c_uint64()
        below = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t((limit // 2) << 20))
        if below == 0:
            cuda.cuMemFree_v2(ptr)
        above_mib = limit + int(os.environ["SMOKE_ABOVE_MIB"])
        above = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(above_mib << 20))
        if above == 0:
            cuda.cuMemFree_v2(ptr)
        out.update(sms=sms.value, free_mib=free.value >> 20, total_mib=total.value >> 20,
                   alloc_half_limit=below, alloc_above_limit=above)
        cuda.cuCtxDestroy_v2(ctx)
print(json.dumps(out))
"""


def first_gpu(env: dict[str, str]) -> tuple[str, int]:
    """GPU 0's UUID and memory (MiB) as nvidia-smi reports them."""
    got = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    uuid, memory = (part.strip() for part in got.stdout.strip().splitlines()[0].split(","))
    return uuid, int(float(memory))


def run(out: Path, *, standin: bool) -> dict[str, Any]:
    sys.path[:0] = [str(REPO), str(REPO / "src")]
    from kubegpu.deviceplugin.mps import DaemonPlan, MpsGpu, share_limits
    from kubegpu.deviceplugin.mps_daemon import ControlDaemon, process_alive
    from kubegpu.errors import MpsDaemonError

    report: dict[str, Any] = {"standin": standin, "checks": {}}
    checks: dict[str, bool] = report["checks"]
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="kubegpu-mps.") as tmp:
        work = Path(tmp)
        if standin:
            from tests.mps_standin import install

            binary: str | None = str(install(work / "bin"))
            uuid, memory = "GPU-standin", 81559
        else:
            binary = shutil.which("nvidia-cuda-mps-control")
            if binary is None:
                report["skipped"] = "no nvidia-cuda-mps-control on PATH"
                return report
            uuid, memory = first_gpu(env)
        report.update(binary=binary, gpu=uuid, memory_mib=memory)
        plan = DaemonPlan(
            resource="smoke",
            gpus=(MpsGpu(index=0, uuid=uuid, memory_mib=memory, replicas=1),),
            pipe_dir=str(work / "pipe"),
            log_dir=str(work / "log"),
            commands=(),
        )
        daemon = ControlDaemon(plan, binary, env)
        try:
            daemon.start()
        except MpsDaemonError as exc:
            report["error"] = str(exc)
            checks["daemon started"] = False
            return report
        report["daemon_pid"] = pid = daemon.pid
        checks["daemon started"] = pid is not None
        try:
            clients = []
            for milli in [] if standin else SHARES:
                limits = share_limits(milli, memory)
                client_env = {
                    **env,
                    **limits.envs(),
                    "CUDA_MPS_PIPE_DIRECTORY": plan.pipe_dir,
                    "CUDA_VISIBLE_DEVICES": uuid,
                    "SMOKE_LIMIT_MIB": str(limits.pinned_mem_mib),
                    "SMOKE_ABOVE_MIB": str(ABOVE_MIB),
                }
                got = subprocess.run(
                    [sys.executable, "-c", CLIENT], capture_output=True, text=True, env=client_env,
                    timeout=120, check=False,
                )  # fmt: skip
                result: dict[str, Any] = {"milli": milli, "env": limits.envs(), "exit": got.returncode}
                try:
                    result.update(json.loads(got.stdout.strip().splitlines()[-1]))
                except (IndexError, json.JSONDecodeError):
                    result["stderr"] = got.stderr[-2000:]
                clients.append(result)
                checks[f"{milli}m: half its limit allocates"] = result.get("alloc_half_limit") == 0
                checks[f"{milli}m: {ABOVE_MIB} MiB above its limit is refused"] = (
                    result.get("alloc_above_limit") == CUDA_ERROR_OUT_OF_MEMORY
                )
            report["clients"] = clients
            report["server_list"] = daemon.send("get_server_list")  # recorded, not judged
        finally:
            daemon.stop()
            report["control_log"] = daemon.new_log_lines()[-50:]
        checks["daemon stopped"] = pid is not None and not process_alive(pid)
    (out / "mps.json").write_text(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu_smoke_mps.py", description=__doc__.splitlines()[0])
    default_out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    parser.add_argument("--out", type=Path, default=default_out, help="where mps.json goes (default: $OUT)")
    parser.add_argument("--standin", action="store_true", help="dry run: the stand-in daemon, no clients")
    args = parser.parse_args(argv)
    if args.out is None:
        parser.error("give --out DIR (or set OUT)")
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(args.out, standin=args.standin)
    for name, held in report["checks"].items():
        print(f"[mps] {'ok  ' if held else 'FAIL'} {name}")
    if "skipped" in report:
        print(f"[mps] skipped: {report['skipped']}")
        return 0
    return 0 if report["checks"] and all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

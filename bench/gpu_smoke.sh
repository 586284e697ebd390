#!/usr/bin/env bash
# The device check: every real-GPU path of kubegpu once, read-only, on a machine with an NVIDIA GPU
# (bench/gpu_smoke.py says what and why). Runs with the checkout's .venv when there is one, else with
# python3 (the device machine's, which has nvidia-ml-py, grpcio, PyYAML, rich and typer), kubegpu from
# src/ either way. Results under $OUT (or --out DIR).
#
#   bench/gpu_smoke.sh                          # real GPU; see $OUT/summary.md
#   bench/gpu_smoke.sh --standin builtin:h100-mig-mixed --out /tmp/smoke   # dry run, no GPU needed
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${KUBEGPU_SMOKE_PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON="$(command -v python3)"; fi
fi
export PYTHONUNBUFFERED=1
exec timeout --kill-after=10 480 "$PYTHON" bench/gpu_smoke.py --python "$PYTHON" "$@"

#!/usr/bin/env bash
# One batched GPU session on the device machine: install, GPU tests, sanitizer, info, benchmarks.
# Usage there: bash tools/gpu-check.sh [pytest -k expression] [bench families…]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NAGARE_CACHE_DIR=/tmp/nagare-cache
bash .device/setup.sh >/dev/null 2>&1 || echo "device setup failed"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "nagare install failed"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
nagare info --backend cupy 2>&1 | tee "$OUT/info.txt"
kexpr=${1:-}
shift || true
python3 -m pytest -m gpu -q -o addopts="" -p no:xvfb ${kexpr:+-k "$kexpr"} 2>&1 | tee "$OUT/gpu-tests.log" | tail -25
for fam in "$@"; do
  nagare bench "$fam" --backend cupy --out "$OUT/bench-$fam" 2>&1 | tail -40
done

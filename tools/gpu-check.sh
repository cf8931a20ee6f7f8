#!/usr/bin/env bash
# Batched GPU work on the device machine (an H200 with CuPy, no network). Run from the repo root
# after `../shared/tools/device-prep` here, with carry [".device"]:
#   bash tools/gpu-check.sh STAGE…
# Stages (each fits one 10-minute call; see docs/gpu-runbook.md for the order and budgets):
#   tests         every gpu-marked test except the app's (compute-sanitizer on two kernels)
#   app           CUDA-GL interop test through EGL + the display-overhead benchmark (2048² D2Q9)
#   bench-diffusion3d | bench-stencil | bench-lbm2d | bench-sph   nagare bench FAMILY
#   tb-grid       P1's ts×tr×tile grid at 4096² and 320² (engine/lbm2d/tb_bench.py)
#   ncu-ws        executed instructions with and without warp shuffle (P1 Table 4)
#   stencil-perf  P2 (issue 5), < 4 min: gpu tests of the stencil framework / auto-tuner / diffusion3d
#                 kernels, `nagare bench stencil` (P2's five meshes, exhaustive vs live tuner, run-off,
#                 1,000-step amortisation at 256³/512³), then ncu on the 512³ kernel
# Results go to $OUT/<stage>/; copy them into docs/benchmarks/ here and commit.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NAGARE_CACHE_DIR=/tmp/nagare-cache
bash .device/setup.sh >/dev/null 2>&1 || echo "gpu-check: device setup failed"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "gpu-check: nagare install failed"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
nagare info --backend cupy 2>&1 | tee "$OUT/info.txt"
pt() { python3 -m pytest -q -o addopts="" -p no:xvfb "$@"; }
for stage in "$@"; do
  mkdir -p "$OUT/$stage"
  case "$stage" in
    tests)
      pt -m gpu --ignore=tests/app 2>&1 | tee "$OUT/tests/gpu-tests.log" | tail -30
      compute-sanitizer --tool memcheck python3 -m pytest -q -o addopts="" -m gpu \
        -k "diffusion3d and cuda and fp32-fixed or lbm2d and aa" tests/equivalence 2>&1 | tail -8 ;;
    app)
      export PYOPENGL_PLATFORM=egl __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
      pt -m gpu tests/app/test_interop_gpu.py 2>&1 | tail -15
      python3 -m nagare.app.gui.bench_display --app egl --backend cupy --seconds 10 --preset lbm2d-cylinder \
        --set grid.nx=2048 --set grid.ny=2048 --out "$OUT/app/display-overhead-h200.json" 2>&1 | tail -15 ;;
    bench-*)
      fam=${stage#bench-}
      nagare bench "$fam" --backend cupy --out "$OUT/$stage" 2>&1 | tail -60 ;;
    tb-grid)
      bw=$(grep -o '[0-9.]* GB/s' "$OUT/info.txt" | head -1 | cut -d' ' -f1)
      for n in 4096 320; do
        python3 -m nagare.engine.lbm2d.tb_bench --n $n --steps 64 --copy-gbs "$bw" 2>&1 | tee "$OUT/tb-grid/p1-grid-$n.txt" | tail -30
      done ;;
    ncu-ws)
      ncu --clock-control none --metrics smsp__inst_executed.sum,dram__bytes.sum \
        python3 -m nagare.engine.lbm2d.tb_bench --n 1024 --steps 8 --kernels srtb,srtb-ws --ts 4 --tr 3 \
        --tiles 8x8,32x8 2>&1 | tee "$OUT/ncu-ws/ncu.txt" | tail -40 ;;
    stencil-perf)
      d="$OUT/stencil-perf"
      timeout 100 python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu tests/unit/test_stencil_gpu.py \
        tests/validation/test_diffusion3d_kernels.py tests/validation/test_wave2d.py \
        "tests/equivalence/test_registry.py" -k "stencil or autotune or diffusion3d or wave2d or unroll or hold" \
        2>&1 | tee "$d/gpu-tests.log" | tail -12
      timeout 150 python3 -m nagare.engine.stencil.bench --json "$d/stencil.json" --markdown "$d/stencil.md" \
        2>&1 | tee "$d/bench.txt" | tail -32
      timeout 60 ncu --clock-control none --kernel-name regex:nagare_diffusion7 \
        --metrics dram__bytes.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
        python3 tools/stencil_ncu.py --json "$d/stencil.json" 2>&1 | tee "$d/ncu.txt" \
        | grep -E "stencil_ncu|nagare_diffusion7|dram__bytes|gpu__time|warps_active|registers" | head -40 ;;
    *) echo "gpu-check: unknown stage $stage" ;;
  esac
done

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
#   lbm2d-fused   lbm2d gpu tests + memcheck of the fused/AA kernels, the fused launch-shape sweep
#                 (engine/lbm2d/fused_bench.py), ncu speed-of-light of the fused kernels
#   lbm2d-pipe    fp16 lbm_fused_pipe: its gpu tests (bit-identical to packed8, launch modes), memcheck +
#                 racecheck, and the fused sweep of fp32 vec4 / fp16 packed8 / pipe shapes at 4096² and 8192²
#   lbm2d-wave    wavefront temporal blocking: its gpu tests, memcheck + racecheck, and a ts × tile sweep
#                 at 4096² and 8192² against the copy roofline (tb_bench --kernels wavefront)
#   ncu-wave      stb / srtb-ws / wavefront side by side at 4096² (ts 4), then ncu of the wavefront kernel
#                 (speed of light, occupancy, warp states, executed instructions)
#   bench-lbm2d-small | bench-lbm2d-8192   nagare bench lbm2d split in two calls (320², 1024², 4096² | 8192²)
#   sph-perf      the sph gpu tests (equivalence, device Δt/time, late-rebuild fallback, registry) and a bench
#                 subset: 3D dam break 1M fp32 and 2D 21k fp32, cell-full / verlet (soa, float4 exact; the
#                 unsuffixed cells run the default pair, fast), per-phase ms
#   sph-fast      issue 42 (SPH step toward 1.5 ms), < 180 s (timeouts 65 + 22 + 22 + 16 + 50): the gpu tests of
#                 pair = fast (NumPy reference, fp64 and fp32, the stale-list fallback, registry), memcheck +
#                 racecheck of a 3-step 3D dam break with it, registers of the interaction kernels as NVRTC built
#                 them, `nagare bench sph` 3D dam break 1M fp32 Verlet float4 exact vs fast (per-phase ms);
#                 everything packed into $OUT/sph-fast.tgz
#   sph-fast2     issue 42 (SPH step <= 1.5 ms), < 170 s (timeouts 70 + 18 + 18 + 12 + 50): the gpu tests of
#                 the fast pair's list-walk shapes (fast-u2, fast-u4, fast-lb12: NumPy reference fp64 both list
#                 layouts and fp32), the unrolled build and the one-pass build (verlet_build = one-pass: the
#                 two-pass build's lists entry for entry, the cap-overflow rerun, fp64 3D vs NumPy), the
#                 registry's sph pair / verlet_build cells, the OOM fallback and device Δt with fast as the
#                 default; memcheck + racecheck of a 3-step 3D dam break with fast-u4 (two-pass and one-pass);
#                 registers of every fp32 Verlet interaction and build kernel as NVRTC built them;
#                 `nagare bench sph` 3D dam break 1M fp32, the "VL float4 " cells (exact, fast, fast-u2,
#                 fast-u4, fast-u2 one-pass, fast one-pass, fast-lb12; per-phase ms, list ms per rebuild);
#                 all in $OUT/sph-fast2.tgz. The tests compile ~30 NVRTC modules of sph.cu (cached for the
#                 registers and the bench); the bench writes sph.json cell by cell, so a cut keeps the
#                 cells measured, likeliest first
#   amr3d         P0 (issue 15): amr3d gpu tests + registry, memcheck of the ladder kernels, nagare bench amr3d
#   stencil-perf  P2 (issue 5), < 4 min: gpu tests of the stencil framework / auto-tuner / diffusion3d
#                 kernels, `nagare bench stencil` (P2's five meshes, exhaustive vs live tuner, run-off,
#                 1,000-step amortisation at 256³/512³), then ncu on the 512³ kernel
#   compact-tile  issue 39 item 1, < 150 s: the gpu tests of solver = scan-tile (mirror bit for bit, dense,
#                 registry), memcheck + racecheck of one small case a direction, the target grid as one
#                 table (scan, scan-tile, gtsv2 × x/y × 1024²..4096² × fp32/fp64 × periodic/closures)
#   compact-stream issue 39 item 1, < 180 s: the gpu tests of solver = stream (mirror bit for bit, dense,
#                 registry), memcheck + racecheck of one small case a direction, the target grid (scan, window,
#                 stream; no gtsv2; 60 s: on an H200 ~16 of its 24 cells, STREAM_GRID="--sizes 4096 ..." narrows
#                 it, STREAM_TESTS the test files), all in one archive $OUT/compact-stream.tgz
#   compact-stream-grid  < 180 s: the whole grid alone (scan, window, stream, gtsv2 × 24 cells) as one table,
#                 $OUT/compact-stream-grid/grid.md (not yet run: its time is estimated from compact-stream's)
#   ncu-compact   ncu of scan and scan-tile on 4096² x and y fp64 closures (DRAM throughput, occupancy,
#                 warp stall reasons, L2 sectors)
#   display-ab    issue 41, < 5 min: the app's gpu files under EGL, then `bench_display --targets` as the app
#                 runs (and, with DISPLAY_AB_SCHEDULE=1, on the worker's old schedule: --worker
#                 pace_by_steps=0); everything packed into $OUT/display-ab.tgz (the device returns 8 files)
#   regrid        issue 38 item 4, < 190 s (timeouts 60 + 75 + 40): the regrid's gpu tests
#                 (test_amr3d_regrid_device, _group_desc, _uploads),
#                 `nagare bench amr3d --case vortex-adapt --only naive-fused` (its Regrids table:
#                 the warm regrid < 50 ms?), tools/amr3d_regrid_profile.py --backend cupy (parts alone, then
#                 whole regrids as a run does them and serial); everything packed into $OUT/regrid.tgz
#   amr3d-coupling issue 38 (fused level coupling), < 240 s (timeouts 70 + 25 + 25 + 35 + 45 + 35): the coupling's
#                 gpu tests (tests/equivalence/test_amr3d_coupling_gpu.py: fused = split bit for bit, fp32/fp16,
#                 graph, checkpoint), compute-sanitizer memcheck + racecheck of its small two-level case (fp32 and
#                 fp16), tools/amr3d_coupling_profile.py on the three-level tree and the sphere (graph off; split =
#                 before, fused = after: coupling share of the coarse step, launches), `nagare bench amr3d --case
#                 three-levels --only naive-fused`; everything packed into $OUT/amr3d-coupling.tgz
#   regrid2       issue 38 item 4 (every rung's warm regrid < 50 ms), < 240 s (timeouts 115 + 30 + 70 + 20): the gpu
#                 tests of the compact rows' CUDA build (tests/unit/test_amr3d_rows_build.py: = the array code bit
#                 for bit, fp32/fp16, after a regrid), the regrid's (test_amr3d_regrid_device, _uploads) and the coupling's on
#                 the three-level tree (fused = split, graph, fp16: the dense rows come back for split);
#                 compute-sanitizer memcheck of a regrid + 2 steps (amr3d_rows_need, amr3d_rows_build);
#                 `nagare bench amr3d --case vortex-adapt --only naive-fused` (the four rungs' Regrids table);
#                 tools/amr3d_regrid_profile.py --storage fp16 --graph on --steps 2 --in-run 6 (the worst rung
#                 alone in a fresh process: parts, select in parts with the rows' CUDA vs array build, 6 regrids
#                 of one engine as a run with the memory pool's growth in each, whole regrids of fresh engines);
#                 everything packed into $OUT/regrid2.tgz
#   amr3d-interp  issue 38 (coupling <= 20 % of a coarse step on the sphere), < 240 s (timeouts 150 + 60 + 60 +
#                 33 + 16 + 16): the coupling's gpu tests (fused = split bit for bit, and amr3d_interpolate_rows
#                 with 3 and 9 threads a position = 1), compute-sanitizer memcheck + racecheck of the small
#                 two- and three-level cases (fp32; the second pairs its restrictions), tools/amr3d_coupling_profile.py on the sphere (split; "fused before":
#                 lanes 1, restrictions unpaired; fused lanes=1 (paired); fused lanes=3 (the default); each with
#                 host-launched events and, "device", each kind's device time alone and the share of the
#                 CUDA-graph step), ncu of the interpolation on the sphere (SpeedOfLight, Occupancy,
#                 WarpStateStats; lanes 3, -c 3: levels 2, 3, 4), the profile on the three-level tree (fused
#                 before vs fused); all in $OUT/amr3d-interp.tgz.
#                 A cold kernel cache compiles in the test step (150 s); the sphere's m = 17 ladders compile in
#                 its profile step unless a stage before compiled them
# Results go to $OUT/<stage>/; copy them into docs/benchmarks/ here and commit.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NAGARE_CACHE_DIR=/tmp/nagare-cache
bash .device/setup.sh >/dev/null 2>&1 || echo "gpu-check: device setup failed"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "gpu-check: nagare install failed"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
nagare info --backend cupy 2>&1 | tee "$OUT/info.txt"
pt() { python3 -m pytest -q -o addopts="" -p no:xvfb "$@"; }
# the level coupling's gpu tests (first, so a cold kernel cache compiles the coupling module and the m = 9
# ladders here: the later steps load them), then memcheck and racecheck of its sanitizer cases:
#   coupling_checks DIR TEST_SECONDS SANITIZER_SECONDS SANITIZER_FILTER
coupling_checks() {
  local d=$1 f=tests/equivalence/test_amr3d_coupling_gpu.py tool
  timeout -k 5 "$2" python3 -m pytest -q -m gpu -p no:cacheprovider -p no:xvfb -o addopts= -rfEs "$f" \
    > "$d/gpu-tests.log" 2>&1
  echo "coupling gpu tests: $(tail -n 1 "$d/gpu-tests.log")"
  for tool in memcheck racecheck; do
    timeout -k 5 "$3" compute-sanitizer --tool $tool --error-exitcode 3 python3 -m pytest -q -m gpu -p no:cacheprovider \
      -p no:xvfb -o addopts= "$f" -k "$4" > "$d/sanitizer-$tool.txt" 2>&1
    echo "$tool exit $?: $(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|passed\|failed" "$d/sanitizer-$tool.txt" | tail -n 2 | tr '\n' ' ')"
  done
}
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
      # ratio, draw ms/frame, frames/s, worker publish share + GPU waits, headless breakdown (~2.5 min)
      timeout 200 python3 -m nagare.app.gui.bench_display --app egl --backend cupy --seconds 10 --breakdown \
        --preset lbm2d-cylinder --set grid.nx=2048 --set grid.ny=2048 \
        --out "$OUT/app/display-overhead-h200.json" 2>&1 | grep -v Warning | tail -15 ;;
    bench-lbm2d-small)
      timeout 560 nagare bench lbm2d --backend cupy --jobs 16 --case 320x320 --case 1024x1024 --case 4096x4096 \
        --out "$OUT/$stage" 2>&1 | tail -150 ;;
    bench-lbm2d-8192)
      timeout 560 nagare bench lbm2d --backend cupy --jobs 16 --case 8192x8192 --min-time 0.25 \
        --out "$OUT/$stage" 2>&1 | tail -150 ;;
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
    lbm2d-fused)
      bw=$(grep -o '[0-9.]* GB/s' "$OUT/info.txt" | head -1 | cut -d' ' -f1)
      pt -m gpu tests/equivalence/test_lbm2d_gpu.py tests/smoke/test_lbm2d_presets.py \
        tests/equivalence/test_registry.py -k lbm2d 2>&1 | tail -6
      compute-sanitizer --tool memcheck python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu \
        tests/equivalence/test_lbm2d_gpu.py -k "aa or fp16" 2>&1 | tail -4
      python3 -m nagare.engine.lbm2d.fused_bench --n 1024,4096,8192 --copy-gbs "$bw" \
        --shapes 64x4n1,128x2n2,256x1n2,32x4nvec2,128x1nvec2,64x2nvec2,64x1nvec4,128x1nvec4 2>&1 \
        | tee "$OUT/lbm2d-fused/fused-sweep.tsv"
      ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        -k regex:lbm_fused -c 4 python3 -m nagare.engine.lbm2d.fused_bench --n 4096 --storages native,fp16 \
        --shapes 64x4n1,128x1nvec2,64x1nvec4 --steps 1 --repeats 1 --no-extras > "$OUT/lbm2d-fused/ncu-fused.txt" 2>&1
      grep -E "lbm_fused|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Achieved Occupancy|Duration" \
        "$OUT/lbm2d-fused/ncu-fused.txt" | head -30 ;;
    lbm2d-pipe)
      d="$OUT/lbm2d-pipe"
      bw=$(grep -o '[0-9.]* GB/s' "$OUT/info.txt" | head -1 | cut -d' ' -f1)
      timeout 150 python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu tests/equivalence/test_lbm2d_gpu.py \
        -k "launch_mode or pipelined or fp16" 2>&1 | tee "$d/gpu-tests.log" | tail -6
      for tool in memcheck racecheck; do
        timeout 120 compute-sanitizer --tool $tool python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu \
          tests/equivalence/test_lbm2d_gpu.py -k "pipelined and walls" 2>&1 | tee "$d/sanitizer-$tool.txt" | tail -3
      done
      timeout 200 python3 -m nagare.engine.lbm2d.fused_bench --n 4096,8192 --copy-gbs "$bw" --no-extras \
        --storages native --shapes 64x1nvec4 2>&1 | tee "$d/fused-sweep.tsv"
      timeout 300 python3 -m nagare.engine.lbm2d.fused_bench --n 4096,8192 --copy-gbs "$bw" --no-extras \
        --storages fp16 --hints "${PIPE_HINTS:-default,rreg128}" \
        --shapes "${PIPE_SHAPES:-128x1npacked8,32x1npipe2,64x1npipe2,128x1npipe2,64x1npipe3,128x1npipe3,64x1npipe4,64x1npipe2r32,64x1npipe2r64}" \
        2>&1 | tail -n +2 | tee -a "$d/fused-sweep.tsv" ;;
    lbm2d-wave)
      bw=$(grep -o '[0-9.]* GB/s' "$OUT/info.txt" | head -1 | cut -d' ' -f1)
      pt -m gpu tests/unit/test_lbm2d_tb.py -k "wavefront or bench" 2>&1 | tee "$OUT/lbm2d-wave/gpu-tests.log" | tail -4
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu tests/unit/test_lbm2d_tb.py \
          -k "wavefront and (s4r0-32x16 or s8r0-128x20) and 77" 2>&1 | tail -3 | tee "$OUT/lbm2d-wave/sanitizer-$tool.txt"
      done
      timeout 280 python3 -m nagare.engine.lbm2d.tb_bench --n 4096,8192 --steps 64 --copy-gbs "$bw" --jobs 16 --kernels wavefront \
        --tr 0 --ts "${WAVE_TS:-1,2,4,8}" --tiles "${WAVE_TILES:-32x128,64x64,64x128,64x256,96x128,128x64,128x128,128x256,192x128,256x128,256x256}" \
        2>&1 | tee "$OUT/lbm2d-wave/wave-sweep.tsv" | grep -v "^#" | sort -t$'\t' -k5 -n | tail -12 ;;
    ncu-wave)
      d="$OUT/ncu-wave"
      bw=$(grep -o '[0-9.]* GB/s' "$OUT/info.txt" | head -1 | cut -d' ' -f1)
      timeout 150 python3 -m nagare.engine.lbm2d.tb_bench --n 4096 --steps 64 --copy-gbs "$bw" --jobs 16 \
        --kernels stb,srtb,srtb-ws,wavefront --ts 4 --tr 0,3 --tiles 32x8,64x8,10x10,64x128,128x64 \
        2>&1 | tee "$d/tb-vs-wave-4096.tsv" | grep -v "cannot run"
      timeout 150 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
        --metrics smsp__inst_executed.sum,dram__bytes.sum -k regex:lbm2d_wave -c 1 \
        python3 -m nagare.engine.lbm2d.tb_bench --n 4096 --steps 4 --kernels wavefront --ts 4 --tr 0 --tiles 64x128 \
        > "$d/ncu-wave-s4-64x128.txt" 2>&1
      grep -E "DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|No Eligible|Issued Warp|inst_executed|dram__bytes|Duration|Block Limit" \
        "$d/ncu-wave-s4-64x128.txt" | head -30 ;;
    amr3d)
      pt -m gpu tests/equivalence/test_amr3d_gpu.py tests/equivalence/test_registry.py -k amr3d 2>&1 \
        | tee "$OUT/amr3d/gpu-tests.log" | tail -8
      compute-sanitizer --tool memcheck python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu \
        tests/equivalence/test_amr3d_gpu.py -k "rungs_agree and 9 or graph" 2>&1 | tail -4
      timeout 400 nagare bench amr3d --backend cupy --out "$OUT/amr3d" 2>&1 | tail -40 ;;
    sph-perf)
      timeout 130 python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu tests/equivalence/test_sph_gpu.py \
        2>&1 | tee "$OUT/sph-perf/gpu-tests.log" | tail -15
      timeout 30 python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu tests/equivalence/test_registry.py -k sph \
        2>&1 | tail -3
      timeout 80 nagare bench sph --backend cupy --out "$OUT/sph-perf" --min-time 0.5 \
        --case dambreak3d-1M-fp32 --case dambreak2d-21k-fp32 \
        --only "CL cell-full" --only "VL warp-interleaved" --only "VL float4 exact" 2>&1 | tail -12
      python3 - "$OUT/sph-perf/sph.json" <<'PY' 2>&1 | tee "$OUT/sph-perf/phases.txt"
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    x = r.get("extra", {})
    ph = " ".join(f"{k}={v:.3f}" for k, v in r.get("phases", {}).items())
    print(f"{r['case']:22s} {r['label']:22s} {r.get('ms_per_step', float('nan')):7.3f} ms/step  {ph}  "
          f"rebuilds={x.get('rebuilds')} late={x.get('verlet_late_interactions')} list={x.get('mean_list_length')}")
PY
      ;;
    sph-fast)
      d="$OUT/sph-fast"
      timeout -k 5 65 python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu tests/equivalence/test_sph_gpu.py \
        tests/equivalence/test_registry.py -k "fast_pair or (sph and pair and fast)" 2>&1 | tee "$d/gpu-tests.log" | tail -8
      for tool in memcheck racecheck; do
        timeout -k 5 22 compute-sanitizer --tool $tool --error-exitcode 3 python3 -m pytest -q -o addopts="" \
          -p no:xvfb -m gpu tests/equivalence/test_sph_gpu.py -k "fast_pair_sanitizer_case" 2>&1 \
          | tee "$d/sanitizer-$tool.txt" | tail -3
      done
      timeout -k 5 16 python3 - <<'PY' 2>&1 | tee "$d/registers.txt"
from nagare.engine.backend import get_backend
from nagare.engine.sph import Engine
from tests.equivalence.test_sph_gpu import DAM3D, _preset
for pair in ("exact", "fast"):
    e = Engine(_preset(DAM3D, "fp32"), get_backend("cupy"), variants={"search": "verlet", "layout": "float4", "pair": pair})
    f = e.gpu.kern["verlet"]
    print(f"pair={pair:5s} {e.gpu.names['verlet']}: {getattr(f, 'num_regs', '?')} registers, "
          f"{getattr(f, 'local_size_bytes', '?')} B local")
PY
      timeout -k 5 50 nagare bench sph --backend cupy --out "$d" --min-time 0.5 --case dambreak3d-1M-fp32 \
        --only "VL float4" --only "VL float4 fast" 2>&1 | tail -8
      python3 - "$d/sph.json" <<'PY' 2>&1 | tee "$d/phases.txt"
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    x = r.get("extra", {})
    ph = " ".join(f"{k}={v:.3f}" for k, v in r.get("phases", {}).items())
    print(f"{r['case']:22s} {r['label']:18s} {r.get('ms_per_step', float('nan')):7.3f} ms/step  {ph}  "
          f"rebuilds={x.get('rebuilds')} late={x.get('verlet_late_interactions')} list={x.get('mean_list_length')}")
PY
      cp "$OUT/info.txt" "$d/" 2>/dev/null
      tar czf "$OUT/sph-fast.tgz" -C "$OUT" sph-fast && rm -rf "$d" ;;
    sph-fast2)
      d="$OUT/sph-fast2"
      timeout -k 5 70 python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu tests/equivalence/test_sph_gpu.py \
        tests/equivalence/test_registry.py -k "fast_shapes or list_build or one_pass or out_of_memory \
        or time_and_dt or (registry and sph and (pair or verlet_build))" 2>&1 | tee "$d/gpu-tests.log" | tail -8
      for tool in memcheck racecheck; do
        timeout -k 5 18 compute-sanitizer --tool $tool --error-exitcode 3 python3 -m pytest -q -o addopts="" \
          -p no:xvfb -m gpu tests/equivalence/test_sph_gpu.py -k "shapes_sanitizer_case and u4" 2>&1 \
          | tee "$d/sanitizer-$tool.txt" | tail -3
      done
      timeout -k 5 12 python3 - <<'PY' 2>&1 | tee "$d/registers.txt"
from nagare.engine.backend import get_backend
from nagare.engine.sph import Engine
from tests.equivalence.test_sph_gpu import DAM3D, _preset
for pair, build in (("exact", "two-pass"), ("fast", "two-pass"), ("fast-u2", "two-pass"), ("fast-u4", "two-pass"),
                    ("fast-lb12", "two-pass"), ("fast", "one-pass")):
    e = Engine(_preset(DAM3D, "fp32"), get_backend("cupy"),
               variants={"search": "verlet", "layout": "float4", "pair": pair, "verlet_build": build})
    for role in ("verlet", "count", "fill", "fill_cap"):
        if role in e.gpu.kern:
            f = e.gpu.kern[role]
            print(f"fp32 pair={pair:9s} {build} {e.gpu.names[role]}: {getattr(f, 'num_regs', '?')} registers, "
                  f"{getattr(f, 'local_size_bytes', '?')} B local")
PY
      timeout -k 5 50 nagare bench sph --backend cupy --out "$d" --min-time 0.25 --case dambreak3d-1M-fp32 \
        --only "VL float4 " 2>&1 | tail -12
      python3 - "$d/sph.json" <<'PY' 2>&1 | tee "$d/phases.txt"
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    x = r.get("extra", {})
    ph = " ".join(f"{k}={v:.3f}" for k, v in r.get("phases", {}).items())
    per = (r.get("phases", {}).get("list", 0.0) * r.get("steps", 0) / x["rebuilds"]) if x.get("rebuilds") else float("nan")
    print(f"{r['case']:22s} {r['label']:26s} {r.get('ms_per_step', float('nan')):7.3f} ms/step  {ph}  "
          f"rebuilds={x.get('rebuilds')} list/rebuild≈{per:.3f} ms late={x.get('verlet_late_interactions')} "
          f"list={x.get('mean_list_length')}")
PY
      cp "$OUT/info.txt" "$d/" 2>/dev/null
      tar czf "$OUT/sph-fast2.tgz" -C "$OUT" sph-fast2 && rm -rf "$d" ;;
    stencil-perf)
      d="$OUT/stencil-perf"
      timeout 200 python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu tests/unit/test_stencil_gpu.py \
        tests/validation/test_diffusion3d_kernels.py tests/validation/test_wave2d.py \
        "tests/equivalence/test_registry.py" -k "stencil or autotune or diffusion3d or wave2d or unroll or hold" \
        2>&1 | tee "$d/gpu-tests.log" | tail -12
      timeout 150 python3 -m nagare.engine.stencil.bench --json "$d/stencil.json" --markdown "$d/stencil.md" \
        2>&1 | tee "$d/bench.txt" | tail -32
      timeout 60 ncu --clock-control none --kernel-name regex:nagare_diffusion7 \
        --metrics dram__bytes.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
        python3 tools/stencil_ncu.py --json "$d/stencil.json" 2>&1 | tee "$d/ncu.txt" \
        | grep -E "stencil_ncu|nagare_diffusion7|dram__bytes|gpu__time|warps_active|registers" | head -90 ;;
    compact-tile)
      d="$OUT/compact-tile"
      timeout 65 python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu tests/equivalence/test_compact_tile_gpu.py \
        tests/equivalence/test_registry.py -k "test_tile or scan-tile" 2>&1 | tee "$d/gpu-tests.log" | tail -6
      for tool in memcheck racecheck; do
        timeout 15 compute-sanitizer --tool $tool --error-exitcode 3 python3 tools/compact_grid.py --check \
          2>&1 | tee "$d/sanitizer-$tool.txt" | tail -3
      done
      timeout 55 python3 tools/compact_grid.py 2>&1 | tee "$d/grid.md" | tail -32 ;;
    compact-stream)
      d="$OUT/compact-stream"
      # shellcheck disable=SC2086
      timeout 75 python3 -m pytest -q -o addopts="" -p no:xvfb -m gpu ${STREAM_TESTS:-tests/equivalence/test_compact_stream_gpu.py \
        tests/equivalence/test_compact_gpu.py tests/equivalence/test_registry.py} -k "stream" 2>&1 \
        | tee "$d/gpu-tests.log" | tail -8
      for tool in memcheck racecheck; do
        timeout 20 compute-sanitizer --tool $tool --error-exitcode 3 python3 tools/compact_grid.py --check \
          --solvers stream 2>&1 | tee "$d/sanitizer-$tool.txt" | tail -3
      done
      # shellcheck disable=SC2086
      timeout 60 python3 tools/compact_grid.py --solvers scan window stream --reps 3 --no-gtsv2 ${STREAM_GRID:-} 2>&1 \
        | tee "$d/grid.md" | tail -34
      cp "$OUT/info.txt" "$d/" 2>/dev/null
      tar czf "$OUT/compact-stream.tgz" -C "$OUT" compact-stream && rm -rf "$d" ;;
    compact-stream-grid)
      d="$OUT/compact-stream-grid"
      # shellcheck disable=SC2086
      timeout 165 python3 tools/compact_grid.py --solvers scan window stream --reps 3 ${STREAM_GRID:-} 2>&1 \
        | tee "$d/grid.md" | tail -34 ;;
    ncu-compact)
      d="$OUT/ncu-compact"
      timeout 240 ncu --clock-control none --kernel-name regex:"compact_(scan|tile)" \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
        --metrics dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sectors_op_read.sum,lts__t_requests_op_read.sum \
        python3 tools/compact_grid.py --sizes 4096 --precisions fp64 --boundaries closures --reps 1 --no-gtsv2 \
        2>&1 | tee "$d/ncu.txt" | grep -E "compact_(scan|tile)|DRAM Throughput|dram__throughput|Achieved Occupancy|warps_active|Stall|lts__t_|Registers|Duration" | head -120 ;;
    display-ab)
      d="$OUT/display-ab"
      export PYOPENGL_PLATFORM=egl __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
      export FONTCONFIG_PATH=${FONTCONFIG_PATH:-/opt/device-fonts/etc/fonts}
      for f in test_interop_gpu test_host_bytes_gpu test_view3d_gpu test_splat_gpu; do
        timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -p no:xvfb -o addopts= -rfEs tests/app/$f.py \
          > "$d/$f.log" 2>&1
        echo "$f: $(tail -n 1 "$d/$f.log")"
      done
      B="python3 -m nagare.app.gui.bench_display --app egl --backend cupy --targets --timeline --seconds 6"
      timeout 170 $B --out "$d/targets-default.json" > "$d/targets-default.log" 2>&1
      [ -n "${DISPLAY_AB_SCHEDULE:-}" ] && timeout 170 $B --worker pace_by_steps=0 --out "$d/targets-schedule.json" \
        > "$d/targets-schedule.log" 2>&1
      for f in "$d"/targets-*.log; do echo "== $(basename "$f")"; grep -h "overhead\|display on\|ratio" "$f"; done
      tar czf "$OUT/display-ab.tgz" -C "$OUT" display-ab && rm -rf "$d" ;;
    regrid)
      d="$OUT/regrid"
      # (a fresh machine compiles CuPy's kernels in the tests; the bench and the profile then load them)
      timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -p no:xvfb -o addopts= -rfEs \
        tests/unit/test_amr3d_regrid_device.py tests/unit/test_amr3d_group_desc.py tests/unit/test_amr3d_uploads.py \
        > "$d/gpu-tests.log" 2>&1
      echo "regrid gpu tests: $(tail -n 1 "$d/gpu-tests.log")"
      # a vortex-adapt cell runs >= 2000 steps (cases.VORTEX_MIN_STEPS, ~0.7 ms each): 4 cells of ~15 s
      timeout 150 nagare bench amr3d --backend cupy --case vortex-adapt --only naive-fused --out "$d" \
        > "$d/bench.log" 2>&1
      echo "bench exit $?"; grep -h -A9 "^## Regrids" "$d"/*.md | tail -n 6
      timeout 60 python3 tools/amr3d_regrid_profile.py --backend cupy > "$d/profile.txt" 2>&1
      echo "profile exit $?"; grep "^whole regrid" "$d/profile.txt" | grep -v serial
      tar czf "$OUT/regrid.tgz" -C "$OUT" regrid && rm -rf "$d" ;;
    regrid2)
      d="$OUT/regrid2"
      # a cold machine compiles the coupling module and the m = 9 ladders here (the later steps load them)
      timeout -k 5 115 python3 -m pytest -q -m gpu -p no:cacheprovider -p no:xvfb -o addopts= -rfEs --durations=5 \
        tests/unit/test_amr3d_rows_build.py tests/unit/test_amr3d_regrid_device.py tests/unit/test_amr3d_uploads.py \
        "tests/equivalence/test_amr3d_coupling_gpu.py::test_fused_coupling_equals_the_split_launches" -k "tree3 or not coupling_gpu" \
        > "$d/gpu-tests.log" 2>&1
      echo "regrid2 gpu tests exit $?: $(tail -n 1 "$d/gpu-tests.log")"
      timeout -k 5 30 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -m gpu -p no:cacheprovider \
        -p no:xvfb -o addopts= tests/unit/test_amr3d_rows_build.py -k sanitizer_case > "$d/sanitizer-memcheck.txt" 2>&1
      echo "memcheck exit $?: $(grep -h "ERROR SUMMARY\|passed\|failed" "$d/sanitizer-memcheck.txt" | tail -n 2 | tr '\n' ' ')"
      # a vortex-adapt cell runs >= 2000 steps (~0.55 ms each) and its regrids: 4 cells of ~15 s
      timeout -k 5 70 nagare bench amr3d --backend cupy --case vortex-adapt --only naive-fused --out "$d/bench" \
        > "$d/bench.log" 2>&1
      echo "bench exit $?"; grep -h -A9 "^## Regrids" "$d"/bench/*.md | tail -n 6
      timeout -k 5 20 python3 tools/amr3d_regrid_profile.py --backend cupy --storage fp16 --graph on --steps 2 \
        --repeats 2 --in-run 6 > "$d/profile-fp16-graph.txt" 2>&1
      echo "profile exit $?"; grep "^select\|^whole regrid\|^in a run" "$d/profile-fp16-graph.txt" | grep -v serial
      cp "$OUT/info.txt" "$d/" 2>/dev/null
      tar czf "$OUT/regrid2.tgz" -C "$OUT" regrid2 && rm -rf "$d" ;;
    amr3d-coupling)
      d="$OUT/amr3d-coupling"
      coupling_checks "$d" 70 25 sanitizer_case
      timeout -k 5 35 python3 tools/amr3d_coupling_profile.py --steps 20 > "$d/profile-three-levels.txt" 2>&1
      echo "profile three-levels exit $?"; grep -h "^\[\|^summary\|extra buffers" "$d/profile-three-levels.txt"
      timeout -k 5 45 python3 tools/amr3d_coupling_profile.py --preset amr3d-sphere-re100 --steps 10 \
        > "$d/profile-sphere.txt" 2>&1
      echo "profile sphere exit $?"; grep -h "^\[\|^summary\|extra buffers" "$d/profile-sphere.txt"
      timeout -k 5 35 nagare bench amr3d --backend cupy --case three-levels --only naive-fused --min-time 0.3 \
        --out "$d/bench" > "$d/bench.log" 2>&1
      echo "bench exit $?"; tail -n 12 "$d/bench.log"
      cp "$OUT/info.txt" "$d/" 2>/dev/null
      tar czf "$OUT/amr3d-coupling.tgz" -C "$OUT" amr3d-coupling && rm -rf "$d" ;;
    amr3d-interp)
      d="$OUT/amr3d-interp"
      coupling_checks "$d" 150 60 "sanitizer_case and native"
      timeout -k 5 33 python3 tools/amr3d_coupling_profile.py --preset amr3d-sphere-re100 --steps 8 --before \
        --lanes 1,3 --device-time > "$d/profile-sphere.txt" 2>&1
      echo "profile sphere exit $?"; grep -h "^\[\|^summary" "$d/profile-sphere.txt"
      timeout -k 5 16 ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
        -k regex:interpolate -c 3 python3 tools/amr3d_coupling_profile.py --preset amr3d-sphere-re100 --steps 1 \
        --coupling fused --lanes 3 > "$d/ncu-interpolate-sphere.txt" 2>&1
      echo "ncu exit $?"; grep -E "amr3d_interpolate_rows|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|Compute \(SM\)|No Eligible|Issued Warp" \
        "$d/ncu-interpolate-sphere.txt" | head -30
      timeout -k 5 16 python3 tools/amr3d_coupling_profile.py --steps 10 --coupling fused --before --lanes 3 \
        > "$d/profile-three-levels.txt" 2>&1
      echo "profile three-levels exit $?"; grep -h "^\[\|^summary" "$d/profile-three-levels.txt"
      cp "$OUT/info.txt" "$d/" 2>/dev/null
      tar czf "$OUT/amr3d-interp.tgz" -C "$OUT" amr3d-interp && rm -rf "$d" ;;
    *) echo "gpu-check: unknown stage $stage" ;;
  esac
done

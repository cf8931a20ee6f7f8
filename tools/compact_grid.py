"""The fused compact derivative's target grid (issue 39) as one table, on the GPU (CuPy): x and y lines ×
1024², 2048², 4096² × fp32, fp64 × periodic, closures — GB/s of ``solver = scan``, ``scan-tile``, ``window``
and ``stream`` (kernel = fused; ``--solvers`` picks) as % of the device's copy bandwidth
(engine/device.copy_bandwidth: read + write), and
each against cuSPARSE gtsv2StridedBatch (solver = gtsv2 with the stencil right-hand side: the time ratio).
A derivative moves 2·n²·itemsize bytes (read f, write f'). Every cell: the engine's Derivative operator,
timed as the tuner and `nagare bench stencil` time kernels (engine/autotune/measure.py): batches of
back-to-back calls between two CUDA events, a hold kernel queued in front so the batch waits in the stream
and the events time the GPU, not Python's ~30 µs of dispatch a call (a single call between two events
timed exactly that at 1024² and 2048²); the median per-call time of `--reps` batches. The calls rotate
over enough (f, f') pairs that a batch's data is ≥ 4× the L2 (`--l2-mib`), so every call reads from and
writes to DRAM, as a derivative inside a solver step does.

    python tools/compact_grid.py [--sizes 1024 2048 4096] [--reps 10] [--no-gtsv2]
    python tools/compact_grid.py --check     # one small case a direction (compute-sanitizer runs)
    ncu -k regex:compact_ ... python tools/compact_grid.py --sizes 4096 --precisions fp64 --boundaries closures \
        --reps 1 --no-gtsv2                   # 18 launches: scan, scan-tile and window, x and y (3 each)
    python tools/compact_grid.py --window-segment 128 256   # an A/B of window's rows a thread (fp64, fp32)
    python tools/compact_grid.py --solvers scan window stream   # some of the fused solvers (and --check: theirs)

Targets (issue 39): median ≥ 80 % of copy over the grid, no cell below 65 %, y ≥ 0.9× x, ≥ 1.5× gtsv2.
"""
from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np
from nagare.engine.autotune.measure import batch_size, host_ms_per_launch, time_batches
from nagare.engine.autotune.timers import EventTimer
from nagare.engine.backend import get_backend
from nagare.engine.compact import schemes, tridiag
from nagare.engine.compact.operator import Derivative
from nagare.engine.compact.solvers import scan, stream, tile, window
from nagare.engine.device import copy_bandwidth, device_info

FUSED = ("scan", "scan-tile", "window", "stream")


def _timer(cp, reps: int):
    """Median per-call ms of ``reps`` held batches (engine/autotune/measure.py) of ``calls()``'s list of
    launches, each batch about BATCH_MS of GPU time or one pass over the list, whichever is longer."""
    timer = EventTimer(cp)

    def timeit(calls: list) -> float:
        for c in calls[:2]:
            c()
        cp.cuda.Device().synchronize()
        host = host_ms_per_launch(calls[0], n=4)
        ring = itertools.cycle(calls)
        est = time_batches(lambda: next(ring)(), timer, batch=len(calls), batches=1, ref_ms=None, host_ms=host)[0]
        batch = max(len(calls), batch_size(est))
        return float(np.median(time_batches(lambda: next(ring)(), timer, batch=batch, batches=reps,
                                            ref_ms=est, host_ms=host)))

    return timeit


def _buffers(cp, f, l2_bytes: int) -> list:
    """(f, f') pairs, copies of f, whose total is at least 4× the L2: a cycle of calls over them misses it."""
    pairs = max(1, -(-4 * l2_bytes // (2 * f.nbytes)))
    return [(f if k == 0 else f.copy(), cp.empty_like(f)) for k in range(pairs)]


def _operator(be, n: int, axis: str, boundary: str, dtype, selection: dict):
    return Derivative(shape=(n, n), axis=axis, h=1.0 / n, boundary=boundary, delta=0.0, dtype=dtype,
                      selection=selection, backend=be, stream=None)


def _selection(solver: str) -> dict:
    kernel = "fused" if solver in FUSED else "cuda"
    return {"solver": solver, "y-direction": "strided", "kernel": kernel}


def check(which=FUSED) -> int:
    """One small case a direction and boundary (fp64, odd sizes, more tiles than one block holds): the
    tile kernel's output against the scan mirror, the window kernel's (several segments, in place too)
    against the window mirror, the stream kernel's (several windows of several warps, in place too) against
    the stream mirror — what compute-sanitizer's memcheck/racecheck run. ``which``: the solvers checked."""
    cp = get_backend("cupy").xp
    rng = np.random.default_rng(1)
    n, nsys = 97, 13
    for boundary in schemes.BOUNDARIES if "scan-tile" in which else ():
        p = scan.plan(tridiag.factorise(*schemes.bands(n, boundary), boundary == "periodic"))
        dev = tile.DeviceTile(p, np.float64)
        for layout in ("x", "y"):
            shape = (nsys, n) if layout == "x" else (n, nsys)
            a = rng.standard_normal(shape)
            out = cp.empty(shape)
            ss, es = (n, 1) if layout == "x" else (1, nsys)
            dev.derivative(cp.asarray(a), out, nsys, ss, es, 0.1)
            got = cp.asnumpy(out)
            want = scan.derivative(p, a if layout == "x" else a.T, 0.1, boundary)
            np.testing.assert_array_equal(got if layout == "x" else got.T, want)
            print(f"check {layout}-lines {boundary}: ok")
    n = 300
    for boundary in schemes.BOUNDARIES if "window" in which else ():
        wp = window.plan(tridiag.factorise(*schemes.bands(n, boundary), boundary == "periodic"), np.float64)
        dev = window.DeviceWindow(wp, np.float64)
        for layout in ("x", "y"):
            shape = (nsys, n) if layout == "x" else (n, nsys)
            a = rng.standard_normal(shape)
            ss, es = (n, 1) if layout == "x" else (1, nsys)
            want = window.derivative(window.for_lines(wp, nsys), a if layout == "x" else a.T, 0.1, boundary)
            src = cp.asarray(a)
            for dst in (cp.empty(shape), src):  # out of place, then in place (the work array)
                dev.derivative(src, dst, nsys, ss, es, 0.1)
                got = cp.asnumpy(dst)
                np.testing.assert_array_equal(got if layout == "x" else got.T, want)
            print(f"check window {layout}-lines {boundary}: ok")
    n, nsys = 1300, 45  # 45 lines: 8-warp windows of 256 rows, 6 of them; a second, partial group of lanes
    for boundary in schemes.BOUNDARIES if "stream" in which else ():
        sp = window.plan(tridiag.factorise(*schemes.bands(n, boundary), boundary == "periodic"), np.float64)
        dev = stream.DeviceStream(sp, np.float64)
        for layout in ("x", "y"):
            shape = (nsys, n) if layout == "x" else (n, nsys)
            a = rng.standard_normal(shape)
            ss, es = (n, 1) if layout == "x" else (1, nsys)
            want = stream.derivative(sp, a if layout == "x" else a.T, 0.1, boundary)
            src = cp.asarray(a)
            for dst in (cp.empty(shape), src):  # out of place, then in place (the work array)
                dev.derivative(src, dst, nsys, ss, es, 0.1)
                got = cp.asnumpy(dst)
                np.testing.assert_array_equal(got if layout == "x" else got.T, want)
            print(f"check stream {layout}-lines {boundary}: ok")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--reps", type=int, default=10, help="timed batches a cell (their median)")
    ap.add_argument("--l2-mib", type=int, default=60,
                    help="the L2 the rotated buffers must exceed 4× (H100/H200: 50 MiB)")
    ap.add_argument("--dirs", nargs="+", default=["x", "y"], choices=["x", "y"])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "fp64"], choices=["fp32", "fp64"])
    ap.add_argument("--boundaries", nargs="+", default=["periodic", "closures"], choices=["periodic", "closures"])
    ap.add_argument("--no-gtsv2", action="store_true")
    ap.add_argument("--tile-threads", type=int,
                    help=f"scan-tile's cap on a block's threads (default {tile.MAX_THREADS})")
    ap.add_argument("--tile-smem-kib", type=int, help=f"scan-tile's cap on a block's two buffers, KiB "
                                                     f"(default {tile.TILE_SMEM // 1024})")
    ap.add_argument("--window-segment", type=int, nargs=2, metavar=("FP64", "FP32"),
                    help="window's rows a thread in every launch (default: "
                         f"{window.SEGMENT[np.dtype(np.float64)]} {window.SEGMENT[np.dtype(np.float32)]}, shorter "
                         "in a launch over few lines: window.for_lines)")
    ap.add_argument("--stream-rows", type=int, nargs=2, metavar=("FP64", "FP32"), choices=(16, 32),
                    help="stream's rows a thread (default: "
                         f"{stream.ROWS[np.dtype(np.float64)]} {stream.ROWS[np.dtype(np.float32)]})")
    ap.add_argument("--stream-window", type=int, nargs=2, metavar=("ROWS", "FEW"),
                    help=f"stream's rows a block (default: {stream.WINDOW} {stream.WINDOW_FEW}; at most 512 at 32 "
                         "rows a thread, 1024 at 16)")
    ap.add_argument("--solvers", nargs="+", default=list(FUSED), choices=FUSED,
                    help="the fused solvers timed (the first is the base of the ratios) and --check'ed")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    try:
        import cupy as cp  # optional dependency: the GPU backend
    except ImportError:
        print("compact_grid: needs CuPy and an NVIDIA GPU (pip install nagare[gpu])", file=sys.stderr)
        return 2
    if args.check:
        return check(tuple(args.solvers))
    if args.tile_threads:  # an A/B of the tile rule's caps (wider y-tiles: whole sectors, fewer blocks an SM)
        tile.MAX_THREADS = args.tile_threads
    if args.tile_smem_kib:
        tile.TILE_SMEM = args.tile_smem_kib * 1024
    if args.window_segment:
        window.SEGMENT[np.dtype(np.float64)], window.SEGMENT[np.dtype(np.float32)] = args.window_segment
        window.LAUNCH_WARPS = 0  # every launch at these rows a thread: the A/B measures the length it names
    if args.stream_rows:
        stream.ROWS[np.dtype(np.float64)], stream.ROWS[np.dtype(np.float32)] = args.stream_rows
    if args.stream_window:
        stream.WINDOW, stream.WINDOW_FEW = args.stream_window
    be = get_backend("cupy")
    bw = copy_bandwidth(be)
    timeit = _timer(cp, args.reps)
    print(f"{device_info(be).name}: copy bandwidth {bw / 1e9:.1f} GB/s (read + write); CuPy {cp.__version__}; "
          f"scan-tile caps: {tile.MAX_THREADS} threads, {tile.TILE_SMEM // 1024} KiB a block; window rows a thread "
          f"{window.SEGMENT[np.dtype(np.float64)]} fp64, {window.SEGMENT[np.dtype(np.float32)]} fp32; stream "
          f"rows a thread {stream.ROWS[np.dtype(np.float64)]} fp64, {stream.ROWS[np.dtype(np.float32)]} fp32 in "
          f"windows of {stream.WINDOW} rows ({stream.WINDOW_FEW} for few lines)")
    fused = tuple(args.solvers)
    base = fused[0]
    solvers = fused + (() if args.no_gtsv2 else ("gtsv2",))
    head = "| dir | n² | prec | boundary | " + " | ".join(f"{s} ms" for s in solvers)
    head += " | " + " | ".join(f"{s} % copy" for s in fused)
    head += "".join(f" | {s} / {base}" for s in fused[1:])
    head += "".join("" if args.no_gtsv2 else f" | {s} × gtsv2" for s in fused) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    pct: dict = {s: {} for s in fused}
    worst_gtsv2 = {s: np.inf for s in fused}
    for axis in args.dirs:
        for n in args.sizes:
            for prec in args.precisions:
                dtype = np.float32 if prec == "fp32" else np.float64
                f = cp.asarray(np.random.default_rng(n).standard_normal((n, n)).astype(dtype))
                bufs = _buffers(cp, f, args.l2_mib << 20)
                nbytes = 2 * f.nbytes
                for boundary in args.boundaries:
                    ms = {}
                    for s in solvers:
                        op = _operator(be, n, axis, boundary, dtype, _selection(s))
                        ms[s] = timeit([lambda op=op, a=a, b=b: op(a, b) for a, b in bufs])
                    cells = [f"{ms[s]:.4f}" for s in solvers]
                    for s in fused:
                        pct[s][(axis, n, prec, boundary)] = 100 * nbytes / (ms[s] * 1e-3) / bw
                    cells += [f"{pct[s][(axis, n, prec, boundary)]:.1f}" for s in fused]
                    cells += [f"{ms[base] / ms[s]:.2f}" for s in fused[1:]]
                    if not args.no_gtsv2:
                        for s in fused:
                            ratio = ms["gtsv2"] / ms[s]
                            worst_gtsv2[s] = min(worst_gtsv2[s], ratio)
                            cells.append(f"{ratio:.1f}")
                    print(f"| {axis} | {n} | {prec} | {boundary} | " + " | ".join(cells) + " |", flush=True)
    for s in fused:
        vals = np.array(list(pct[s].values()))
        xs = np.array([v for k, v in pct[s].items() if k[0] == "x"])
        ys = np.array([v for k, v in pct[s].items() if k[0] == "y"])
        ratio = f"{np.median(ys) / np.median(xs):.2f}" if len(xs) and len(ys) else "-"
        print(f"{s}: median {np.median(vals):.1f} % of copy (target ≥ 80), lowest cell {vals.min():.1f} % "
              f"(target ≥ 65), y / x median {ratio} (target ≥ 0.9)")
    if not args.no_gtsv2:
        for s, worst in worst_gtsv2.items():
            print(f"{s} against gtsv2: at least {worst:.1f}× in every cell (target ≥ 1.5×)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

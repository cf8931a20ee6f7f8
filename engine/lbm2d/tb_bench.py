"""Stand-alone timing of the P1 temporal-blocking grid on one GPU (before/besides `nagare bench`).

    python -m nagare.engine.lbm2d.tb_bench --n 4096 --steps 64 [--fp64] [--kernels stb,srtb-ws]

Scene: P1's plane Poiseuille case (walls top/bottom, periodic left/right, body force), fp32.
Prints one row per (kernel, ts, tr, tile): MLUPS, effective GB/s at 72 B (fp32) / 144 B (fp64)
per update, and the ratio to the single-step DRAM roofline given by --copy-gbs (measured copy
bandwidth, read + write), or "cannot run: <reason>" — P1's Fig. 8/10 as a table.
"""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import numpy as np

from . import temporal_blocking as tb


def poiseuille(nx: int, ny: int, dtype):
    mask = np.zeros((ny, nx), np.uint8)
    mask[0, :] = 1
    mask[-1, :] = 1
    w = np.array([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4, dtype=dtype)
    f = np.ascontiguousarray(np.broadcast_to(w[:, None, None], (9, ny, nx)).astype(dtype))
    params = {"tau": 0.8, "force": (1e-6, 0.0), "u_wall": (0.0, 0.0), "dtype": np.dtype(dtype)}
    preset = SimpleNamespace(boundaries=SimpleNamespace(x="periodic", y="walls"),
                             physics=SimpleNamespace(dtype=np.dtype(dtype), collision="bgk"))
    return f, mask, params, preset


def time_config(cp, sel, f_host, mask, params, preset, steps: int, repeats: int = 3) -> float:
    """Best-of-`repeats` seconds for `steps` steps (after one warm-up call)."""
    step = tb.make_stepper(cp, sel, preset, mask, params)
    a = cp.asarray(f_host)
    b = cp.empty_like(a)
    step(a, b, steps)  # warm-up (compiles, sets attributes)
    best = float("inf")
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        step(a, b, steps)
        stop.record()
        stop.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="square grid side")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--fp64", action="store_true")
    ap.add_argument("--kernels", default=",".join(tb.KERNELS))
    ap.add_argument("--ts", default=",".join(map(str, tb.P1_TS)))
    ap.add_argument("--tr", default=",".join(map(str, tb.P1_TR)))
    ap.add_argument("--tiles", default=",".join(tb.P1_TILES))
    ap.add_argument("--copy-gbs", type=float, default=0.0, help="measured copy bandwidth (GB/s) for the roofline ratio")
    args = ap.parse_args(argv)
    import cupy as cp

    dtype = np.float64 if args.fp64 else np.float32
    f, mask, params, preset = poiseuille(args.n, args.n, dtype)
    bpu = 2 * 9 * np.dtype(dtype).itemsize
    rows = tb.p1_grid(preset, kernels=tuple(args.kernels.split(",")),
                      ts_values=tuple(int(v) for v in args.ts.split(",")),
                      tr_values=tuple(int(v) for v in args.tr.split(",")), tiles=tuple(args.tiles.split(",")))
    print(f"# {args.n}x{args.n} {np.dtype(dtype).name}, {args.steps} steps, {bpu} B/update single-step model")
    print("kernel\tts\ttr\ttile\tMLUPS\teff_GB/s\tx_roofline\tnote")
    for sel, reason in rows:
        head = f"{sel['kernel']}\t{sel['ts']}\t{sel['tr']}\t{sel['tile']}"
        if reason is None:
            try:
                secs = time_config(cp, sel, f, mask, params, preset, args.steps)
            except Exception as exc:  # a launch failure is a result of the grid, not a crash of the table
                reason = f"{type(exc).__name__}: {exc}"
        if reason is not None:
            print(f"{head}\t\t\t\tcannot run: {reason}")
            continue
        mlups = args.n * args.n * args.steps / secs / 1e6
        gbs = mlups * 1e6 * bpu / 1e9
        ratio = f"{gbs / args.copy_gbs:.2f}" if args.copy_gbs else ""
        print(f"{head}\t{mlups:.0f}\t{gbs:.0f}\t{ratio}\t", flush=True)


if __name__ == "__main__":
    main()

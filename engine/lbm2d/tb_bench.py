"""Stand-alone timing of the P1 temporal-blocking grid on one GPU (before/besides `nagare bench`).

    python -m nagare.engine.lbm2d.tb_bench --n 4096 --steps 64 [--fp64] [--kernels stb,srtb-ws]
    python -m nagare.engine.lbm2d.tb_bench --n 320,1024,4096,8192 --jobs 16   # P1's four sizes

Every configuration is its own NVRTC module (tile sizes, ts and tr are template arguments): the full
grid is 182 compilations, so ``--jobs N`` compiles them first in N processes (filling CuPy's on-disk
kernel cache), and the sizes then share the compiled modules.

Scene: P1's plane Poiseuille case (walls top/bottom, periodic left/right, body force), fp32.
Prints one row per (kernel, ts, tr, tile): MLUPS, effective GB/s at 72 B (fp32) / 144 B (fp64)
per update, and the ratio to the single-step DRAM roofline given by --copy-gbs (measured copy
bandwidth, read + write), or "cannot run: <reason>" — P1's Fig. 8/10 as a table.
"""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import numpy as np

from .. import cuda
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


def time_config(cp, sel, f_host, mask, params, preset, steps: int, repeats: int = 3, info: dict | None = None) -> float:
    """Best-of-`repeats` seconds for `steps` steps (after one warm-up call); ``info`` receives the
    compiled kernel's registers, local (spill) bytes and dynamic shared memory."""
    step = tb.make_stepper(cp, sel, preset, mask, params)
    a = cp.asarray(f_host)
    b = cp.empty_like(a)
    step(a, b, steps)  # warm-up (compiles, sets attributes)
    if info is not None:
        info.update(regs=int(step.kernel.num_regs), spill=step.spill_bytes, smem=step.shared_bytes)
    best = float("inf")
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        step(a, b, steps)
        stop.record()
        stop.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return best


def precompile(rows, fp64: bool, jobs: int) -> None:
    """Compile the runnable configurations of ``rows`` ((selection, reason) pairs) in ``jobs``
    processes (engine/cuda.py precompile); a failure is reported again, as "cannot run", when the
    grid is timed."""
    dtype = np.float64 if fp64 else np.float32
    specs = [tb.kernel_spec(sel, dtype) for sel, reason in rows if reason is None]
    failed = cuda.precompile(specs, jobs)
    print(f"# precompiled {len(specs) - len(failed)} of {len(specs)} configurations in {jobs} processes", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="4096", help="square grid sides, comma-separated")
    ap.add_argument("--jobs", type=int, default=0, help="compile the grid first in this many processes")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--fp64", action="store_true")
    ap.add_argument("--kernels", default=",".join(tb.KERNELS))
    ap.add_argument("--ts", default=",".join(map(str, tb.P1_TS)))
    ap.add_argument("--tr", default=",".join(map(str, tb.P1_TR)))
    ap.add_argument("--tiles", default=",".join(tb.P1_TILES))
    ap.add_argument("--copy-gbs", type=float, default=0.0, help="measured copy bandwidth (GB/s) for the roofline ratio")
    args = ap.parse_args(argv)
    import cupy as cp  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

    dtype = np.float64 if args.fp64 else np.float32
    bpu = 2 * 9 * np.dtype(dtype).itemsize
    sizes = [int(v) for v in args.n.split(",")]
    grid_args = dict(kernels=tuple(args.kernels.split(",")), ts_values=tuple(int(v) for v in args.ts.split(",")),
                     tr_values=tuple(int(v) for v in args.tr.split(",")), tiles=tuple(args.tiles.split(",")))
    if args.jobs > 1:
        precompile(tb.p1_grid(poiseuille(64, 64, dtype)[3], **grid_args), args.fp64, args.jobs)
    for n in sizes:
        f, mask, params, preset = poiseuille(n, n, dtype)
        rows = tb.p1_grid(preset, **grid_args)
        print(f"# {n}x{n} {np.dtype(dtype).name}, {args.steps} steps, {bpu} B/update single-step model")
        print("kernel\tts\ttr\ttile\tMLUPS\teff_GB/s\tx_roofline\tnote")
        for sel, reason in rows:
            head = f"{sel['kernel']}\t{sel['ts']}\t{sel['tr']}\t{sel['tile']}"
            info = {}
            if reason is None:
                try:
                    secs = time_config(cp, sel, f, mask, params, preset, args.steps, info=info)
                except Exception as exc:  # a launch failure is a result of the grid, not a crash of the table
                    reason = f"{type(exc).__name__}: {exc}"
            if reason is not None:
                print(f"{head}\t\t\t\tcannot run: {reason}")
                continue
            mlups = n * n * args.steps / secs / 1e6
            gbs = mlups * 1e6 * bpu / 1e9
            ratio = f"{gbs / args.copy_gbs:.2f}" if args.copy_gbs else ""
            note = f"{info['regs']} regs, {info['smem'] / 1024:.1f} KB smem"
            if info["spill"]:
                note += f", {info['spill']} B spill"
            print(f"{head}\t{mlups:.0f}\t{gbs:.0f}\t{ratio}\t{note}", flush=True)
        f = mask = None
        cp.get_default_memory_pool().free_all_blocks()

if __name__ == "__main__":
    main()

"""P2's experiment on this GPU: launch configurations of the 7-point fp32 diffusion stencil.

For each mesh (P2: 32³, 64³, 256³, 512³ and the thin 8×512×512, written nx×ny×nz) it

1. times *every* valid launch configuration of P2's space offline (exhaustive search: CUDA
   events around batches of launches, median of several batches, warm-up excluded),
2. times P2's fixed configuration (128,1,1) with z-march 2 the same way,
3. runs the live auto-tuner (the ``device-autotune`` loop engine, no cache) on a real run until it
   settles, for the default (exhaustive) strategy and for greedy coordinate descent, and reports
   its pick, the pick's offline time against the exhaustive best, the calls it needed and its
   overhead in steps (Σ over tuning calls of (t_call − t_best)/t_best),

and reports GB/s at the ideal 8 bytes per point update (read f once, write fn once) and the
percentage of the measured copy bandwidth (engine/device.py).

Run:  python -m nagare.engine.stencil.bench [--sizes 32,32,32 8,512,512] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

P2_SIZES = [(32, 32, 32), (64, 64, 64), (256, 256, 256), (512, 512, 512), (8, 512, 512)]  # (nx, ny, nz)
FIXED = {"bx": 128, "by": 1, "zmarch": 2}
BYTES_PER_POINT = 8  # fp32: one read + one write per point with ideal caching


_SPIN = r"""
extern "C" __global__ void nagare_spin(long long cycles)
{
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


def _busy(cp, ms: float) -> None:
    """Keep the GPU busy for about ``ms`` so the host can queue a whole batch behind it: small
    kernels then run back to back and the events time the kernels, not the host's launch rate."""
    if not hasattr(_busy, "kernel"):
        _busy.kernel = cp.RawModule(code=_SPIN).get_function("nagare_spin")
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        _busy.khz = int(props["clockRate"])
    _busy.kernel((1,), (1,), (np.int64(ms * _busy.khz),))


def _time_config(loop, cfg, f, fn, r, cp, batch: int, batches: int) -> float:
    """Median ms per launch over ``batches`` batches of ``batch`` launches (after 2 warm-ups)."""
    for _ in range(2):
        loop.run_with(cfg, f=f, fn=fn, r=r)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    samples = []
    for _ in range(batches):
        _busy(cp, 0.05 * batch + 0.2)  # ≥ the host's time to queue the batch (~30 µs per launch)
        start.record()
        for _ in range(batch):
            loop.run_with(cfg, f=f, fn=fn, r=r)
        end.record()
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) / batch)
    return statistics.median(samples)


def _live_tune(st, shape, f, fn, r, cp, strategy: str, max_calls: int = 20000) -> dict:
    from .loops import Loop

    loop = Loop(st, shape, np.float32, engine="device-autotune", xp=cp, tune_cache=None,
                tune={"strategy": strategy})
    t0 = time.perf_counter()
    a, b = f, fn
    for _ in range(max_calls):
        loop(f=a, fn=b, r=r)
        a, b = b, a
        if loop.tuner.done:
            break
    cp.cuda.get_current_stream().synchronize()
    wall = time.perf_counter() - t0
    t = loop.tuner
    return {"strategy": t.strategy, "pick": t.best, "calls": t.calls, "measured": len(t.results),
            "overhead_steps": t.overhead_calls(), "settled": t.done, "wall_s": wall,
            "invalid": {str(t.space.config(k)): why for k, why in t.invalid.items()}}


def bench_stencil(sizes=None, *, target_batch_ms: float = 2.0, batches: int = 5, strategies=("exhaustive", "descent"),
                  progress=None) -> dict:
    """Run the experiment on the current CUDA device; returns JSON-able results."""
    from ..autotune import stencil_space
    from ..backend import get_backend

    backend = get_backend("cupy")  # one-line BackendUnavailable without a GPU
    import cupy as cp

    from ..device import copy_bandwidth, device_info
    from .library import diffusion7
    from .loops import Loop

    bw = copy_bandwidth(backend)
    info = device_info(backend).as_dict()
    space = stencil_space()
    r = np.float32(0.1)
    rows = []
    for nx, ny, nz in sizes or P2_SIZES:
        shape = (nz, ny, nx)
        rng = np.random.default_rng(0)
        f = cp.asarray(rng.random(shape, dtype=np.float32))
        fn = cp.zeros_like(f)
        loop = Loop(diffusion7, shape, np.float32, engine="device", xp=cp)
        est = _time_config(loop, FIXED, f, fn, r, cp, 1, 3)
        batch = max(1, int(target_batch_ms / max(est, 1e-4)))
        table = {}
        for key in space.all_keys():
            cfg = space.config(key)
            if space.invalid_reason(cfg):
                continue
            table[key] = _time_config(loop, cfg, f, fn, r, cp, batch, batches)
        best_key = min(table, key=table.get)
        fixed_ms = table[space.key(FIXED)]
        points = nx * ny * nz

        def gbs(ms, points=points):
            return points * BYTES_PER_POINT / (ms * 1e-3) / 1e9

        row = {
            "mesh": f"{nx}x{ny}x{nz}", "points": points,
            "best": {"threads": [space.config(best_key)["bx"], space.config(best_key)["by"], 1],
                     "zmarch": space.config(best_key)["zmarch"], "ms": table[best_key],
                     "GB_s": gbs(table[best_key]), "pct_copy_bw": 100 * gbs(table[best_key]) * 1e9 / bw},
            "fixed_128_1_1_z2": {"ms": fixed_ms, "GB_s": gbs(fixed_ms), "pct_copy_bw": 100 * gbs(fixed_ms) * 1e9 / bw},
            "speedup_vs_fixed": fixed_ms / table[best_key],
            "autotune": [],
            "exhaustive_table_ms": {f"{k[0]},{k[1]},{k[2]}": v for k, v in table.items()},
        }
        for strategy in strategies:
            live = _live_tune(diffusion7, shape, f, fn, r, cp, strategy)
            pick = live["pick"]
            live["pick_ms_offline"] = table.get(space.key(pick)) if pick else None
            live["pick_vs_best"] = live["pick_ms_offline"] / table[best_key] if pick else None
            row["autotune"].append(live)
        rows.append(row)
        if progress:
            progress(row)
        del f, fn
        cp.get_default_memory_pool().free_all_blocks()
    return {"device": info, "copy_bandwidth_GB_s": bw / 1e9, "bytes_per_point": BYTES_PER_POINT,
            "stencil": "diffusion7 fp32 periodic", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}


def format_table(result: dict) -> str:
    """P2's table 2 plus the performance columns, as Markdown."""
    lines = [f"# P2 stencil benchmark — {result['device'].get('name')} ({result['date']})", "",
             f"7-point diffusion, fp32, periodic; {result['bytes_per_point']} B/point; measured copy bandwidth "
             f"{result['copy_bandwidth_GB_s']:.0f} GB/s", "",
             "| mesh | best threads | z-march | GB/s | % copy BW | (128,1,1)/2 GB/s | % copy BW | speed-up | "
             "autotune pick (strategy) | pick/best | calls | overhead (steps) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        b, fx = row["best"], row["fixed_128_1_1_z2"]
        for i, live in enumerate(row["autotune"]):
            pick = live["pick"]
            pick_txt = f"({pick['bx']},{pick['by']},1)/{pick['zmarch']} ({live['strategy']})" if pick else "—"
            ov = live["overhead_steps"]
            head = (f"| {row['mesh']} | ({b['threads'][0]},{b['threads'][1]},1) | {b['zmarch']} | {b['GB_s']:.0f} | "
                    f"{b['pct_copy_bw']:.1f} | {fx['GB_s']:.0f} | {fx['pct_copy_bw']:.1f} | "
                    f"{row['speedup_vs_fixed']:.2f}× |") if i == 0 else "| | | | | | | | |"
            ratio = f"{live['pick_vs_best']:.3f}" if live.get("pick_vs_best") is not None else "—"
            ov_txt = f"{ov:.0f}" if ov is not None else "—"
            lines.append(f"{head} {pick_txt} | {ratio} | {live['calls']} | {ov_txt} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="nagare bench stencil", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="*", help="meshes as nx,ny,nz (default: P2's five)")
    p.add_argument("--json", help="write the full results (with every configuration's time) here")
    p.add_argument("--markdown", help="write the table here")
    args = p.parse_args(argv)
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes] if args.sizes else None

    def progress(row):
        print(f"  {row['mesh']}: best {row['best']['threads']}/{row['best']['zmarch']} "
              f"{row['best']['GB_s']:.0f} GB/s ({row['best']['pct_copy_bw']:.1f}%), fixed "
              f"{row['fixed_128_1_1_z2']['GB_s']:.0f} GB/s", file=sys.stderr, flush=True)

    result = bench_stencil(sizes, progress=progress)
    table = format_table(result)
    print(table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1, default=str)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

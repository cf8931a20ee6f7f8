"""P2's experiment on this GPU: launch configurations of the 7-point fp32 diffusion stencil.

For each mesh (P2: 32³, 64³, 256³, 512³ and the thin 8×512×512, written nx×ny×nz) it

1. times *every* valid launch configuration of the tuner's space — its kernel shapes, z-marching
   (bx, by, zmarch), plain (block bx × by × bz, one thread per point) and vec (V points per thread,
   vector loads, x-neighbours by shuffles; block bx × by, z-march) — offline (exhaustive search) with
   the tuner's own measurement method (engine/autotune/measure.py): batches of back-to-back
   launches between CUDA events, a hold in front of each batch when the kernel is launch-bound,
   the batch size from the same rule, median of several batches;
2. times P2's fixed configuration (128,1,1) with z-march 2 the same way;
3. runs the live auto-tuner (the ``device-autotune`` loop engine, no cache) on a real run until it
   settles, for the default (exhaustive) strategy and for greedy coordinate descent;
4. re-measures the exhaustive top 3, the tuners' picks and the fixed configuration in an
   interleaved run-off (round-robin batches, so GPU clock drift hits all alike) and reports
   pick / best from the run-off next to pick / best from the table — both are independent
   offline measurements, not the tuner's own numbers;
5. on the big meshes (≥ 2²⁴ points) measures amortisation directly: the device time of the first
   1,000 steps of a fresh auto-tuned run (tuning included) against 1,000 steps of the fixed
   configuration and of the best one;

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

from .. import backend as backends
from .. import device
from ..atomic import ExportError, output_writer, write_text_atomic
from ..autotune import ALL_STENCIL_SHAPES, STENCIL_SHAPES, EventTimer, measure, stencil_space
from .codegen import tile_smem_bytes, vec_choice
from .library import diffusion7
from .loops import Loop

P2_SIZES = [(32, 32, 32), (64, 64, 64), (256, 256, 256), (512, 512, 512), (8, 512, 512)]  # (nx, ny, nz)
FIXED = {"bx": 128, "by": 1, "zmarch": 2, "shape": "march"}
BYTES_PER_POINT = 8  # fp32: one read + one write per point with ideal caching
AMORTISE_STEPS = 1000
AMORTISE_MIN_POINTS = 1 << 24


def cfg_label(cfg: dict) -> str:
    """``(bx,by,1)/zmarch`` for a z-marching launch, ``plain (bx,by,bz)`` for the plain shape."""
    if cfg.get("shape", "march") == "plain":
        return f"plain ({cfg['bx']},{cfg['by']},{cfg['zmarch']})"
    if cfg.get("shape", "march") in ("tile", "vec"):
        return f"{cfg['shape']} ({cfg['bx']},{cfg['by']},1)/{cfg['zmarch']}"
    return f"({cfg['bx']},{cfg['by']},1)/{cfg['zmarch']}"


def _key_text(key) -> str:
    return ",".join(str(v) for v in key if v != "march")  # "128,1,2" (march) or "32,4,2,plain"


def _summary(cfg: dict, ms: float, gbs, bw: float, loop) -> dict:
    plain = cfg.get("shape", "march") == "plain"
    return {"shape": cfg.get("shape", "march"), "label": cfg_label(cfg),
            "threads": [cfg["bx"], cfg["by"], cfg["zmarch"] if plain else 1],
            "zmarch": None if plain else cfg["zmarch"], "unroll": loop.unroll_of(cfg), "ms": ms,
            "GB_s": gbs(ms), "pct_copy_bw": 100 * gbs(ms) * 1e9 / bw}


def _table(loop, space, f, fn, r, timer, batch, batches, est, host):
    table = {}
    ref = est
    for key in space.all_keys():
        cfg = space.config(key)
        if space.invalid_reason(cfg):
            continue
        go = loop.prepared(cfg, f=f, fn=fn, r=r)
        go()
        go()  # warm-up (first launch of an unrolled kernel, caches)
        table[key] = statistics.median(measure.time_batches(go, timer, batch=batch, batches=batches,
                                                            ref_ms=ref, host_ms=host))
        ref = min(ref, table[key])
    return table


def _runoff(loop, cfgs, f, fn, r, timer, batch, rounds, ref, host) -> list[float]:
    """Interleaved re-measurement: ``rounds`` rounds, each one batch of every configuration (rotated)."""
    gos = [loop.prepared(c, f=f, fn=fn, r=r) for c in cfgs]
    samples = [[] for _ in cfgs]
    for rnd in range(rounds):
        order = list(range(len(cfgs)))
        order = order[rnd % len(order):] + order[: rnd % len(order)]
        for i in order:
            samples[i] += measure.time_batches(gos[i], timer, batch=batch, batches=1, ref_ms=ref, host_ms=host)
    return [statistics.median(s) for s in samples]


def _live_tune(st, shape, f, fn, r, cp, strategy: str, shapes=None, max_calls: int = 200000) -> dict:
    loop = Loop(st, shape, np.float32, engine="device-autotune", xp=cp, tune_cache=None,
                tune={"strategy": strategy, **({"shapes": shapes} if shapes else {})})
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
            "batch": t.batch, "hold_ms": t.hold_ms_total, "overhead_ms": t.overhead_ms(),
            "overhead_steps": t.overhead_calls(), "settled": t.done, "wall_s": wall, "pick_ms_live": t.results.get(
                t.settled) if t.settled is not None else None,
            "invalid": len(t.invalid)}


def _amortise(st, shape, f, fn, r, cp, best_cfg, steps: int = AMORTISE_STEPS) -> dict:
    """Device time of the first ``steps`` steps: fresh auto-tuned run vs fixed vs best (events). All
    three go through the same ``Loop.__call__`` path, so the host side is alike."""
    def run(loop):
        a, b = f, fn
        start, end = cp.cuda.Event(), cp.cuda.Event()
        cp.cuda.get_current_stream().synchronize()
        t0 = time.perf_counter()
        start.record()
        for _ in range(steps):
            loop(f=a, fn=b, r=r)
            a, b = b, a
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end), (time.perf_counter() - t0) * 1e3

    fixed = Loop(st, shape, np.float32, engine="device", xp=cp, block=(FIXED["bx"], FIXED["by"]),
                 zmarch=FIXED["zmarch"])
    best = Loop(st, shape, np.float32, engine="device", xp=cp, block=(best_cfg["bx"], best_cfg["by"]),
                zmarch=best_cfg["zmarch"], shape_kind=best_cfg.get("shape", "march"))
    run(fixed)  # warm-up
    fixed_ms, fixed_wall = run(fixed)
    best_ms, best_wall = run(best)
    tuned = Loop(st, shape, np.float32, engine="device-autotune", xp=cp, tune_cache=None)
    tuned_ms, tuned_wall = run(tuned)
    t = tuned.tuner
    return {"steps": steps, "tuned_ms": tuned_ms, "fixed_ms": fixed_ms, "best_ms": best_ms,
            "tuned_wall_ms": tuned_wall, "fixed_wall_ms": fixed_wall, "best_wall_ms": best_wall,
            "settled": t.done, "settled_after_calls": len(t.tuning_calls) if t.done else None,
            "pick": t.best, "overhead_steps": (tuned_ms - best_ms) / (best_ms / steps),
            "amortised": tuned_ms <= fixed_ms}


def bench_stencil(sizes=None, *, batches: int = 5, runoff_rounds: int = 5, strategies=("exhaustive", "descent"),
                  amortise: bool = True, progress=None, shapes=None) -> dict:
    """Run the experiment on the current CUDA device; returns JSON-able results. ``shapes``: the
    kernel shapes of the searched space and of the live tuners (default: the tuner's,
    ``STENCIL_SHAPES``; add ``"tile"`` to include the tile shape)."""
    backend = backends.get_backend("cupy")  # one-line BackendUnavailable without a GPU
    import cupy as cp  # optional dependency (nagare[gpu]); the line above has said if it is missing

    bw = device.copy_bandwidth(backend)
    info = backend.device_info().as_dict()
    shapes = tuple(shapes or STENCIL_SHAPES)
    unknown = [s for s in shapes if s not in ALL_STENCIL_SHAPES]
    if unknown:
        raise ValueError(f"unknown kernel shape(s) {', '.join(unknown)}; allowed: {', '.join(ALL_STENCIL_SHAPES)}")

    def space_for(shape):
        """The live tuner's space on this grid: its kernel shapes (vec only where the grid allows it)."""
        return stencil_space(shapes=shapes, ndim=3,
                             tile_smem=lambda cfg: tile_smem_bytes(diffusion7, np.float32, cfg["bx"], cfg["by"]),
                             vec_reason=lambda cfg: vec_choice(diffusion7, shape)[1])

    timer = EventTimer(cp)
    r = np.float32(0.1)
    rows = []
    for nx, ny, nz in sizes or P2_SIZES:
        shape = (nz, ny, nx)
        space = space_for(shape)
        rng = np.random.default_rng(0)
        f = cp.asarray(rng.random(shape, dtype=np.float32))
        fn = cp.zeros_like(f)
        loop = Loop(diffusion7, shape, np.float32, engine="device", xp=cp)
        go = loop.prepared(FIXED, f=f, fn=fn, r=r)
        host = measure.host_ms_per_launch(go)  # also the warm-up
        # The probe, as the tuner's: two single-launch measurements of the fixed configuration.
        est = statistics.median(measure.time_batches(go, timer, batch=1, batches=2, host_ms=host))
        batch = measure.batch_size(est)
        table = _table(loop, space, f, fn, r, timer, batch, batches, est, host)
        best_key = min(table, key=table.get)
        fixed_ms = table[space.key(FIXED)]
        points = nx * ny * nz

        def gbs(ms, points=points):
            return points * BYTES_PER_POINT / (ms * 1e-3) / 1e9

        best_cfg = space.config(best_key)
        best_by_shape = {}
        for k in sorted(table, key=table.get):
            c = space.config(k)
            best_by_shape.setdefault(c.get("shape", "march"), _summary(c, table[k], gbs, bw, loop))
        row = {
            "mesh": f"{nx}x{ny}x{nz}", "points": points, "batch": batch, "host_ms_per_launch": host,
            "candidates": len(table),
            "best": _summary(best_cfg, table[best_key], gbs, bw, loop),
            "best_by_shape": best_by_shape,
            "fixed_128_1_1_z2": {"ms": fixed_ms, "GB_s": gbs(fixed_ms), "pct_copy_bw": 100 * gbs(fixed_ms) * 1e9 / bw},
            "speedup_vs_fixed": fixed_ms / table[best_key],
            "autotune": [],
            "exhaustive_table_ms": {_key_text(k): v for k, v in table.items()},
        }
        for strategy in strategies:
            live = _live_tune(diffusion7, shape, f, fn, r, cp, strategy, shapes)
            pick = live["pick"]
            live["pick_ms_table"] = table.get(space.key(pick)) if pick else None
            live["pick_vs_best_table"] = live["pick_ms_table"] / table[best_key] if pick else None
            row["autotune"].append(live)
        # Run-off: the exhaustive top 3, the picks and the fixed configuration, interleaved.
        top = sorted(table, key=table.get)[:3]
        keys = list(dict.fromkeys(top + [space.key(lv["pick"]) for lv in row["autotune"] if lv["pick"]]
                                  + [space.key(FIXED)]))
        ms = _runoff(loop, [space.config(k) for k in keys], f, fn, r, timer, batch, runoff_rounds,
                     table[best_key], host)
        runoff = dict(zip(keys, ms))
        best_runoff = min(runoff[k] for k in top)
        row["runoff_ms"] = {_key_text(k): v for k, v in runoff.items()}
        row["best_runoff_ms"] = best_runoff
        row["best_runoff"] = {"ms": best_runoff, "GB_s": gbs(best_runoff),
                              "pct_copy_bw": 100 * gbs(best_runoff) * 1e9 / bw}
        for live in row["autotune"]:
            if live["pick"]:
                live["pick_ms_runoff"] = runoff[space.key(live["pick"])]
                live["pick_vs_best"] = live["pick_ms_runoff"] / best_runoff
            else:
                live["pick_vs_best"] = None
        if amortise and points >= AMORTISE_MIN_POINTS:
            row["amortise"] = _amortise(diffusion7, shape, f, fn, r, cp, best_cfg)
        rows.append(row)
        if progress:
            progress(row)
        del f, fn
        cp.get_default_memory_pool().free_all_blocks()
    space = stencil_space(shapes=shapes, ndim=3)  # without the grid's conditions (each row has its "candidates")
    return {"device": info, "copy_bandwidth_GB_s": bw / 1e9, "bytes_per_point": BYTES_PER_POINT,
            "stencil": "diffusion7 fp32 periodic", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "space": {"size": space.size, "shapes": list(shapes),
                      "valid": sum(1 for k in space.all_keys() if not space.invalid_reason(space.config(k)))},
            "rows": rows}


def format_table(result: dict) -> str:
    """P2's table 2 plus the performance columns, as Markdown."""
    lines = [f"# P2 stencil benchmark — {result['device'].get('name')} ({result['date']})", "",
             f"7-point diffusion, fp32, periodic; {result['bytes_per_point']} B/point; measured copy bandwidth "
             f"{result['copy_bandwidth_GB_s']:.0f} GB/s. Every time is a median of batches of back-to-back "
             "launches between CUDA events (engine/autotune/measure.py, the tuner's own method); "
             "pick/best (run-off) re-measures picks and the exhaustive top 3 interleaved.", "",
             "| mesh | best shape | best threads | z-march | GB/s | % copy BW | best other shape (% copy BW) | "
             "(128,1,1)/2 GB/s | % copy BW | speed-up | "
             "autotune pick (strategy) | pick/best (run-off) | pick/best (table) | calls | overhead (steps) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        b, fx = row["best"], row["fixed_128_1_1_z2"]
        for i, live in enumerate(row["autotune"]):
            pick = live["pick"]
            pick_txt = f"{cfg_label(pick)} ({live['strategy']})" if pick else "—"
            ov = live["overhead_steps"]
            other = [v for k, v in row.get("best_by_shape", {}).items() if k != b.get("shape", "march")]
            other_txt = "; ".join(f"{o['label']} ({o['pct_copy_bw']:.1f})" for o in other) or "—"
            zm = b["zmarch"] if b.get("zmarch") is not None else "—"
            t = b["threads"]
            head = (f"| {row['mesh']} | {b.get('shape', 'march')} | ({t[0]},{t[1]},{t[2]}) | {zm} | {b['GB_s']:.0f} | "
                    f"{b['pct_copy_bw']:.1f} | {other_txt} | {fx['GB_s']:.0f} | {fx['pct_copy_bw']:.1f} | "
                    f"{row['speedup_vs_fixed']:.2f}× |") if i == 0 else "| | | | | | | | | | |"
            ratio = f"{live['pick_vs_best']:.3f}" if live.get("pick_vs_best") is not None else "—"
            tratio = f"{live['pick_vs_best_table']:.3f}" if live.get("pick_vs_best_table") is not None else "—"
            ov_txt = f"{ov:.0f}" if ov is not None else "—"
            lines.append(f"{head} {pick_txt} | {ratio} | {tratio} | {live['calls']} | {ov_txt} |")
    am = [row for row in result["rows"] if "amortise" in row]
    if am:
        lines += ["", f"Amortisation: device time of the first {am[0]['amortise']['steps']} steps of a fresh run "
                      "(auto-tune from scratch, tuning included) vs the fixed (128,1,1)/2 and the best configuration.",
                  "", "| mesh | auto-tuned ms | fixed ms | best ms | tuning overhead (steps) | settled after calls | "
                      "amortised within the steps |", "|---|---|---|---|---|---|---|"]
        for row in am:
            a = row["amortise"]
            lines.append(f"| {row['mesh']} | {a['tuned_ms']:.1f} | {a['fixed_ms']:.1f} | {a['best_ms']:.1f} | "
                         f"{a['overhead_steps']:.0f} | {a['settled_after_calls']} | "
                         f"{'yes' if a['amortised'] else 'no'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="nagare bench stencil", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="*", help="meshes as nx,ny,nz (default: P2's five)")
    p.add_argument("--strategies", default="exhaustive,descent", help="live tuner strategies (comma-separated)")
    p.add_argument("--no-amortise", action="store_true", help="skip the 1,000-step amortisation runs")
    p.add_argument("--shapes", help="kernel shapes to search and tune (comma-separated; default march,plain,vec; "
                                    "add tile for the 2.5D shared-memory shape)")
    p.add_argument("--json", help="write the full results (with every configuration's time) here")
    p.add_argument("--markdown", help="write the table here")
    args = p.parse_args(argv)
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.sizes] if args.sizes else None

    def progress(row):
        b = row["best"]
        picks = ", ".join(f"{lv['strategy']} {cfg_label(lv['pick'])} x{lv['pick_vs_best']:.3f}"
                          for lv in row["autotune"] if lv.get("pick_vs_best") is not None)
        shapes = "; ".join(f"best {k} {v['label']} {v['pct_copy_bw']:.1f}%" for k, v in row["best_by_shape"].items())
        am = row.get("amortise")
        am_txt = (f"; first {am['steps']} steps: tuned {am['tuned_ms']:.1f} ms vs fixed {am['fixed_ms']:.1f} ms"
                  if am else "")
        print(f"  {row['mesh']}: best {b['label']} (unroll {b['unroll']}) {b['GB_s']:.0f} GB/s "
              f"({b['pct_copy_bw']:.1f}%) [{shapes}], fixed {row['fixed_128_1_1_z2']['GB_s']:.0f} GB/s; "
              f"{picks}{am_txt}",
              file=sys.stderr, flush=True)

    result = bench_stencil(sizes, strategies=tuple(s for s in args.strategies.split(",") if s),
                           amortise=not args.no_amortise, progress=progress,
                           shapes=tuple(args.shapes.split(",")) if args.shapes else None)
    table = format_table(result)
    print(table)
    return write_results(result, table, args.json, args.markdown)


@output_writer("the stencil benchmark's results")
def write_results(result: dict, table: str, json_path: str | None, markdown_path: str | None) -> int:
    """The results as JSON and Markdown, each written whole or not at all; 4 (one line each) if
    one cannot be written."""
    status = 0
    for path, text in ((json_path, lambda: json.dumps(result, indent=1, default=str)),
                       (markdown_path, lambda: table + "\n")):
        if not path:
            continue
        try:
            write_text_atomic(path, text())
        except ExportError as exc:
            print(f"nagare bench stencil: NOT WRITTEN: {exc}", file=sys.stderr)
            status = 4
    return status


if __name__ == "__main__":
    sys.exit(main())

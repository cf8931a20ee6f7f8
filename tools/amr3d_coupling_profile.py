"""Where the level coupling of an amr3d tree spends its time, kernel kind by kind (GPU).

    python tools/amr3d_coupling_profile.py [--preset amr3d-bench] [--rung naive-fused] [--steps 20]
                                           [--coupling both|fused|split] [--storage native|fp16]
                                           [--lanes 1,3,9] [--device-time] [--set KEY=VALUE ...]

Runs the three-level benchmark tree (amr3d-bench with cases.THREE_LEVELS; another preset with
--preset, e.g. amr3d-sphere-re100, whose own tree is then taken unless --set is given), wraps each
kind of kernel launch of the tree stepper (the coupling's rescale, interpolate, restrict and their
fused forms, the fix-up, and the rung's ladder kernels) in CUDA events, and prints milliseconds per
coarse step for each kind and level, the coupling's share of the coarse step and its launches per
coarse step. ``--coupling both`` measures the split launches (tree_stepper ``fused_coupling`` off:
before) and the fused ones (after) on the same engine.

``--lanes 1,3,9`` measures the fused coupling once per amr3d_interpolate_rows' threads a source
position (tree_stepper ``interp_lanes``; 1 is the thread-per-position kernel of before), labelled
``fused lanes=L``. ``--device-time`` runs each again with a short spin kernel before each wrapped
phase, so the host has queued the phase's launches before its start event fires: each phase's figure
is then the device's time alone (the host's launch time, which the plain figures include wherever
the GPU waits for the host, left out), and the coupling's share is taken of the coarse step with the
CUDA graph (every level step's launches replayed from one graph: "graph step"); lines "device".

The CUDA graph is off while the profiler wraps the phases (the events must be recorded between
launches from the host; inside a graph capture they would be captured too, which is why a preset
with graph = "on", such as the sphere's, failed here): each kind is timed alone, and the step time
is that of launching every kernel from the host. The stepper is advanced directly, a coarse step at
a time (no tracers, no regrid).
"""
from __future__ import annotations

import argparse
import collections

import numpy as np
from nagare.engine.autotune.timers import spin_kernel

COUPLING = ("rescale_points", "interpolate", "restrict", "rescale_two", "interpolate_two", "restrict_fine",
            "restrict_two", "fixup")
WRAPPED = COUPLING + ("ladder",)


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else float("nan")


# the wait on the device before each phase (the tuner's hold kernel, engine/autotune/timers.py): longer
# than the host's launch of a phase
SPIN_NS = 200_000


def profile(eng, cp, steps: int, fused: bool, lanes: int | None = None, device_time: bool = False,
            pairs: bool = True) -> dict:
    st = eng.shape.stepper
    st.fused_coupling, st.pair_restrictions = fused, pairs
    if lanes is not None:
        st.interp_lanes = lanes
    k = st.kernels
    events, calls, depth = [], collections.Counter(), [0]
    originals = {name: getattr(type(k), name) for name in WRAPPED}
    spin = spin_kernel(cp) if device_time else None

    def wrap(name, fn):
        def run(st_, lv, *args, **kw):
            if depth[0]:  # (a fused method's own inner calls are part of its launch)
                return fn(k, st_, lv, *args, **kw)
            depth[0] += 1
            s, e = cp.cuda.Event(), cp.cuda.Event()
            if spin is not None:  # (the phase's launches queue while the device waits: device time only)
                spin((1,), (1,), (np.int64(SPIN_NS),), stream=eng.stream)
            s.record(eng.stream)
            try:
                return fn(k, st_, lv, *args, **kw)
            finally:
                e.record(eng.stream)
                depth[0] -= 1
                events.append((name, lv, s, e))
                calls[name] += 1
        return run

    for name, fn in originals.items():
        setattr(k, name, wrap(name, fn))
    try:
        st.advance(2)  # compile and warm up
        eng.synchronize()
        events.clear()
        calls.clear()
        t0, t1 = cp.cuda.Event(), cp.cuda.Event()
        t0.record(eng.stream)
        st.advance(steps)
        t1.record(eng.stream)
        t1.synchronize()
    finally:
        for name in WRAPPED:
            delattr(k, name)
    total = cp.cuda.get_elapsed_time(t0, t1) / steps
    per = collections.defaultdict(float)
    for name, lv, s, e in events:
        per[name, lv] += cp.cuda.get_elapsed_time(s, e) / steps
    coupling = sum(t for (name, _), t in per.items() if name in COUPLING)
    launches = sum(n for name, n in calls.items() if name in COUPLING and name != "fixup") / steps
    fixups = calls["fixup"] / steps
    graph_step = None
    if device_time:  # the coarse step as the engine runs it: every launch replayed from one graph
        st.advance(steps, graph=True)  # (captures, then warms)
        g0, g1 = cp.cuda.Event(), cp.cuda.Event()
        g0.record(eng.stream)
        st.advance(steps, graph=True)
        g1.record(eng.stream)
        g1.synchronize()
        graph_step = cp.cuda.get_elapsed_time(g0, g1) / steps
    return {"total": total, "per": dict(per), "coupling": coupling, "launches": launches, "fixups": fixups,
            "graph_step": graph_step}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="amr3d-bench")
    ap.add_argument("--rung", default="naive-fused")
    ap.add_argument("--storage", default="native", choices=("native", "fp16"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--coupling", default="both", choices=("both", "fused", "split"))
    ap.add_argument("--set", action="append", default=None)
    ap.add_argument("--lanes", default=None,
                    help="comma-separated threads a source position of the fused interpolation (1, 3, 9); "
                         "default: the stepper's")
    ap.add_argument("--device-time", action="store_true",
                    help="each run again with a spin kernel before each phase: device time only, as a share of "
                         "the graph's step")
    ap.add_argument("--before", action="store_true",
                    help="also the fused coupling as it was before the paired restrictions and the interpolation's "
                         "lanes (lanes 1, pair_restrictions off): \"fused before\"")
    a = ap.parse_args(argv)
    lane_list = [int(x) for x in a.lanes.split(",")] if a.lanes else [None]

    import cupy as cp
    from nagare.engine.amr3d.cases import THREE_LEVELS
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.amr3d.tree_stepper import CupyKernels
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    over = a.set if a.set is not None else (["grid.leaves=[8, 8, 8]", THREE_LEVELS] if a.preset == "amr3d-bench"
                                            else [])
    eng = AMR3D(load_preset(a.preset, over, backend="cupy"), get_backend("cupy"),
                variants={"kernels": a.rung, "storage": a.storage, "graph": "off"})
    st = eng.shape.stepper
    assert isinstance(st.kernels, CupyKernels), "a tree preset with a CUDA rung"
    print(f"preset {a.preset}: {[int((eng.forest.level == lv).sum()) for lv in eng.forest.levels]} leaves per level, "
          f"rung {a.rung}, storage {a.storage}; graph OFF while profiling (each phase timed alone, every kernel "
          f"launched from the host)")
    for lv, x in st.coupling.items():
        print(f"  level {lv}: interface points {x.n_fix}, coarse nodes {x.size_of('coarse_pts')}, "
              f"positions {x.shape_of('interp_slot')[0]}, fine nodes {x.size_of('fine_pts')}, "
              f"restricted {x.restrict_dst.size}")
    extra = sum(b.nbytes for b in (*st.coarse_half.values(), *st.interp_half.values()))
    print(f"  fused coupling's extra buffers (theta = 1/2 coarse and interpolated values): {extra / 1e6:.2f} MB")
    modes = {"both": (False, True), "fused": (True,), "split": (False,)}[a.coupling]
    if a.device_time:
        print(f"device time: each run again with a {SPIN_NS / 1e3:g} us spin before each phase (lines \"device\"); "
              f"the coupling's share is then of the graph step")
    out = {}
    runs = [(False, None, True, "split")] if False in modes else []
    if True in modes:
        runs += [(True, 1, False, "fused before")] if a.before else []
        runs += [(True, lanes, True, "fused" if len(lane_list) == 1 else f"fused lanes={lanes}") for lanes in lane_list]
    for fused, lanes, pairs, label in runs:
        r = out[label] = profile(eng, cp, a.steps, fused, lanes, pairs=pairs)
        print(f"[{label}] {r['total']:.4f} ms per coarse step (events), coupling {r['coupling']:.4f} ms = "
              f"{_pct(r['coupling'], r['total']):.1f} % of the coarse step; coupling launches per coarse "
              f"step {r['launches']:g} (+ {r['fixups']:g} fix-up launches)")
        for (name, lv) in sorted(r["per"], key=lambda n: -r["per"][n]):
            print(f"    {name + ' L' + str(lv):24s} {r['per'][name, lv]:.4f} ms/step")
        print(f"    {'(sum)':24s} {sum(r['per'].values()):.4f}   gaps {r['total'] - sum(r['per'].values()):.4f}")
        if a.device_time:  # (the same engine again, a spin before each phase)
            d = out[label + " device"] = profile(eng, cp, a.steps, fused, lanes, device_time=True, pairs=pairs)
            print(f"[{label} device] graph step {d['graph_step']:.4f} ms; device time: coupling "
                  f"{d['coupling']:.4f} ms = {_pct(d['coupling'], d['graph_step']):.1f} % of the graph step")
            for (name, lv) in sorted(d["per"], key=lambda n: -d["per"][n]):
                print(f"    {name + ' L' + str(lv):24s} {d['per'][name, lv]:.4f} ms/step (device)")
            print(f"    {'(sum)':24s} {sum(d['per'].values()):.4f}")
    for timing, whole in (("", "total"), (" device", "graph_step")):
        for base in ("split", "fused before"):
            s = out.get(base + timing)
            for label, f in out.items():
                if (s is None or label.startswith(("split", base)) or not label.endswith(timing)
                        or (not timing and label.endswith(" device"))):
                    continue
                print(f"summary{timing}: coupling share {base} {_pct(s['coupling'], s[whole]):.1f} % -> {label} "
                      f"{_pct(f['coupling'], f[whole]):.1f} %; coupling {s['coupling']:.4f} -> {f['coupling']:.4f} ms; "
                      f"launches {s['launches']:g} -> {f['launches']:g}; step {s[whole]:.4f} -> {f[whole]:.4f} ms"
                      + (" (graph)" if timing else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

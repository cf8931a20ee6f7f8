"""Where the level coupling of an amr3d tree spends its time, kernel kind by kind (GPU).

    python tools/amr3d_coupling_profile.py [--rung naive] [--steps 20] [--set KEY=VALUE ...]

Runs the three-level benchmark tree (or the preset given with --preset/--set), wraps each kind of
kernel launch of the tree stepper (rescale, interpolate, fix-up, restrict, and the rung's own
kernels per level) in CUDA events, and prints milliseconds per coarse step for each kind and
level, with the points each touches. The figures add up to the step time minus launch gaps.
"""
from __future__ import annotations

import argparse
import collections


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="amr3d-bench")
    ap.add_argument("--rung", default="naive")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--set", action="append", default=None)
    a = ap.parse_args(argv)

    import cupy as cp
    from nagare.engine.amr3d.cases import THREE_LEVELS
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.amr3d.tree_stepper import CupyKernels
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    over = a.set if a.set is not None else ["grid.leaves=[8, 8, 8]", THREE_LEVELS]
    eng = AMR3D(load_preset(a.preset, over, backend="cupy"), get_backend("cupy"), variants={"kernels": a.rung})
    events = []

    def wrap(name, fn):
        def run(st, lv, *args, **kw):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record(eng.stream)
            out = fn(st, lv, *args, **kw)
            e.record(eng.stream)
            events.append((f"{name} L{lv}", s, e))
            return out
        return run

    k = eng.shape.stepper.kernels
    assert isinstance(k, CupyKernels), "a tree preset with a CUDA rung"
    for name in ("rescale_points", "interpolate", "fixup", "restrict", "ladder"):
        setattr(k, name, wrap(name, getattr(k, name)))
    eng.step(2)  # compile and warm up
    eng.synchronize()
    events.clear()
    t0, t1 = cp.cuda.Event(), cp.cuda.Event()
    t0.record(eng.stream)
    eng.step(a.steps)
    t1.record(eng.stream)
    t1.synchronize()
    total = cp.cuda.get_elapsed_time(t0, t1) / a.steps
    per = collections.defaultdict(float)
    for name, s, e in events:
        per[name] += cp.cuda.get_elapsed_time(s, e) / a.steps
    c = eng.shape.stepper.coupling
    print(f"tree: {[int((eng.forest.level == lv).sum()) for lv in eng.forest.levels]} leaves per level, "
          f"rung {a.rung}, {total:.4f} ms per step (events)")
    for lv, x in c.items():
        print(f"  level {lv}: interface points {x.n_fix}, coarse nodes {x.coarse_pts.size}, "
              f"positions {x.interp_slot.shape[0]}, fine nodes {x.fine_pts.size}, restricted {x.restrict_dst.size}")
    for name in sorted(per, key=lambda n: -per[n]):
        print(f"  {name:24s} {per[name]:.4f} ms/step")
    print(f"  {'(sum)':24s} {sum(per.values()):.4f}   gaps {total - sum(per.values()):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

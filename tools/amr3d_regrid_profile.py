"""Where one regrid of amr3d-vortex-adapt spends its time, part by part (docs/amr3d.md "Regridding").

    python tools/amr3d_regrid_profile.py [--backend cupy] [--shift 12] [--repeats 3] [--rung naive-fused]

Builds the preset, moves its vortex by --shift level-0 units on the present tree (so the regrid
refines ahead of it and coarsens behind it, as a run's regrids do), and times each part of that
regrid on its own, the device synchronised after each (median of --repeats): the criterion, the
refine/coarsen plan, the populations' transfer, the coupling tables (serial and on threads; with a device,
also with their descriptors' passes there, and that part), the same-level copies, the
synchronisation of the new state; then whole regrids (Regridding.regrid, fresh engines): the first of
the process apart (CuPy compiles its kernels then), the later ones' medians in all and per part
(regrid_clock.REGRID_PARTS): as a run regrids (no wait for the device between the parts: a part's
time is its host time and its own waits) and serial (RegridClock's serial: each part's device time
its own; the sum is slower, it loses the overlap).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--shift", type=float, default=12.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rung", default="naive-fused")
    a = ap.parse_args(argv)

    from nagare.engine.amr3d import cases, interface, tables, transfer
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.amr3d.regrid_clock import REGRID_PARTS
    from nagare.engine.amr3d.tree_stepper import synchronise_state
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    backend = get_backend(a.backend)
    p = load_preset("amr3d-vortex-adapt", backend=backend.name)
    variants = {"kernels": a.rung} if backend.is_gpu else None

    def engine():
        e = AMR3D(p, backend, variants=variants)
        c = list(p.initial.center)
        c[0] += a.shift
        moved = p.model_copy(update={"initial": p.initial.model_copy(update={"center": c})})
        e.shape.set_leaves(cases.initial_tree_state(moved, e.forest))
        backend.synchronize(e.stream)
        return e

    def timed(name, fn):
        ts, out = [], None
        for _ in range(a.repeats):
            t = time.perf_counter()
            out = fn()
            backend.synchronize(e.stream)
            ts.append(1e3 * (time.perf_counter() - t))
        print(f"{name:44s} {statistics.median(ts):9.1f} ms")
        return out

    e = engine()
    xp = e.xp
    print(f"{backend.device_info().describe()}; {p.source}: {e.forest.n_leaves} leaves of {p.grid.m}³, "
          f"rung {e.selection['kernels']}")
    with e.on_stream():
        crit = timed("criterion (device; per-leaf maxima to the host)", e.regrid_criterion)
        plan = timed("plan: refine, coarsen, 2:1 balance (host)", lambda: e.shape._plan(crit))
        new = plan.forest
        print(f"  {e.forest.n_leaves} → {new.n_leaves} leaves: {plan.refined} split, {plan.coarsened} families merged")
        f = e.shape.leaves()
        f_new = timed("transfer of the populations (device)",
                      lambda: transfer.transfer(e.forest, new, f, p.physics.tau, e.accel, xp=xp))
        workers = tables._WORKERS
        tables._WORKERS = 1
        timed("coupling tables, one thread (host)", lambda: interface.build(new.replace(new.level, new.block),
                                                                             p.physics.interp))
        tables._WORKERS = workers
        coupling = timed(f"coupling tables, {workers} threads (host)",
                         lambda: interface.build(new.replace(new.level, new.block), p.physics.interp))
        if xp is not np:
            timing = {}
            timed("coupling tables, descriptors on the device",
                  lambda: interface.build(new.replace(new.level, new.block), p.physics.interp, xp=xp, timing=timing))
            device = 1e3 * timing["device_s"] / a.repeats
            print(f"  of which the device's passes {device:.1f} ms (median wall time above; mean device part)")
        timed("same-level copies' ids (host)", lambda: [interface.level_copies(new, lv) for lv in new.levels])

        def sync():
            g = xp.array(f_new)
            synchronise_state(xp, new, coupling, g, p.physics.tau, e.accel)
        timed("synchronisation of the new state (device)", sync)
    for serial in (False, True):
        # as a run regrids (the host goes on while the device works), then serial: the device waited
        # for between the parts, so each part's device time counts for it (slower in all)
        whole = []
        for _ in range(a.repeats):
            e = engine()
            e.shape.regrid_serial = serial
            with e.on_stream():
                e.regrid()
            whole.append(e.shape.regrid_times[-1])
        # the first of a process compiles CuPy's kernels; the medians are over fresh engines after it
        later = whole[1:] or whole
        name = "whole regrid, serial" if serial else "whole regrid"
        print(f"{name + ', first of these (compiles)':44s} {whole[0]['total_ms']:9.1f} ms")
        for k in ("total_ms", "host_ms", "device_ms") + tuple(f"{p}_ms" for p in REGRID_PARTS):
            print(f"{name + ', ' + k[:-3]:44s} {statistics.median(r[k] for r in later):9.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

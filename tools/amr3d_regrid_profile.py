"""Where one regrid of amr3d-vortex-adapt spends its time, part by part (docs/amr3d.md "Regridding").

    python tools/amr3d_regrid_profile.py [--backend cupy] [--shift 12] [--repeats 3] [--rung naive-fused]
                                         [--storage native|fp16] [--graph off|on] [--steps 0] [--in-run 0]

Builds the preset, moves its vortex by --shift level-0 units on the present tree (so the regrid
refines ahead of it and coarsens behind it, as a run's regrids do), and times each part of that
regrid on its own, the device synchronised after each (median of --repeats): the criterion, the
refine/coarsen plan, the populations' transfer, the coupling tables (serial and on threads; with a device,
also with their descriptors' passes there, and that part), the same-level copies, the
synchronisation of the new state; then whole regrids (Regridding.regrid, fresh engines): the first of
the process apart (CuPy compiles its kernels then), the later ones' medians in all and per part
(regrid_clock.REGRID_PARTS): as a run regrids (no wait for the device between the parts: a part's
time is its host time and its own waits) and serial (RegridClock's serial: each part's device time
its own; the sum is slower, it loses the overlap). With a device also the stepper's rebuild ("select")
in its parts: the level buffers and the tables' upload (the TreeStepper), the compact interpolation rows
(two launches a level; the array code they replace, timed alone for comparison) and the state's
set into the buffers. ``--storage``/``--graph``: the rung's variant (fp16 level buffers; the steps
replayed from a CUDA graph); ``--steps``: coarse steps each fresh engine runs before its regrid (with
the graph on they capture one, which the regrid then drops with the old stepper, as in a run).
``--in-run N``: before the whole regrids, N regrids of one engine back and forth (as a run: the old stepper dropped at
each, the memory pool reused), each with what the device's memory pool grew by in it.
Every line is printed as it is measured (a cut run keeps what it measured).
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
    ap.add_argument("--storage", default="native", choices=("native", "fp16"))
    ap.add_argument("--graph", default="off", choices=("off", "on"))
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--in-run", type=int, default=0, help="then this many regrids of one engine, as a run")
    a = ap.parse_args(argv)

    from nagare.engine.amr3d import cases, interface, tables, transfer
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.amr3d.regrid_clock import REGRID_PARTS
    from nagare.engine.amr3d.tree_stepper import synchronise_state
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    backend = get_backend(a.backend)
    p = load_preset("amr3d-vortex-adapt", backend=backend.name)
    variants = {"kernels": a.rung, "storage": a.storage, "graph": a.graph} if backend.is_gpu else None

    def moved_state(e, shift):
        c = list(p.initial.center)
        c[0] += shift
        moved = p.model_copy(update={"initial": p.initial.model_copy(update={"center": c})})
        return cases.initial_tree_state(moved, e.forest)

    def engine():
        e = AMR3D(p, backend, variants=variants)
        e.shape.set_leaves(moved_state(e, a.shift))
        if a.steps:
            with e.on_stream():
                e.shape._advance(a.steps)  # (without the regrid a step count may fall on)
        backend.synchronize(e.stream)
        return e

    def timed(name, fn):
        ts, out = [], None
        for _ in range(a.repeats):
            t = time.perf_counter()
            out = fn()
            backend.synchronize(e.stream)
            ts.append(1e3 * (time.perf_counter() - t))
        print(f"{name:44s} {statistics.median(ts):9.1f} ms", flush=True)
        return out

    e = engine()
    xp = e.xp
    print(f"{backend.device_info().describe()}; {p.source}: {e.forest.n_leaves} leaves of {p.grid.m}³, "
          f"rung {e.selection['kernels']}, storage {e.selection.get('storage', 'native')}, graph "
          f"{e.selection.get('graph', 'off')}, {a.steps} steps before each whole regrid", flush=True)
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
        if xp is not np and e.selection["kernels"] != "reference":
            select_parts(e, timed)
    if a.in_run:  # (first: the whole regrids below then compile nothing)
        in_run(engine, moved_state, a, backend)
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
        first = "first of these" if a.in_run else "first of these (compiles)"
        print(f"{name + ', ' + first:44s} {whole[0]['total_ms']:9.1f} ms")
        for k in ("total_ms", "host_ms", "device_ms") + tuple(f"{p}_ms" for p in REGRID_PARTS):
            print(f"{name + ', ' + k[:-3]:44s} {statistics.median(r[k] for r in later):9.1f} ms", flush=True)
    return 0


def in_run(engine, moved_state, a, backend) -> None:
    """--in-run N regrids of one engine, as a run does them (the old stepper, its buffers and its
    graphs dropped at each; the memory pool reused): the vortex moved back and forth by --shift
    before each, --steps steps before each regrid. Per regrid its wall time and what the device's
    memory pool grew by in it (new device allocations: cudaMalloc), then the medians over all but
    the first."""
    from nagare.engine.amr3d.regrid_clock import REGRID_PARTS

    e = engine()
    xp = e.xp
    pool = xp.get_default_memory_pool() if xp is not np else None
    if not hasattr(pool, "total_bytes"):  # (a stand-in for CuPy without the pool's figures)
        pool = None
    recs = []
    for i in range(a.in_run):
        if i:
            e.shape.set_leaves(moved_state(e, a.shift if i % 2 == 0 else 0.0))
            if a.steps:
                with e.on_stream():
                    e.shape._advance(a.steps)
        backend.synchronize(e.stream)
        before = pool.total_bytes() if pool is not None else 0
        n = len(e.shape.regrid_times)
        with e.on_stream():
            ev = e.regrid()
        grew = (pool.total_bytes() - before) / 2**20 if pool is not None else 0.0
        if len(e.shape.regrid_times) == n:
            print(f"in a run, regrid {i}: the tree did not change", flush=True)
            continue
        r = e.shape.regrid_times[-1]
        recs.append(r)
        print(f"in a run, regrid {i}: {r['total_ms']:7.1f} ms ({ev['leaves']} leaves; select {r['select_ms']:.1f}, "
              f"other {r['other_ms']:.1f} ms); memory pool +{grew:.1f} MiB"
              + (f", {pool.n_free_blocks()} free blocks" if pool is not None else ""), flush=True)
    later = recs[1:] or recs
    if later:
        for k in ("total_ms", "host_ms", "device_ms") + tuple(f"{p}_ms" for p in REGRID_PARTS):
            print(f"{'in a run, ' + k[:-3]:44s} {statistics.median(r[k] for r in later):9.1f} ms", flush=True)


def select_parts(e, timed) -> None:
    """The stepper's rebuild on the engine's tree in parts (the device synchronised after each):
    the whole select, the TreeStepper (buffers, tables' upload, compact rows), the compact rows
    alone (CupyKernels._build_rows, every level) against the array code they replace
    (interp_rows.build on the same device tables), and the state set into the level buffers."""
    from nagare.engine.amr3d import interp_rows
    from nagare.engine.amr3d.tree_stepper import CupyKernels, TreeStepper
    from nagare.engine.amr3d.variants import RUNG_KERNELS

    shape, xp, p = e.shape, e.xp, e.preset
    leaves = shape.leaves().copy()
    timed("select: the whole stepper rebuilt", lambda: shape.select(e.selection))
    rung = e.selection["kernels"]
    fp16 = e.selection.get("storage", "native") == "fp16"

    def stepper():
        return TreeStepper(xp, e.forest, shape.interface(), p.physics.tau, e.accel,
                           CupyKernels(RUNG_KERNELS.get(rung, rung) if shape.storage_of(rung) == "mothers" else rung,
                                       e.stream), e.timer, dtype=shape.dtype, bnd=e._bnd, collision=e.collision,
                           fp16=fp16)
    st = timed("select: TreeStepper (buffers, tables, rows)", stepper)
    k = st.kernels
    levels = [lv for lv, c in st.coupling.items() if c.size_of("coarse_pts")]
    k.split_tables(st)  # (the dense rows on the device, as the build takes them)
    dense = {lv: (k.dev[lv]["interp_slot"], k.dev[lv]["interp_w"]) for lv in levels}
    timed(f"select: compact rows, CUDA ({len(levels)} levels)",
          lambda: [k._build_rows(xp, dict(k.dev[lv], interp_slot=dense[lv][0], interp_w=dense[lv][1]),
                                 st.coupling[lv]) for lv in levels])
    timed("select: compact rows, array code (before)",
          lambda: [interp_rows.build(xp, *dense[lv], k.dev[lv]["desc"], st.coupling[lv].size_of("fine_pts"))
                   for lv in levels])
    timed("select: the state set into the level buffers", lambda: st.set_state(leaves))


if __name__ == "__main__":
    raise SystemExit(main())

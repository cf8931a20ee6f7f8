"""A tree that adapts to its flow (adapt.every > 0; docs/amr3d-flows.md "Adaptive regridding"): the
tree shape's regrids, and the tree as part of the state (checkpoints hold it, a restore rebuilds it).

The algorithms (criterion, refine/coarsen plan, 2:1 balance) are adapt.py's and the state's
carry-over is transfer.py's; this mixin of :class:`~.tree_shape.Tree` applies them to an engine:
it replaces the engine's forest and boundaries, the tracers' lookup and the stepper by a fresh
build of the new tree.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from ..errors import CheckpointError
from . import adapt, d3q27, interface, levels, mesh, reference, transfer
from . import tree as tree_mod
from .builder import build_boundaries
from .cases import initial_tree_state
from .regrid_clock import REGRID_PARTS, RegridClock
from .uploads import upload_together

log = logging.getLogger("nagare")

REGRID_TIMES_KEPT = 64  # the latest regrids whose times regrid_figures summarises

class Regridding:
    def init_regridding(self) -> None:
        self.regrids = 0  # regrids done by this engine object (not in the state)
        self.last_regrid = {"refined": 0, "coarsened": 0, "step": -1, "capped": 0}
        self._cap_said = False  # the cap's warning, once a run
        self._floor = None
        self._preset_leaf_count = None
        self.regrid_times: list[dict] = []  # per regrid that changed the tree (regrid_figures)
        self.first_regrid = None  # the first of them (its CuPy kernels compiled at their first use)
        self.coupling_device_s = 0.0  # the device's part of the last coupling build (Tree.interface)
        # the device waited for between a regrid's parts (RegridClock's serial: each part's device
        # time its own, for a profile); by default the host goes on while the device runs a part
        self.regrid_serial = False

    def preset_leaves(self) -> int:
        """Leaves of the preset's own tree (before any adaptation): what adapt.leaf_cap scales."""
        if self._preset_leaf_count is None:
            self._preset_leaf_count = mesh.build_forest(self.e.preset, self.e.bodies).n_leaves
        return self._preset_leaf_count

    def floor_forest(self):
        """The refinement a regrid never undoes: the bodies' (adapt.keep = bodies) or the preset's
        whole tree (static)."""
        if self._floor is None:
            p, bodies = self.e.preset, self.e.bodies
            if p.adapt.keep == "static":
                self._floor = mesh.build_forest(p, bodies)
            else:
                f = tree_mod.Forest.uniform(tuple(p.grid.leaves), 0, p.grid.m, p.max_level, tuple(p.grid.periodic))
                for spec, body in zip(p.body, bodies):
                    f = mesh.refine_near(f, body, spec.level, spec.band)
                self._floor = f
        return self._floor

    def _plan(self, crit):
        a, e = self.e.preset.adapt, self.e
        return adapt.plan(e.forest, crit, refine_above=a.refine_above, coarsen_below=a.coarsen_below,
                          max_level=a.max_level, base_level=e.base_level, floor=self.floor_forest(),
                          max_leaves=a.leaf_cap(self.preset_leaves()))

    def _set_forest(self, forest) -> None:
        """Make ``forest`` the engine's tree: its boundaries and the tracers' lookup follow."""
        e = self.e
        e.forest = forest
        e._bnd = build_boundaries(e.preset, forest, e.bodies)
        if e._tracers is not None:
            e._tracers.set_forest(forest)

    def adapt_initial_tree(self, f):
        """The starting tree adapted to the initial flow: plan on the flow, rebuild the tree, evaluate
        the flow anew on it (no transfer), until nothing changes (at most one pass per level)."""
        e = self.e
        refined = coarsened = 0
        for _ in range(e.forest.max_level - e.base_level + 1):
            chunks = [(lv, f[:, e.forest.level_slice(lv)]) for lv in e.forest.levels]
            crit = adapt.criterion(np, chunks, e.accel, e.preset.adapt_u_ref, np.asarray)
            plan = self._plan(crit)
            if plan.refined == 0 and plan.coarsened == 0:
                break
            refined, coarsened = refined + plan.refined, coarsened + plan.coarsened
            self._set_forest(plan.forest)
            f = initial_tree_state(e.preset, e.forest)
        self.last_regrid = {"refined": refined, "coarsened": coarsened, "step": 0, "capped": int(plan.capped)}
        return f

    def regrid_criterion(self, chunks=None) -> np.ndarray:
        """Per-leaf max |ω|·h_leaf / U_ref (host float64, leaf order), from the stepper's own storage
        level by level (``chunks``: level_chunks() already taken): only the per-leaf maxima leave the
        device."""
        e = self.e
        chunks = self.level_chunks() if chunks is None else chunks
        return adapt.criterion(self.xp, chunks, e.accel, e.preset.adapt_u_ref, e.backend.asnumpy)

    def level_chunks(self) -> list:
        """[(level, its leaves' populations f[Q, n_l, m, m, m])] in leaf order: views of the state
        where it is stored so, else (fp16 storage, mother leaves) the stepper's fp32 copies."""
        e, st = self.e, self.stepper
        if st is None:
            return [(lv, self.xp.asarray(self.pending)[:, e.forest.level_slice(lv)]) for lv in e.forest.levels]
        if isinstance(st, reference.Stepper):
            return [(lv, st.f[:, e.forest.level_slice(lv)]) for lv in e.forest.levels]
        return [(lv, st.level_state(lv)) for lv in st.levels]  # (leaf order, also on mother leaves)

    def _leaves_from(self, chunks: list):
        """self.leaves() from level_chunks' arrays: a TreeStepper's state() is their concatenation
        (fp16 storage: its fp32 conversion is not done twice in a regrid)."""
        st = self.stepper
        if st is None or isinstance(st, reference.Stepper):
            return self.leaves()
        return self.xp.concatenate([c for _, c in chunks], axis=1)

    def regrid(self, step: int | None = None) -> dict:
        """One regrid now: criterion, refine/coarsen sets, 2:1 balance, the state carried over by
        transfer.py on the state's device, then boundaries, tables or interface, tracers' lookup and
        stepper rebuilt as a fresh build of the new tree. Returns (and keeps, for the live figures)
        the counts; each regrid that changes the tree adds its times to ``regrid_times``."""
        e = self.e
        with e.timer.phase("regrid", steps=0):
            # the steps queued before: finished first, so the regrid's wall time is its own (the
            # criterion's per-leaf maxima would wait for them anyway)
            e.backend.synchronize(e.stream)
            clock = RegridClock(lambda: e.backend.synchronize(e.stream), serial=self.regrid_serial)
            chunks = self.level_chunks()
            crit = self.regrid_criterion(chunks)
            clock.lap("criterion")
            plan = self._plan(crit)
            changed = not (np.array_equal(plan.forest.level, e.forest.level)
                           and np.array_equal(plan.forest.block, e.forest.block))
            clock.lap("plan")
            if changed:
                f_old = self._leaves_from(chunks)
                del chunks  # (fp16 storage: its fp32 levels, not kept through the transfer)
                f_new = transfer.transfer(e.forest, plan.forest, f_old, e.preset.physics.tau, e.accel, xp=self.xp)
                del f_old
                clock.lap("transfer")
                host = clock.seconds["plan"] + self.install_tree(plan.forest, f_new, synchronise=True, clock=clock)
                clock.finish()
                self._record_regrid(clock, host, plan.forest.n_leaves)
        self.regrids += 1
        self.last_regrid = {"refined": plan.refined, "coarsened": plan.coarsened,
                            "step": int(e.step_count if step is None else step), "capped": int(plan.capped)}
        if plan.capped and not self._cap_said:
            self._cap_said = True
            log.warning("nagare: %s: a regrid's refinement was skipped: the tree would pass adapt.max_leaves = %d "
                        "leaves (raise it; the memory estimate reserves that many)", e.preset.source,
                        e.preset.adapt.leaf_cap(self.preset_leaves()))
        return dict(self.last_regrid, leaves=e.forest.n_leaves)

    def _record_regrid(self, clock: RegridClock, host: float, leaves: int) -> None:
        """Keep a regrid's times (ms): total, host part (plan, the coupling's host part, the
        same-level copies' ids), the rest, and each of REGRID_PARTS; the engine's first such regrid
        also apart (it compiles CuPy's elementwise and reduction kernels at their first use)."""
        total = clock.total
        rec = {"total_ms": 1e3 * total, "host_ms": 1e3 * host, "device_ms": 1e3 * (total - host), "leaves": leaves,
               **{f"{k}_ms": 1e3 * v for k, v in clock.seconds.items()}}
        if self.first_regrid is None:
            self.first_regrid = rec
        self.regrid_times.append(rec)
        del self.regrid_times[:-REGRID_TIMES_KEPT]

    def regrid_figures(self) -> dict:
        """Medians over the kept regrids that changed the tree (ms): wall time with the device
        synchronised at the end, its host part (the refine/coarsen plan, the coupling data built on
        the host and the same-level copies' ids) and the rest (criterion, transfer, synchronisation,
        the coupling's passes on a device, buffers and uploads: device work and the launches, and
        the transfer's per-leaf decisions on the host, a few ms); the engine's first such regrid
        apart (``regrid_first_ms``: CuPy compiles then), and the later ones' wall time
        (``regrid_warm_ms``, over ``regrids_warm`` of them) and parts (``regrid_<part>_ms``,
        REGRID_PARTS; over the first alone while it is the only one); empty before the first."""
        t = self.regrid_times
        if not t:
            return {}
        warm = [r for r in t if r is not self.first_regrid]
        out = {"regrid_ms": float(np.median([r["total_ms"] for r in t])),
               "regrid_host_ms": float(np.median([r["host_ms"] for r in t])),
               "regrid_device_ms": float(np.median([r["device_ms"] for r in t])),
               "regrids_timed": float(len(t)), "regrids_warm": float(len(warm))}
        if self.first_regrid is not None:
            out["regrid_first_ms"] = self.first_regrid["total_ms"]
        if warm:
            out["regrid_warm_ms"] = float(np.median([r["total_ms"] for r in warm]))
        for part in REGRID_PARTS:
            out[f"regrid_{part}_ms"] = float(np.median([r[f"{part}_ms"] for r in warm or t]))
        return out

    def install_tree(self, forest, f, synchronise: bool, clock: RegridClock | None = None) -> float:
        """Make ``forest`` the engine's tree with state ``f`` (on that tree; host or xp array). With
        ``synchronise`` (a transferred state): solid and inlet nodes as the step leaves them, the
        coarse copies of fine-owned nodes restricted and same-level copies set to their owner's
        (transfer fills each new leaf on its own), on the state's device; without (a checkpoint):
        taken bit for bit. Returns the seconds spent building the coupling data and the same-level
        copies on the host (the coupling's passes on a device not counted: they are device time).
        ``clock``: a regrid's parts (coupling, synchronise, select, other) lapped on it.

        Where the restriction is known before the coupling (interface.early_restriction: a flow
        without bodies or free slip) the synchronisation is queued first, so on a device it runs
        (after the transfer) while the host builds the rest of the coupling: nothing between them
        waits for the device. The same operations in the same order either way."""
        e, xp = self.e, self.xp
        clock = clock if clock is not None else RegridClock()
        self._set_forest(forest)
        self.tables = self.coupling = self.sampling = self.mass_w = None
        self.release_stepper()
        f = xp.array(f, dtype=self.dtype)
        clock.lap("other")
        t = time.perf_counter()
        early = self.early_restriction() if synchronise else None
        host = time.perf_counter() - t  # (the coupling's host work, done first)
        if early is not None:
            clock.lap("coupling_host")
            host += self._synchronise_state(forest, f, early[1])
            clock.lap("synchronise")
        t = time.perf_counter()
        coupling = self.interface(early) if synchronise else None
        device = self.coupling_device_s if synchronise else 0.0
        host += time.perf_counter() - t - device
        clock.lap("coupling_host")
        clock.move(device, "coupling_host", "coupling_device")
        if synchronise and early is None:
            m3 = forest.m ** 3
            restriction = {lv: (c.restrict_dst + c.lo * m3,
                                c.restrict_src + (forest.level_slice(lv + 1).start * m3 if c.restrict_src.size else 0))
                           for lv, c in coupling.items()}
            host += self._synchronise_state(forest, f, restriction)
            clock.lap("synchronise")
        self.pending = f
        self.select(e.selection)
        clock.lap("select")
        return host

    def _synchronise_state(self, forest, f, restriction: dict) -> float:
        """Queue a transferred state's synchronisation on its device: boundaries, then level by level
        from the finest (reference.synchronise's order) the restriction of fine-owned coarse copies
        (``restriction`` {level: (dst, src) global point ids}: tree_stepper.synchronise_state's
        operations) and the same-level copies. Their indices cross in one upload. Returns the host
        seconds spent on the copies' ids."""
        e, xp = self.e, self.xp
        self.apply_boundaries(f, xp)
        f2 = f.reshape(d3q27.Q, -1)
        order = sorted(forest.levels, reverse=True)
        t = time.perf_counter()
        # every level's (dst, src) state indices (host NumPy: host time)
        by_level = interface.forest_copies(forest)
        host = time.perf_counter() - t
        empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        ids = upload_together(xp, [a for lv in order for a in (*restriction.get(lv, empty), *by_level[lv])])
        tau, accel = e.preset.physics.tau, e.accel
        for i, lv in enumerate(order):
            r_dst, r_src, dst, src = ids[4 * i:4 * i + 4]
            if r_dst.size:
                f2[:, r_dst] = levels.rescale(xp, f2[:, r_src], tau, lv + 1, lv, accel)
            if dst.size:
                f2[:, dst] = f2[:, src]
        return host

    def adapt_figures(self) -> dict:
        """Leaves in all and per level (levels base … max_level, zeros included, so the columns stay
        fixed), and the last regrid's refine (leaves split) and coarsen (families merged) counts."""
        forest = self.e.forest
        lev = forest.level
        out = {"leaves": float(forest.n_leaves)}
        for lv in range(self.e.base_level, forest.max_level + 1):
            out[f"leaves_l{lv}"] = float(np.count_nonzero(lev == lv))
        out["regrid_refined"] = float(self.last_regrid["refined"])
        out["regrid_coarsened"] = float(self.last_regrid["coarsened"])
        out["regrid_capped"] = float(self.last_regrid.get("capped", 0))  # 1: refinement skipped at the cap
        return out

    # ---- the tree in the state ------------------------------------------------------------------
    def state_arrays(self) -> dict:
        out = {"f": self.leaves()}
        if self.e.preset.adapt.on:
            # the tree is part of the state: the stored preset only defines the tree it started with
            e = self.e
            out["tree/level"] = e.forest.level.copy()
            out["tree/block"] = e.forest.block.copy()
            lr = self.last_regrid
            out["adapt/last"] = np.array([lr["refined"], lr["coarsened"], lr["step"], lr.get("capped", 0)], np.int64)
        return out

    def check_restorable(self, arrays: dict, expected: dict) -> None:
        """An adaptive run's checkpoint holds its tree: a valid tree of this preset (tiles the domain,
        balanced, levels base … max_level, the bodies' refinement kept), and f sized for it."""
        if not self.e.preset.adapt.on:
            return
        for k in ("tree/level", "tree/block"):
            if k not in arrays:
                raise CheckpointError(f"checkpoint lacks state array '{k}' (adapt.every > 0: the tree is part of "
                                      "the state)")
        lev = np.asarray(arrays["tree/level"])
        blk = np.asarray(arrays["tree/block"])
        if lev.ndim != 1 or blk.shape != (lev.size, 3) or lev.dtype.kind not in "iu" or blk.dtype.kind not in "iu":
            raise CheckpointError(f"checkpoint arrays 'tree/level' {lev.shape} and 'tree/block' {blk.shape} are not "
                                  "one level and one (x, y, z) block per leaf")
        try:
            forest = self.e.forest.replace(lev, blk)
        except ValueError as exc:
            raise CheckpointError(f"checkpoint tree: {exc}") from None
        why = adapt.check_tree(forest, self.floor_forest(), self.e.base_level)
        a = self.e.preset.adapt
        top = max(a.max_level, int(self.floor_forest().level.max()))
        if not why and int(forest.level.max()) > top:
            why = f"a leaf at level {int(forest.level.max())} > adapt.max_level = {a.max_level}"
        if not why and forest.n_leaves > a.leaf_cap(self.preset_leaves()):
            why = (f"{forest.n_leaves} leaves > adapt.max_leaves = {a.leaf_cap(self.preset_leaves())} (the memory "
                   "estimate reserves that many; resume with a larger --set adapt.max_leaves)")
        if why:
            raise CheckpointError(f"checkpoint tree ({forest.n_leaves} leaves) is not a tree of this preset: {why}")
        shape, dtype = expected["f"]
        expected["f"] = ((shape[0], forest.n_leaves) + tuple(shape[2:]), dtype)
        expected["tree/level"] = (lev.shape, expected["tree/level"][1])
        expected["tree/block"] = (blk.shape, expected["tree/block"][1])

    def load(self, arrays: dict) -> None:
        e = self.e
        if e.preset.adapt.on:
            lev, blk = np.asarray(arrays["tree/level"], np.int64), np.asarray(arrays["tree/block"], np.int64)
            forest = e.forest.replace(lev, blk)
            same = np.array_equal(forest.level, e.forest.level) and np.array_equal(forest.block, e.forest.block)
            if not same:
                self.install_tree(forest, np.asarray(arrays["f"], self.dtype), synchronise=False)
            last = np.asarray(arrays.get("adapt/last", np.array([0, 0, -1, 0]))).reshape(-1)
            self.last_regrid = {"refined": int(last[0]), "coarsened": int(last[1]), "step": int(last[2]),
                                "capped": int(last[3]) if last.size > 3 else 0}
        self.set_leaves(arrays["f"])

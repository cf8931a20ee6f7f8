"""The octree step on per-level leaf grids: P0's ladder on each level, joined across 2:1 interfaces
by the coupling kernels (shaders/cuda/amr3d/coupling.cu; host data: interface.py).

Each level l holds its own buffer pair [current, previous] of shape (Q, n_l, m, m, m); one level
step pulls from current into previous and swaps them, so after it the pair is [new, old] — the old
state is exactly the reference's f_prev, read at θ = 0 and ½ by the next finer level. The order is
the reference's (reference.py): advance(l, θ) = coarse buffer (level l−1, time-interpolated and
rescaled), fine buffer (level l+1, rescaled), the ladder kernel over level l, the fix-up of its
interface points, swap; then advance(l+1, 0), advance(l+1, ½), restriction l+1 → l.

Two kernel sets: :class:`CupyKernels` (the CUDA ladder and coupling kernels) and
:class:`NumpyKernels` (the same operations with array code, any xp: it makes the per-level
orchestration and the interface descriptors testable without a GPU, against reference.py).

With Kobayashi's CSM (collision.py) each level step first computes the coefficient C per point
(``csm``: u from the populations the collision will see — the pull, and the fix-up's gather at the
interface points, so the link buffer is filled before the ladder — then differences inside each
leaf); the ladder and fix-up kernels read C[point].

fp16 storage (``fp16=True``, beyond P0 as on the box): the level buffers hold the shifted populations
f − w in IEEE half (storage.to_fp16; d3q27.cuh load_pop/store_pop), every kernel that reads or
writes them converts, the arithmetic stays fp32. The interface buffers stay fp32 (coupling.cu says
why). The state seen from outside (state, level_state, populations, set_state) is fp32.

Fused coupling (``fused_coupling``, the default; False launches each operation alone, as before):
level l−1 does not change between level l's two steps (θ = 0 and ½), so level l's first step
computes both steps' coarse values in one launch (amr3d_rescale_two, with that step's fine values)
and interpolates both in one (amr3d_interpolate_rows: from compact rows, nonzero weights only and
only the populations the fix-up reads, interp_rows.py; ``interp_lanes`` threads a position), into a
second coarse and interpolated buffer (``coarse_half``, ``interp_half``: the extra memory, Q · 4
bytes per coarse node and per source position of each finer level); the restriction l+1 → l at the
end of level l's first step waits for the start of its second, whose fine values it joins
(amr3d_restrict_fine: both rescale level l+1's current buffer to level l, and nothing runs between
them). Every value is the split launches' value, bit for bit (the same device functions, the same
inputs); the three-level benchmark tree's coupling goes from 18 launches a coarse step to 10.

Timing phases (one coarse step = one step): ``inner``/``shell`` (or ``step`` for one-kernel rungs)
summed over every level step, ``coupling`` (interface buffers, fix-up, restriction; with
``naive-fused`` the fix-up is inside the ladder's ``step``), ``boundary``, and ``les`` (the CSM's
pre-pass).
"""
from __future__ import annotations

import numpy as np

from . import boundaries, collision, d3q27, interface, interp_rows, leafgrid, levels, storage
from .collision import Collision
from .gpu import LadderStepper, _no_phase, coupling_kernels, graph_batch  # (gpu.py imports no CuPy at module level)
from .interface import LevelCoupling
from .tracer_kernels import LevelBuffers
from .tree import Forest
from .uploads import upload_together

# amr3d_interpolate_rows' threads a position: the choices (coupling.cu instantiates each) and the default
INTERP_LANES = (1, 3, 9)
INTERP_LANES_DEFAULT = 3
# the coupling's launch choices a tool may change on a stepper (tools/amr3d_coupling_profile.py):
# they hold for the tree's next steppers too (tree_shape.TreeShape.select carries them over)
COUPLING_SETTINGS = ("fused_coupling", "interp_lanes", "pair_restrictions")


def _scale(tau0: float, accel0, src: int, dst: int):
    a_s, a_t = levels.accel_at(accel0, src), levels.accel_at(accel0, dst)
    return levels.alpha(tau0, src, dst), a_s, a_t, bool(any(a_s) or any(a_t))


class TreeStepper:
    """Owns the per-level buffers of one forest and advances them by coarse steps."""

    def __init__(self, xp, forest: Forest, coupling: dict[int, LevelCoupling], tau0: float, accel0, kernels,
                 timer, dtype=np.float32, bnd=None, collision: Collision | None = None, fp16: bool = False):
        """``bnd``: boundaries.Boundaries of a flow (the coupling must then come from
        interface.build with its ``solid`` and ``near``). ``collision``: the collision operator of
        the ladder and fix-up kernels (collision.Collision; None = P0's BGK). ``fp16``: the level
        buffers in fp16 storage (the CUDA kernels on leaves of m³, fp32 arithmetic)."""
        levels.check_taus(tau0, forest.levels)
        self.xp, self.forest, self.coupling, self.kernels, self.timer = xp, forest, coupling, kernels, timer
        self.collision = collision if collision is not None else Collision()
        self.bnd = boundaries.on_device(xp, bnd) if bnd is not None else None
        self.tau0, self.accel0 = float(tau0), tuple(float(a) for a in accel0)
        self.levels = list(forest.levels)
        m = forest.m
        # each level's storage: leaves of m³, or P0's mother leaves (mothers.py: blocks of (2m−1)³
        # reached from the leaves through ``leaf_map``)
        self.block = {lv: c.block or m for lv, c in coupling.items()}
        self.mapped = any(c.leaf_map is not None for c in coupling.values())
        if self.mapped and self.collision.csm:
            raise ValueError("mother leaves on a tree do not run Kobayashi's CSM (its coefficient takes each "
                             "shared node's owner, a leaf-storage notion)")
        self.fp16 = bool(fp16)
        if self.fp16 and (self.mapped or self.collision.csm or not getattr(kernels, "fp16_storage", False)
                          or np.dtype(dtype) != np.float32):
            raise ValueError("fp16 storage on a tree runs the CUDA naive kernels on leaves of m³ with fp32 "
                             "arithmetic, without Kobayashi's CSM")
        store = np.float16 if self.fp16 else dtype
        self.bufs = {lv: [xp.zeros((d3q27.Q, c.n) + (self.block[lv],) * 3, store) for _ in range(2)]
                     for lv, c in coupling.items()}
        self._maps = {lv: xp.asarray(c.leaf_map) for lv, c in coupling.items() if c.leaf_map is not None}
        self._tracer_map = None  # (planes, map) of level_buffers on mother leaves, built on first use
        # interface buffers, allocated once (the CUDA graph captures their addresses)
        # (sizes by shape_of: the tables may still be on the device only, interface.LevelCoupling)
        self.fine_buf = {lv: xp.zeros((d3q27.Q, c.size_of("fine_pts")), dtype) for lv, c in coupling.items()}
        self.coarse_buf = {lv: xp.zeros((d3q27.Q, c.size_of("coarse_pts")), dtype) for lv, c in coupling.items()}
        self.interp_buf = {lv: xp.zeros((d3q27.Q, c.shape_of("interp_slot")[0]), dtype) for lv, c in coupling.items()}
        self.link_buf = {lv: xp.zeros(c.link_i1.size, dtype) for lv, c in coupling.items()}
        # fused coupling: the coarse values and their interpolation at θ = ½, computed with θ = 0's
        self._fused_coupling = True
        self.coarse_half = {lv: xp.zeros_like(b) for lv, b in self.coarse_buf.items()}
        self.interp_half = {lv: xp.zeros_like(b) for lv, b in self.interp_buf.items()}
        # threads a source position in amr3d_interpolate_rows (1, 3 or 9; 27 / lanes populations each:
        # 3 holds 56 registers a thread instead of 1's 123; the same bits, coupling.cu)
        self._interp_lanes = INTERP_LANES_DEFAULT
        self._half_step: dict = {}  # level → its step in progress is the θ = ½ one (fused: reads interp_half)
        self._pending: set = set()  # levels whose restriction waits for their next step's start
        # a second step's restriction (the level's) held back to join the restriction of the level
        # below, which follows it at once (restrict_two), where that one reads none of its nodes
        self._held = None
        self._pairable = pairable_restrictions(coupling, self.mapped, xp)
        # (False: each second step's restriction alone and the coarsest level's at each step's end, as before)
        self.pair_restrictions = True
        self._carry = False  # the coarse step in progress leaves the coarsest level's restriction to the next
        # the CSM's coefficient C per point of each level (one value a point; collision.py) and the
        # copies of shared nodes that take their owner's C (ladder.shared_copies)
        self.csm_coef, self.csm_copies = {}, {}
        if self.collision.csm:
            self.csm_coef = {lv: xp.zeros((c.n, m, m, m), dtype) for lv, c in coupling.items()}
            self.csm_copies = {lv: interface.level_copies(forest, lv) for lv in coupling}
        self._phases_seen: set = set()
        self._graphs: dict = {}
        # canonical point ids (leaf · m³ + local) of each level's first point, in self.levels order
        # (state() concatenates the levels in this order): populations() finds an id's level with them
        first = np.array([coupling[lv].lo * m**3 for lv in self.levels], np.int64)
        self._level_first, self._level_bounds = upload_together(xp, (first, first[1:]))
        kernels.prepare(self)

    def coupling_settings(self) -> dict:
        """How this stepper launches its level coupling (COUPLING_SETTINGS), for the next stepper of
        the tree (a regrid or a rung switch builds one)."""
        return {name: getattr(self, name) for name in COUPLING_SETTINGS}

    def apply_coupling_settings(self, settings: dict) -> None:
        """Set what ``coupling_settings`` returned (through the setters: checked, and the split
        launches' tables brought back where fused_coupling is off). Before any step or capture."""
        unknown = set(settings) - set(COUPLING_SETTINGS)
        if unknown:
            raise ValueError(f"unknown coupling settings {sorted(unknown)}: known are {COUPLING_SETTINGS}")
        for name in COUPLING_SETTINGS:
            if name in settings and settings[name] != getattr(self, name):
                setattr(self, name, settings[name])

    @property
    def interp_lanes(self) -> int:
        return self._interp_lanes

    @interp_lanes.setter
    def interp_lanes(self, lanes: int) -> None:
        """Checked here, not at the launch: a value the kernel does not have would stop a coarse step
        half done (some levels stepped, the step count not)."""
        if isinstance(lanes, bool) or int(lanes) != lanes or int(lanes) not in INTERP_LANES:
            raise ValueError(f"interp_lanes = {lanes!r}: one of {INTERP_LANES}")
        self._interp_lanes = int(lanes)

    @property
    def fused_coupling(self) -> bool:
        return self._fused_coupling

    @fused_coupling.setter
    def fused_coupling(self, on: bool) -> None:
        """The split launches read the dense interpolation rows, which the kernels then bring back
        (set before stepping: a CUDA graph must not capture their upload)."""
        self._fused_coupling = bool(on)
        if not on and hasattr(self.kernels, "split_tables"):
            self.kernels.split_tables(self)

    # ---- state --------------------------------------------------------------------------------
    def set_state(self, f, synchronised: bool = True) -> None:
        """f[Q, L, m, m, m] (every leaf, the forest's order) → the per-level buffers. A state that is
        not ``synchronised`` then has its coarse copies of fine-owned nodes set from the fine values
        (the invariant the step keeps); one that is (out of a step, or synchronise_host) is taken
        bit for bit."""
        xp = self.xp
        for lv in self.coupling:
            sl = self.forest.level_slice(lv)
            if self.fp16:
                self.bufs[lv][0][...] = storage.to_fp16(xp, xp.asarray(f[:, sl], dtype=np.float32))
            elif lv in self._maps:  # shared nodes of siblings land on one mother point (equal values)
                self.bufs[lv][0].reshape(d3q27.Q, -1)[:, self._maps[lv]] = xp.asarray(f[:, sl]).reshape(d3q27.Q, -1)
            else:
                self.bufs[lv][0][...] = xp.asarray(f[:, sl])
        if not synchronised:
            self.synchronise()
        elif self.mapped:  # the provisional points from the finer levels (finest first), nothing else
            for lv in sorted(self.levels, reverse=True):
                if self.coupling[lv].n_prov:
                    self.kernels.restrict(self, lv, *_scale(self.tau0, self.accel0, lv + 1, lv), provisional=True)

    def level_state(self, lv: int):
        """f[Q, n_l, m, m, m] of one level's leaves: its current buffer (a view), or gathered from
        its mother leaves (a new array, provisional points left out); on fp16 storage the fp32
        populations (a new array)."""
        if self.fp16:
            return storage.from_fp16(self.xp, self.bufs[lv][0])
        if lv not in self._maps:
            return self.bufs[lv][0]
        m, q = self.forest.m, d3q27.Q
        return self.bufs[lv][0].reshape(q, -1)[:, self._maps[lv]].reshape(q, -1, m, m, m)

    def state(self):
        """f[Q, L, m, m, m] assembled from every level's current buffer (a new array)."""
        return self.xp.concatenate([self.level_state(lv) for lv in self.levels], axis=1)

    def populations(self, ids):
        """f (Q, *ids.shape) at canonical point ids (leaf · m³ + (k·m + j)·m + i), gathered from each
        level's current buffer (the mapping of state(), without assembling the state): per level one
        gather at the ids clamped into it, kept where the id is of that level."""
        xp, q = self.xp, d3q27.Q
        flat = ids.reshape(-1)
        bufs = [self.bufs[lv][0].reshape(q, -1) for lv in self.levels]
        maps = [self._maps.get(lv) for lv in self.levels]
        if len(bufs) == 1:
            out = bufs[0][:, flat if maps[0] is None else maps[0][flat]]
            return self._fp32(out).reshape((q,) + ids.shape)
        level = xp.searchsorted(self._level_bounds, flat, side="right")  # index into self.levels
        local = flat - self._level_first[level]
        m3 = self.forest.m ** 3

        def at(i):  # level i's storage index of the clamped local ids
            c = self.coupling[self.levels[i]]
            loc = xp.minimum(local, (self.forest.level_slice(c.level).stop - c.lo) * m3 - 1)
            return loc if maps[i] is None else maps[i][xp.maximum(loc, 0)]

        out = bufs[0][:, at(0)]
        for i, b in enumerate(bufs[1:], 1):  # into the one result: two (Q, K) temporaries at most
            xp.copyto(out, b[:, at(i)], where=(level == i)[None])
        return self._fp32(out).reshape((q,) + ids.shape)

    def gather_plan(self, ids) -> tuple:
        """For sorted canonical point ids (xp int64, e.g. a sampled.SamplePlan's points), each level's
        storage indices of its ids within its buffer (self.levels order; device arrays, built once):
        :meth:`gathered` is then populations(ids) as one gather per level, without the per-call
        search, clamps and selects. The levels are contiguous runs of canonical ids in this order, so
        sorted ids split into runs (where: one search on the ids' device, a few ints to the host)."""
        m3, xp = self.forest.m ** 3, self.xp
        ids = xp.asarray(ids)
        first = [self.coupling[lv].lo * m3 for lv in self.levels]
        cuts = xp.searchsorted(ids, xp.asarray(first[1:] + [np.iinfo(np.int64).max], dtype=np.int64)).tolist()
        plan, start = [], 0
        for lv, f0, stop in zip(self.levels, first, cuts):
            local = ids[start:stop] - f0
            plan.append(local if lv not in self._maps else self._maps[lv][local])
            start = stop
        return tuple(plan)

    def gathered(self, plan: tuple):
        """f (Q, len(ids)) at the ids of a :meth:`gather_plan`: populations(ids), bit for bit."""
        q = d3q27.Q
        parts = [self.bufs[lv][0].reshape(q, -1)[:, idx] for lv, idx in zip(self.levels, plan)]
        return self._fp32(parts[0] if len(parts) == 1 else self.xp.concatenate(parts, axis=1))

    def _fp32(self, g):
        """Gathered populations g[Q, ...] as fp32 (from fp16 storage: + w, load_pop's arithmetic)."""
        return storage.from_fp16(self.xp, g) if self.fp16 else g

    def level_buffers(self):
        """Each level's current buffer (self.levels order), the canonical point id of each level's
        first point (device int64) and the points of all levels: populations() without the gather,
        for kernels that read the storage themselves (tracer_kernels.py). The current buffers swap
        with each level step: ask again after stepping. On mother leaves also each level's plane and
        the storage index of every canonical point id (built once: 8 bytes a leaf point)."""
        m3, xp = self.forest.m**3, self.xp
        if self.fp16:
            raise ValueError("the fused tracer kernels read fp32 buffers; on fp16 storage the tracers gather "
                             "through populations()")
        bufs = tuple(self.bufs[lv][0] for lv in self.levels)
        if not self.mapped:
            return LevelBuffers(bufs, self._level_first, self.forest.n_leaves * m3)
        if self._tracer_map is None:
            parts = [self._maps[lv] if lv in self._maps else xp.arange(self.coupling[lv].n * m3, dtype=np.int64)
                     for lv in self.levels]
            planes = np.array([self.coupling[lv].n * self.block[lv] ** 3 for lv in self.levels], np.int64)
            self._tracer_map = (xp.asarray(planes), xp.concatenate(parts))
        return LevelBuffers(bufs, self._level_first, self.forest.n_leaves * m3, *self._tracer_map)

    def synchronise(self) -> None:
        for lv in sorted(self.levels, reverse=True):
            if lv + 1 in self.bufs:
                self._restrict(lv)

    # ---- stepping -------------------------------------------------------------------------------
    def _phase(self, name: str):
        """Each phase name counts one step in the first sample of a coarse step, 0 in the rest, so
        the per-step figure is the sum over every level step."""
        steps = 0 if name in self._phases_seen else 1
        self._phases_seen.add(name)
        return self.timer.phase(name, steps=steps)

    def _restrict(self, lv: int, phase=None) -> None:
        c = self.coupling[lv]
        if self._held is not None and (self._held != lv + 1 or not c.restrict_dst.size):
            self._flush_held(phase)  # (only the next level's restriction joins this one)
        if c.restrict_dst.size:
            with (phase or _no_phase)("coupling"):
                if self._held == lv + 1:
                    self._held = None
                    self.kernels.restrict_two(self, lv + 1, False, _scale(self.tau0, self.accel0, lv + 2, lv + 1),
                                              _scale(self.tau0, self.accel0, lv + 1, lv))
                else:
                    self.kernels.restrict(self, lv, *_scale(self.tau0, self.accel0, lv + 1, lv))

    def _flush_held(self, phase=None) -> None:
        """The held restriction alone (what follows it is not the restriction it was held for)."""
        lv, self._held = self._held, None
        if lv is not None:
            with (phase or _no_phase)("coupling"):
                self.kernels.restrict(self, lv, *_scale(self.tau0, self.accel0, lv + 1, lv))

    def interp_now(self, lv: int):
        """The interpolated buffer the level's step in progress reads (fused: θ = ½'s own)."""
        return self.interp_half[lv] if self._half_step.get(lv) else self.interp_buf[lv]

    def _coupling_in(self, lv: int, theta: float) -> None:
        """The interface buffers a level step reads, launched alone (split) or fused."""
        c, k = self.coupling[lv], self.kernels
        has_coarse, has_fine = bool(c.size_of("coarse_pts")), bool(c.size_of("fine_pts"))
        if not self.fused_coupling:
            self._half_step[lv] = False
            if has_coarse:
                k.rescale_points(self, lv, lv - 1, theta, *_scale(self.tau0, self.accel0, lv - 1, lv))
                k.interpolate(self, lv)
            if has_fine:
                k.rescale_points(self, lv, lv + 1, 1.0, *_scale(self.tau0, self.accel0, lv + 1, lv))
            return
        self._half_step[lv] = theta == 0.5
        if lv not in self._pending:
            self._flush_held()  # (never: a held restriction is followed by the pending one of the level below)
        if theta == 0.0 and has_coarse:  # both steps' coarse values (and this step's fine ones)
            k.rescale_two(self, lv, _scale(self.tau0, self.accel0, lv - 1, lv),
                          _scale(self.tau0, self.accel0, lv + 1, lv) if has_fine else None)
            k.interpolate_two(self, lv)
        elif lv in self._pending:  # θ = ½: the first step's restriction with this step's fine values
            self._pending.discard(lv)
            if self._held == lv + 1 and (not has_fine or self._pairable[lv + 1] == "fine"):
                self._held = None  # (and level lv+1's second step's restriction before it, in the same launch)
                k.restrict_two(self, lv + 1, has_fine, _scale(self.tau0, self.accel0, lv + 2, lv + 1),
                               _scale(self.tau0, self.accel0, lv + 1, lv))
                return
            self._flush_held()
            k.restrict_fine(self, lv, has_fine, *_scale(self.tau0, self.accel0, lv + 1, lv))
        elif has_fine:
            k.rescale_points(self, lv, lv + 1, 1.0, *_scale(self.tau0, self.accel0, lv + 1, lv))

    def _advance(self, lv: int, theta: float, phase) -> None:
        c, k = self.coupling[lv], self.kernels
        with phase("coupling"):
            self._coupling_in(lv, theta)
        if c.link_i1.size:  # (reads the level's current buffer only: before the ladder, for the CSM's pre-pass)
            with phase("boundary"):
                k.links(self, lv)
        if self.collision.csm:
            with phase("les"):
                k.csm(self, lv)
        k.ladder(self, lv, phase)
        if c.n_fix:
            with phase("coupling"):
                k.fixup(self, lv)
        if self.bnd is not None and not self.bnd.level[lv].empty:
            with phase("boundary"):
                k.boundary(self, lv)
        self.bufs[lv].reverse()
        if lv + 1 in self.bufs:
            self._advance(lv + 1, 0.0, phase)
            self._advance(lv + 1, 0.5, phase)
            if self.fused_coupling and theta == 0.0 and (lv != self.levels[0] or self._carry) and c.restrict_dst.size:
                # level lv's θ = ½ step follows at once (restrict_fine); the coarsest level's next coarse
                # step, where the caller runs another at once (_carry)
                self._pending.add(lv)
            elif (self.fused_coupling and self.pair_restrictions and theta == 0.5 and self._held is None
                  and lv in self._pairable):
                self._held = lv  # (level lv−1's restriction follows at once: restrict_two)
            else:
                self._restrict(lv, phase)

    def _step(self, timed: bool, carry: bool = False) -> None:
        """One coarse step. ``carry`` (fused coupling): another coarse step follows at once, so the
        coarsest level's restriction waits for its start, whose fine values it joins (restrict_fine,
        as within a step; with a held restriction, restrict_two); the last step of a run, or of a
        graph, restricts at its end, so nothing of this outlives a call of advance."""
        self._phases_seen.clear()
        self._carry = bool(carry and self.pair_restrictions)
        phase = self._phase if timed else _no_phase
        self._advance(self.levels[0], 0.0, phase)
        if not self._carry:
            self._flush_held(phase)  # (never: the coarsest level's restriction is the step's last)

    def advance(self, n: int, graph: bool = False) -> None:
        self._pending.clear()
        self._held = None
        if not graph or not self.kernels.graphs:
            for i in range(n):
                self._step(timed=True, carry=i < n - 1)
            return
        with self.timer.phase("step", steps=n):
            while n:
                c = graph_batch(n)
                key = ((c, self.fused_coupling, self.interp_lanes, self.pair_restrictions)
                       + tuple(int(self.bufs[lv][0].data.ptr) for lv in self.levels))
                g = self._graphs.get(key)
                if g is None:  # the capture runs the steps' Python once: their buffer swaps are done
                    g = self._graphs[key] = self.kernels.capture(
                        lambda c=c: [self._step(False, carry=i < c - 1) for i in range(c)])
                else:
                    self._swap_as_steps(c)
                g.launch(self.kernels.stream)
                n -= c

    def _swap_as_steps(self, n: int) -> None:
        """The buffer roles after n coarse steps replayed from a graph, as stepping leaves them: a
        level's pair swaps at each of its level steps, and level l steps 2^(l − l₀) times a coarse
        step, so only the coarsest level's pair swaps, and only after an odd n. Odd counts can
        then be replayed too (one step a batch, as the tracers step, is one launch)."""
        if n % 2:
            self.bufs[self.levels[0]].reverse()

    @property
    def dt(self) -> float:
        """Level-0 time units of one coarse step."""
        return 2.0 ** -self.levels[0]

    def body_force(self):
        """Momentum-exchange force (3,) on the bodies, level-0 units (device array)."""
        total = self.xp.zeros(3, np.float64)
        if self.bnd is not None:
            for lv, b in self.bnd.level.items():
                total = total + boundaries.force(self.xp, self._fp32(self.bufs[lv][0]).reshape(d3q27.Q, -1), b, 0, lv)
        return total


def pairable_restrictions(coupling: dict[int, LevelCoupling], mapped: bool = False, xp=np) -> dict[int, str]:
    """The levels lv whose restriction lv+1 → lv may run in one launch with level lv−1's (lv → lv−1,
    which reads level lv): "fine" where level lv−1's restriction points and its fine points (level lv
    ids) are none of level lv's restricted points, "plain" where only the restriction points are
    apart (the fine values then join the next step's launch as before), absent where they meet, where a
    level has no restriction, and on mother leaves (mapped: their provisional points are restricted
    apart). Host tables, except fine points a regrid left on the device (LevelCoupling.device_copy):
    those are checked there with ``xp``, one boolean read back, so the answer is the same however the
    tables were built (the launches a step, and what the tests exercise, do not depend on it)."""
    out = {}
    if mapped:
        return out
    for lv, c in coupling.items():
        below = coupling.get(lv - 1)
        if below is None or lv + 1 not in coupling or not c.restrict_dst.size or not below.restrict_dst.size:
            continue
        dst, src = c.restrict_dst, below.restrict_src
        if not (isinstance(dst, np.ndarray) and isinstance(src, np.ndarray)):
            continue
        # level lv's restricted points marked (a regrid builds a stepper: one pass, no sort)
        written = np.zeros(max(int(dst.max(initial=-1)), int(src.max(initial=-1))) + 1, bool)
        written[dst] = True
        if written[src].any():
            continue
        fine_dev = below.device_copy("fine_pts")
        if fine_dev is None:
            fine = np.asarray(below.fine_pts)
            met = bool(written[fine[fine < written.size]].any())
        else:  # indices past the marks are not restricted points
            marks = xp.asarray(written)
            inside = fine_dev < written.size
            met = bool((marks[xp.where(inside, fine_dev, 0)] & inside).any())
        out[lv] = "plain" if met else "fine"
    return out


def synchronise_host(forest: Forest, coupling: dict[int, LevelCoupling], f, tau0: float, accel0) -> None:
    """In place on a host state f[Q, L, m, m, m]: every coarse copy of a fine-owned node takes the
    rescaled fine value, finest levels first (reference.synchronise's restriction, from the
    interface data): initial states start consistent and every rung then starts from the same bits."""
    synchronise_state(np, forest, coupling, f, tau0, accel0)


def synchronise_state(xp, forest: Forest, coupling: dict[int, LevelCoupling], f, tau0: float, accel0) -> None:
    """:func:`synchronise_host` on a state of any xp (a regrid's, on the device)."""
    m3 = forest.m ** 3
    f2 = f.reshape(d3q27.Q, -1)
    for lv in sorted(coupling, reverse=True):
        c = coupling[lv]
        if c.restrict_dst.size:
            src = xp.asarray(c.restrict_src + forest.level_slice(lv + 1).start * m3)
            f2[:, xp.asarray(c.restrict_dst + c.lo * m3)] = levels.rescale(xp, f2[:, src], tau0, lv + 1, lv, accel0)


class NumpyKernels:
    """The ladder and coupling kernels written as array code (any xp): the ladder step of a level
    is the one-level reference (leafgrid.step through its same-level neighbour table), the coupling
    follows coupling.cu. ``collide`` is the kernels' operation order (leafgrid.collide)."""

    graphs = False
    fp16_storage = False  # (array code on the engine's dtype; the reference rounds for fp16: reference.py)

    def prepare(self, st: TreeStepper) -> None:
        xp = st.xp
        self.src = {lv: xp.asarray(leafgrid.gather_sources(c.nbr, st.block[lv])) for lv, c in st.coupling.items()}
        names = ("fix_pts", "desc", "fine_pts", "coarse_pts", "interp_slot", "interp_w", "restrict_dst", "restrict_src",
                 "link_i1", "link_i2", "link_w1", "link_w2")
        self.dev = {lv: {k: xp.asarray(getattr(c, k)) for k in names} for lv, c in st.coupling.items()}
        for lv in st.coupling:  # the fused coupling's compact rows (interp_rows.py)
            d = self.dev[lv]
            d["rows"] = interp_rows.build(xp, d["interp_slot"], d["interp_w"], d["desc"], d["fine_pts"].size)

    def ladder(self, st, lv, phase):
        cur, nxt = st.bufs[lv]
        with phase("step"):
            nxt[...] = leafgrid.step(st.xp, cur, self.src[lv], 1.0 / levels.tau_at(st.tau0, lv),
                                     levels.accel_at(st.accel0, lv), st.collision, st.csm_coef.get(lv))

    def csm(self, st, lv):
        """The CSM's C of every point of the level from its pre-collision populations: the pull
        through the gather table, and the fix-up's gather at the interface points."""
        xp, cur = st.xp, st.bufs[lv][0]
        g = xp.take_along_axis(cur.reshape(d3q27.Q, -1), self.src[lv], axis=1)
        if st.coupling[lv].n_fix:
            g[:, self.dev[lv]["fix_pts"]] = self._fix_gather(st, lv)
        st.csm_coef[lv][...] = collision.csm_coefficient(xp, g.reshape(cur.shape), st.csm_copies[lv])

    def rescale_points(self, st, lv, other, theta, alpha, a_s, a_t, forced, out=None):
        cur, prev = st.bufs[other]
        pts = self.dev[lv]["fine_pts" if other > lv else "coarse_pts"]
        q = d3q27.Q
        if theta == 0.0:
            f = prev.reshape(q, -1)[:, pts]
        elif theta == 1.0:
            f = cur.reshape(q, -1)[:, pts]
        else:
            t = cur.dtype.type
            f = t(1.0 - theta) * prev.reshape(q, -1)[:, pts] + t(theta) * cur.reshape(q, -1)[:, pts]
        out = (st.fine_buf if other > lv else st.coarse_buf)[lv] if out is None else out
        out[...] = levels.rescale(st.xp, f, st.tau0, other, lv, st.accel0)

    def rescale_two(self, st, lv, coarse_scale, fine_scale):
        """amr3d_rescale_two: the coarse values at θ = 0 and ½, and (fine_scale not None) the fine ones."""
        self.rescale_points(st, lv, lv - 1, 0.0, *coarse_scale)
        self.rescale_points(st, lv, lv - 1, 0.5, *coarse_scale, out=st.coarse_half[lv])
        if fine_scale is not None:
            self.rescale_points(st, lv, lv + 1, 1.0, *fine_scale)

    def interpolate_two(self, st, lv):
        """amr3d_interpolate_rows of both time levels: the compact rows, the fix-up's populations only."""
        rows = self.dev[lv]["rows"]
        interp_rows.apply(st.xp, rows, st.coarse_buf[lv], st.interp_buf[lv])
        interp_rows.apply(st.xp, rows, st.coarse_half[lv], st.interp_half[lv])

    def restrict_fine(self, st, lv, fine, alpha, a_s, a_t, forced):
        """amr3d_restrict_fine: the restriction lv+1 → lv and (``fine``) level lv's fine values."""
        self.restrict(st, lv, alpha, a_s, a_t, forced)
        if fine:
            self.rescale_points(st, lv, lv + 1, 1.0, alpha, a_s, a_t, forced)

    def restrict_two(self, st, lv, fine, scale_a, scale_b):
        """amr3d_restrict_two: the restriction lv+1 → lv, then lv → lv−1 and (``fine``) level lv−1's
        fine values."""
        self.restrict(st, lv, *scale_a)
        self.restrict_fine(st, lv - 1, fine, *scale_b)

    def interpolate(self, st, lv, cb=None, out=None):
        d = self.dev[lv]
        cb = st.coarse_buf[lv] if cb is None else cb
        w = st.xp.asarray(d["interp_w"], dtype=cb.dtype)
        slot = d["interp_slot"]
        v = w[:, 0] * cb[:, slot[:, 0]]
        for s in range(1, slot.shape[1]):
            v = v + w[:, s] * cb[:, slot[:, s]]
        (st.interp_buf[lv] if out is None else out)[...] = v

    def restrict(self, st, lv, alpha, a_s, a_t, forced, provisional=False):
        """Level lv's copies of level lv+1 nodes ← the rescaled fine values; ``provisional``: only
        the mother leaves' provisional points (the last n_prov pairs)."""
        d = self.dev[lv]
        part = slice(d["restrict_dst"].size - st.coupling[lv].n_prov if provisional else 0, None)
        src = st.bufs[lv + 1][0].reshape(d3q27.Q, -1)[:, d["restrict_src"][part]]
        st.bufs[lv][0].reshape(d3q27.Q, -1)[:, d["restrict_dst"][part]] = levels.rescale(st.xp, src, st.tau0, lv + 1,
                                                                                        lv, st.accel0)

    def _fix_gather(self, st, lv):
        """(Q, R) pre-collision populations of the interface points through their descriptors."""
        xp, d = st.xp, self.dev[lv]
        src = st.bufs[lv][0]
        desc = d["desc"]
        g = xp.empty(desc.shape, src.dtype)
        direct = desc >= 0
        g[direct] = src.reshape(-1)[desc[direct]]
        j = -1 - desc
        nf = st.fine_buf[lv].size
        fine = (~direct) & (j < nf)
        if nf:
            g[fine] = st.fine_buf[lv].reshape(-1)[j[fine]]
        ni = st.interp_buf[lv].size
        coarse = (~direct) & (j >= nf) & (j < nf + ni)
        if ni:
            g[coarse] = st.interp_now(lv).reshape(-1)[j[coarse] - nf]
        link = (~direct) & (j >= nf + ni)
        if st.link_buf[lv].size:
            g[link] = st.link_buf[lv][j[link] - nf - ni]
        return g

    def fixup(self, st, lv):
        xp, d = st.xp, self.dev[lv]
        src, dst = st.bufs[lv]
        g = self._fix_gather(st, lv)
        coef = st.csm_coef[lv].reshape(-1)[d["fix_pts"]] if st.collision.csm else None
        out = leafgrid.collide(xp, g, src.dtype.type(1.0 / levels.tau_at(st.tau0, lv)), levels.accel_at(st.accel0, lv),
                               st.collision, coef)
        dst.reshape(d3q27.Q, -1)[:, d["fix_pts"]] = out

    def links(self, st, lv):
        d, src = self.dev[lv], st.bufs[lv][0].reshape(-1)
        t = src.dtype
        st.link_buf[lv][...] = d["link_w1"].astype(t) * src[d["link_i1"]] + d["link_w2"].astype(t) * src[d["link_i2"]]

    def boundary(self, st, lv):
        boundaries.apply(st.xp, st.bufs[lv][1].reshape(d3q27.Q, -1), st.bnd.level[lv], 0, st.bnd.inlet_velocity)


class CupyKernels:
    """The CUDA kernels: one LadderStepper per level (the rung's kernels on that level's leaf grid)
    and the coupling kernels of coupling.cu, all on the engine's stream.

    ``rung = "naive-fused"`` (beyond P0): on a level with interface points, ladder.cu's
    amr3d_naive_fix does the naive pull and the fix-up's pull in one pass (one store per point),
    and :meth:`fixup` has nothing left to do; the time of both is in the ladder's ``step`` phase."""

    graphs = True
    fp16_storage = True  # on the naive rungs (LadderStepper refuses the others)

    def __init__(self, rung: str, stream):
        self.fused = rung == "naive-fused"
        self.rung, self.stream = ("naive" if self.fused else rung), stream

    def prepare(self, st: TreeStepper) -> None:
        xp = st.xp
        self.k = coupling_kernels(st.collision)
        self.half = "_16" if st.fp16 else ""  # the fp16 storage's kernels (kernel_names.COUPLING)
        # every level's tables cross to the device in one upload (uploads.py): a regrid rebuilds
        # them all, and one upload per table cost more than their bytes
        host, at = [], {}

        def put(lv, key, a):
            at[lv, key] = len(host)
            host.append(a)

        wide = {}
        for lv, c in st.coupling.items():
            on_device = c.device or {}  # (built there: converted there, not uploaded again)
            for k in ("fine_pts", "coarse_pts", "interp_slot", "restrict_dst", "restrict_src", "link_i1", "link_i2"):
                if k not in on_device:
                    put(lv, k, np.asarray(getattr(c, k), np.int64))
            put(lv, "link_w1", np.asarray(c.link_w1, np.float32))
            put(lv, "link_w2", np.asarray(c.link_w2, np.float32))
            # the fix-up's descriptors in 32 bits where every index of the level fits (half the bytes);
            # |x| ≥ 2³¹ − 1 as max and min (no temporary: the descriptors never hold INT64_MIN)
            top = 2**31 - 1
            d_min, d_max = c.desc_bounds()  # (known without the descriptors on the host)
            wide[lv] = d_max >= top or d_min <= -top or int(c.fix_pts.max(initial=0)) >= top
            idx = np.int64 if wide[lv] else np.int32
            put(lv, "fix_pts", np.asarray(c.fix_pts, idx))
            if "desc" not in on_device:
                put(lv, "desc", np.asarray(c.desc, idx))
            if "interp_w" not in on_device:
                put(lv, "interp_w", np.asarray(c.interp_w, np.float32))
            for k, a in zip(("nbr", "shell", "seg"), LadderStepper.ladder_tables(st.block[lv], c.nbr)):
                put(lv, k, a)
        u_in = st.bnd.inlet_velocity if st.bnd is not None else (0.0, 0.0, 0.0)
        put(None, "inlet", boundaries.rest_values(np.float32, u_in))
        put(None, "rest", boundaries.rest_values(np.float32))
        dev = upload_together(xp, host)

        def got(lv, key):
            if (lv, key) in at:
                return dev[at[lv, key]]
            a = st.coupling[lv].device[key]  # the device's own copy, in the dtype the kernels take
            dtype = {"desc": np.int64 if wide[lv] else np.int32, "interp_w": np.float32}.get(key, np.int64)
            return a if a.dtype == dtype else a.astype(dtype)

        self.steppers = {lv: LadderStepper(xp, self.stream, self.rung, st.block[lv], None,
                                           1.0 / levels.tau_at(st.tau0, lv),
                                           levels.accel_at(st.accel0, lv), st.timer, nbr=c.nbr, model=st.collision,
                                           coef=st.csm_coef[lv].reshape(-1) if st.collision.csm else None,
                                           copies=st.csm_copies.get(lv), fp16=st.fp16,
                                           uploaded=tuple(got(lv, k) for k in ("nbr", "shell", "seg")))
                         for lv, c in st.coupling.items()}
        self.dev = {}
        for lv, c in st.coupling.items():
            d = {k: got(lv, k) for k in ("fine_pts", "coarse_pts", "interp_slot", "restrict_dst", "restrict_src",
                                         "link_i1", "link_i2", "link_w1", "link_w2", "fix_pts", "desc", "interp_w")}
            d["fixup"] = "fixup64" if wide[lv] else "fixup32"
            if self.fused and c.n_fix:  # each point's rank in the fix-up's list, or -1 (on the device: no upload)
                fix_of = xp.full(c.n * st.block[lv]**3, -1, np.int32)
                fix_of[d["fix_pts"]] = xp.arange(c.n_fix, dtype=np.int32)
                d["fix_of"] = fix_of
            if c.size_of("coarse_pts"):  # the fused coupling's compact rows (interp_rows.py), built on the device
                d["rows"] = self._build_rows(xp, d, c)
            # the dense rows serve the split launches only (split_tables brings them back): the fused
            # coupling reads the compact ones
            del d["interp_slot"], d["interp_w"]
            self.dev[lv] = d
        # taken: the device copies the stepper does not hold are dropped here; the tables a device build
        # left on the device for their first host use (LevelCoupling.keep_on_device: the descriptors in
        # int64, the weights in float64) stay with the coupling, which the interface cache keeps
        for c in st.coupling.values():
            c.device = None
        self.m3 = {lv: b ** 3 for lv, b in st.block.items()}  # points per block of each level
        self._inlet_values = got(None, "inlet")
        self._rest_values = got(None, "rest")

    def _build_rows(self, xp, d: dict, c: LevelCoupling) -> interp_rows.InterpRows:
        """interp_rows.build's compact rows (the same arrays, bit for bit) in two launches of
        coupling.cu (amr3d_rows_need, amr3d_rows_build) instead of its ~30 array operations and their
        64-bit temporaries (a regrid builds every level's)."""
        slot, w, desc = xp.ascontiguousarray(d["interp_slot"]), xp.ascontiguousarray(d["interp_w"]), d["desc"]
        n, stride = (int(x) for x in slot.shape)
        size = d3q27.Q * n
        # the kernel's 32-bit counts: positions (and their populations) and the compact slots, which
        # index the coarse buffer's nodes
        if size >= 2**31 or c.size_of("coarse_pts") >= 2**31:
            raise ValueError(f"level {c.level}: {n} interpolated positions of {c.size_of('coarse_pts')} coarse nodes "
                             "pass the compact rows' 32-bit indices")
        if slot.dtype != np.int64 or w.dtype != np.float32:
            raise TypeError(f"compact rows from {slot.dtype} slots and {w.dtype} weights (int64, float32 expected)")
        need = xp.zeros(size, np.uint8)
        flat = xp.ascontiguousarray(desc).reshape(-1)
        g, b = self._grid(flat.size)
        self.k["rows_need64" if flat.dtype == np.int64 else "rows_need32"](
            g, b, (flat, np.int64(flat.size), np.int64(d3q27.Q * c.size_of("fine_pts")), np.int64(size), need),
            stream=self.stream)
        rows = interp_rows.InterpRows(count=xp.empty(n, np.int32), slot=xp.empty((n, stride), np.int32),
                                      w=xp.empty((n, stride), np.float32), mask=xp.empty(n, np.uint32))
        g, b = self._grid(n)
        self.k["rows_build"](g, b, (slot, w, np.int32(n), np.int32(stride), need, rows.count, rows.slot, rows.w,
                                    rows.mask), stream=self.stream)
        return rows

    def split_tables(self, st: TreeStepper) -> None:
        """The dense interpolation rows of every level on the device (the split launches' amr3d_interpolate
        reads them; prepare keeps only the compact rows): from the coupling's host fields (read back
        where a device build left them there), once."""
        for lv, c in st.coupling.items():
            d = self.dev[lv]
            if "interp_slot" not in d:
                d["interp_slot"], d["interp_w"] = upload_together(
                    st.xp, (np.asarray(c.interp_slot, np.int64), np.asarray(c.interp_w, np.float32)))

    @staticmethod
    def _grid(n: int):
        return (max(1, -(-int(n) // 128)), 1, 1), (128,)

    def ladder(self, st, lv, phase):
        cur, nxt = st.bufs[lv]
        if self.fused and st.coupling[lv].n_fix:
            with phase("step"):
                self._naive_fix(st, lv)
            return
        self.steppers[lv].launch(cur, nxt, timed=phase is not _no_phase, phase=phase, prepass=False)

    def _naive_fix(self, st, lv):
        c, d, stepper = st.coupling[lv], self.dev[lv], self.steppers[lv]
        cur, nxt = st.bufs[lv]
        kern = stepper.k[("naive_fix64" if d["fixup"] == "fixup64" else "naive_fix32") + self.half]
        g, b = self._grid(c.n * self.m3[lv])
        kern(g, b, (cur, nxt, stepper.nbr, np.int32(c.n), d["fix_of"], d["desc"], np.int32(c.n_fix),
                    st.fine_buf[lv], np.int64(st.fine_buf[lv].size), st.interp_now(lv),
                    np.int64(st.interp_buf[lv].size), st.link_buf[lv], *stepper.scalars)
             + ((st.csm_coef[lv],) if st.collision.csm else ()), stream=self.stream)

    def csm(self, st, lv):
        """The CSM's pre-pass of a level: velocities of the pull into the next buffer, those of the
        fix-up's gather at the interface points, then C from differences inside each leaf."""
        c, d, stepper = st.coupling[lv], self.dev[lv], self.steppers[lv]
        cur, nxt = st.bufs[lv]
        stepper.csm_velocity(cur, nxt)
        if c.n_fix:
            g, b = self._grid(c.n_fix)
            kern = self.k["csm_fix64" if d["fixup"] == "fixup64" else "csm_fix32"]
            kern(g, b, (cur, nxt, d["fix_pts"], d["desc"], np.int32(c.n_fix), np.int64(c.n * self.m3[lv]),
                        st.fine_buf[lv], np.int64(st.fine_buf[lv].size), st.interp_now(lv),
                        np.int64(st.interp_buf[lv].size), st.link_buf[lv]), stream=self.stream)
        stepper.csm_coefficient(nxt)

    def rescale_points(self, st, lv, other, theta, alpha, a_s, a_t, forced):
        cur, prev = st.bufs[other]
        fine = other > lv
        pts = self.dev[lv]["fine_pts" if fine else "coarse_pts"]
        out = (st.fine_buf if fine else st.coarse_buf)[lv]
        f32 = np.float32
        g, b = self._grid(pts.size)
        plane = np.int64(st.coupling[other].n * self.m3[other])
        self.k["rescale" + self.half](g, b, (cur, prev, pts, np.int32(pts.size), plane, f32(theta), f32(alpha),
                                             *map(f32, a_s), *map(f32, a_t), np.int32(forced), out), stream=self.stream)

    def _scalars(self, scale):
        alpha, a_s, a_t, forced = scale
        f32 = np.float32
        return (f32(alpha), *map(f32, a_s), *map(f32, a_t), np.int32(forced))

    def rescale_two(self, st, lv, coarse_scale, fine_scale):
        """amr3d_rescale_two: level lv−1's points at θ = 0 and ½ and, with fine_scale, level lv+1's."""
        d = self.dev[lv]
        cpts, fpts = d["coarse_pts"], d["fine_pts"]
        nf = fpts.size if fine_scale is not None else 0
        ccur, cprev = st.bufs[lv - 1]
        fcur = st.bufs[lv + 1][0] if nf else ccur  # (not read without fine points)
        fplane = st.coupling[lv + 1].n * self.m3[lv + 1] if nf else 0
        g, b = self._grid(cpts.size + nf)
        self.k["rescale_two" + self.half](
            g, b, (ccur, cprev, cpts, np.int32(cpts.size), np.int64(st.coupling[lv - 1].n * self.m3[lv - 1]),
                   *self._scalars(coarse_scale), st.coarse_buf[lv], st.coarse_half[lv],
                   fcur, fpts, np.int32(nf), np.int64(fplane),
                   *self._scalars(fine_scale if nf else coarse_scale), st.fine_buf[lv]), stream=self.stream)

    def interpolate_two(self, st, lv):
        """Both time levels' interpolation from the compact rows (interp_rows.py: nonzero weights,
        the fix-up's populations only) in one launch."""
        c, rows = st.coupling[lv], self.dev[lv]["rows"]
        n, lanes = rows.n, int(st.interp_lanes)
        if lanes not in INTERP_LANES:
            raise ValueError(f"interp_lanes = {lanes}: one of {INTERP_LANES}")
        g, b = self._grid(2 * n * lanes)  # (lanes consecutive threads a position)
        kern = self.k["interp_rows" + ("" if lanes == 1 else str(lanes))]
        kern(g, b, (st.coarse_buf[lv], st.coarse_half[lv], np.int32(c.size_of("coarse_pts")), rows.count, rows.slot,
                    rows.w, np.int32(rows.stride), rows.mask, np.int32(n), np.int32(2), st.interp_buf[lv],
                    st.interp_half[lv]), stream=self.stream)

    def restrict_fine(self, st, lv, fine, alpha, a_s, a_t, forced):
        """amr3d_restrict_fine: the restriction lv+1 → lv and (``fine``) level lv's fine values."""
        d = self.dev[lv]
        dst, src, fpts = d["restrict_dst"], d["restrict_src"], d["fine_pts"]
        nf = fpts.size if fine else 0
        g, b = self._grid(dst.size + nf)
        self.k["restrict_fine" + self.half](
            g, b, (st.bufs[lv + 1][0], st.bufs[lv][0], src, dst, np.int32(dst.size), fpts, np.int32(nf),
                   np.int64(st.coupling[lv + 1].n * self.m3[lv + 1]), np.int64(st.coupling[lv].n * self.m3[lv]),
                   *self._scalars((alpha, a_s, a_t, forced)), st.fine_buf[lv]), stream=self.stream)

    def restrict_two(self, st, lv, fine, scale_a, scale_b):
        """amr3d_restrict_two: the restriction lv+1 → lv, then lv → lv−1 and (``fine``) level lv−1's
        fine values, in one launch (tree_stepper pairable_restrictions: the second reads none of the
        first's nodes)."""
        a, b = self.dev[lv], self.dev[lv - 1]
        fpts = b["fine_pts"]
        na, nb, nf = a["restrict_dst"].size, b["restrict_dst"].size, (fpts.size if fine else 0)
        g, t = self._grid(na + nb + nf)
        plane = {x: np.int64(st.coupling[x].n * self.m3[x]) for x in (lv + 1, lv, lv - 1)}
        self.k["restrict_two" + self.half](
            g, t, (st.bufs[lv + 1][0], st.bufs[lv][0], a["restrict_src"], a["restrict_dst"], np.int32(na),
                   plane[lv + 1], plane[lv], *self._scalars(scale_a),
                   st.bufs[lv - 1][0], b["restrict_src"], b["restrict_dst"], np.int32(nb), fpts, np.int32(nf),
                   plane[lv - 1], *self._scalars(scale_b), st.fine_buf[lv - 1]), stream=self.stream)

    def interpolate(self, st, lv):
        c, d = st.coupling[lv], self.dev[lv]
        if "interp_slot" not in d:  # (launched alone, outside the split steps: their tables first)
            if self.stream.is_capturing():
                raise RuntimeError("amr3d: the split interpolation's dense rows are uploaded inside a CUDA graph "
                                   "capture; set the stepper's fused_coupling = False before capturing")
            self.split_tables(st)
        n = c.shape_of("interp_slot")[0]
        g, b = self._grid(n)  # a thread per position, 27 populations each
        self.k[f"interp{c.stencil}"](g, b, (st.coarse_buf[lv], np.int32(c.size_of("coarse_pts")), d["interp_slot"],
                                            d["interp_w"], np.int32(n), st.interp_buf[lv]), stream=self.stream)

    def restrict(self, st, lv, alpha, a_s, a_t, forced, provisional=False):
        """``provisional``: only the mother leaves' provisional points (the last n_prov pairs)."""
        d, f32 = self.dev[lv], np.float32
        dst, src = d["restrict_dst"], d["restrict_src"]
        if provisional:
            k = dst.size - st.coupling[lv].n_prov
            dst, src = dst[k:], src[k:]
        n = dst.size
        g, b = self._grid(n)
        self.k["restrict" + self.half](g, b, (st.bufs[lv + 1][0], st.bufs[lv][0], src, dst, np.int32(n),
                                              np.int64(st.coupling[lv + 1].n * self.m3[lv + 1]),
                                              np.int64(st.coupling[lv].n * self.m3[lv]),
                                              f32(alpha), *map(f32, a_s), *map(f32, a_t), np.int32(forced)),
                                       stream=self.stream)

    def fixup(self, st, lv):
        if self.fused:
            return  # done inside amr3d_naive_fix
        c, d, f32 = st.coupling[lv], self.dev[lv], np.float32
        src, dst = st.bufs[lv]
        n = c.n_fix
        g, b = self._grid(n)
        tau = levels.tau_at(st.tau0, lv)
        ax, ay, az = levels.accel_at(st.accel0, lv)
        self.k[d["fixup"] + self.half](g, b, (src, dst, d["fix_pts"], d["desc"], np.int32(n),
                                              np.int64(c.n * self.m3[lv]), st.fine_buf[lv],
                                              np.int64(st.fine_buf[lv].size), st.interp_now(lv),
                                              np.int64(st.interp_buf[lv].size), st.link_buf[lv],
                                              f32(1.0 / tau), f32(ax), f32(ay), f32(az))
                                       + ((st.csm_coef[lv],) if st.collision.csm else ()), stream=self.stream)

    def links(self, st, lv):
        d = self.dev[lv]
        n = d["link_i1"].size
        g, b = self._grid(n)
        plane = np.int64(st.coupling[lv].n * self.m3[lv])  # (fp16 storage: a population's direction, i // plane)
        self.k["links" + self.half](g, b, (st.bufs[lv][0], d["link_i1"], d["link_i2"], d["link_w1"], d["link_w2"],
                                           np.int32(n), plane, st.link_buf[lv]), stream=self.stream)

    def boundary(self, st, lv):
        """boundaries.apply in CUDA: outlet copies, then the inlet and solid values."""
        b, buf = st.bnd.level[lv], st.bufs[lv][1]
        plane = np.int64(st.coupling[lv].n * self.m3[lv])
        if b.outlet_dst.size:
            g, t = self._grid(b.outlet_dst.size)
            self.k["outflow" + self.half](g, t, (buf, b.outlet_dst, b.outlet_src, np.int32(b.outlet_dst.size),
                                                     plane), stream=self.stream)
        for pts, vals in ((b.inlet_pts, self._inlet_values), (b.solid_pts, self._rest_values)):
            if pts.size:
                g, t = self._grid(pts.size)
                self.k["set_points" + self.half](g, t, (buf, pts, np.int32(pts.size), plane, vals), stream=self.stream)

    def capture(self, body):
        cp = __import__("cupy")
        rt = cp.cuda.runtime
        self.stream.begin_capture(getattr(rt, "streamCaptureModeRelaxed", None))
        try:
            body()
        except BaseException:
            try:
                self.stream.end_capture()
            except Exception:
                pass  # the launch error above is the one to report
            raise
        return self.stream.end_capture()

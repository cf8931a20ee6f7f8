"""A refined or walled tree: refined regions, bodies, open sides or free-slip walls on an octree of
leaves of m³ points.

The reference rung steps the whole tree with array code (reference.py: sub-cycled levels,
rescaling, interpolation, on the gather tables of tables.py); a ladder rung runs P0's kernels on
each level joined by the coupling kernels (tree_stepper.py, interface.py), on leaves of m³ or, where
the tree allows, P0's mother leaves (mothers.py). Until a stepper exists (the engine's first
selection) the state waits on the host. Regridding (regridding.py) rebuilds all of this on a new
tree; the tracers (tracers.py) step with the fluid, one coarse step at a time.

fp16 storage (variants: the naive rungs on leaves of m³): the ladder's level buffers hold f − w in
IEEE half (tree_stepper.py); the reference rounds its fp32 state where those buffers store it
(reference.py ``half``), so the registry compares the two as on the box.
"""
from __future__ import annotations

import weakref

import numpy as np

from . import boundaries, cases, d3q27, interface, mesh, mothers, reference, sampled, storage, tables, variants
from .builder import tracer_bytes
from .gpu import coupling_spec, kernel_spec
from .regridding import Regridding
from .shapes import Shape
from .tracer_kernels import kernel_spec as tracer_spec
from .tree_stepper import CupyKernels, TreeStepper, synchronise_host
from .variants import RUNG_KERNELS, RUNG_STORAGE

_COUPLING_CACHE: dict = {}  # preset's tree description → interface.build result (one kept)
_MOTHER_CACHE: dict = {}  # the same with the levels as mother leaves (mothers.coupling; one kept)


# the fused coupling's device memory a shell point (tree_stepper.py): the θ = ½ coarse and
# interpolated buffers (27 fp32 values a coarse node and a source position) and the compact rows
# (27 int32 slots and fp32 weights, a count and a mask a position); source positions and coarse nodes
# each fewer than the shell points (a bound: 4–19 % of it on the registry's trees,
# tests/unit/test_amr3d_rows_build.py)
FUSED_COUPLING_BYTES = 27 * 4 * 2 + 27 * (4 + 4) + 4 + 4


class Tree(Regridding, Shape):
    takes_tracers = True

    @staticmethod
    def fits(preset) -> bool:
        return not preset.is_box

    @staticmethod
    def extra_bytes(p, backend, leaves: int) -> int:
        item = np.dtype(p.physics.dtype).itemsize
        m = p.grid.m
        points = leaves * m**3
        work = 0
        if backend.is_gpu:
            # a tree assembles its state and samples its fields through 8 point ids and weights per
            # sample (mesh.sampling, 2^21 samples) (+ 4 bytes a point: naive-fused's fix-up rank of
            # each point)
            work += 27 * points * item + (1 << 21) * 8 * (8 + item + 4) + 4 * points
            # a published frame (sampled.py): the populations of the points its samples read (at
            # most 8 a sample, at most every point), gathered per level and joined, then the moments
            # of those points and the frame's grids with the speed's temporaries (12 a sample)
            gathered = 27 * min(points, 8 << 21) * item
            work += 2 * gathered + (1 << 21) * item * 12
        # NumPy: the reference's gather tables over every shell point and the classification's
        # temporaries while they are built (measured peak on amr3d-periodic: 0.9 of this);
        # GPU: the interface descriptors (a few % of the points, 27 indices each)
        shell = leaves * (m**3 - (m - 2) ** 3)
        work += shell * 27 * 8 * (12 if not backend.is_gpu else 1)
        if backend.is_gpu:
            work += shell * FUSED_COUPLING_BYTES
        if p.tracers.count:
            work += tracer_bytes(p.tracers.count * len(p.tracers.seeds), p.tracers.trail_length)
        return work

    def __init__(self, e):
        super().__init__(e)
        self.stepper = None  # reference.Stepper or tree_stepper.TreeStepper, which own the state
        self.half = None  # fp16 storage: "buffers" (the kernels' fp16 level buffers), "rounded" (the reference)
        self.tables = self.coupling = self.sampling = self.mass_w = None
        self.coupling_settings: dict = {}  # the last TreeStepper's (carried to the next one)
        self.pending = np.zeros((d3q27.Q, e.forest.n_leaves, self.m, self.m, self.m), self.dtype)
        self.init_regridding()

    # ---- the state --------------------------------------------------------------------------
    def initialise(self) -> None:
        e, p = self.e, self.e.preset
        f = cases.initial_tree_state(p, e.forest)
        if p.adapt.on and p.adapt.initial:
            f = self.adapt_initial_tree(f)
        self.apply_boundaries(f)
        self.set_leaves(self.synchronised(f))

    def apply_boundaries(self, f, xp=np) -> None:
        """Solid nodes at rest, inlet nodes at the inflow equilibrium (in place on a state of xp)."""
        bnd, forest = self.e._bnd, self.e.forest
        if bnd is None:
            return
        f2, m3 = f.reshape(d3q27.Q, -1), self.m ** 3
        for lv, b in boundaries.on_device(xp, bnd).level.items():
            boundaries.apply(xp, f2, b, forest.level_slice(lv).start * m3, bnd.inlet_velocity)

    def random_state(self, rng: np.random.Generator) -> None:
        self.set_leaves(self.synchronised(cases.random_tree_state(self.e.preset, self.e.forest, rng)))

    def synchronised(self, f: np.ndarray) -> np.ndarray:
        """A host state on the tree with its coarse copies of fine-owned nodes set (tree_stepper)."""
        f = np.array(f)
        synchronise_host(self.e.forest, self.interface(), f, self.e.preset.physics.tau, self.e.accel)
        return f

    def leaves(self):
        if self.stepper is None:
            return self.xp.asarray(self.pending)
        return self.stepper.f if isinstance(self.stepper, reference.Stepper) else self.stepper.state()

    def set_leaves(self, leaves) -> None:
        leaves = self.xp.asarray(leaves, dtype=self.dtype)
        if self.stepper is None:
            self.pending = leaves.copy()
        elif isinstance(self.stepper, reference.Stepper):
            self.stepper.f[...] = storage.round_fp16(self.xp, leaves) if self.half == "rounded" else leaves
        else:
            self.stepper.set_state(leaves)

    # ---- variants and stepping ----------------------------------------------------------------
    def select(self, selection: dict) -> None:
        """The reference owns f and f_prev; a ladder rung owns per-level buffer pairs."""
        e, p, xp = self.e, self.e.preset, self.xp
        rung = selection["kernels"]
        leaves = self.leaves()
        bnd = e._bnd
        fp16 = selection.get("storage", "native") == "fp16"
        self.half = ("rounded" if rung == "reference" else "buffers") if fp16 else None
        if rung == "reference":
            if self.tables is None:
                solid, near, slip = (bnd.solid, bnd.near(), bnd.slip) if bnd is not None else (None, None, ())
                self.tables = tables.on_device(xp, tables.build(e.forest, p.physics.interp, solid, near, slip))
            self.keep_coupling_settings()
            self.stepper = reference.Stepper(xp, e.forest, reference.Physics(p.physics.tau, e.accel,
                                                                             collision=e.collision),
                                             xp.array(leaves, dtype=self.dtype), self.tables, synchronised=True,
                                             bnd=bnd, half=fp16)
            self._drop_device_copies()
            return
        mothered = self.storage_of(rung) == "mothers"
        coupling, bnd = self.mother_interface() if mothered else (self.interface(), bnd)
        self.keep_coupling_settings()
        self.stepper = TreeStepper(xp, e.forest, coupling, p.physics.tau, e.accel,
                                   CupyKernels(RUNG_KERNELS[rung] if mothered else rung, e.stream),
                                   e.timer, dtype=self.dtype, bnd=bnd, collision=e.collision, fp16=fp16)
        # a regrid or a rung switch builds a new stepper: how it launches its coupling (a tool's
        # choice, tree_stepper.COUPLING_SETTINGS) stays what it was, through the reference rung too
        self.stepper.apply_coupling_settings(self.coupling_settings)
        self.stepper.set_state(leaves)
        self._drop_device_copies()

    def keep_coupling_settings(self) -> None:
        """Remember how the TreeStepper launches its coupling, for the next stepper of the tree. (A rung
        switch keeps the old stepper until the new one is built: a build that fails leaves it, and its
        state, in place for the selection's roll-back.)"""
        if isinstance(self.stepper, TreeStepper):
            self.coupling_settings = self.stepper.coupling_settings()

    def release_stepper(self) -> None:
        """Drop the stepper (a regrid: its buffers back to the memory pool before the new tree's are
        taken; the state is already in hand), keeping its coupling settings for the next."""
        self.keep_coupling_settings()
        self.stepper = None

    def _drop_device_copies(self) -> None:
        """The coupling's device-built tables (a regrid builds them there) once a stepper has taken
        what it needs: a rung that does not use them (the reference, mother leaves) would keep them
        on the device until the next build. The host fields stay (a later switch uploads from them)."""
        for c in (self.coupling or {}).values():
            c.device = None

    def storage_of(self, rung: str) -> str:
        """A tree's storage for a rung: P0's mother leaves (mothers.py) for the rungs that use them on a
        box, where the tree allows them (variants.tree_mothers_reason); else leaves of m³."""
        if RUNG_STORAGE.get(rung) == "mothers" and variants.tree_mothers_reason(self.e.preset) is None:
            return "mothers"
        return "leaves"

    def mother_interface(self):
        """interface.build's data with the levels stored as mother leaves (mothers.coupling), and the
        flow's boundary lists moved into that storage (mothers.boundaries)."""
        e = self.e
        key = self._coupling_key()
        if key not in _MOTHER_CACHE:
            lay = mothers.layout(e.forest)
            solid, near, links, slip = self._body_tables()
            _MOTHER_CACHE.clear()
            _MOTHER_CACHE[key] = (mothers.coupling(e.forest, lay, e.preset.physics.interp, slip, solid, near, links),
                                  mothers.boundaries(e._bnd, lay) if e._bnd is not None else None)
        return _MOTHER_CACHE[key]

    def _coupling_key(self) -> tuple:
        """What a tree's coupling data depends on: the preset's tree, bodies and flow, and the tree."""
        p, forest = self.e.preset, self.e.forest
        return (p.model_dump_json(include={"grid", "refine", "body", "flow"}), p.physics.interp,
                getattr(p, "source", ""), forest.level.tobytes(), forest.block.tobytes())

    def _body_tables(self) -> tuple:
        """(solid, near, links, slip) of the flow's boundaries for the coupling builders."""
        b = self.e._bnd
        return (b.solid, b.near(), b.links(), b.slip) if b is not None else (None, None, None, ())

    def early_restriction(self):
        """interface.early_restriction of the tree (None where its coupling is cached already: that
        one's restriction serves)."""
        if self.coupling is not None or self._coupling_key() in _COUPLING_CACHE:
            return None
        solid, near, links, slip = self._body_tables()
        return interface.early_restriction(self.e.forest, solid, near, links, slip)

    def interface(self, early=None):
        """The level coupling of the tree (interface.build) on leaves of m³; ``early``: this tree's
        early_restriction, taken by the build."""
        if self.coupling is None:
            # built on the host (seconds to tens of seconds for a flow's tree; a flow without bodies
            # or free slip has its descriptors' passes on the device): engines of the same tree
            # (bench cells, a restarted run) share the last one built
            key = self._coupling_key()
            self.coupling_device_s = 0.0
            if key not in _COUPLING_CACHE:
                solid, near, links, slip = self._body_tables()
                _COUPLING_CACHE.clear()
                timing = {}
                _COUPLING_CACHE[key] = interface.build(self.e.forest, self.e.preset.physics.interp, solid, near,
                                                       links, slip, xp=self.xp, timing=timing, early=early)
                self.coupling_device_s = timing.get("device_s", 0.0)
            self.coupling = _COUPLING_CACHE[key]
        return self.coupling

    def substeps(self) -> int:
        """Stepper steps per engine step: 2^(l_min − base level) (1 unless a regrid refined every leaf
        of the base level)."""
        return 1 << (min(self.e.forest.levels) - self.e.base_level)

    def advance(self, n: int) -> None:
        p, e = self.e.preset, self.e
        if not p.adapt.on:
            self._advance(n)
            return
        # regrids fall on coarse-step counts (every K-th step), whatever the batches: step(N) is
        # N × step(1) bit for bit
        every, done = p.adapt.every, 0
        while done < n:
            k = min(n - done, every - (e.step_count + done) % every)
            self._advance(k)
            done += k
            if (e.step_count + done) % every == 0:
                self.regrid(e.step_count + done)

    def _advance(self, n: int) -> None:
        if self.e._tracers is not None:
            self._advance_with_tracers(n)
            return
        sub = self.substeps()
        if isinstance(self.stepper, reference.Stepper):
            with self.e.timer.phase("step", steps=n):
                self.stepper.step(n * sub)
        else:
            self.stepper.advance(n * sub, graph=self.e.selection["graph"] == "on")

    def _advance_with_tracers(self, n: int) -> None:
        """One coarse step at a time: the tracers' k₁ from the populations before the step, k₂ from
        those after it, each gathered at the tracers' stencil nodes only (``populations``: no state
        assembled, no velocity field), whatever the batch (step(N) = N × step(1), bit for bit)."""
        e = self.e
        graph = e.selection["graph"] == "on"
        stepper, tracers = self.stepper, e._tracers
        # a TreeStepper's buffers: the fused kernels on the GPU (which read fp32 buffers; on fp16
        # storage the array code gathers the stencil nodes through populations, converted)
        levels = None if self.half == "buffers" else getattr(stepper, "level_buffers", None)
        sub = self.substeps()
        for _ in range(n):
            with e.timer.phase("tracers", steps=1):
                tracers.begin(stepper.populations, levels)
            if isinstance(stepper, reference.Stepper):
                with e.timer.phase("step", steps=1):
                    stepper.step(sub)
            else:
                stepper.advance(sub, graph=graph)
            with e.timer.phase("tracers", steps=0):  # the two halves are one step's "tracers"
                tracers.finish(stepper.populations, e.dt, levels)

    def kernel_specs(self, selection: dict) -> list:
        """The ladder's kernels for leaves of m³ and the level-coupling kernels; the ladder's for
        mother leaves too where a rung stores them (level 0 may keep leaves of m³); the fused
        tracer step with tracers (on the TreeStepper's buffers: the engine's dtype); the sampled
        fields' kernels (sampled.py: every published frame)."""
        e = self.e
        specs = [kernel_spec(self.m, e.collision), coupling_spec(e.collision), sampled.kernel_spec(self.dtype)]
        if self.storage_of(selection["kernels"]) == "mothers":
            specs.append(kernel_spec(storage.mother_size(self.m), e.collision))
        if e._tracers is not None:
            specs.append(tracer_spec(self.dtype, self.dtype))
        return specs

    def body_force(self):
        if self.stepper is None:
            return self.xp.zeros(3, np.float64)
        return self.stepper.body_force()

    # ---- outputs ----------------------------------------------------------------------------
    def macroscopic(self, names=sampled.MOMENTS):
        """The moments ``names`` (default ρ, ux, uy, uz) on the sampling lattice (mesh.py: each
        sample from the finest leaf that holds it). On the GPU from the points the samples read
        (sampled.py: three launches after their gather, not ~200), otherwise the array code on the
        whole state; the same bits either way."""
        p = self.sampling_lattice()
        if sampled.gpu_supports(p):
            return sampled.gpu_samples(self.xp, p, self._sampled_populations(p), names)
        if p.ids is None:  # a points plan the kernels do not take (int64 indices): the array code on them
            at = sampled.moments(self.xp, self._sampled_populations(p), names)
            return tuple(sampled.sample(self.xp, p, at[n], p.local) for n in names)
        at = sampled.moments(self.xp, self.leaves(), names)
        return tuple(sampled.sample(self.xp, p, at[n]) for n in names)

    def speed(self):
        """|u| on the sampling lattice: on the GPU from the same launches as the velocities (sampled.py),
        otherwise Shape.speed's array code (the same bits)."""
        p = self.sampling_lattice()
        if sampled.gpu_supports(p):
            return sampled.gpu_samples(self.xp, p, self._sampled_populations(p), ("ux", "uy", "uz"), speed=True)[0]
        return super().speed()

    def _sampled_populations(self, p: sampled.SamplePlan):
        """f[27, U] at the plan's points, gathered from the stepper's storage (the state is not
        assembled); a ladder's gather indices per level are kept while the stepper and plan are."""
        st = self.stepper
        if st is None:
            return self.xp.asarray(self.pending).reshape(d3q27.Q, -1)[:, p.points]
        if isinstance(st, reference.Stepper):
            return st.populations(p.points)
        key = getattr(self, "_gather", None)
        if key is None or key[0]() is not st or key[1]() is not p:
            # weak: a regrid's or a switch's old stepper (a state's worth of buffers) is not kept
            key = self._gather = (weakref.ref(st), weakref.ref(p), st.gather_plan(p.points))
        return st.gathered(key[2])

    def sampling_lattice(self) -> sampled.SamplePlan:
        if self.sampling is None:
            budget = 1 << 21 if self.e.backend.is_gpu else 1 << 18
            forest = self.e.forest
            # the kernels read the points the samples need; the array code (NumPy) the whole state,
            # which it holds already (a gather of those points cost more than it saved there). Built
            # on the state's device: each regrid of an adaptive run builds it again
            smp = mesh.sampling(forest, budget, self.xp, self.dtype)
            self.sampling = sampled.plan(self.xp, smp, forest.n_leaves * self.m**3, self.dtype,
                                         by_points=self.e.backend.is_gpu)
        return self.sampling

    def sample_kw(self) -> dict:
        """The samples are the sampling lattice's nodes (walled axes keep the far face): "node", and
        the domain as the extent."""
        forest = self.e.forest
        unit = float(1 << forest.max_level)
        return {"spacing": self.sampling_lattice().unit / unit, "centering": "node",
                "extent": tuple(float(d) / unit for d in forest.domain)}

    def mass(self, rho):
        """∫ρ dV over the leaves (reference.mass: trapezoidal per leaf, level-0 volume units)."""
        xp = self.xp
        if self.mass_w is None:
            vol = (2.0 ** -self.e.forest.level.astype(np.float64)) ** 3
            self.mass_w = xp.asarray(vol[:, None, None, None] * reference.trapezoid_weights(self.m)[None])
        return xp.sum(d3q27.moments(xp, self.leaves())[0] * self.mass_w, dtype=xp.float64)

    def min_population(self):
        xp, st = self.xp, self.stepper
        if st is None:  # the pending state (on the host until the first selection)
            return self.xp.min(self.xp.asarray(self.pending))
        if isinstance(st, reference.Stepper):
            return xp.min(st.f)
        # (on mother leaves the leaves' points only: provisional points are rescaled finer values, not state)
        return xp.min(xp.stack([xp.min(st.level_state(lv)) for lv in st.levels]))

    # ---- throughput -------------------------------------------------------------------------
    def population_bytes(self) -> int:
        """fp16 storage on the kernels moves 2 bytes a population; the reference rung keeps its
        rounded state in the engine's dtype."""
        return 2 if self.half == "buffers" else self.dtype.itemsize

    def updates_per_step(self) -> float:
        """Level l's points count 2^(l − l_min) times (its sub-steps); on mother leaves, as stored."""
        base = self.e.base_level
        blocks = getattr(self.stepper, "block", None)  # a TreeStepper's storage per level (mother leaves)
        if blocks is not None and getattr(self.stepper, "mapped", False):
            return float(sum(c.n * blocks[lv] ** 3 * 2.0 ** (lv - base) for lv, c in self.stepper.coupling.items()))
        lv = self.e.forest.level
        return float(np.sum(2.0 ** (lv - base)) * self.m**3)

    def timing_figures(self) -> dict:
        """The points against the uniform lattice of the finest spacing, and that lattice's updates
        per coarse step (fine-equivalent throughput = those / the time of a step)."""
        f = self.e.forest
        uniform = float(np.prod((f.domain // f.spacing_of(f.max_level)).astype(np.float64)))
        points = float(f.n_leaves * self.m**3)
        out = {"leaves": f.n_leaves, "points": points, "uniform_points": uniform, "point_fraction": points / uniform,
               "fine_equivalent_updates_per_step": uniform * 2.0 ** (f.max_level - self.e.base_level)}
        if self.e.preset.adapt.on:
            out.update(self.adapt_figures())
            out.update(self.regrid_figures())
        return out

"""amr3d: D3Q27 lattice Boltzmann on an octree of leaves of m³ node-centred points (P0), with P0's
kernel ladder as live variants (docs/amr3d.md).

Two shapes of problem, one state: f[27, leaf, m, m, m] in the forest's leaf order (checkpoints,
fields, switching). A *box* (one level of periodic leaves: P0's benchmark) runs every rung,
including the storages of the mother-leaf rungs and the uniform lattice, converted losslessly on
selection. A *tree* (refined regions, or walls) runs the reference (reference.py: sub-cycled
levels, rescaling, interpolation) or the ladder on each level joined by the coupling kernels
(tree_stepper.py, interface.py).
"""
from __future__ import annotations

import logging
import math
import os

import numpy as np

from ..benchspec import BenchSpec
from ..contract import Engine
from ..errors import CheckpointError, PresetError
from ..fields import Boxes, Grid3D, Particles
from . import adapt as regrid
from . import bodies as body_shapes
from . import boundaries, d3q27, interface, ladder, leafgrid, mesh, reference, storage, transfer, variants
from . import collision as collision_model
from . import tree as tree_mod
from .config import MAX_TRACERS_PER_SEED, AMR3DPreset

log = logging.getLogger("nagare")

FAMILY = variants.FAMILY
# The multi-level benchmark case: P0's box with a centred region refined twice (level 1 over the
# middle half of each axis, level 2 over its middle quarter): 2:1 interfaces on faces, edges and
# corners at two depths, and sub-cycling (level l takes 2^l steps per step).
THREE_LEVELS = ("refine=[{lo=[0.25, 0.25, 0.25], hi=[0.75, 0.75, 0.75], level=1}, "
                "{lo=[0.375, 0.375, 0.375], hi=[0.625, 0.625, 0.625], level=2}]")
FIELD_LABELS = {"speed": "speed |u|", "rho": "density ρ", "ux": "ux", "uy": "uy", "uz": "uz"}
# P0 §4: flops and bytes per point and step of the D3Q27 BGK update (the improved roofline).
P0_FLOPS, P0_BYTES = 377, 220

# kernels axis: P0's ladder (each rung adds to the previous), then what a 2026 GPU rewards.
RUNG_STORAGE = {"reference": "leaves", "naive": "leaves", "split": "leaves", "mother-leaf": "mothers",
                "templates": "mothers", "sorted": "mothers", "split-apart": "apart", "naive-fused": "leaves",
                "uniform": "uniform"}
RUNG_KERNELS = {"naive": "naive", "split": "split", "mother-leaf": "split", "templates": "templates",
                "sorted": "sorted", "split-apart": "apart", "naive-fused": "naive", "uniform": "uniform"}


variants.register()
def tracer_bytes(slots: int, trail_length: int) -> int:
    """Memory of ``slots`` tracers with their trails: positions (3 fp32), age (fp64), alive, the trail
    (T × 3 fp32) and its validity, held about four times over at a peak (the state, a checkpoint's
    copies, a frame's snapshot, set_capacity's new arrays), plus ~2 kB a tracer of temporaries
    while they move (the 27 populations at its 8 stencil nodes and their pair differences: measured
    1.9 kB in fp32 with tracemalloc, against ~300 B and a whole velocity field before the tracers
    read their stencils only)."""
    per = 12 + 8 + 1 + trail_length * 13
    return int(slots) * (4 * per + 2000)


# sanity bound on the smallest population (sanity_bounds): f_i > −this = −2/27, the rest weight of
# a face direction. Measured (NumPy, amr3d-bench): the shipped flows keep min f ≈ 3e-3 … 4e-3 (the
# corner weight 1/216 ≈ 4.6e-3 is the smallest equilibrium); an under-resolved random start at
# τ = 0.51 dips to −0.034 for a few steps and recovers; the diverging τ = 0.5001 runs (audit D6)
# pass −0.074 at step 24 (random start, |u| then 0.34, below every other bound until step ~48)
# and go on to −3.5 before NaN.
MIN_POPULATION_SLACK = 2.0 / 27.0

# sanity bound on the largest density: ten times the rest density 1. A low-Mach flow moves ρ by
# O(Ma²) and the speed bound stops a run long before Mach 1; a state above this is a blow-up or one
# that never was a flow (a checkpoint whose populations are all 1e30 has ρ = 2.7e31 and u = 0).
MAX_DENSITY = 10.0

# the axis of the tracer slots in each checkpointed tracer array (state_arrays); the rest is fixed
TRACER_SLOT_AXIS = {"tracers/positions": 0, "tracers/age": 0, "tracers/alive": 0, "tracers/trail": 1,
                    "tracers/trail_valid": 1}
_COUPLING_CACHE: dict = {}  # preset's tree description → interface.build result (one kept)
_MOTHER_CACHE: dict = {}  # the same with the levels as mother leaves (mothers.coupling; one kept)


class AMR3D(Engine):
    family = FAMILY
    Preset = AMR3DPreset
    equivalence_steps = 24
    constant_dt = True

    def reserved_leaves(self) -> int:
        """The leaves the memory estimate reserves: the preset tree's, or for an adaptive tree what it
        may grow to — its cap (adapt.leaf_cap: a regrid refines nothing that would pass it), or every
        leaf split down to adapt.max_level if that is fewer."""
        p = self.preset
        forest = mesh.build_forest(p, self._make_bodies())
        leaves = forest.n_leaves
        if p.adapt.on:
            grow = (8 ** np.maximum(p.adapt.max_level - forest.level.astype(np.int64), 0)).sum()
            leaves = max(leaves, min(int(grow), p.adapt.leaf_cap(forest.n_leaves)))
        return int(leaves)

    def estimated_bytes(self):
        p = self.preset
        item = np.dtype(p.physics.dtype).itemsize
        leaves = self.reserved_leaves()
        points = leaves * p.grid.m**3
        work = 27 * points * item * 2  # two buffers
        if not self.backend.is_gpu:
            work += 27 * points * 8 + 27 * points * item * 5  # gather table + the reference's temporaries
        if p.physics.les == "csm":
            # Kobayashi's CSM: the coefficient C, one value a point (the pre-pass keeps u in the next
            # buffer on the GPU), and the shared nodes' copies that take their owner's C (two int64
            # each: the stored points beyond each leaf's own (m − 1)³); on NumPy also u, its 9
            # derivatives and their products while C is formed
            m = p.grid.m
            work += points * item + leaves * (m**3 - (m - 1) ** 3) * 16
            if not self.backend.is_gpu:
                work += points * item * 15
        if self.backend.is_gpu:
            # what a frame and a checkpoint allocate in the pool besides the two buffers: a storage
            # conversion, the checkpoint copy, the macroscopic arrays (measured on the H200,
            # 2026-11-25: 3.8 state copies on the P0 box); a tree assembles its state and samples
            # its fields through 8 point ids and weights per sample (mesh.sampling, 2^21 samples)
            work += 27 * points * item * 5
            if not p.is_box:  # (+ 4 bytes a point: naive-fused's fix-up rank of each point)
                work += 27 * points * item + (1 << 21) * 8 * (8 + item + 4) + 4 * points
        if not p.is_box:
            # NumPy: the reference's gather tables over every shell point and the classification's
            # temporaries while they are built (measured peak on amr3d-periodic: 0.9 of this);
            # GPU: the interface descriptors (a few % of the points, 27 indices each)
            shell = leaves * (p.grid.m**3 - (p.grid.m - 2) ** 3)
            work += shell * 27 * 8 * (12 if not self.backend.is_gpu else 1)
            if p.tracers.count:
                work += tracer_bytes(p.tracers.count * len(p.tracers.seeds), p.tracers.trail_length)
        return work

    # ---- state ------------------------------------------------------------------------------
    def _allocate(self):
        p = self.preset
        self.dtype = np.dtype(p.physics.dtype)
        self.m = p.grid.m
        self.leaf_shape = tuple(p.grid.leaves)
        self.bodies = self._make_bodies()
        self.forest = mesh.build_forest(p, self.bodies)
        self._tracers = None
        if p.tracers.count and not p.is_box:
            from .tracers import Tracers

            bodies = self.bodies

            def solid(x):
                out = np.zeros(len(x), bool)
                for b in bodies:
                    out |= b.inside(x)
                return out
            self._tracers = Tracers(self.xp, self.forest, p.tracers.seeds, p.tracers.count, p.tracers.release_every,
                                    solid if bodies else None, dtype=self.dtype, trail_length=p.tracers.trail_length,
                                    trail_every=p.tracers.trail_every)
            self._seeds_in_fluid()
        self._bnd = self._build_boundaries(self.forest)
        self.is_box = p.is_box
        # one step = one step of the coarsest level of the preset's tree (the base level); a regrid
        # never coarsens below it, and when it refines every base leaf the stepper takes
        # 2^(l_min − base) of its own steps per engine step (_substeps), so Δt stays constant
        self.base_level = min(self.forest.levels)
        self.dt = 2.0 ** -self.base_level
        self.regrids = 0  # regrids done by this engine object (not in the state)
        self.last_regrid = {"refined": 0, "coarsened": 0, "step": -1, "capped": 0}
        self._cap_said = False  # the cap's warning, once a run
        self._floor = None
        self.omega = 1.0 / p.physics.tau
        self.accel = tuple(float(a) for a in p.physics.force)
        self.collision = collision_model.from_physics(p.physics)  # BGK, MRT; Smagorinsky LES or none
        self.storage = "leaves"
        self.half = None  # fp16 storage on a box: "buffers" (the kernels' fp16 arrays), "rounded" (the reference)
        self._sources = None
        self._csm_copies = None
        self._stepper = None
        self._tree = None  # tree: reference.Stepper or tree_stepper.TreeStepper, which own the state
        self._tables = self._coupling = self._sampling = self._mass_w = None
        if self.is_box:
            self.f = self.xp.zeros((d3q27.Q, p.nleaf, self.m, self.m, self.m), self.dtype)
            self.fn = self.xp.empty_like(self.f)
        else:
            self.f = self.fn = None
            self._pending = np.zeros((d3q27.Q, self.forest.n_leaves, self.m, self.m, self.m), self.dtype)

    def _build_boundaries(self, forest):
        p = self.preset
        if self.bodies or p.flow.inlet != "none" or p.flow.outlet != "none" or p.grid.free_slip:
            return boundaries.build(forest, self.bodies, p.flow.inlet, p.flow.outlet, p.flow.velocity, p.flow.wall,
                                    p.grid.free_slip)
        return None

    def _seeds_in_fluid(self) -> None:
        """A seed inside a body, or within half a node of its wall (where the tracers' interpolated
        solid indicator reaches ½), parks every tracer it releases or leaves it stuck in the wall:
        refused in one line naming the seed and the body."""
        p = self.preset
        seeds = np.asarray(p.tracers.seeds, np.float64).reshape(-1, 3)
        inside = np.zeros(len(seeds), bool)
        for b in self.bodies:
            inside |= b.inside(seeds)
        parked = np.zeros(len(seeds), bool)
        parked[self._tracers.seeds_in_solid()] = True  # the tracers' own test (half-way to a solid node)
        bad = np.flatnonzero(inside | parked)
        if not len(bad):
            return
        i = int(bad[0])
        seed = seeds[i:i + 1]
        k = int(np.argmin([float(b.distance(seed)[0]) for b in self.bodies]))
        where = "inside" if inside[i] else "within half a node of the wall of"
        raise PresetError(getattr(p, "source", "<memory>"), f"tracers.seeds[{i}]", list(p.tracers.seeds[i]),
                          f"lies {where} body[{k}] (the {p.body[k].kind}): every tracer released there is parked "
                          "at once; put the seed in the fluid")

    def _make_bodies(self) -> list:
        """The preset's bodies (STL paths relative to the preset's folder), each inside the domain and
        clear of periodic sides (its images are not searched)."""
        p = self.preset
        src = getattr(p, "source", "<memory>")
        base = os.path.dirname(os.path.abspath(src)) if src and not src.startswith("<") else "."
        made = []
        for k, spec in enumerate(p.body):
            try:
                made.append(body_shapes.make(spec, base))
            except ValueError as exc:  # a bad mesh file or size: one line naming the preset and the body
                raise PresetError(src, f"body[{k}]", PresetError.NOTHING, str(exc)) from None
        s = p.grid.m - 1
        domain = np.array(p.grid.leaves, np.float64) * s
        for k, b in enumerate(made):
            lo, hi = b.bounds()
            if np.any(lo <= 0) or np.any(hi >= domain):
                raise PresetError(src, f"body[{k}]", PresetError.NOTHING,
                                  f"the {p.body[k].kind} reaches from {np.round(lo, 3).tolist()} to "
                                  f"{np.round(hi, 3).tolist()}: it must lie inside the domain (0 … "
                                  f"{domain.tolist()} level-0 units), clear of every side")
        body_shapes.check_resolved(made, p.body, src)
        return made

    def _initialise(self):
        if self.is_box:
            self._set_leaves(initial_state(self.preset))
        else:
            f = initial_tree_state(self.preset, self.forest)
            if self.preset.adapt.on and self.preset.adapt.initial:
                f = self._adapt_initial_tree(f)
            if self._bnd is not None:  # solid nodes at rest, inlet nodes at the inflow equilibrium
                f2, m3 = f.reshape(d3q27.Q, -1), self.m ** 3
                for lv, b in self._bnd.level.items():
                    boundaries.apply(np, f2, b, self.forest.level_slice(lv).start * m3, self._bnd.inlet_velocity)
            self._set_leaves(self._synchronised(f))

    def _leaves(self):
        """f in the canonical leaf storage (a view when already there)."""
        xp, m = self.xp, self.m
        if not self.is_box:
            if self._tree is None:
                return xp.asarray(self._pending)
            return self._tree.f if isinstance(self._tree, reference.Stepper) else self._tree.state()
        f = storage.from_fp16(xp, self.f) if self.half == "buffers" else self.f
        if self.storage == "leaves":
            return f
        if self.storage == "mothers":
            return storage.leaves_from_mothers(xp, f, m, self.leaf_shape)
        if self.storage == "apart":
            return storage.leaves_from_apart(xp, f, m, self.preset.nleaf)
        return storage.leaves_from_uniform(xp, f, m, self.leaf_shape)

    def _set_leaves(self, leaves) -> None:
        xp, m = self.xp, self.m
        leaves = xp.asarray(leaves, dtype=self.dtype)
        if not self.is_box:
            if self._tree is None:
                self._pending = leaves.copy()
            elif isinstance(self._tree, reference.Stepper):
                self._tree.f[...] = leaves
            else:
                self._tree.set_state(leaves)
            return
        if self.storage == "mothers":
            f = storage.mothers_from_leaves(xp, leaves, m, self.leaf_shape)
        elif self.storage == "uniform":
            f = storage.uniform_from_leaves(xp, leaves, m, self.leaf_shape)
        elif self.storage == "apart":
            f = storage.apart_from_leaves(xp, leaves, m)
        else:
            f = leaves
        if self.half == "buffers":
            f = storage.to_fp16(xp, f)
        elif self.half == "rounded":
            f = storage.round_fp16(xp, f)
        self.f = xp.ascontiguousarray(f).copy()
        self.fn = xp.empty_like(self.f)

    def state_arrays(self):
        out = {"f": self._leaves()}
        if self.preset.adapt.on:
            # the tree is part of the state: the stored preset only defines the tree it started with
            out["tree/level"] = self.forest.level.copy()
            out["tree/block"] = self.forest.block.copy()
            lr = self.last_regrid
            out["adapt/last"] = np.array([lr["refined"], lr["coarsened"], lr["step"], lr.get("capped", 0)], np.int64)
        if self._tracers is not None:
            # parked tracers and trail samples not yet taken are NaN; a checkpoint holds finite numbers
            # only, so those are written as 0 with their validity (restored as NaN on load)
            t = self._tracers.state_arrays()
            xp = self.xp
            valid = xp.isfinite(t["trail"]).all(axis=-1)
            t["trail_valid"] = valid
            t["trail"] = xp.where(valid[..., None], t["trail"], 0)
            t["positions"] = xp.where(t["alive"][:, None], t["positions"], 0)
            out.update({f"tracers/{k}": v for k, v in t.items()})
        return out

    def check_restorable(self, arrays):
        """The contract's check, except that the tracer arrays may hold another count per seed than
        the preset's (the app's live control changes it; the tracers take it from the arrays)."""
        expected = {k: (v.shape, v.dtype) for k, v in self.state_arrays().items()}
        if self.preset.adapt.on:
            self._check_tree_arrays(arrays, expected)
        if self._tracers is not None and "tracers/positions" in arrays:
            seeds = self._tracers.n_seeds
            rows = int(np.shape(arrays["tracers/positions"])[0])
            if rows % seeds or not 1 <= rows // seeds <= MAX_TRACERS_PER_SEED:
                raise CheckpointError(f"checkpoint holds {rows} tracers for {seeds} seed points: not a whole "
                                      f"count per seed from 1 to {MAX_TRACERS_PER_SEED}; load it with its own preset")
            # the tracer axis of each array (the slots: capacity × seeds), named, not guessed from
            # sizes (a trail of 8 samples and 8 slots have the same length)
            for k, axis in TRACER_SLOT_AXIS.items():
                if k in expected:
                    shape, dtype = expected[k]
                    expected[k] = (shape[:axis] + (rows,) + shape[axis + 1:], dtype)
        self._check_arrays(arrays, expected)

    def check_consistent(self, meta, arrays):
        """The contract's checks, and the tracers': their step clock is the run's (one advance per
        coarse step: tracers/step = meta.step), the ring cursor lies in the ring, and an alive
        tracer lies in the domain (level-0 units; a parked one is stored at 0) with an age no older
        than the run. A tracer clock off the run's releases and samples at other steps than a
        straight run would; a tracer far outside is interpolated from a clamped leaf."""
        super().check_consistent(meta, arrays)
        if self._tracers is None or "tracers/step" not in arrays:
            return
        step = int(meta["step"])
        clock = np.asarray(arrays["tracers/step"]).reshape(-1)
        if clock.size != 1 or int(clock[0]) != step:
            raise CheckpointError(f"state array 'tracers/step' = {clock.tolist()} is not the run's step clock "
                                  f"meta.step = {step} (the tracers advance once per coarse step)")
        rows = int(np.shape(arrays["tracers/positions"])[0])
        capacity = rows // self._tracers.n_seeds
        cursor = np.asarray(arrays["tracers/cursor"]).reshape(-1)
        if cursor.size != 1 or not 0 <= int(cursor[0]) < capacity:
            raise CheckpointError(f"state array 'tracers/cursor' = {cursor.tolist()} is not a ring row "
                                  f"(0 … {capacity - 1} for {capacity} tracers per seed)")
        alive = np.asarray(arrays["tracers/alive"]).astype(bool).reshape(-1)
        pos = np.asarray(arrays["tracers/positions"], np.float64).reshape(-1, 3)[alive]
        dom = self._tracers.lookup.domain
        tol = 1e-3  # level-0 units: far above the positions' fp32 rounding
        for d in range(3):
            out = (pos[:, d] < -tol) | (pos[:, d] > dom[d] + tol)
            if out.any():
                i = int(np.flatnonzero(alive)[np.flatnonzero(out)[0]])
                raise CheckpointError(f"state array 'tracers/positions': {int(out.sum())} alive tracer"
                                      f"{'s lie' if out.sum() > 1 else ' lies'} outside the domain along "
                                      f"{'xyz'[d]} (0 … {dom[d]:g} level-0 units), e.g. tracer {i} at "
                                      f"{np.round(pos[np.flatnonzero(out)[0]], 4).tolist()}")
        age = np.asarray(arrays["tracers/age"], np.float64).reshape(-1)[alive]
        t = float(meta["time"])
        if age.size and (age.min() < 0 or age.max() > t * (1 + 1e-9) + 1e-12):
            raise CheckpointError(f"state array 'tracers/age' holds ages from {age.min():.6g} to {age.max():.6g}, "
                                  f"outside 0 … meta.time = {t:.6g}")

    def _check_tree_arrays(self, arrays, expected) -> None:
        """An adaptive run's checkpoint holds its tree: a valid tree of this preset (tiles the domain,
        balanced, levels base … max_level, the bodies' refinement kept), and f sized for it."""
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
            forest = self.forest.replace(lev, blk)
        except ValueError as exc:
            raise CheckpointError(f"checkpoint tree: {exc}") from None
        why = regrid.check_tree(forest, self._floor_forest(), self.base_level)
        a = self.preset.adapt
        top = max(a.max_level, int(self._floor_forest().level.max()))
        if not why and int(forest.level.max()) > top:
            why = f"a leaf at level {int(forest.level.max())} > adapt.max_level = {a.max_level}"
        if not why and forest.n_leaves > a.leaf_cap(self._preset_leaves()):
            why = (f"{forest.n_leaves} leaves > adapt.max_leaves = {a.leaf_cap(self._preset_leaves())} (the memory "
                   "estimate reserves that many; resume with a larger --set adapt.max_leaves)")
        if why:
            raise CheckpointError(f"checkpoint tree ({forest.n_leaves} leaves) is not a tree of this preset: {why}")
        shape, dtype = expected["f"]
        expected["f"] = ((shape[0], forest.n_leaves) + tuple(shape[2:]), dtype)
        expected["tree/level"] = (lev.shape, expected["tree/level"][1])
        expected["tree/block"] = (blk.shape, expected["tree/block"][1])

    def _load_state_arrays(self, arrays):
        if self.preset.adapt.on:
            lev, blk = np.asarray(arrays["tree/level"], np.int64), np.asarray(arrays["tree/block"], np.int64)
            forest = self.forest.replace(lev, blk)
            same = np.array_equal(forest.level, self.forest.level) and np.array_equal(forest.block, self.forest.block)
            if not same:
                self._install_tree(forest, np.asarray(arrays["f"], self.dtype), synchronise=False)
            last = np.asarray(arrays.get("adapt/last", np.array([0, 0, -1, 0]))).reshape(-1)
            self.last_regrid = {"refined": int(last[0]), "coarsened": int(last[1]), "step": int(last[2]),
                                "capped": int(last[3]) if last.size > 3 else 0}
        self._set_leaves(arrays["f"])
        if self._tracers is not None:
            t = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("tracers/")}
            if t:
                xp = self.xp
                t = {k: xp.asarray(v) for k, v in t.items()}
                t["positions"] = xp.where(t["alive"].astype(bool)[:, None], t["positions"], np.nan)
                t["trail"] = xp.where(t.pop("trail_valid").astype(bool)[..., None], t["trail"], np.nan)
                self._tracers.load_state_arrays(t)

    # ---- tracers ----------------------------------------------------------------------------
    def tracer_capacity(self) -> int | None:
        return None if self._tracers is None else int(self._tracers.capacity)

    def set_tracer_count(self, count: int) -> None:
        """Tracers kept per seed, live (the newest are kept; new slots fill one release at a time).
        A checkpoint stores the arrays, so it resumes with the count in force when it was written."""
        if self._tracers is None:
            raise ValueError(f"{self.preset.source}: this preset has no tracers (tracers.count = 0 or no seeds)")
        count = int(count)
        if not 1 <= count <= MAX_TRACERS_PER_SEED:
            raise ValueError(f"tracers per seed = {count}: allowed 1 to {MAX_TRACERS_PER_SEED}")
        from ..contract import available_memory

        grow = tracer_bytes(max(count - self._tracers.capacity, 0) * self._tracers.n_seeds,
                            self._tracers.trail_length)
        free = available_memory(self.backend)
        if grow and free is not None and grow > free:
            raise ValueError(f"tracers per seed = {count}: needs about {grow / 2**30:.1f} GiB more, "
                             f"{free / 2**30:.1f} GiB are free")
        self._tracers.set_capacity(count)

    def _advance_with_tracers(self, n):
        """One coarse step at a time: the tracers' k₁ from the populations before the step, k₂ from
        those after it, each gathered at the tracers' stencil nodes only (``populations``: no state
        assembled, no velocity field), whatever the batch (step(N) = N × step(1), bit for bit)."""
        graph = self.selection["graph"] == "on"
        tree, tracers = self._tree, self._tracers
        levels = getattr(tree, "level_buffers", None)  # a TreeStepper's: the fused kernels on the GPU
        sub = self._substeps()
        for _ in range(n):
            with self.timer.phase("tracers", steps=1):
                tracers.begin(tree.populations, levels)
            if isinstance(tree, reference.Stepper):
                with self.timer.phase("step", steps=1):
                    tree.step(sub)
            else:
                tree.advance(sub, graph=graph)
            with self.timer.phase("tracers", steps=0):  # the two halves are one step's "tracers"
                tracers.finish(tree.populations, self.dt, levels)
        return n * self.dt

    def random_state(self, rng: np.random.Generator):
        if not self.is_box:
            self._set_leaves(self._synchronised(random_tree_state(self.preset, self.forest, rng)))
            return
        nz, ny, nx = self.preset.shape
        rho = 1 + 0.02 * rng.standard_normal((nz, ny, nx))
        u = 0.04 * rng.standard_normal((3, nz, ny, nx))
        feq = leafgrid.equilibrium(np, rho, *u)
        u0 = feq * (1 + 0.01 * rng.standard_normal(feq.shape))
        self._set_leaves(storage.leaves_from_uniform(np, u0, self.m, self.leaf_shape))

    # ---- variants ---------------------------------------------------------------------------
    def _apply_selection(self, old, new):
        if not self.is_box:
            self._select_tree(new["kernels"])
            return
        rung = new["kernels"]
        want = RUNG_STORAGE[rung]
        half = None if new.get("storage", "native") != "fp16" else ("rounded" if rung == "reference" else "buffers")
        if (want, half) != (self.storage, self.half):
            leaves = self._leaves()
            self.storage, self.half = want, half
            self._set_leaves(leaves)
        self._stepper = None
        self._sources = None
        if rung == "reference":
            nbr = ladder.periodic_neighbours(self.leaf_shape)
            self._sources = self.xp.asarray(leafgrid.gather_sources(nbr, self.m))
            if self.collision.csm:  # the shared nodes' copies take their owner's coefficient (collision.py)
                self._csm_copies = tuple(self.xp.asarray(a) for a in ladder.shared_copies(nbr, None, self.m))
        else:
            from .gpu import LadderStepper

            m, shape = self.m, self.leaf_shape
            if want == "mothers":
                m, shape = 2 * self.m - 1, storage.mother_shape(self.leaf_shape)
            self._stepper = LadderStepper(self.xp, self.stream, RUNG_KERNELS[rung], m, shape, self.omega, self.accel,
                                          self.timer, uniform_shape=self.preset.shape, model=self.collision,
                                          fp16=half is not None)

    def _select_tree(self, rung: str) -> None:
        """A tree: the reference owns f and f_prev; a ladder rung owns per-level buffer pairs."""
        leaves = self._leaves()
        p = self.preset
        if rung == "reference":
            if self._tables is None:
                from . import tables

                solid, near, slip = ((self._bnd.solid, self._bnd.near(), self._bnd.slip) if self._bnd is not None
                                     else (None, None, ()))
                self._tables = tables.on_device(self.xp, tables.build(self.forest, p.physics.interp, solid, near,
                                                                      slip))
            self._tree = reference.Stepper(self.xp, self.forest,
                                           reference.Physics(p.physics.tau, self.accel, collision=self.collision),
                                           self.xp.array(leaves, dtype=self.dtype), self._tables, synchronised=True,
                                           bnd=self._bnd)
            return
        from .tree_stepper import CupyKernels, TreeStepper

        mothered = self._tree_storage(rung) == "mothers"
        coupling, bnd = self._mother_interface() if mothered else (self._interface(), self._bnd)
        self._tree = TreeStepper(self.xp, self.forest, coupling, p.physics.tau, self.accel,
                                 CupyKernels(RUNG_KERNELS[rung] if mothered else rung, self.stream),
                                 self.timer, dtype=self.dtype, bnd=bnd, collision=self.collision)
        self._tree.set_state(leaves)

    def _tree_storage(self, rung: str) -> str:
        """A tree's storage for a rung: P0's mother leaves (mothers.py) for the rungs that use them on a
        box, where the tree allows them (variants.tree_mothers_reason); else leaves of m³."""
        if RUNG_STORAGE.get(rung) == "mothers" and variants.tree_mothers_reason(self.preset) is None:
            return "mothers"
        return "leaves"

    def _mother_interface(self):
        """interface.build's data with the levels stored as mother leaves (mothers.coupling), and the
        flow's boundary lists moved into that storage (mothers.boundaries)."""
        from . import mothers

        key = self._coupling_key()
        if key not in _MOTHER_CACHE:
            lay = mothers.layout(self.forest)
            solid, near, links, slip = self._body_tables()
            _MOTHER_CACHE.clear()
            _MOTHER_CACHE[key] = (mothers.coupling(self.forest, lay, self.preset.physics.interp, slip, solid, near,
                                                   links),
                                  mothers.boundaries(self._bnd, lay) if self._bnd is not None else None)
        return _MOTHER_CACHE[key]

    def _coupling_key(self) -> tuple:
        """What a tree's coupling data depends on: the preset's tree, bodies and flow, and the tree."""
        return (self.preset.model_dump_json(include={"grid", "refine", "body", "flow"}), self.preset.physics.interp,
                getattr(self.preset, "source", ""), self.forest.level.tobytes(), self.forest.block.tobytes())

    def _body_tables(self) -> tuple:
        """(solid, near, links, slip) of the flow's boundaries for the coupling builders."""
        b = self._bnd
        return (b.solid, b.near(), b.links(), b.slip) if b is not None else (None, None, None, ())

    def _interface(self):
        if self._coupling is None:
            # built on the host (seconds to tens of seconds for a flow's tree): engines of the same
            # tree (bench cells, a restarted run) share the last one built
            key = self._coupling_key()
            if key not in _COUPLING_CACHE:
                solid, near, links, slip = self._body_tables()
                _COUPLING_CACHE.clear()
                _COUPLING_CACHE[key] = interface.build(self.forest, self.preset.physics.interp, solid, near, links,
                                                       slip)
            self._coupling = _COUPLING_CACHE[key]
        return self._coupling

    # ---- adaptive regridding (adapt.py; docs/amr3d-flows.md "Adaptive regridding") ----------------
    def _preset_leaves(self) -> int:
        """Leaves of the preset's own tree (before any adaptation): what adapt.leaf_cap scales."""
        if getattr(self, "_preset_leaf_count", None) is None:
            self._preset_leaf_count = mesh.build_forest(self.preset, self.bodies).n_leaves
        return self._preset_leaf_count

    def _floor_forest(self):
        """The refinement a regrid never undoes: the bodies' (adapt.keep = bodies) or the preset's
        whole tree (static)."""
        if self._floor is None:
            p = self.preset
            if p.adapt.keep == "static":
                self._floor = mesh.build_forest(p, self.bodies)
            else:
                f = tree_mod.Forest.uniform(tuple(p.grid.leaves), 0, p.grid.m, p.max_level, tuple(p.grid.periodic))
                for spec, body in zip(p.body, self.bodies):
                    f = mesh.refine_near(f, body, spec.level, spec.band)
                self._floor = f
        return self._floor

    def _adapt_initial_tree(self, f):
        """The starting tree adapted to the initial flow: plan on the flow, rebuild the tree, evaluate
        the flow anew on it (no transfer), until nothing changes (at most one pass per level)."""
        a = self.preset.adapt
        refined = coarsened = 0
        for _ in range(self.forest.max_level - self.base_level + 1):
            chunks = [(lv, f[:, self.forest.level_slice(lv)]) for lv in self.forest.levels]
            crit = regrid.criterion(np, chunks, self.accel, self.preset.adapt_u_ref, np.asarray)
            plan = regrid.plan(self.forest, crit, refine_above=a.refine_above, coarsen_below=a.coarsen_below,
                               max_level=a.max_level, base_level=self.base_level, floor=self._floor_forest(),
                               max_leaves=a.leaf_cap(self._preset_leaves()))
            if plan.refined == 0 and plan.coarsened == 0:
                break
            refined, coarsened = refined + plan.refined, coarsened + plan.coarsened
            self.forest = plan.forest
            self._bnd = self._build_boundaries(self.forest)
            if self._tracers is not None:
                self._tracers.set_forest(self.forest)
            f = initial_tree_state(self.preset, self.forest)
        self.last_regrid = {"refined": refined, "coarsened": coarsened, "step": 0, "capped": int(plan.capped)}
        return f

    def regrid_criterion(self) -> np.ndarray:
        """Per-leaf max |ω|·h_leaf / U_ref (host float64, leaf order), from the stepper's own storage
        level by level: only the per-leaf maxima leave the device."""
        tree = self._tree
        if tree is None:
            chunks = [(lv, self.xp.asarray(self._pending)[:, self.forest.level_slice(lv)]) for lv in self.forest.levels]
        elif isinstance(tree, reference.Stepper):
            chunks = [(lv, tree.f[:, self.forest.level_slice(lv)]) for lv in self.forest.levels]
        else:
            chunks = [(lv, tree.level_state(lv)) for lv in tree.levels]  # (leaf order, also on mother leaves)
        return regrid.criterion(self.xp, chunks, self.accel, self.preset.adapt_u_ref, self.backend.asnumpy)

    def regrid(self, step: int | None = None) -> dict:
        """One regrid now: criterion, refine/coarsen sets, 2:1 balance, the state carried over by
        transfer.py, then boundaries, tables or interface, tracers' lookup and stepper rebuilt as a
        fresh build of the new tree. Returns (and keeps, for the live figures) the counts."""
        a = self.preset.adapt
        with self.timer.phase("regrid", steps=0):
            crit = self.regrid_criterion()
            plan = regrid.plan(self.forest, crit, refine_above=a.refine_above, coarsen_below=a.coarsen_below,
                               max_level=a.max_level, base_level=self.base_level, floor=self._floor_forest(),
                               max_leaves=a.leaf_cap(self._preset_leaves()))
            changed = not (np.array_equal(plan.forest.level, self.forest.level)
                           and np.array_equal(plan.forest.block, self.forest.block))
            if changed:
                f_old = np.asarray(self.backend.asnumpy(self._leaves()))
                f_new = transfer.transfer(self.forest, plan.forest, f_old, self.preset.physics.tau, self.accel)
                self._install_tree(plan.forest, f_new, synchronise=True)
        self.regrids += 1
        self.last_regrid = {"refined": plan.refined, "coarsened": plan.coarsened,
                            "step": int(self.step_count if step is None else step), "capped": int(plan.capped)}
        if plan.capped and not self._cap_said:
            self._cap_said = True
            log.warning("nagare: %s: a regrid's refinement was skipped: the tree would pass adapt.max_leaves = %d "
                        "leaves (raise it; the memory estimate reserves that many)", self.preset.source,
                        self.preset.adapt.leaf_cap(self._preset_leaves()))
        return dict(self.last_regrid, leaves=self.forest.n_leaves)

    def _install_tree(self, forest, f_host, synchronise: bool) -> None:
        """Make ``forest`` the engine's tree with state ``f_host`` (host, on that tree). With
        ``synchronise`` (a transferred state): solid and inlet nodes as the step leaves them, the
        coarse copies of fine-owned nodes restricted and same-level copies set to their owner's
        (transfer fills each new leaf on its own); without (a checkpoint): taken bit for bit."""
        p = self.preset
        self.forest = forest
        self._bnd = self._build_boundaries(forest)
        self._tables = self._coupling = self._sampling = self._mass_w = None
        self._tree = None
        f = np.array(f_host, dtype=self.dtype)
        if synchronise:
            if self._bnd is not None:
                f2, m3 = f.reshape(d3q27.Q, -1), self.m ** 3
                for lv, b in self._bnd.level.items():
                    boundaries.apply(np, f2, b, forest.level_slice(lv).start * m3, self._bnd.inlet_velocity)
            from .tree_stepper import synchronise_host

            coupling = self._interface()
            f2 = f.reshape(d3q27.Q, -1)
            m3 = self.m ** 3
            for lv in sorted(forest.levels, reverse=True):  # reference.synchronise's order
                if lv in coupling:
                    synchronise_host(forest, {lv: coupling[lv]}, f, p.physics.tau, self.accel)
                dst, src = interface.level_copies(forest, lv)
                if dst.size:
                    lo = forest.level_slice(lv).start * m3
                    f2[:, dst + lo] = f2[:, src + lo]
        self._pending = f
        if self._tracers is not None:
            self._tracers.set_forest(forest)
        self._select_tree(self.selection["kernels"])

    # ---- forces on the bodies -------------------------------------------------------------------
    def body_force(self):
        """Momentum-exchange force (3,) on all bodies, level-0 lattice units (device array)."""
        if self._bnd is None or not self.bodies or self._tree is None:
            return self.xp.zeros(3, np.float64)
        return self._tree.body_force()

    def force_coefficients(self) -> dict:
        """C_d along the inflow, and the two transverse coefficients: C_l on ``flow.lift`` (default:
        the axis after the inflow's — flow along x, lift along y), C_s on the remaining axis; with the
        first body's frontal area and ρ = 1: C = F / (½ |u_in|² A)."""
        p = self.preset
        u = np.asarray(p.flow.velocity, np.float64)
        speed = float(np.linalg.norm(u))
        if not self.bodies or speed == 0.0:
            return {}
        axis = int(np.argmax(np.abs(u)))
        F = self.backend.asnumpy(self.body_force()).astype(np.float64)
        q = 0.5 * speed * speed * self.bodies[0].frontal_area(axis)
        e = u / speed
        lift = (axis + 1) % 3 if p.flow.lift is None else "xyz".index(p.flow.lift)
        side = 3 - axis - lift
        return {"cd": float(F @ e) / q, "cl": float(F[lift]) / q, "cs": float(F[side]) / q}

    def logged_quantities(self):
        out = self.force_coefficients()
        if self.preset.adapt.on:  # the HUD's Quantities section plots them live
            out.update(self.adapt_figures())
        return out

    def fixed_layout_reason(self) -> str | None:
        if self.preset.adapt.on:
            return f"{self.preset.source} regrids its octree every {self.preset.adapt.every} steps (adapt.every)"
        return None

    def adapt_figures(self) -> dict:
        """Leaves in all and per level (levels base … max_level, zeros included, so the columns stay
        fixed), and the last regrid's refine (leaves split) and coarsen (families merged) counts."""
        lev = self.forest.level
        out = {"leaves": float(self.forest.n_leaves)}
        for lv in range(self.base_level, self.forest.max_level + 1):
            out[f"leaves_l{lv}"] = float(np.count_nonzero(lev == lv))
        out["regrid_refined"] = float(self.last_regrid["refined"])
        out["regrid_coarsened"] = float(self.last_regrid["coarsened"])
        out["regrid_capped"] = float(self.last_regrid.get("capped", 0))  # 1: refinement skipped at the cap
        return out

    def _synchronised(self, f: np.ndarray) -> np.ndarray:
        """A host state on the tree with its coarse copies of fine-owned nodes set (tree_stepper)."""
        from .tree_stepper import synchronise_host

        f = np.array(f)
        synchronise_host(self.forest, self._interface(), f, self.preset.physics.tau, self.accel)
        return f

    def kernel_specs(self, selection=None):
        """The ladder module a selection compiles (leaves of m³, or mother leaves of (2m−1)³), and on
        a tree the level-coupling kernels (and the fused tracer step, with tracers)."""
        sel = selection or self.selection
        if not self.backend.is_gpu or sel["kernels"] == "reference":
            return []
        from .gpu import coupling_spec, kernel_spec

        if not self.is_box:
            specs = [kernel_spec(self.m, self.collision), coupling_spec(self.collision)]
            if self._tree_storage(sel["kernels"]) == "mothers":  # (level 0 may keep leaves of m³)
                specs.append(kernel_spec(2 * self.m - 1, self.collision))
            if self._tracers is not None:  # the fused tracer step (the TreeStepper's buffers: the engine's dtype)
                from .tracer_kernels import kernel_spec as tracer_spec

                specs.append(tracer_spec(self.dtype, self.dtype))
            return specs
        return [kernel_spec(2 * self.m - 1 if RUNG_STORAGE[sel["kernels"]] == "mothers" else self.m, self.collision)]

    # ---- stepping ---------------------------------------------------------------------------
    def _advance(self, n):
        if self.preset.adapt.on:
            # regrids fall on coarse-step counts (every K-th step), whatever the batches: step(N) is
            # N × step(1) bit for bit
            every, done = self.preset.adapt.every, 0
            while done < n:
                k = min(n - done, every - (self.step_count + done) % every)
                self._advance_tree(k)
                done += k
                if (self.step_count + done) % every == 0:
                    self.regrid(self.step_count + done)
            return n * self.dt
        return self._advance_tree(n)

    def _substeps(self) -> int:
        """Stepper steps per engine step: 2^(l_min − base level) (1 unless a regrid refined every leaf
        of the base level)."""
        return 1 << (min(self.forest.levels) - self.base_level) if not self.is_box else 1

    def _advance_tree(self, n):
        if self._tracers is not None:
            return self._advance_with_tracers(n)
        if not self.is_box:
            sub = self._substeps()
            if isinstance(self._tree, reference.Stepper):
                with self.timer.phase("step", steps=n):
                    self._tree.step(n * sub)
            else:
                self._tree.advance(n * sub, graph=self.selection["graph"] == "on")
            return n * self.dt
        if self._stepper is None:
            with self.timer.phase("step", steps=n):
                for _ in range(n):
                    self.f = leafgrid.step(self.xp, self.f, self._sources, self.omega, self.accel, model=self.collision,
                                           copies=self._csm_copies)
                    if self.half == "rounded":  # what fp16 storage keeps of the step (the kernels' store_pop)
                        self.f = storage.round_fp16(self.xp, self.f)
            return n * self.dt
        bufs = [self.f, self.fn]
        self._stepper.advance(bufs, n, graph=self.selection["graph"] == "on")
        self.f, self.fn = bufs
        return n * self.dt

    # ---- outputs ----------------------------------------------------------------------------
    def _uniform(self):
        if self.storage == "uniform":
            return storage.from_fp16(self.xp, self.f) if self.half == "buffers" else self.f
        if self.half == "buffers" or self.storage == "apart":  # through the leaves (the conversions are there)
            return storage.uniform_from_leaves(self.xp, self._leaves(), self.m, self.leaf_shape)
        m, shape = (self.m, self.leaf_shape) if self.storage == "leaves" else \
            (2 * self.m - 1, storage.mother_shape(self.leaf_shape))
        return storage.uniform_from_leaves(self.xp, self.f, m, shape)

    def _macroscopic(self):
        """(ρ, ux, uy, uz) on the display lattice: the box's uniform lattice, or a tree's sampling
        lattice (mesh.py: each sample from the finest leaf that holds it)."""
        xp = self.xp
        if self.is_box:
            return leafgrid.macroscopic(xp, self._uniform())
        s = self._sampling_lattice()
        rho, ux, uy, uz = leafgrid.macroscopic(xp, self._leaves())
        out = []
        for a in (rho, ux, uy, uz):
            flat = a.reshape(-1)
            v = s["w"][0] * flat[s["ids"][0]]
            for c in range(1, 8):
                v = v + s["w"][c] * flat[s["ids"][c]]
            out.append(v.reshape(s["shape"]))
        return tuple(out)

    def _sampling_lattice(self):
        if self._sampling is None:
            budget = 1 << 21 if self.backend.is_gpu else 1 << 18
            smp = mesh.sampling(self.forest, budget)
            self._sampling = {"ids": self.xp.asarray(smp.ids), "w": self.xp.asarray(smp.weights, dtype=self.dtype),
                              "shape": smp.shape, "unit": smp.unit, "level": smp.level}
        return self._sampling

    def field_names(self):
        return ["speed", "rho", "ux", "uy", "uz", "leaves"] + (["tracers"] if self._tracers is not None else [])

    def _tracer_field(self):
        t = self._tracers
        unit = float(1 << self.forest.max_level)
        dom = tuple(float(d) / unit for d in self.forest.domain)
        return Particles(t.positions(), {"age": t.age}, label="tracers (age)", bounds=((0.0, 0.0, 0.0), dom),
                         spacing=float(self.forest.spacing_of(self.forest.max_level)) / unit, trails=t.trails(),
                         length_units="lattice (level 0)", attribute_units={"age": "level-0 steps"})

    def field(self, name):
        if name == "leaves":
            return self._boxes()
        if name == "tracers" and self._tracers is not None:
            return self._tracer_field()
        if name not in ("speed", "rho", "ux", "uy", "uz"):
            raise KeyError(name)
        rho, ux, uy, uz = self._macroscopic()
        data = {"rho": rho, "ux": ux, "uy": uy, "uz": uz}.get(name)
        if name == "speed":
            data = self.xp.sqrt(ux * ux + uy * uy + uz * uz)
        return Grid3D(data, label=FIELD_LABELS[name], units="lattice", symmetric=name in ("ux", "uy", "uz"),
                      **self._grid_kw())

    def _grid_kw(self) -> dict:
        """Spacing, bodies and sample placement of the sampled fields: on a tree the samples are the
        lattice's nodes (walled axes keep the far face), so "node" and the domain as the extent."""
        kw = {"spacing": self._spacing(), "surfaces": self._surfaces()}
        if not self.is_box:
            unit = float(1 << self.forest.max_level)
            kw.update(centering="node", extent=tuple(float(d) / unit for d in self.forest.domain))
        return kw

    def fields(self):
        rho, ux, uy, uz = self._macroscopic()
        kw = self._grid_kw()
        g = {"speed": Grid3D(self.xp.sqrt(ux * ux + uy * uy + uz * uz), label=FIELD_LABELS["speed"], units="lattice",
                             **kw),
             "rho": Grid3D(rho, label=FIELD_LABELS["rho"], units="lattice", **kw)}
        for name, d in (("ux", ux), ("uy", uy), ("uz", uz)):
            g[name] = Grid3D(d, label=name, units="lattice", symmetric=True, **kw)
        g["leaves"] = self._boxes()
        if self._tracers is not None:
            g["tracers"] = self._tracer_field()
        return g

    def _surfaces(self) -> tuple:
        """The bodies as triangle meshes in the fields' world units (built once: the view uploads a
        surface again only when its arrays change)."""
        if getattr(self, "_surface_cache", None) is None:
            self._surface_cache = tuple(b.surface() for b in self.bodies)
        return self._surface_cache

    def _spacing(self) -> float:
        """Sample spacing in level-0 lattice units."""
        if self.is_box:
            return 1.0
        return self._sampling_lattice()["unit"] / float(1 << self.forest.max_level)

    def _boxes(self):
        """The leaves as boxes with their level, in the fields' world units (level-0 lattice units:
        a Grid3D sample index times its spacing)."""
        xp = self.xp
        lo, hi, lev = mesh.boxes(self.forest, 1 << self.forest.max_level)
        return Boxes(xp.asarray(lo), xp.asarray(hi), xp.asarray(lev), label="leaves (level)")

    def leaf_blocks(self) -> dict:
        """The leaves as stored, as host NumPy (read-only; for exports such as ParaView's
        OverlappingAMR): per leaf its ``level``, ``origin`` (x, y, z) and point ``spacing`` in
        level-0 lattice units (the fields' world units), and at its m³ node-centred points
        ``rho`` [leaf, z, y, x] and ``u`` [3, leaf, z, y, x] (the moments the fields show), in the
        forest's leaf order (by level, then z, y, x). Neighbouring leaves share their face nodes:
        each holds its own copy (where levels meet, the coarse copy follows the fine one to the
        coupling's accuracy: within 2e-5 of the flow's scale in tests/app/test_vtkhdf_amr.py)."""
        unit = float(1 << self.forest.max_level)
        rho, ux, uy, uz = leafgrid.macroscopic(self.xp, self._leaves())
        asnumpy = self.backend.asnumpy
        return {"level": self.forest.level.astype(np.int32), "origin": self.forest.origin / unit,
                "spacing": self.forest.spacing / unit, "m": self.m, "rho": asnumpy(rho),
                "u": np.stack([asnumpy(ux), asnumpy(uy), asnumpy(uz)])}

    def device_diagnostics(self):
        xp = self.xp
        rho, ux, uy, uz = self._macroscopic()
        if self.is_box:
            mass = xp.sum(rho, dtype=xp.float64)
        else:  # ∫ρ dV over the leaves (reference.mass: trapezoidal per leaf, level-0 volume units)
            if self._mass_w is None:
                vol = (2.0 ** -self.forest.level.astype(np.float64)) ** 3
                self._mass_w = xp.asarray(vol[:, None, None, None] * reference.trapezoid_weights(self.m)[None])
            mass = xp.sum(d3q27.moments(xp, self._leaves())[0] * self._mass_w, dtype=xp.float64)
        return {"mass": mass, "max_speed": xp.sqrt(xp.max(ux * ux + uy * uy + uz * uz)), "min_density": xp.min(rho),
                "max_density": xp.max(rho), "min_population": self._min_population()}

    def _min_population(self):
        """The smallest population f_i of the state (a device scalar): one reduction over the arrays
        the state lives in, whatever their layout (no leaf assembly)."""
        xp = self.xp
        if self.is_box and self.half == "buffers":  # the minimum per direction, then + w (load_pop's order)
            return xp.min(storage.from_fp16(xp, xp.min(self.f.reshape(d3q27.Q, -1), axis=1).reshape(-1, 1)))
        if self.is_box:
            return xp.min(self.f)
        if self._tree is None:  # the pending host state: no copy to the device for one minimum
            return np.min(self._pending)
        if isinstance(self._tree, reference.Stepper):
            return xp.min(self._tree.f)
        # (on mother leaves the leaves' points only: provisional points are rescaled finer values, not state)
        return xp.min(xp.stack([xp.min(self._tree.level_state(lv)) for lv in self._tree.levels]))

    def sanity_bounds(self):
        """Density positive; speed below the lattice sound speed 1/√3 and, in an open flow (an inflow
        and no body force), below 3 × the inflow speed. A sphere's or the Ahmed body's fastest point
        moves at ~1.6 × the inflow; a run past 3 × is diverging, and a checkpoint of it is no "last
        good" state (one diverged again within an interval when the bound was 1/√3 alone). Decaying
        box flows (Taylor–Green, shear wave) are bounded at 1.2 × u0 (physically they only slow);
        random and force-driven ones keep the sound-speed bound: their scale is not known in advance."""
        p = self.preset
        inflow = float(np.linalg.norm(p.flow.velocity)) if p.flow.inlet != "none" else 0.0
        top = 1.0 / math.sqrt(3.0)
        if inflow > 0.0 and not any(p.physics.force):
            top = min(top, 3.0 * inflow)
        elif p.initial.kind in ("taylor-green", "shear-wave") and p.flow.inlet == "none" and not any(p.physics.force):
            top = min(top, 1.2 * p.initial.u0)  # decaying flows: the fastest point starts at u0 and slows
        # populations: a distribution is never negative; an under-resolved start dips a little below
        # 0 and recovers, a diverging run goes far below while its speed still looks plausible, so a
        # population below −MIN_POPULATION_SLACK (−2/27, measured: see there) is a divergence.
        return {"min_density": (0.0, math.inf), "max_density": (-math.inf, MAX_DENSITY), "max_speed": (-1.0, top),
                "min_population": (-MIN_POPULATION_SLACK, math.inf)}

    # ---- throughput -------------------------------------------------------------------------
    @property
    def updates_per_step(self):
        """Stored points updated per step (P0 counts every stored point, shared faces included); on a
        tree, level l's points count 2^(l − l_min) times (its sub-steps)."""
        p = self.preset
        if not self.is_box:
            blocks = getattr(self._tree, "block", None)  # a TreeStepper's storage per level (mother leaves)
            if blocks is not None and getattr(self._tree, "mapped", False):
                return float(sum(c.n * blocks[lv] ** 3 * 2.0 ** (lv - self.base_level)
                                 for lv, c in self._tree.coupling.items()))
            lv = self.forest.level
            return float(np.sum(2.0 ** (lv - self.base_level)) * self.m**3)
        if self.selection["kernels"] == "uniform":
            nz, ny, nx = p.shape
            return float(nx * ny * nz)
        if RUNG_STORAGE[self.selection["kernels"]] == "mothers":
            return float(p.nleaf // 8 * (2 * self.m - 1) ** 3)
        return float(p.nleaf * self.m**3)

    def bytes_per_update(self):
        """P0's B = 220 bytes in fp32 (27 reads + 27 writes of 4 bytes, plus 4 of table/flags);
        the fp16 kernels move 2 bytes a population (112); the reference with fp16 storage keeps
        its rounded state in fp32 and moves what fp32 does."""
        item = 2 if self.half == "buffers" else self.dtype.itemsize
        return 2.0 * d3q27.Q * item + 4.0

    def timing_extra(self):
        """P0's figures: GFLOPS at F = 377 flop per point and % of the improved roofline
        P = F / (F/P_peak + B/B_peak) with the measured copy bandwidth and the fp32 peak. On a tree,
        the points against the uniform lattice of the finest spacing, and that lattice's updates
        per coarse step (fine-equivalent throughput = those / the time of a step)."""
        out = {"flops_per_point": P0_FLOPS}
        if not self.is_box:
            f = self.forest
            uniform = float(np.prod((f.domain // f.spacing_of(f.max_level)).astype(np.float64)))
            points = float(f.n_leaves * self.m**3)
            out.update({"leaves": f.n_leaves, "points": points, "uniform_points": uniform,
                        "point_fraction": points / uniform,
                        "fine_equivalent_updates_per_step": uniform * 2.0 ** (f.max_level - self.base_level)})
            if self.preset.adapt.on:
                out.update(self.adapt_figures())
        elif self.storage != "uniform":  # the points P0's inner kernel updates (indices 1..m−2 of a leaf)
            mothers = self.storage == "mothers"
            m, n = (2 * self.m - 1, self.preset.nleaf // 8) if mothers else (self.m, self.preset.nleaf)
            out["inner_points"] = float(n * (m - 2) ** 3)
        peak = fp32_peak_flops(self.backend)
        if peak:
            bw = self.roofline_bytes_per_s()
            out["fp32_peak_gflops"] = peak / 1e9
            b = self.bytes_per_update()  # P0's B = 220 in fp32; fp16 storage moves 112
            out["improved_roofline_gflops"] = P0_FLOPS / (P0_FLOPS / peak + b / bw) / 1e9 if bw else None
        return out

    # ---- tests and benchmarks ---------------------------------------------------------------
    @classmethod
    def equivalence_presets(cls):
        base = {"engine": FAMILY, "description": "equivalence test", "initial": {"kind": "random"}}
        return {
            "fp32-2x2x2-m9": AMR3DPreset.model_validate({
                **base, "grid": {"leaves": [2, 2, 2], "m": 9}, "physics": {"tau": 0.62, "force": [1e-5, 0, -2e-5]}}),
            "fp32-4x2x2-m9": AMR3DPreset.model_validate({
                **base, "grid": {"leaves": [4, 2, 2], "m": 9}, "physics": {"tau": 0.8}}),
            "fp32-3x1x2-m17": AMR3DPreset.model_validate({
                **base, "grid": {"leaves": [3, 1, 2], "m": 17}, "physics": {"tau": 0.7}}),
            # two levels, interfaces on faces, edges and corners, P0's trilinear stencil, a body force
            "fp32-tree2-m9": AMR3DPreset.model_validate({
                **base, "grid": {"leaves": [3, 2, 2], "m": 9},
                "refine": [{"lo": [0.0, 0.0, 0.0], "hi": [0.3, 0.4, 0.4], "level": 1}],
                "physics": {"tau": 0.62, "force": [1e-5, 0, -2e-5], "interp": "linear"}}),
            # three levels, walls normal to y (bounce-back at interface points too), quadratic stencil
            "fp32-tree3-m9": AMR3DPreset.model_validate({
                **base, "grid": {"leaves": [4, 2, 4], "m": 9, "periodic": [True, False, True]},
                "refine": [{"lo": [0.4, 0.2, 0.4], "hi": [0.6, 0.4, 0.6], "level": 2}],
                "physics": {"tau": 0.57}}),
            # a flow: a sphere on the finer of two levels (interpolated bounce-back: the link kernel,
            # its points in the fix-up), a velocity inlet and an outflow (the boundary kernels), with
            # the MRT collision and Smagorinsky's LES in every kernel
            "fp32-sphere-m9": AMR3DPreset.model_validate({
                **base, "grid": {"leaves": [3, 2, 2], "m": 9, "periodic": [False, True, True]},
                "body": [{"kind": "sphere", "center": [7.7, 8.1, 8.3], "diameter": 3.0, "level": 1, "band": 0.5}],
                "flow": {"inlet": "x-", "outlet": "x+", "velocity": [0.04, 0.0, 0.0], "wall": "interpolated"},
                "physics": {"tau": 0.56, "collision": "mrt", "les": "smagorinsky", "smagorinsky": 0.16}}),
            # free-slip sides (specular reflection through the fix-up's descriptors) on two levels: y− and z+
            # free slip, y+ a wall (the wall–free-slip edge), z− a wall, x periodic, a body force along x
            "fp32-tree2-slip-m9": AMR3DPreset.model_validate({
                **base, "grid": {"leaves": [3, 2, 2], "m": 9, "periodic": [True, False, False],
                                 "free_slip": ["y-", "z+"]},
                "refine": [{"lo": [0.0, 0.0, 0.0], "hi": [0.3, 0.4, 0.4], "level": 1}],
                "physics": {"tau": 0.57, "force": [2e-5, 0, 0]}}),
            # Kobayashi's CSM (the coefficient's pre-pass, the fix-up's velocities, the owners' C) on two
            # levels with walls normal to y and a body force
            "fp32-tree2-csm-m9": AMR3DPreset.model_validate({
                **base, "grid": {"leaves": [3, 2, 2], "m": 9, "periodic": [True, False, True]},
                "refine": [{"lo": [0.0, 0.0, 0.0], "hi": [0.3, 0.4, 0.4], "level": 1}],
                "physics": {"tau": 0.56, "force": [1e-5, 0, -2e-5], "les": "csm"}}),
        }

    @classmethod
    def equivalence_companions(cls, axis, choice):
        """The graph is checked around the most involved rung (26 class streams captured); fp16
        storage on the fastest rung that has it."""
        if axis == "graph" and choice == "on":
            return {"kernels": "templates"}
        return {"kernels": "naive"} if axis == "storage" and choice == "fp16" else {}

    @classmethod
    def bench_spec(cls):
        return BenchSpec(preset="amr3d-bench", cases=cls.bench_cases, selections=cls.bench_selections, batch=16)

    @classmethod
    def bench_report(cls, results: list) -> str:
        """P0's table (§4) from the measured cells: per case and rung the inner and outer (shell)
        kernel times, the step, the speed-up over naive, GFLOPS at F = 377 flop a point, and % of
        P0's improved roofline P for the step and for the inner kernel alone (its own points)."""
        rows = []
        for r in results:
            peak = r.extra.get("improved_roofline_gflops") if r.ok else None
            if not peak:
                continue
            naive = next((x for x in results if x.ok and x.case == r.case and x.label == "naive"), None)
            gflops = r.updates_per_s * P0_FLOPS / 1e9
            inner, shell, points = r.phases.get("inner"), r.phases.get("shell"), r.extra.get("inner_points")
            inner_gflops = points / (inner * 1e-3) * P0_FLOPS / 1e9 if inner and points else None

            def cell(v, fmt):
                return "—" if v is None else format(v, fmt)
            cells = [r.case, r.label, cell(inner, ".4f"), cell(shell, ".4f"), f"{r.ms_per_step:.4f}",
                     "—" if naive is None else f"{naive.ms_per_step / r.ms_per_step:.2f}×",
                     f"{gflops:,.0f}", f"{100 * gflops / peak:.1f}", cell(inner_gflops, ",.0f"),
                     cell(None if inner_gflops is None else 100 * inner_gflops / peak, ".1f")]
            rows.append("| " + " | ".join(cells) + " |")
        if not rows:
            return ""
        return "\n".join(["", "## P0's table (§4)", "",
                          f"F = {P0_FLOPS} flop and B = {P0_BYTES} bytes a point and step (112 with fp16 storage); "
                          "P = F / (F/P_peak + B/B_copy) with this GPU's fp32 peak and the copy bandwidth above. "
                          "Points are counted as stored (shared face nodes twice); the inner kernel's figures count "
                          "its own points (indices 1..m−2 of each leaf).", "",
                          "| case | rung | inner ms | outer ms | step ms | speed-up over naive | GFLOPS | % of P "
                          "| inner GFLOPS | inner % of P |", "|" + "---|" * 10, *rows]) + "\n"

    @classmethod
    def bench_cases(cls, backend: str = "cupy"):
        """P0's box (512 leaves of 17³ = 64 mother leaves of 33³) and a GPU-filling box (16×)."""
        if backend == "numpy":
            return [("p0-box-8-leaves", ["grid.leaves=[2, 2, 2]"])]
        return [("p0-box-512-leaves", ["grid.leaves=[8, 8, 8]"]),
                ("fill-8192-leaves", ["grid.leaves=[16, 16, 32]"]),
                ("three-levels", ["grid.leaves=[8, 8, 8]", THREE_LEVELS]),
                ("sphere", ["@amr3d-sphere-re100"])]

    @classmethod
    def bench_selections(cls, backend: str = "cupy"):
        if backend == "numpy":
            return [("reference", {"kernels": "reference"})]
        rungs = ("naive", "split", "mother-leaf", "templates", "sorted", "split-apart", "naive-fused", "uniform")
        return ([(r, {"kernels": r}) for r in rungs]
                + [(f"{r} graph", {"kernels": r, "graph": "on"})
                   for r in ("naive", "templates", "sorted", "naive-fused", "uniform")]
                + [(f"{r} fp16", {"kernels": r, "storage": "fp16"}) for r in ("naive", "uniform")])


def fp32_peak_flops(backend) -> float | None:
    """FMA peak of the device: SMs × 128 fp32 lanes × 2 flop × clock (Volta and newer)."""
    if not backend.is_gpu:
        return None
    try:
        dev = backend.xp.cuda.Device()
        attrs = dev.attributes
        return attrs["MultiProcessorCount"] * 128 * 2 * attrs["ClockRate"] * 1e3
    except Exception:
        return None


def _flow(p: AMR3DPreset, x, y, z):
    """ρ, (ux, uy, uz) of the preset's initial flow at coordinates in level-0 lattice units."""
    nz, ny, nx = p.shape
    kx, ky, kz = 2 * math.pi / nx, 2 * math.pi / ny, 2 * math.pi / nz
    u0 = p.initial.u0
    rho = np.ones(np.broadcast(x, y, z).shape)
    ux, uy, uz = np.zeros_like(rho), np.zeros_like(rho), np.zeros_like(rho)
    kind = p.initial.kind
    if kind == "taylor-green":
        ux = u0 * np.sin(kx * x) * np.cos(ky * y) * np.cos(kz * z)
        uy = -u0 * np.cos(kx * x) * np.sin(ky * y) * np.cos(kz * z)
        # the pressure of the 3D Taylor–Green vortex, as a density through p = c_s² ρ
        rho = 1 + 3 * (u0 * u0 / 16) * (np.cos(2 * kx * x) + np.cos(2 * ky * y)) * (np.cos(2 * kz * z) + 2)
    elif kind == "shear-wave":
        ux = u0 * np.sin(kz * z)
    elif kind == "uniform":
        ux, uy, uz = (np.full_like(rho, v) for v in p.flow.velocity)
    elif kind == "vortex":
        # u_θ = u0 (r/R) exp(½(1 − r²/R²)) about z, on top of flow.velocity (the convected Gaussian
        # vortex: compact, so the periodic images are negligible for R ≪ the box, and zero net
        # circulation); ρ = 1 − (3/2) u0² exp(1 − r²/R²) balances the centripetal pressure (p = ρ/3)
        c = p.initial.center if p.initial.center is not None else (nx / 2, ny / 2, nz / 2)
        R = p.initial.radius
        dx, dy = x - c[0], y - c[1]
        for d, n in ((0, nx), (1, ny)):  # nearest periodic image
            if p.grid.periodic[d]:
                v = dx if d == 0 else dy
                v = v - n * np.round(v / n)
                dx, dy = (v, dy) if d == 0 else (dx, v)
        g = np.exp(0.5 * (1.0 - (dx * dx + dy * dy) / (R * R)))
        ux = p.flow.velocity[0] - u0 * dy / R * g + 0 * rho
        uy = p.flow.velocity[1] + u0 * dx / R * g + 0 * rho
        uz = p.flow.velocity[2] + 0 * rho
        rho = 1.0 - 1.5 * u0 * u0 * g * g
    elif kind == "random":
        return _smooth_random(np.random.default_rng(p.initial.seed), x, y, z, (nx, ny, nz), u0)
    return rho, (ux, uy, uz)


def _smooth_random(rng, x, y, z, n, u0, modes: int = 6):
    """A random smooth flow: a few periodic Fourier modes evaluated at the coordinates, so every
    stored copy of a node (shared faces, coarse and fine copies) gets the same value."""
    def field(amp):
        out = np.zeros(np.broadcast(x, y, z).shape)
        for _ in range(modes):
            k = rng.integers(-2, 3, size=3)
            ph = rng.uniform(0, 2 * math.pi)
            out += amp / modes ** 0.5 * rng.standard_normal() * np.cos(
                2 * math.pi * (k[0] * x / n[0] + k[1] * y / n[1] + k[2] * z / n[2]) + ph)
        return out
    return 1 + field(0.02), (field(u0), field(u0), field(u0))


def initial_tree_state(p: AMR3DPreset, forest) -> np.ndarray:
    """The preset's initial flow on a tree as post-collision populations (reference.init_state:
    the equilibrium of each level with P0's force term)."""
    X = reference.point_coordinates(forest)
    rho, u = _flow(p, X[..., 0], X[..., 1], X[..., 2])
    phys = reference.Physics(p.physics.tau, tuple(p.physics.force))
    return reference.init_state(np, forest, phys, rho, np.stack(u), dtype=p.physics.dtype)


def random_tree_state(p: AMR3DPreset, forest, rng: np.random.Generator) -> np.ndarray:
    """A random, physically valid state on a tree, equal on every copy of a node: a smooth random
    flow and a small non-equilibrium perturbation that is a smooth function of position too."""
    X = reference.point_coordinates(forest)
    nz, ny, nx = p.shape
    rho, u = _smooth_random(rng, X[..., 0], X[..., 1], X[..., 2], (nx, ny, nz), 0.02)
    f = reference.init_state(np, forest, reference.Physics(p.physics.tau, tuple(p.physics.force)), rho, np.stack(u))
    for q in range(d3q27.Q):  # periodic in the domain: the copies at x = 0 and x = L of a node agree
        k = 2 * math.pi * rng.integers(1, 4, size=3) / np.array([nx, ny, nz])
        f[q] *= 1 + 0.01 * np.sin(X[..., 0] * k[0] + X[..., 1] * k[1] + X[..., 2] * k[2] + rng.uniform(0, 6.3))
    return f.astype(p.physics.dtype)


def initial_state(p: AMR3DPreset) -> np.ndarray:
    """The preset's initial condition as equilibrium populations in leaf storage (host NumPy)."""
    nz, ny, nx = p.shape
    z, y, x = np.meshgrid(*(np.arange(n, dtype=np.float64) for n in (nz, ny, nx)), indexing="ij")
    if p.initial.kind == "random":  # independent noise per node (a box stores each node's copies alike)
        rng = np.random.default_rng(p.initial.seed)
        rho = 1 + 0.01 * rng.standard_normal((nz, ny, nx))
        ux, uy, uz = (p.initial.u0 * 0.5 * rng.standard_normal(rho.shape) for _ in range(3))
    else:
        rho, (ux, uy, uz) = _flow(p, x, y, z)
    feq = leafgrid.equilibrium(np, rho, ux, uy, uz)
    return storage.leaves_from_uniform(np, feq, p.grid.m, tuple(p.grid.leaves)).astype(p.physics.dtype)

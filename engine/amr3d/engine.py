"""amr3d: D3Q27 lattice Boltzmann on an octree of leaves of m³ node-centred points (P0), with P0's
kernel ladder as live variants (docs/amr3d.md).

:class:`AMR3D` is the engine contract's glue; each job is in its own module:

- ``builder.py``: preset → bodies, forest, boundaries, tracers, and the memory they take;
- ``shapes.py``: the two shapes of problem behind one interface — ``box.py``, P0's box of periodic
  leaves where every rung runs, and ``tree_shape.py`` (with ``regridding.py``), a refined or walled
  tree run by the reference or the ladder per level;
- ``outputs.py``: fields, diagnostics, forces and throughput figures;
- ``cases.py``: the equivalence and bench cases and the initial states;
- ``tracer_state.py``: the tracers in a checkpoint; ``variants.py``: the variant axes.

One state at the interface: f[27, leaf, m, m, m] in the forest's leaf order (checkpoints, fields,
switching), whatever the shape stores.
"""
from __future__ import annotations

import numpy as np

from ..contract import Engine, available_memory
from . import builder, cases, mesh, outputs, tracer_state, variants
from . import collision as collision_model
from .box import Box
from .config import MAX_TRACERS_PER_SEED, AMR3DPreset
from .tree_shape import Tree

FAMILY = variants.FAMILY
variants.register()


class AMR3D(Engine):
    time_units = "level-0 steps"  # lattice time of the coarsest level (a level-l step is 2^-l of it)
    build_stages = ("building the octree", "setting the initial flow", "loading the kernels")
    family = FAMILY
    Preset = AMR3DPreset
    equivalence_steps = 24
    constant_dt = True

    @property
    def shape_class(self):
        """The shape of the preset: P0's box where it fits, else a tree."""
        return Box if Box.fits(self.preset) else Tree

    def reserved_leaves(self) -> int:
        """The leaves the memory estimate reserves (builder.reserved_leaves)."""
        return builder.reserved_leaves(self.preset, builder.make_bodies(self.preset))

    def estimated_bytes(self):
        return builder.estimated_bytes(self.preset, self.backend, self.reserved_leaves(), self.shape_class)

    # ---- state ------------------------------------------------------------------------------
    def _allocate(self):
        p = self.preset
        self.dtype = np.dtype(p.physics.dtype)
        self.m = p.grid.m
        self.bodies = builder.make_bodies(p)
        self.forest = mesh.build_forest(p, self.bodies)
        shape = self.shape_class
        self._tracers = None
        if p.tracers.count and shape.takes_tracers:
            self._tracers = builder.make_tracers(self.xp, p, self.forest, self.bodies, self.dtype)
        self._bnd = builder.build_boundaries(p, self.forest, self.bodies)
        # one step = one step of the coarsest level of the preset's tree (the base level); a regrid
        # never coarsens below it, and when it refines every base leaf the stepper takes
        # 2^(l_min − base) of its own steps per engine step (Tree.substeps), so Δt stays constant
        self.base_level = min(self.forest.levels)
        self.dt = 2.0 ** -self.base_level
        self.omega = 1.0 / p.physics.tau
        self.accel = tuple(float(a) for a in p.physics.force)
        self.collision = collision_model.from_physics(p.physics)  # BGK, MRT; Smagorinsky LES or none
        self.shape = shape(self)

    def _initialise(self):
        self.shape.initialise()

    def random_state(self, rng: np.random.Generator):
        self.shape.random_state(rng)

    def state_arrays(self):
        out = self.shape.state_arrays()
        if self._tracers is not None:
            out.update(tracer_state.state_arrays(self.xp, self._tracers))
        return out

    def check_restorable(self, arrays):
        """The contract's check, with the shape's (an adaptive tree's checkpoint holds its tree) and
        the tracers' (another count per seed than the preset's) allowances."""
        expected = {k: (v.shape, v.dtype) for k, v in self.state_arrays().items()}
        self.shape.check_restorable(arrays, expected)
        if self._tracers is not None:
            tracer_state.check_restorable(self._tracers, arrays, expected)
        self._check_arrays(arrays, expected)

    def check_consistent(self, meta, arrays):
        """The contract's checks, and the tracers' (tracer_state.check_consistent)."""
        super().check_consistent(meta, arrays)
        if self._tracers is not None:
            tracer_state.check_consistent(self._tracers, meta, arrays)

    def _load_state_arrays(self, arrays):
        self.shape.load(arrays)
        if self._tracers is not None:
            tracer_state.load(self.xp, self._tracers, arrays)

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
        grow = builder.tracer_bytes(max(count - self._tracers.capacity, 0) * self._tracers.n_seeds,
                                    self._tracers.trail_length)
        free = available_memory(self.backend)
        if grow and free is not None and grow > free:
            raise ValueError(f"tracers per seed = {count}: needs about {grow / 2**30:.1f} GiB more, "
                             f"{free / 2**30:.1f} GiB are free")
        self._tracers.set_capacity(count)

    # ---- variants and stepping ----------------------------------------------------------------
    def _apply_selection(self, old, new):
        self.shape.select(new)

    def kernel_specs(self, selection=None):
        """The CUDA compilations a selection launches (the shape's: the ladder for leaves of m³ or
        mother leaves, on a tree the level coupling and the fused tracer step)."""
        sel = selection or self.selection
        if not self.backend.is_gpu or sel["kernels"] == "reference":
            return []
        return self.shape.kernel_specs(sel)

    def _advance(self, n):
        self.shape.advance(n)
        return n * self.dt

    # ---- adaptive regridding (a tree's: regridding.py) --------------------------------------------
    def regrid(self, step: int | None = None) -> dict:
        return self.shape.regrid(step)

    def regrid_criterion(self) -> np.ndarray:
        return self.shape.regrid_criterion()

    def adapt_figures(self) -> dict:
        return self.shape.adapt_figures()

    @property
    def last_regrid(self) -> dict:
        return self.shape.last_regrid

    @property
    def regrids(self) -> int:
        return self.shape.regrids

    def fixed_layout_reason(self) -> str | None:
        if self.preset.adapt.on:
            return f"{self.preset.source} regrids its octree every {self.preset.adapt.every} steps (adapt.every)"
        return None

    # ---- outputs (outputs.py) -------------------------------------------------------------------
    def field_names(self):
        return outputs.field_names(self)

    def field(self, name):
        return outputs.field(self, name)

    def fields(self):
        return outputs.fields(self)

    def leaf_blocks(self) -> dict:
        return outputs.leaf_blocks(self)

    def device_diagnostics(self):
        return outputs.device_diagnostics(self)

    def sanity_bounds(self):
        return outputs.sanity_bounds(self.preset)

    def divergence_advice(self):
        """Lattice Boltzmann: no time step to lower; stable for τ well above ½ and |u| ≪ 1/√3."""
        return ("raise physics.tau towards 1 (or lower flow.reynolds where it is given), or lower flow.velocity, "
                "or raise the resolution (grid.leaves, grid.m)")

    def body_force(self):
        return outputs.body_force(self)

    def force_coefficients(self) -> dict:
        return outputs.force_coefficients(self)

    def logged_quantities(self):
        out = self.force_coefficients()
        if self.preset.adapt.on:  # the HUD's Quantities section plots them live
            out.update(self.adapt_figures())
        return out

    def device_quantities(self):
        """The force summed on the device now, the coefficients from its host copy later; the
        tree's figures (host values) as they are at this step."""
        if not self.backend.is_gpu:
            return None
        figures = self.adapt_figures() if self.preset.adapt.on else {}
        if not outputs.has_force_coefficients(self):
            return {}, lambda host: dict(figures)
        return ({"force": self.body_force()},
                lambda host: {**outputs.coefficients_of_force(self, host["force"]), **figures})

    # ---- throughput -------------------------------------------------------------------------
    @property
    def updates_per_step(self):
        """Stored points updated per step (P0 counts every stored point, shared faces included); on a
        tree, level l's points count 2^(l − l_min) times (its sub-steps)."""
        return self.shape.updates_per_step()

    def bytes_per_update(self):
        return outputs.bytes_per_update(self)

    def timing_extra(self):
        return outputs.timing_extra(self)

    # ---- tests and benchmarks (cases.py) -----------------------------------------------------
    @classmethod
    def equivalence_presets(cls):
        return cases.equivalence_presets()

    @classmethod
    def equivalence_companions(cls, axis, choice):
        return cases.equivalence_companions(axis, choice)

    @classmethod
    def bench_spec(cls):
        return cases.bench_spec()

    @classmethod
    def bench_report(cls, results: list) -> str:
        return cases.bench_report(results)

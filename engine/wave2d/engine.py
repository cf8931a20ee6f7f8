"""2D wave equation u_tt = c²∇²u with leapfrog: the framework's second family (2D, two inputs).

The point update is written once (engine/stencil/library.py: ``wave2d``) and run by P2's
loop engines; ``array`` is an independent whole-array reference (reference.py).
"""
from __future__ import annotations

import math

import numpy as np

from ..benchspec import BenchSpec
from ..contract import Engine
from ..fields import Grid2D
from ..stencil.library import wave2d
from ..stencil.loops import loop_timing_extra
from ..stencil.variants import loop_for
from . import reference, variants
from .config import Wave2DPreset

FAMILY = variants.FAMILY

variants.register()


class Wave2D(Engine):
    family = FAMILY
    Preset = Wave2DPreset
    equivalence_steps = 64
    constant_dt = True  # time = step_count·Δt: the same however the steps were batched

    def estimated_bytes(self):
        n = self.preset.grid.nx * self.preset.grid.ny * np.dtype(self.preset.physics.dtype).itemsize
        return 3 * n + 8 * n  # three time levels + the array reference's temporaries

    # ---- state ----
    def _allocate(self):
        p = self.preset
        self.dtype = np.dtype(p.physics.dtype)
        self.periodic = p.boundaries.kind == "periodic"
        self.u = self.xp.zeros(p.shape, dtype=self.dtype)
        self.u_prev = self.xp.zeros_like(self.u)
        self.u_next = self.xp.zeros_like(self.u)
        self.dt = p.physics.courant * p.grid.dx / p.physics.c

    def _initialise(self):
        p = self.preset
        if p.initial.kind == "standing":
            u = reference.standing_mode(np, p.shape, p.grid.dx, p.initial.mode, self.periodic, p.initial.amplitude)
            # u at t = −Δt of the exact discrete standing wave (zero initial velocity): u·cos θ.
            theta = reference.discrete_theta(p.shape, p.grid.dx, p.initial.mode, self.periodic, p.physics.courant)
            u_prev = u * math.cos(theta)
        elif p.initial.kind == "gaussian":
            y, x = np.meshgrid(*(np.linspace(-0.5, 0.5, n) for n in p.shape), indexing="ij")
            u = p.initial.amplitude * np.exp(-(x * x + y * y) / (2 * p.initial.width ** 2))
            u_prev = u  # starts at rest (first-order start; fine for a demo pulse)
        else:
            self.random_state(np.random.default_rng(p.initial.seed))
            return
        if not self.periodic:  # held outer values: the same at every time level (the buffers rotate,
            u_prev = np.array(u_prev)  # so a resume that refills them must find them equal)
            u_prev[[0, -1], :], u_prev[:, [0, -1]] = u[[0, -1], :], u[:, [0, -1]]
        self._load_state_arrays({"u": u, "u_prev": u_prev})
        self._amp0 = self._amplitude()  # the preset's amplitude: restores keep it

    def _amplitude(self) -> float:
        return max(float(self.xp.max(self.xp.abs(self.u))), float(self.xp.max(self.xp.abs(self.u_prev))))

    def state_arrays(self):
        return {"u": self.u, "u_prev": self.u_prev}

    def _load_state_arrays(self, arrays):
        self.u[...] = self.xp.asarray(np.asarray(arrays["u"]).astype(self.dtype))
        self.u_prev[...] = self.xp.asarray(np.asarray(arrays["u_prev"]).astype(self.dtype))
        self.u_next[...] = self.u_prev  # fixed boundaries: outer points identical in all levels

    def sanity_bounds(self):
        """Bounded growth: the leapfrog scheme (Courant ≤ 1/√2) conserves a discrete energy, so the
        amplitude stays within a modest multiple of the initial state's (100×: focusing of a pulse
        stays far below it, an instability passes it within a few dozen steps). The initial state is
        the preset's (or the random state a test set), not a loaded one: a resumed checkpoint is held
        to the same bound, so a state of 1e30 everywhere is refused rather than taken as the scale."""
        if getattr(self, "_amp0", None) is None:
            self._amp0 = self._amplitude()
        a = 100.0 * self._amp0 + 1e-30
        return {"max": (-a, a), "min": (-a, a)}

    def random_state(self, rng: np.random.Generator):
        shape = self.preset.shape
        u, u_prev = rng.random(shape) - 0.5, rng.random(shape) - 0.5
        if not self.periodic:  # the held outer values must be the same at every time level
            u_prev[[0, -1], :], u_prev[:, [0, -1]] = u[[0, -1], :], u[:, [0, -1]]
        self._load_state_arrays({"u": u, "u_prev": u_prev})
        self._amp0 = self._amplitude()

    # ---- variants ----
    def _apply_selection(self, old, new):
        p = self.preset
        self._c2 = self.dtype.type(p.physics.courant ** 2)
        self._loop = loop_for(new["kernel"], wave2d, p.shape, self.dtype, p.boundaries.kind, self.xp, self.stream)

    # ---- stepping ----
    def _advance(self, n):
        with self.timer.phase("leapfrog", steps=n):
            for _ in range(n):
                if self._loop is not None:
                    self._loop(u=self.u, u_prev=self.u_prev, u_next=self.u_next, c2=self._c2)
                else:
                    fn = reference.leapfrog_periodic if self.periodic else reference.leapfrog_fixed
                    fn(self.xp, self.u, self.u_prev, self.u_next, self._c2)
                self.u_prev, self.u, self.u_next = self.u, self.u_next, self.u_prev
        return n * self.dt

    def timing_extra(self):
        return loop_timing_extra(getattr(self, "_loop", None))

    # ---- outputs ----
    def fields(self):
        return {"u": Grid2D(self.u, spacing=self.preset.grid.dx, label="u", units="", symmetric=True)}

    def device_diagnostics(self):
        xp = self.xp
        return {"max": xp.max(self.u), "min": xp.min(self.u),
                "mean": xp.mean(self.u, dtype=xp.float64)}

    @property
    def updates_per_step(self):
        ny, nx = self.preset.shape
        return float(nx * ny)

    def bytes_per_update(self):
        return 3.0 * self.dtype.itemsize  # read u and u_prev, write u_next (ideal caching)

    # ---- tests and benchmarks ----
    @classmethod
    def equivalence_presets(cls):
        base = {"engine": FAMILY, "description": "equivalence test", "initial": {"kind": "random"}}
        grids = {"periodic": {"nx": 40, "ny": 24}, "fixed": {"nx": 33, "ny": 17}}
        return {
            f"{prec}-{bc}": Wave2DPreset.model_validate(
                {**base, "grid": grids[bc], "physics": {"precision": prec}, "boundaries": {"kind": bc}})
            for prec in ("fp32", "fp64") for bc in ("periodic", "fixed")
        }

    @classmethod
    def bench_spec(cls):
        return BenchSpec(preset="wave2d", cases=cls.bench_cases,
                         grid_axes=("nx", "ny"))  # `nagare bench wave2d --case NXxNY`: any grid size

    @classmethod
    def bench_cases(cls, backend: str = "cupy"):
        sizes = [(512, 512), (2048, 2048), (8192, 8192), (16, 8192)]
        if backend == "numpy":
            sizes = [(128, 128), (512, 512), (16, 1024)]
        return [(f"{nx}x{ny}", [f"grid.nx={nx}", f"grid.ny={ny}"]) for nx, ny in sizes]

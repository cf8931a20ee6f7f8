"""3D diffusion ∂f/∂t = κ∇²f, 7-point stencil, explicit Euler: the foundation's proof engine."""
from __future__ import annotations

import math

import numpy as np

from .. import cuda
from ..benchspec import BenchSpec
from ..contract import Engine
from ..fields import Grid3D
from ..stencil.library import diffusion7
from ..stencil.loops import loop_timing_extra
from ..stencil.variants import loop_for
from . import reference, variants
from .config import Diffusion3DPreset

FAMILY = variants.FAMILY
CUDA_SOURCE = "cuda/diffusion3d/diffusion7.cu"

variants.register()


class Diffusion3D(Engine):
    family = FAMILY
    Preset = Diffusion3DPreset
    equivalence_steps = 64
    constant_dt = True

    # Launch configuration of the `cuda-handwritten` kernel: P2's fixed default. The framework's
    # `cuda` choice uses the same default; `cuda-autotune` tunes it per problem shape.
    block = (128, 1, 1)
    zmarch = 2

    def estimated_bytes(self):
        p = self.preset
        n = p.grid.nx * p.grid.ny * p.grid.nz * np.dtype(p.physics.dtype).itemsize
        return 2 * n + 9 * n  # two buffers + the array reference's temporaries (rolls; 8 measured)

    # ---- state ----
    def _allocate(self):
        p = self.preset
        self.dtype = np.dtype(p.physics.dtype)
        self.periodic = p.boundaries.kind == "periodic"
        self.f = self.xp.zeros(p.shape, dtype=self.dtype)
        self.fn = self.xp.zeros_like(self.f)
        self.dt = p.physics.r * p.grid.dx ** 2 / p.physics.kappa

    def _initialise(self):
        p, xp = self.preset, self.xp
        if p.initial.kind == "sine":
            f = reference.sine_mode(np, p.shape, p.grid.dx, p.initial.mode, self.periodic, p.initial.amplitude)
        elif p.initial.kind == "gaussian":
            z, y, x = np.meshgrid(*(np.linspace(-0.5, 0.5, n) for n in p.shape), indexing="ij")
            f = p.initial.amplitude * np.exp(-(x * x + y * y + z * z) / (2 * p.initial.width ** 2))
        else:
            f = np.random.default_rng(p.initial.seed).random(p.shape)
        self.f[...] = xp.asarray(f.astype(self.dtype))
        self.fn[...] = self.f  # fixed boundaries live in both buffers
        self._range0 = (float(f.min()), float(f.max()))  # the preset's range: restores keep it

    def state_arrays(self):
        return {"f": self.f}

    def _load_state_arrays(self, arrays):
        self.f[...] = self.xp.asarray(arrays["f"].astype(self.dtype))
        self.fn[...] = self.f

    def sanity_bounds(self):
        """The explicit scheme (r ≤ 1/6) obeys the maximum principle: values stay within the range
        of the state it started from (with 5 % of that range for round-off). That is the preset's
        initial state (or the random state a test set), not a loaded one: a resumed checkpoint is held
        to the same range, so a state of 1e30 everywhere is refused rather than taken as the range."""
        if getattr(self, "_range0", None) is None:  # an initial state not loaded through _load_state_arrays
            self._range0 = (float(self.xp.min(self.f)), float(self.xp.max(self.f)))
        lo, hi = self._range0
        pad = 0.05 * (hi - lo) + 1e-30
        return {"min": (lo - pad, math.inf), "max": (-math.inf, hi + pad)}

    def random_state(self, rng: np.random.Generator):
        self._load_state_arrays({"f": rng.random(self.preset.shape)})
        self._range0 = (float(self.xp.min(self.f)), float(self.xp.max(self.f)))

    # ---- variants ----
    def _apply_selection(self, old, new):
        self._r = self.dtype.type(self.preset.physics.r)
        kernel = new["kernel"]
        self._loop = loop_for(kernel, diffusion7, self.preset.shape, self.dtype, self.preset.boundaries.kind,
                              self.xp, self.stream)
        if kernel == "cuda-handwritten":
            name = f"diffusion7<{cuda.ctype(self.dtype)}, {'true' if self.periodic else 'false'}>"
            self._kernel = cuda.kernel(CUDA_SOURCE, name, (name,))
            nz, ny, nx = self.preset.shape
            bx, by, _ = self.block
            self._grid = ((nx + bx - 1) // bx, (ny + by - 1) // by, (nz + self.zmarch - 1) // self.zmarch)
            self._args_tail = (np.int32(nx), np.int32(ny), np.int32(nz), self._r, np.int32(self.zmarch))

    # ---- stepping ----
    def _advance(self, n):
        kernel = self.selection["kernel"]
        if self._loop is not None:
            update = self._one_step_framework
        elif kernel == "cuda-handwritten":
            update = self._one_step_cuda
        else:
            update = self._one_step_array
        with self.timer.phase("diffuse", steps=n):
            for _ in range(n):
                update()
                self.f, self.fn = self.fn, self.f
        return n * self.dt

    def _one_step_array(self):
        fn = reference.diffuse_periodic if self.periodic else reference.diffuse_fixed
        fn(self.xp, self.f, self.fn, self._r)

    def _one_step_cuda(self):
        self._kernel(self._grid, self.block, (self.f, self.fn) + self._args_tail)

    def _one_step_framework(self):
        self._loop(f=self.f, fn=self.fn, r=self._r)

    def timing_extra(self):
        return loop_timing_extra(getattr(self, "_loop", None))

    # ---- outputs ----
    def fields(self):
        return {"f": Grid3D(self.f, spacing=self.preset.grid.dx, label="f", units="")}

    def device_diagnostics(self):
        xp = self.xp
        total = xp.sum(self.f, dtype=xp.float64) * self.preset.grid.dx ** 3
        return {"integral": total, "max": xp.max(self.f), "min": xp.min(self.f)}

    @property
    def updates_per_step(self):
        nz, ny, nx = self.preset.shape
        return float(nx * ny * nz)

    def bytes_per_update(self):
        return 2.0 * self.dtype.itemsize  # each point read once and written once (ideal caching)

    # ---- tests and benchmarks ----
    @classmethod
    def equivalence_presets(cls):
        base = {"engine": FAMILY, "description": "equivalence test", "initial": {"kind": "random"}}
        # fixed: nx a multiple of 4 so that the cuda-vec choice runs there too (update range 34: partial blocks)
        grids = {"periodic": {"nx": 40, "ny": 24, "nz": 20}, "fixed": {"nx": 36, "ny": 17, "nz": 12}}
        return {
            f"{prec}-{bc}": Diffusion3DPreset.model_validate(
                {**base, "grid": grids[bc], "physics": {"precision": prec}, "boundaries": {"kind": bc}})
            for prec in ("fp32", "fp64") for bc in ("periodic", "fixed")
        }

    @classmethod
    def bench_spec(cls):
        return BenchSpec(preset="diffusion3d", cases=cls.bench_cases,
                         grid_axes=("nx", "ny", "nz"))  # `nagare bench diffusion3d --case NXxNYxNZ`: any grid size

    @classmethod
    def bench_cases(cls, backend: str = "cupy"):
        sizes = [(64, 64, 64), (256, 256, 256), (512, 512, 512), (8, 512, 512)]
        if backend == "numpy":
            sizes = [(32, 32, 32), (64, 64, 64), (128, 128, 128), (8, 128, 128)]
        return [(f"{nx}x{ny}x{nz}", [f"grid.nx={nx}", f"grid.ny={ny}", f"grid.nz={nz}"]) for nx, ny, nz in sizes]

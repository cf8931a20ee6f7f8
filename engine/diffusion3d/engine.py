"""3D diffusion ∂f/∂t = κ∇²f, 7-point stencil, explicit Euler: the foundation's proof engine."""
from __future__ import annotations

import numpy as np

from .. import registry
from ..benchspec import BenchSpec
from ..contract import Engine
from ..fields import Grid3D
from ..stencil.library import diffusion7
from ..stencil.loops import loop_timing_extra
from ..stencil.variants import loop_for, register_stencil_choices
from . import reference
from .config import Diffusion3DPreset

FAMILY = "diffusion3d"
CUDA_SOURCE = "cuda/diffusion3d/diffusion7.cu"

registry.register_axis(FAMILY, "kernel", default={"numpy": "array", "cupy": "cuda"},
                       doc="array: whole-array expression (the reference, runs on either backend); "
                           "stencil-host / cuda / cuda-autotune: the 7-point update written once with the "
                           "stencil framework (engine/stencil) and run by P2's host, device and auto-tuning "
                           "device loop engines; cuda-vec: the framework's vec kernel shape (vector loads, "
                           "warp shuffles) at a fixed launch; cuda-handwritten: the hand-written CUDA kernel")
registry.register_choice(FAMILY, "kernel", "array", backends=("numpy", "cupy"),
                         doc="xp-generic array expression", reference={"kernel": "array"}, rtol=1e-12)
# The framework's host evaluation performs exactly the reference's operations in the same order:
# bit-identical (rtol 0). Generated CUDA is compiled without FMA contraction and is expected to
# be bit-identical too (tests/gpu checks that separately); the registry keeps the family's CUDA
# tolerance.
register_stencil_choices(FAMILY, {"kernel": "array"}, host_rtol=0.0, device_rtol=1e-5, vec_stencil=diffusion7)
registry.register_choice(FAMILY, "kernel", "cuda-handwritten", backends=("cupy",),
                         doc="hand-written CUDA kernel (shaders/cuda/diffusion3d), block (128,1,1), z-march 2",
                         reference={"kernel": "array"}, rtol=1e-5)


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
        return 2 * n + 8 * n  # two buffers + the array reference's temporaries (rolls)

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

    def state_arrays(self):
        return {"f": self.f}

    def _load_state_arrays(self, arrays):
        self.f[...] = self.xp.asarray(arrays["f"].astype(self.dtype))
        self.fn[...] = self.f

    def random_state(self, rng: np.random.Generator):
        self._load_state_arrays({"f": rng.random(self.preset.shape)})

    # ---- variants ----
    def _apply_selection(self, old, new):
        self._r = self.dtype.type(self.preset.physics.r)
        kernel = new["kernel"]
        self._loop = loop_for(kernel, diffusion7, self.preset.shape, self.dtype, self.preset.boundaries.kind,
                              self.xp, self.stream)
        if kernel == "cuda-handwritten":
            from .. import cuda

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

"""amr3d: D3Q27 lattice Boltzmann on leaves of m³ node-centred points (P0), with P0's kernel
ladder as live variants. This first stage runs one level of leaves in a periodic box (P0's
benchmark box); the octree with level coupling builds on it (docs/amr3d.md).

The state is always checkpointed in the canonical leaf storage f[27, leaf, m, m, m]; a rung that
needs another storage (mother leaves, the uniform lattice) converts on selection, losslessly.
"""
from __future__ import annotations

import math

import numpy as np

from ..benchspec import BenchSpec
from ..contract import Engine
from ..fields import Boxes, Grid3D
from . import d3q27, ladder, leafgrid, storage, variants
from .config import AMR3DPreset

FAMILY = variants.FAMILY
# P0 §4: flops and bytes per point and step of the D3Q27 BGK update (the improved roofline).
P0_FLOPS, P0_BYTES = 377, 220

# kernels axis: P0's ladder (each rung adds to the previous), then what a 2026 GPU rewards.
RUNG_STORAGE = {"reference": "leaves", "naive": "leaves", "split": "leaves", "mother-leaf": "mothers",
                "templates": "mothers", "sorted": "mothers", "uniform": "uniform"}
RUNG_KERNELS = {"naive": "naive", "split": "split", "mother-leaf": "split", "templates": "templates",
                "sorted": "sorted", "uniform": "uniform"}


variants.register()


class AMR3D(Engine):
    family = FAMILY
    Preset = AMR3DPreset
    equivalence_steps = 24
    constant_dt = True

    def estimated_bytes(self):
        p = self.preset
        item = np.dtype(p.physics.dtype).itemsize
        points = p.nleaf * p.grid.m**3
        work = 27 * points * item * 2  # two buffers
        if not self.backend.is_gpu:
            work += 27 * points * 8 + 27 * points * item * 3  # gather table + the reference's temporaries
        return work

    # ---- state ------------------------------------------------------------------------------
    def _allocate(self):
        p = self.preset
        self.dtype = np.dtype(p.physics.dtype)
        self.m = p.grid.m
        self.leaf_shape = tuple(p.grid.leaves)
        self.dt = 1.0
        self.omega = 1.0 / p.physics.tau
        self.accel = tuple(float(a) for a in p.physics.force)
        self.storage = "leaves"
        self.f = self.xp.zeros((d3q27.Q, p.nleaf, self.m, self.m, self.m), self.dtype)
        self.fn = self.xp.empty_like(self.f)
        self._sources = None
        self._stepper = None

    def _initialise(self):
        self._set_leaves(initial_state(self.preset))

    def _leaves(self):
        """f in the canonical leaf storage (a view when already there)."""
        xp, m = self.xp, self.m
        if self.storage == "leaves":
            return self.f
        if self.storage == "mothers":
            return storage.leaves_from_mothers(xp, self.f, m, self.leaf_shape)
        return storage.leaves_from_uniform(xp, self.f, m, self.leaf_shape)

    def _set_leaves(self, leaves) -> None:
        xp, m = self.xp, self.m
        leaves = xp.asarray(leaves, dtype=self.dtype)
        if self.storage == "mothers":
            f = storage.mothers_from_leaves(xp, leaves, m, self.leaf_shape)
        elif self.storage == "uniform":
            f = storage.uniform_from_leaves(xp, leaves, m, self.leaf_shape)
        else:
            f = leaves
        self.f = xp.ascontiguousarray(f).copy()
        self.fn = xp.empty_like(self.f)

    def state_arrays(self):
        return {"f": self._leaves()}

    def _load_state_arrays(self, arrays):
        self._set_leaves(arrays["f"])

    def random_state(self, rng: np.random.Generator):
        nz, ny, nx = self.preset.shape
        rho = 1 + 0.02 * rng.standard_normal((nz, ny, nx))
        u = 0.04 * rng.standard_normal((3, nz, ny, nx))
        feq = leafgrid.equilibrium(np, rho, *u)
        u0 = feq * (1 + 0.01 * rng.standard_normal(feq.shape))
        self._set_leaves(storage.leaves_from_uniform(np, u0, self.m, self.leaf_shape))

    # ---- variants ---------------------------------------------------------------------------
    def _apply_selection(self, old, new):
        rung = new["kernels"]
        want = RUNG_STORAGE[rung]
        if want != self.storage:
            leaves = self._leaves()
            self.storage = want
            self._set_leaves(leaves)
        self._stepper = None
        self._sources = None
        if rung == "reference":
            nbr = ladder.periodic_neighbours(self.leaf_shape)
            self._sources = self.xp.asarray(leafgrid.gather_sources(nbr, self.m))
        else:
            from .gpu import LadderStepper

            m, shape = self.m, self.leaf_shape
            if want == "mothers":
                m, shape = 2 * self.m - 1, storage.mother_shape(self.leaf_shape)
            self._stepper = LadderStepper(self.xp, self.stream, RUNG_KERNELS[rung], m, shape, self.omega, self.accel,
                                          self.timer, uniform_shape=self.preset.shape)

    def kernel_specs(self, selection=None):
        """The ladder module a selection compiles (leaves of m³, or mother leaves of (2m−1)³)."""
        sel = selection or self.selection
        if not self.backend.is_gpu or sel["kernels"] == "reference":
            return []
        from .gpu import kernel_spec

        return [kernel_spec(2 * self.m - 1 if RUNG_STORAGE[sel["kernels"]] == "mothers" else self.m)]

    # ---- stepping ---------------------------------------------------------------------------
    def _advance(self, n):
        if self._stepper is None:
            with self.timer.phase("step", steps=n):
                for _ in range(n):
                    self.f = leafgrid.step(self.xp, self.f, self._sources, self.omega, self.accel)
            return n * self.dt
        bufs = [self.f, self.fn]
        self._stepper.advance(bufs, n, graph=self.selection["graph"] == "on")
        self.f, self.fn = bufs
        return n * self.dt

    # ---- outputs ----------------------------------------------------------------------------
    def _uniform(self):
        if self.storage == "uniform":
            return self.f
        m, shape = (self.m, self.leaf_shape) if self.storage == "leaves" else \
            (2 * self.m - 1, storage.mother_shape(self.leaf_shape))
        return storage.uniform_from_leaves(self.xp, self.f, m, shape)

    def field_names(self):
        return ["speed", "rho", "ux", "uy", "uz", "leaves"]

    def field(self, name):
        if name == "leaves":
            return self._boxes()
        if name not in ("speed", "rho", "ux", "uy", "uz"):
            raise KeyError(name)
        rho, ux, uy, uz = leafgrid.macroscopic(self.xp, self._uniform())
        data = {"rho": rho, "ux": ux, "uy": uy, "uz": uz}.get(name)
        if name == "speed":
            data = self.xp.sqrt(ux * ux + uy * uy + uz * uz)
        labels = {"speed": "speed |u|", "rho": "density ρ", "ux": "ux", "uy": "uy", "uz": "uz"}
        return Grid3D(data, label=labels[name], units="lattice", symmetric=name in ("ux", "uy", "uz"))

    def fields(self):
        rho, ux, uy, uz = leafgrid.macroscopic(self.xp, self._uniform())
        g = {"speed": Grid3D(self.xp.sqrt(ux * ux + uy * uy + uz * uz), label="speed |u|", units="lattice"),
             "rho": Grid3D(rho, label="density ρ", units="lattice")}
        for name, d in (("ux", ux), ("uy", uy), ("uz", uz)):
            g[name] = Grid3D(d, label=name, units="lattice", symmetric=True)
        g["leaves"] = self._boxes()
        return g

    def _boxes(self):
        lx, ly, lz = self.leaf_shape
        s = self.m - 1
        z, y, x = np.meshgrid(np.arange(lz), np.arange(ly), np.arange(lx), indexing="ij")
        lo = np.stack([x.ravel() * s, y.ravel() * s, z.ravel() * s], axis=1).astype(np.float32)
        xp = self.xp
        return Boxes(xp.asarray(lo), xp.asarray(lo + s), xp.zeros(len(lo), np.int32), label="leaves (level)")

    def device_diagnostics(self):
        xp = self.xp
        rho, ux, uy, uz = leafgrid.macroscopic(xp, self._uniform())
        return {"mass": xp.sum(rho, dtype=xp.float64), "max_speed": xp.sqrt(xp.max(ux * ux + uy * uy + uz * uz)),
                "min_density": xp.min(rho)}

    # ---- throughput -------------------------------------------------------------------------
    @property
    def updates_per_step(self):
        """Stored points updated per step (P0 counts every stored point, shared faces included)."""
        p = self.preset
        if self.selection["kernels"] == "uniform":
            nz, ny, nx = p.shape
            return float(nx * ny * nz)
        if RUNG_STORAGE[self.selection["kernels"]] == "mothers":
            return float(p.nleaf // 8 * (2 * self.m - 1) ** 3)
        return float(p.nleaf * self.m**3)

    def bytes_per_update(self):
        """P0's B = 220 bytes in fp32 (27 reads + 27 writes of 4 bytes, plus 4 of table/flags)."""
        return 2.0 * d3q27.Q * self.dtype.itemsize + 4.0

    def timing_extra(self):
        """P0's figures: GFLOPS at F = 377 flop per point and % of the improved roofline
        P = F / (F/P_peak + B/B_peak) with the measured copy bandwidth and the fp32 peak."""
        out = {"flops_per_point": P0_FLOPS}
        peak = fp32_peak_flops(self.backend)
        if peak:
            bw = self.roofline_bytes_per_s()
            out["fp32_peak_gflops"] = peak / 1e9
            out["improved_roofline_gflops"] = P0_FLOPS / (P0_FLOPS / peak + P0_BYTES / bw) / 1e9 if bw else None
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
        }

    @classmethod
    def equivalence_companions(cls, axis, choice):
        """The graph is checked around the most involved rung (26 class streams captured)."""
        return {"kernels": "templates"} if axis == "graph" and choice == "on" else {}

    @classmethod
    def bench_spec(cls):
        return BenchSpec(preset="amr3d-bench", cases=cls.bench_cases, selections=cls.bench_selections, batch=16)

    @classmethod
    def bench_cases(cls, backend: str = "cupy"):
        """P0's box (512 leaves of 17³ = 64 mother leaves of 33³) and a GPU-filling box (16×)."""
        if backend == "numpy":
            return [("p0-box-8-leaves", ["grid.leaves=[2, 2, 2]"])]
        return [("p0-box-512-leaves", ["grid.leaves=[8, 8, 8]"]),
                ("fill-8192-leaves", ["grid.leaves=[16, 16, 32]"])]

    @classmethod
    def bench_selections(cls, backend: str = "cupy"):
        if backend == "numpy":
            return [("reference", {"kernels": "reference"})]
        rungs = ("naive", "split", "mother-leaf", "templates", "sorted", "uniform")
        return ([(r, {"kernels": r}) for r in rungs]
                + [(f"{r} graph", {"kernels": r, "graph": "on"}) for r in ("templates", "sorted", "uniform")])


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


def initial_state(p: AMR3DPreset) -> np.ndarray:
    """The preset's initial condition as equilibrium populations in leaf storage (host NumPy)."""
    nz, ny, nx = p.shape
    z, y, x = np.meshgrid(*(np.arange(n, dtype=np.float64) for n in (nz, ny, nx)), indexing="ij")
    kx, ky, kz = 2 * math.pi / nx, 2 * math.pi / ny, 2 * math.pi / nz
    u0 = p.initial.u0
    rho = np.ones((nz, ny, nx))
    ux, uy, uz = np.zeros_like(rho), np.zeros_like(rho), np.zeros_like(rho)
    kind = p.initial.kind
    if kind == "taylor-green":
        ux = u0 * np.sin(kx * x) * np.cos(ky * y) * np.cos(kz * z)
        uy = -u0 * np.cos(kx * x) * np.sin(ky * y) * np.cos(kz * z)
        # the pressure of the 3D Taylor–Green vortex, as a density through p = c_s² ρ
        rho = 1 + 3 * (u0 * u0 / 16) * (np.cos(2 * kx * x) + np.cos(2 * ky * y)) * (np.cos(2 * kz * z) + 2)
    elif kind == "shear-wave":
        ux = u0 * np.sin(kz * z)
    elif kind == "random":
        rng = np.random.default_rng(p.initial.seed)
        rho = 1 + 0.01 * rng.standard_normal(rho.shape)
        ux, uy, uz = (u0 * 0.5 * rng.standard_normal(rho.shape) for _ in range(3))
    feq = leafgrid.equilibrium(np, rho, ux, uy, uz)
    return storage.leaves_from_uniform(np, feq, p.grid.m, tuple(p.grid.leaves)).astype(p.physics.dtype)

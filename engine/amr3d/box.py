"""P0's benchmark box: one level of periodic leaves, where every rung of the ladder runs.

The state lives in the storage its rung reads (storage.py: leaves, mother leaves, apart, the
uniform lattice; fp16 storage on the rungs that have it), converted losslessly when the selection
changes. The reference rung steps leaves of m³ with array code (leafgrid.py); the others launch the
CUDA ladder (gpu.LadderStepper) on the engine's buffer pair.
"""
from __future__ import annotations

import numpy as np

from . import cases, d3q27, ladder, leafgrid, storage
from .gpu import LadderStepper, kernel_spec
from .sampled import MOMENTS
from .shapes import Shape
from .variants import RUNG_KERNELS, RUNG_STORAGE


class Box(Shape):
    @staticmethod
    def fits(preset) -> bool:
        return preset.is_box

    @staticmethod
    def extra_bytes(p, backend, leaves: int) -> int:
        return 0

    def __init__(self, e):
        super().__init__(e)
        p = e.preset
        self.leaf_shape = tuple(p.grid.leaves)
        self.nleaf = p.nleaf
        self.storage = "leaves"
        self.half = None  # fp16 storage: "buffers" (the kernels' fp16 arrays), "rounded" (the reference)
        self.stepper = None  # the rung's LadderStepper; None: the reference's array step
        self.sources = None
        self.csm_copies = None
        self.f = self.xp.zeros((d3q27.Q, self.nleaf, self.m, self.m, self.m), self.dtype)
        self.fn = self.xp.empty_like(self.f)

    def _stored(self) -> tuple[int, tuple]:
        """(points per axis, arrangement) of the stored leaves: leaves of m³, or mother leaves."""
        if self.storage == "mothers":
            return storage.mother_size(self.m), storage.mother_shape(self.leaf_shape)
        return self.m, self.leaf_shape

    # ---- the state --------------------------------------------------------------------------
    def initialise(self) -> None:
        self.set_leaves(cases.initial_state(self.e.preset))

    def random_state(self, rng: np.random.Generator) -> None:
        self.set_leaves(cases.random_box_state(self.e.preset, rng))

    def leaves(self):
        xp, m = self.xp, self.m
        f = storage.from_fp16(xp, self.f) if self.half == "buffers" else self.f
        if self.storage == "leaves":
            return f
        if self.storage == "mothers":
            return storage.leaves_from_mothers(xp, f, m, self.leaf_shape)
        if self.storage == "apart":
            return storage.leaves_from_apart(xp, f, m, self.nleaf)
        return storage.leaves_from_uniform(xp, f, m, self.leaf_shape)

    def set_leaves(self, leaves) -> None:
        xp, m = self.xp, self.m
        leaves = xp.asarray(leaves, dtype=self.dtype)
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

    # ---- variants and stepping ----------------------------------------------------------------
    def select(self, selection: dict) -> None:
        e, xp = self.e, self.xp
        rung = selection["kernels"]
        want = RUNG_STORAGE[rung]
        half = None
        if selection.get("storage", "native") == "fp16":
            half = "rounded" if rung == "reference" else "buffers"
        if (want, half) != (self.storage, self.half):
            leaves = self.leaves()
            self.storage, self.half = want, half
            self.set_leaves(leaves)
        self.stepper = None
        self.sources = None
        if rung == "reference":
            nbr = ladder.periodic_neighbours(self.leaf_shape)
            self.sources = xp.asarray(leafgrid.gather_sources(nbr, self.m))
            if e.collision.csm:  # the shared nodes' copies take their owner's coefficient (collision.py)
                self.csm_copies = tuple(xp.asarray(a) for a in ladder.shared_copies(nbr, None, self.m))
        else:
            m, shape = self._stored()
            self.stepper = LadderStepper(xp, e.stream, RUNG_KERNELS[rung], m, shape, e.omega, e.accel, e.timer,
                                         uniform_shape=e.preset.shape, model=e.collision, fp16=half is not None)

    def advance(self, n: int) -> None:
        e = self.e
        if self.stepper is None:
            with e.timer.phase("step", steps=n):
                for _ in range(n):
                    self.f = leafgrid.step(self.xp, self.f, self.sources, e.omega, e.accel, model=e.collision,
                                           copies=self.csm_copies)
                    if self.half == "rounded":  # what fp16 storage keeps of the step (the kernels' store_pop)
                        self.f = storage.round_fp16(self.xp, self.f)
            return
        bufs = [self.f, self.fn]
        self.stepper.advance(bufs, n, graph=e.selection["graph"] == "on")
        self.f, self.fn = bufs

    def kernel_specs(self, selection: dict) -> list:
        mothers = RUNG_STORAGE[selection["kernels"]] == "mothers"
        return [kernel_spec(storage.mother_size(self.m) if mothers else self.m, self.e.collision)]

    # ---- outputs ----------------------------------------------------------------------------
    def uniform(self):
        """The state on the uniform lattice the leaves tile (each node once)."""
        if self.storage == "uniform":
            return storage.from_fp16(self.xp, self.f) if self.half == "buffers" else self.f
        if self.half == "buffers" or self.storage == "apart":  # through the leaves (the conversions are there)
            return storage.uniform_from_leaves(self.xp, self.leaves(), self.m, self.leaf_shape)
        m, shape = self._stored()
        return storage.uniform_from_leaves(self.xp, self.f, m, shape)

    def macroscopic(self, names=MOMENTS):
        m = dict(zip(MOMENTS, leafgrid.macroscopic(self.xp, self.uniform())))
        return tuple(m[n] for n in names)

    def sample_kw(self) -> dict:
        return {"spacing": 1.0}

    def mass(self, rho):
        return self.xp.sum(rho, dtype=self.xp.float64)

    def min_population(self):
        xp = self.xp
        if self.half == "buffers":  # the minimum per direction, then + w (load_pop's order)
            return xp.min(storage.from_fp16(xp, xp.min(self.f.reshape(d3q27.Q, -1), axis=1).reshape(-1, 1)))
        return xp.min(self.f)

    # ---- throughput -------------------------------------------------------------------------
    def updates_per_step(self) -> float:
        rung = self.e.selection["kernels"]
        if rung == "uniform":
            nz, ny, nx = self.e.preset.shape
            return float(nx * ny * nz)
        if RUNG_STORAGE[rung] == "mothers":
            return float(self.nleaf // 8 * storage.mother_size(self.m) ** 3)
        return float(self.nleaf * self.m**3)

    def population_bytes(self) -> int:
        """fp16 storage on the kernels moves 2 bytes a population; the reference rung keeps its
        rounded state in the engine's dtype."""
        return 2 if self.half == "buffers" else self.dtype.itemsize

    def timing_figures(self) -> dict:
        """The points P0's inner kernel updates (indices 1..m−2 of a leaf) on a leaf storage."""
        if self.storage == "uniform":
            return {}
        m, _ = self._stored()
        n = self.nleaf // 8 if self.storage == "mothers" else self.nleaf
        return {"inner_points": float(n * (m - 2) ** 3)}

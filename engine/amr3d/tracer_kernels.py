"""The tracer step in two CUDA launches (shaders/cuda/amr3d/tracers.cu): :meth:`Tracers.begin` and
:meth:`Tracers.finish` on the GPU when the populations come from a TreeStepper's per-level buffers.

The array code of tracers.py is the reference and stays the path of every other case (NumPy, the
reference stepper): on CuPy it issues ~140–180 small launches a step, whose host issue time is the
whole cost of the tracers phase. The kernels do the same operations in the same order, compiled
with --fmad=false (the array code rounds each product on its own), so both paths give the same
bits; the state (positions, age, alive, trail, step, cursor) is the array code's, in place, so
checkpoints and step(N) = N × step(1) are unchanged.

Per coarse step: begin (k₁, and a snapshot of the step and cursor counters) and finish (k₂, the
move, parking, ages, release, trail, counters) — nothing else is launched or copied once the
level-buffer address tables of the stepper's two buffer parities are cached.
"""
from __future__ import annotations

import logging
from functools import cache
from typing import NamedTuple

import numpy as np

from ..cuda import KernelSpec, template
from .d3q27 import PAIR, PAIR_C, PAIR_OPP
from .kernel_names import TRACER_BEGIN, TRACER_FINISH

log = logging.getLogger("nagare")

SOURCE = "cuda/amr3d/tracers.cu"
MAX_LEVELS = 16  # the kernels' level search is bounded by it; a deeper tree takes the array code
BLOCK = 128
OPTIONS = ("--fmad=false",)  # no FMA contraction: the array code's roundings (see tracers.cu)


class LevelBuffers(NamedTuple):
    """What the kernels read the populations from (TreeStepper.level_buffers): each level's current
    buffer (Q, n_l, m, m, m) in the stepper's level order, the canonical point id of each level's
    first point (a device int64 array), and the points of all levels together. On mother leaves
    (mothers.py) also ``planes``, each level's stored points (device int64), and ``map``, the
    storage index within its level's buffer of every canonical point id (device int64)."""

    buffers: tuple
    first: object
    points: int
    planes: object = None
    map: object = None


def prelude() -> str:
    """The 13 opposite pairs of d3q27.py (PAIR, PAIR_OPP, PAIR_C) and the level bound as #define
    lines: the tables stay in one place, the Python module."""
    def ints(v):
        return "{" + ",".join(str(int(x)) for x in v) + "}"

    return (f"#define AMR3D_TRACER_PAIR {ints(PAIR)}\n#define AMR3D_TRACER_PAIR_OPP {ints(PAIR_OPP)}\n"
            f"#define AMR3D_TRACER_PAIR_CX {ints(PAIR_C[:, 0])}\n#define AMR3D_TRACER_PAIR_CY {ints(PAIR_C[:, 1])}\n"
            f"#define AMR3D_TRACER_PAIR_CZ {ints(PAIR_C[:, 2])}\n#define AMR3D_TRACER_MAX_LEVELS {MAX_LEVELS}\n")


@cache
def kernel_spec(pos_dtype, storage_dtype) -> KernelSpec:
    """The begin and finish kernels for positions of ``pos_dtype`` and buffers of ``storage_dtype``
    (float32 / float64 each) as one NVRTC compilation."""
    p, s = np.dtype(pos_dtype), np.dtype(storage_dtype)
    return KernelSpec(SOURCE, (template(TRACER_BEGIN, p, s), template(TRACER_FINISH, p, s)),
                      OPTIONS, prelude=prelude())


def _address(a) -> int:
    """The device address of an array's first element (CuPy; the CPU emulation of the tests hands
    NumPy arrays, whose address is their host one)."""
    data = a.data
    return int(data.ptr) if hasattr(data, "ptr") else int(a.ctypes.data)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class FusedStep:
    """The kernels' side of one :class:`~.tracers.Tracers`: k₁ between begin and finish, the counter
    snapshot, the level-address tables (one per set of buffer addresses: a level's current buffer
    alternates between the two of its pair, so a run sees two, cached after the first two steps)."""

    def __init__(self, xp):
        self.xp = xp
        self._k1 = None
        self._snap = xp.zeros(2, np.int64)
        self._tables: dict = {}
        self._warned = False

    def supports(self, tracers, levels: LevelBuffers) -> bool:
        dtypes = {np.dtype(b.dtype) for b in levels.buffers}
        ok = (tracers.dtype in _FLOATS and len(dtypes) == 1 and dtypes <= set(_FLOATS)
              and 1 <= len(levels.buffers) <= MAX_LEVELS)
        if not ok and not self._warned:
            self._warned = True
            log.warning("nagare: amr3d tracers take the array code (%d levels, buffers %s, positions %s: the fused "
                        "kernels handle up to %d levels of float32/float64)", len(levels.buffers),
                        sorted(str(d) for d in dtypes), tracers.dtype, MAX_LEVELS)
        return ok

    def _table(self, levels: LevelBuffers):
        key = tuple(_address(b) for b in levels.buffers)
        table = self._tables.get(key)
        if table is None:
            # (regrids, restores; a reused address is harmless: a table holds exactly its key)
            if len(self._tables) >= 8:
                self._tables.clear()
            table = self._tables[key] = self.xp.asarray(np.array(key, np.uint64))
        return table

    def _common(self, tr, levels: LevelBuffers) -> tuple:
        """The arguments after the tracer arrays: level buffers, then the lookup."""
        lk, t = tr.lookup, tr.dtype.type
        periodic = sum(1 << a for a in range(3) if lk.periodic[a])
        mapped = levels.map is not None
        return (self._table(levels), levels.first, np.int32(len(levels.buffers)), np.int64(levels.points),
                levels.planes if mapped else levels.first, levels.map if mapped else levels.first, np.int32(mapped),
                lk.leaf_of_cell, lk.origin, lk.inv_spacing, t(lk.cell), *(np.int32(c) for c in lk.cells),
                np.int32(lk.m), *(t(d) for d in lk.domain), np.int32(periodic))

    @staticmethod
    def _grid(n: int):
        return (max(1, -(-n // BLOCK)),), (BLOCK,)

    def _kernel(self, name: str, tr, levels: LevelBuffers):
        spec = kernel_spec(tr.dtype, levels.buffers[0].dtype)
        return spec.function(template(name, tr.dtype, np.dtype(levels.buffers[0].dtype)))

    def begin(self, tr, levels: LevelBuffers) -> None:
        n = tr.pos.shape[0]
        if self._k1 is None or self._k1.shape[0] != n or self._k1.dtype != tr.dtype:
            self._k1 = self.xp.empty((n, 3), tr.dtype)
        grid, block = self._grid(n)
        self._kernel(TRACER_BEGIN, tr, levels)(
            grid, block, (tr.pos, tr.alive, np.int32(n), *self._common(tr, levels), tr.step, tr.cursor, self._snap,
                          self._k1))

    def finish(self, tr, levels: LevelBuffers, dt: float) -> None:
        n = tr.pos.shape[0]
        if self._k1 is None or self._k1.shape[0] != n:
            raise RuntimeError("Tracers.finish: the tracers changed size since begin")
        t = tr.dtype.type
        dt_ = t(dt)
        solid = tr.solid if tr.solid is not None else tr.lookup.inv_spacing  # (never read without a solid)
        grid, block = self._grid(n)
        self._kernel(TRACER_FINISH, tr, levels)(
            grid, block, (tr.pos, tr.alive, tr.age, tr.trail, np.int32(n), *self._common(tr, levels), solid,
                          np.int32(tr.solid is not None), self._k1, self._snap, tr.step, tr.cursor, tr.seeds,
                          np.int32(tr.n_seeds), np.int32(tr.capacity), np.int32(tr.release_every),
                          np.int32(tr.trail_every), np.int32(tr.trail_length), dt_, dt_ * t(0.5), np.float64(dt)))

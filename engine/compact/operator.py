"""One compact derivative operator per (scheme half, boundary closure, direction), holding the
factorised matrix (docs/compact.md): ``op(f, out)`` writes ∂f/∂(axis) of a (ny, nx) array.

The work is split into the phases the timing HUD shows: ``rhs`` (the explicit side, stencil
framework), ``solve`` (the tridiagonal systems, a ``solver`` choice, through lines.LineSolver) and
``transpose`` (only for y-derivatives under ``y-direction = transpose``, or a solver that needs
contiguous systems).
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from . import schemes, tridiag
from .lines import LineSolver
from .rhs import RightHandSide


class Derivative:
    def __init__(self, *, shape, axis: str, h: float, boundary: str, delta: float, dtype, selection: dict,
                 backend, stream=None, phase=None):
        self.shape, self.axis, self.h = tuple(shape), axis, h
        self.boundary, self.delta = boundary, delta
        self.dtype = np.dtype(dtype)
        self.xp = backend.xp
        self.phase = phase or (lambda name: nullcontext())
        ny, nx = self.shape
        self.n = nx if axis == "x" else ny
        self.fac = tridiag.factorise(*schemes.bands(self.n, boundary, delta), boundary == "periodic")
        # one field is a stack of one variable
        self.solver = LineSolver(self.fac, shape=self.shape, axis=axis, dtype=self.dtype, selection=selection,
                                 backend=backend, stream=stream, phase=self.phase)
        # kernel = fused (GPU, a fusing solver): the right-hand side is computed in the solve's launch
        self.fused = selection["kernel"] == "fused"
        self.rhs = None if self.fused else RightHandSide(selection["kernel"], self.shape, axis, h, boundary, delta,
                                                         self.dtype, self.xp, stream)
        self.work = None if self.fused else self.xp.empty(self.shape, dtype=self.dtype)

    @property
    def transpose(self) -> bool:
        return self.solver.transpose

    def solver_stats(self) -> dict | None:
        """The last solve's statistics (CGS / Bi-CGSTAB: P4's iteration counts), or None."""
        return self.solver.stats()

    def estimated_bytes(self) -> int:
        arrays = (1 if self.transpose else 0) + (0 if self.fused else 1)  # transposed copy, right-hand side
        return arrays * int(np.prod(self.shape)) * self.dtype.itemsize

    def __call__(self, f, out) -> None:
        if self.fused:  # out = ∂f in one launch per line batch
            self.solver.derivative(f[None], out[None], self.h, self.delta)
            return
        with self.phase("rhs"):
            self.rhs(f, self.work)
        self.solver(self.work[None], out[None])

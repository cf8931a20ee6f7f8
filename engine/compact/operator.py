"""One compact derivative operator per (scheme half, boundary closure, direction), holding the
factorised matrix (docs/compact.md): ``op(f, out)`` writes ∂f/∂(axis) of a (ny, nx) array.

The work is split into the phases the timing HUD shows: ``rhs`` (the explicit side, stencil
framework), ``solve`` (the tridiagonal systems, a ``solver`` choice) and ``transpose`` (only for
y-derivatives under ``y-direction = transpose``, or a solver that needs contiguous systems).
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from . import iterative, schemes, tridiag
from .rhs import RightHandSide


def _lines_along(a, axis: str):
    return a if axis == "x" else a.T


class Derivative:
    def __init__(self, *, shape, axis: str, h: float, boundary: str, delta: float, dtype, selection: dict,
                 backend, stream=None, phase=None):
        self.shape, self.axis, self.h = tuple(shape), axis, h
        self.boundary, self.delta = boundary, delta
        self.dtype = np.dtype(dtype)
        self.xp = backend.xp
        self.gpu = backend.is_gpu
        self.phase = phase or (lambda name: nullcontext())
        ny, nx = self.shape
        self.n = nx if axis == "x" else ny
        self.nsys = ny if axis == "x" else nx
        self.solver = selection["solver"]
        self.transpose = axis == "y" and (selection["y-direction"] == "transpose" or self.solver == "gtsv2")
        self.fac = tridiag.factorise(*schemes.bands(self.n, boundary, delta), boundary == "periodic")
        self.sched = tridiag.prepare(self.fac, self.solver)
        # kernel = fused (GPU, solver = scan): the right-hand side is computed in the solve's launch
        self.fused = selection["kernel"] == "fused"
        self.rhs = None if self.fused else RightHandSide(selection["kernel"], self.shape, axis, h, boundary, delta,
                                                         self.dtype, self.xp, stream)
        self.work = None if self.fused else self.xp.empty(self.shape, dtype=self.dtype)
        self.twork = self.xp.empty(self.shape[::-1], dtype=self.dtype) if self.transpose and self.gpu else None
        self.iterative = None
        if self.solver in iterative.SOLVERS:  # CGS / Bi-CGSTAB (array code): prepared once, keeps its stats
            self.sched = self.iterative = iterative.IterativeSolver(self.solver, self.fac, self.dtype, self.xp,
                                                                    stream=stream)
        self.device = None
        if self.gpu:
            from .gpu import DeviceSolver

            self.device = self.iterative or DeviceSolver(self.solver, self.fac, self.sched, self.dtype, stream)

    def estimated_bytes(self) -> int:
        arrays = (1 if self.transpose else 0) + (0 if self.fused else 1)  # transposed copy, right-hand side
        return arrays * int(np.prod(self.shape)) * self.dtype.itemsize

    def __call__(self, f, out) -> None:
        if self.fused:
            self._fused(f, out)
            return
        with self.phase("rhs"):
            self.rhs(f, self.work)
        if not self.gpu:
            with self.phase("solve"):
                lines = _lines_along(self.work, self.axis)
                x = (iterative if self.iterative else tridiag).solve(self.solver, self.fac, lines, self.sched,
                                                                     self.dtype)
                _lines_along(out, self.axis)[...] = x
            return
        ny, nx = self.shape
        if self.axis == "x":
            with self.phase("solve"):
                self.device.solve(self.work, out, ny, nx, 1)
            return
        if not self.transpose:
            with self.phase("solve"):
                self.device.solve(self.work, out, nx, 1, nx)
            return
        from .gpu import transpose

        with self.phase("transpose"):
            transpose(self.work, self.twork)  # (nx, ny): the y-lines are now contiguous rows
        with self.phase("solve"):
            self.device.solve(self.twork, self.twork, nx, ny, 1)
        with self.phase("transpose"):
            transpose(self.twork, out)

    def _fused(self, f, out) -> None:
        """out = ∂f in one launch per line batch (``kernel = fused``), through the transposed copy for
        y-lines under ``y-direction = transpose`` (in place there: a line is read whole before written)."""
        ny, nx = self.shape
        run = self.device.derivative
        if self.axis == "x":
            with self.phase("derivative"):
                run(f, out, ny, nx, 1, self.h, self.delta)
            return
        if not self.transpose:
            with self.phase("derivative"):
                run(f, out, nx, 1, nx, self.h, self.delta)
            return
        from .gpu import transpose

        with self.phase("transpose"):
            transpose(f, self.twork)
        with self.phase("derivative"):
            run(self.twork, self.twork, nx, ny, 1, self.h, self.delta)
        with self.phase("transpose"):
            transpose(self.twork, out)

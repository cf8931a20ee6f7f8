"""Tridiagonal solves and compact derivatives of a *stack* of variables (nv, ny, nx) — the
``batching`` axis (P4: "batching several variables per block raises concurrency: 14 variables
grouped 8 + 6").

Every variable of a stack needs the same matrix along the same axis, so its lines are just more
systems of one batch:

- ``stacked``: one solve for all nv·ny x-lines (a contiguous stack: system stride nx), or for all
  nv·nx y-lines — with ``y-direction = transpose`` the (nv·ny, nx) array is transposed once into
  (nx, nv·ny), whose rows are nv consecutive contiguous systems of length ny (system stride ny); with
  ``strided`` on the GPU the y-lines of a stack have no single system stride, so each variable is
  its own launch (the stacking then only batches x and transposed y);
- ``per-variable``: one solve (and one explicit right-hand side) per variable, P4's baseline.

On NumPy both perform the same element-wise operations on the same lines, so they agree bit for bit
(tests/unit/test_compact_ns.py); on the GPU they differ only in launches.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from . import schemes, tridiag
from .rhs import RightHandSide

BATCHING = ("stacked", "per-variable")
ITERATIVE = ("cgs", "bicgstab")  # engine/compact/iterative.py: tridiag.solve's and DeviceSolver's interfaces


def _lines(a, axis: str):
    """The lines along ``axis`` of a (…, ny, nx) array as the last axis (a view)."""
    return a if axis == "x" else a.swapaxes(-1, -2)


class LineSolver:
    """Solves A x = d on every line along ``axis`` of (nv, ny, nx) stacks for one factorised matrix,
    with the selection's ``solver``, ``y-direction`` and ``batching``."""

    def __init__(self, fac, *, shape, axis: str, dtype, selection: dict, backend, stream=None, phase=None):
        self.fac, self.shape, self.axis = fac, tuple(shape), axis
        self.dtype = np.dtype(dtype)
        self.xp, self.gpu = backend.xp, backend.is_gpu
        self.phase = phase or (lambda name: nullcontext())
        self.solver = selection["solver"]
        self.stacked = selection.get("batching", "stacked") == "stacked"
        self.transpose = axis == "y" and (selection["y-direction"] == "transpose" or self.solver == "gtsv2")
        self.sched = tridiag.schedule(fac, self.solver) if self.solver in ("cr", "pcr", "cr-pcr") else None
        self._solve = tridiag.solve
        self.device = None
        self._twork: dict = {}
        if self.solver in ITERATIVE:  # prepared once; the same object solves host and device lines
            from . import iterative

            self.sched = iterative.IterativeSolver(self.solver, fac, self.dtype, self.xp, stream=stream)
            self._solve = iterative.solve
            self.device = self.sched if self.gpu else None
        elif self.gpu:
            from .gpu import DeviceSolver

            self.device = DeviceSolver(self.solver, fac, self.sched, self.dtype, stream)

    def __call__(self, d, x) -> None:
        """x = A⁻¹ d line by line (d, x: C-contiguous (nv, ny, nx); x may be d)."""
        if not self.gpu:
            with self.phase("solve"):
                if self.stacked:
                    _lines(x, self.axis)[...] = self._solve(self.solver, self.fac, _lines(d, self.axis),
                                                            self.sched, self.dtype)
                else:
                    for v in range(d.shape[0]):
                        _lines(x[v], self.axis)[...] = self._solve(self.solver, self.fac, _lines(d[v], self.axis),
                                                                   self.sched, self.dtype)
            return
        groups = [(d, x)] if self.stacked else [(d[v:v + 1], x[v:v + 1]) for v in range(d.shape[0])]
        for dd, xx in groups:
            self._device(dd, xx)

    def _device(self, d, x) -> None:
        nv, ny, nx = d.shape
        if self.axis == "x":
            with self.phase("solve"):
                self.device.solve(d, x, nv * ny, nx, 1)
            return
        if not self.transpose:
            with self.phase("solve"):
                for v in range(nv):  # a stack's y-lines have no single system stride
                    self.device.solve(d[v], x[v], nx, 1, nx)
            return
        from .gpu import transpose

        t = self._twork.get(nv)
        if t is None:
            t = self._twork[nv] = self.xp.empty((nx, nv * ny), dtype=self.dtype)
        with self.phase("transpose"):
            transpose(d.reshape(nv * ny, nx), t)  # rows of t: nv consecutive y-lines of length ny
        with self.phase("solve"):
            self.device.solve(t, t, nx * nv, ny, 1)
        with self.phase("transpose"):
            transpose(t, x.reshape(nv * ny, nx))


class StackDerivative:
    """∂/∂(axis) of every variable of a (nv, ny, nx) stack with Lele's compact6 scheme (P4's closures
    or periodic): explicit right-hand side (phase ``rhs``), then :class:`LineSolver`."""

    def __init__(self, *, shape, axis: str, h: float, boundary: str, dtype, selection: dict, backend,
                 stream=None, phase=None, nv_max: int = 8):
        self.shape, self.axis, self.h, self.boundary = tuple(shape), axis, h, boundary
        self.dtype = np.dtype(dtype)
        self.xp = backend.xp
        self.phase = phase or (lambda name: nullcontext())
        self.stacked = selection.get("batching", "stacked") == "stacked"
        self.kernel = selection["kernel"]
        n = shape[1] if axis == "x" else shape[0]
        fac = tridiag.factorise(*schemes.bands(n, boundary, 0.0), boundary == "periodic")
        self.solver = LineSolver(fac, shape=shape, axis=axis, dtype=dtype, selection=selection, backend=backend,
                                 stream=stream, phase=phase)
        # the stencil framework's loop engines work on one (ny, nx) array: one launch per variable
        self.rhs2d = None if self.kernel == "array" else RightHandSide(
            self.kernel, self.shape, axis, h, boundary, 0.0, self.dtype, self.xp, stream)
        self.work = self.xp.empty((nv_max,) + self.shape, dtype=self.dtype)

    def __call__(self, f, out) -> None:
        """out = ∂f/∂(axis) (f, out: C-contiguous (nv, ny, nx), nv ≤ nv_max; out must not be f)."""
        nv = f.shape[0]
        work = self.work[:nv]
        ax = -1 if self.axis == "x" else -2
        with self.phase("rhs"):
            if self.rhs2d is not None:
                for v in range(nv):
                    self.rhs2d(f[v], work[v])
            elif self.stacked:
                schemes.rhs(self.xp, f, self.h, self.boundary, 0.0, axis=ax, out=work)
            else:
                for v in range(nv):
                    schemes.rhs(self.xp, f[v], self.h, self.boundary, 0.0, axis=ax, out=work[v])
        self.solver(work, out)

    def launches(self, nv: int) -> int:
        """Tridiagonal-solver launches for a stack of nv variables (the batching axis' point)."""
        return 1 if self.stacked else nv

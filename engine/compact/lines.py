"""The one dispatcher of the compact family's tridiagonal solves: :class:`LineSolver` lays the lines of
(nv, ny, nx) stacks out for the selection's solver (engine/compact/solvers/) — the lines along an axis,
stacked or one variable at a time, strided or through a transpose — and hands them to the solver's
NumPy solve or its device side. operator.Derivative (one field), batched.StackDerivative,
batched.GroupedDerivative and filter.Filter all solve through it.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from . import gpu, solvers


def _lines(a, axis: str):
    """The lines along ``axis`` of a (…, ny, nx) array as the last axis (a view)."""
    return a if axis == "x" else a.swapaxes(-1, -2)


def device_solver(name: str, fac, prepared, dtype, stream=None):
    """The device side of solver ``name`` for one factorised matrix (solvers/base.py: Solver.device)."""
    return solvers.get(name).device(fac, prepared, dtype, stream)


class LineSolver:
    """Solves A x = d on every line along ``axis`` of (nv, ny, nx) stacks for one factorised matrix,
    with the selection's ``solver``, ``y-direction`` and ``batching`` (``y-direction = window``: the y-lines
    with the window solver, solvers.for_axis)."""

    def __init__(self, fac, *, shape, axis: str, dtype, selection: dict, backend, stream=None, phase=None):
        self.fac, self.shape, self.axis = fac, tuple(shape), axis
        self.dtype = np.dtype(dtype)
        self.xp, self.gpu = backend.xp, backend.is_gpu
        self.phase = phase or (lambda name: nullcontext())
        self.solver = solvers.for_axis(selection, axis, fac, dtype)
        self.strategy = solvers.get(self.solver)
        # grouped batches whole stacks too (GroupedDerivative pairs them; a lone stack is one batch)
        self.stacked = selection.get("batching", "stacked") != "per-variable"
        self.calls = 0  # solver launches so far (NumPy: solve calls); launches() is their model
        self.transpose = axis == "y" and solvers.transposes_y(selection, self.solver)
        self.prepared = self.strategy.prepare(fac, self.dtype, self.xp, stream)
        self.device = device_solver(self.solver, fac, self.prepared, self.dtype, stream) if self.gpu else None
        self._twork: dict = {}

    def stats(self) -> dict | None:
        """The last solve's statistics (iterative solvers: P4's iteration counts), or None."""
        return self.strategy.stats(self.prepared)

    def launches(self, nv: int) -> int:
        """Solver launches (NumPy: solve calls) for one call on a stack of nv variables — what
        ``__call__`` does (tests count them against ``calls``)."""
        if not self.stacked or (self.gpu and self.axis == "y" and not self.transpose and not self._groups):
            return nv
        if self.gpu and self.axis == "y" and not self.transpose:
            return self._grouped_launches(nv)
        return 1

    def _grouped_launches(self, nv: int) -> int:
        """Kernel launches of a stack's strided y-lines as lines in groups."""
        ny, nx = self.shape[-2:]
        if nv <= 1:
            return 1
        return self.strategy.launches(self.prepared, self.dtype, nv * nx, 1, nx, (nx, ny * nx))

    @property
    def _groups(self) -> bool:
        """Whether the device side takes a stack's strided y-lines in one launch (lines in groups; a device
        side without the attribute takes one system stride a launch)."""
        return bool(getattr(self.device, "groups", False))

    def _solve_host(self, d, x) -> None:
        x[...] = self.strategy.solve(self.fac, self.prepared, d, self.dtype)

    def __call__(self, d, x) -> None:
        """x = A⁻¹ d line by line (d, x: C-contiguous (nv, ny, nx); x may be d)."""
        if not self.gpu:
            with self.phase("solve"):
                if self.stacked:
                    self.calls += 1
                    self._solve_host(_lines(d, self.axis), _lines(x, self.axis))
                else:
                    for v in range(d.shape[0]):
                        self.calls += 1
                        self._solve_host(_lines(d[v], self.axis), _lines(x[v], self.axis))
            return
        self._batches(d, x, self.device.solve, "solve")

    def derivative(self, f, x, h: float, delta: float = 0.0) -> None:
        """x = ∂f/∂(axis) with ``kernel = fused`` (GPU, a solver that fuses the right-hand side): the explicit
        right-hand side is computed inside the solve's launch (phase ``derivative``), batched and laid out as
        a solve."""
        if not self.strategy.fuses_rhs:
            raise ValueError(f"the fused derivative runs on the {solvers.fusing()} solver, not {self.solver!r}")

        def fused(src, dst, nsys, sys_stride, elem_stride, group=None):
            self.device.derivative(src, dst, nsys, sys_stride, elem_stride, h, delta, group=group)

        self._batches(f, x, fused, "derivative")

    def _batches(self, d, x, launch, phase: str) -> None:
        groups = [(d, x)] if self.stacked else [(d[v:v + 1], x[v:v + 1]) for v in range(d.shape[0])]
        for dd, xx in groups:
            self._device(dd, xx, launch, phase)

    def _device(self, d, x, launch, phase: str) -> None:
        """One batch on the device: ``launch(src, dst, nsys, sys_stride, elem_stride)`` on the lines,
        through a transpose for y-lines under ``y-direction = transpose`` (in place on the transposed
        copy: a line is read whole before it is written)."""
        nv, ny, nx = d.shape
        if self.axis == "x":
            with self.phase(phase):
                self.calls += 1
                launch(d, x, nv * ny, nx, 1)
            return
        if not self.transpose:
            with self.phase(phase):
                if nv > 1 and self._groups:  # nv groups of nx lines, one variable (ny·nx values) apart
                    self.calls += self._grouped_launches(nv)
                    launch(d, x, nv * nx, 1, nx, group=(nx, ny * nx))
                    return
                for v in range(nv):  # a stack's y-lines have no single system stride
                    self.calls += 1
                    launch(d[v], x[v], nx, 1, nx)
            return
        t = self._twork.get(nv)
        if t is None:
            t = self._twork[nv] = self.xp.empty((nx, nv * ny), dtype=self.dtype)
        with self.phase("transpose"):
            gpu.transpose(d.reshape(nv * ny, nx), t)  # rows of t: nv consecutive y-lines of length ny
        with self.phase(phase):
            self.calls += 1
            launch(t, t, nx * nv, ny, 1)
        with self.phase("transpose"):
            gpu.transpose(t, x.reshape(nv * ny, nx))

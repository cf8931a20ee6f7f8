"""Tridiagonal solves and compact derivatives of a *stack* of variables (nv, ny, nx) — the
``batching`` axis (P4: "batching several variables per block raises concurrency: 14 variables
grouped 8 + 6").

Every variable of a stack needs the same matrix along the same axis, so its lines are just more
systems of one batch:

- ``stacked``: one solve for all nv·ny x-lines (a contiguous stack: system stride nx), or for all
  nv·nx y-lines — with ``y-direction = transpose`` the (nv·ny, nx) array is transposed once into
  (nx, nv·ny), whose rows are nv consecutive contiguous systems of length ny (system stride ny); with
  ``strided`` on the GPU the y-lines of a stack have no single system stride: the scan kernel takes
  them as nv groups of nx lines in one launch (``group=``), the other solvers one launch a variable;
- ``per-variable``: one solve (and one explicit right-hand side) per variable, P4's baseline;
- ``grouped`` (P4's 8 + 6, :class:`GroupedDerivative`): the x-lines of one stack and the transposed
  y-lines of another (or the same) stack in *one* batch — when x and y share the matrix (nx = ny, the
  same closures on both axes) and the y-lines are transposed, both are contiguous systems of length n,
  2·nv·n of them: one solve per pair, so 2 per Navier–Stokes evaluation (the 6 gradient derivatives,
  the 8 flux derivatives). :func:`grouping_reason` says when it cannot be.

On NumPy all three perform the same element-wise operations on the same lines, so they agree bit for
bit (tests/unit/test_compact_ns.py); on the GPU they differ only in launches.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from . import gpu, schemes, solvers, tridiag
from .lines import LineSolver
from .rhs import RightHandSide

BATCHING = ("stacked", "per-variable", "grouped")


class StackDerivative:
    """∂/∂(axis) of every variable of a (nv, ny, nx) stack with Lele's compact6 scheme (P4's closures
    or periodic): explicit right-hand side (phase ``rhs``), then :class:`LineSolver`."""

    def __init__(self, *, shape, axis: str, h: float, boundary: str, dtype, selection: dict, backend,
                 stream=None, phase=None, nv_max: int = 8):
        self.shape, self.axis, self.h, self.boundary = tuple(shape), axis, h, boundary
        self.dtype = np.dtype(dtype)
        self.xp = backend.xp
        self.phase = phase or (lambda name: nullcontext())
        self.stacked = selection.get("batching", "stacked") != "per-variable"
        self.kernel = selection["kernel"]
        self.fused = self.kernel == "fused"  # GPU, solver = scan: right-hand side inside the solve's launch
        n = shape[1] if axis == "x" else shape[0]
        fac = tridiag.factorise(*schemes.bands(n, boundary, 0.0), boundary == "periodic")
        self.solver = LineSolver(fac, shape=shape, axis=axis, dtype=dtype, selection=selection, backend=backend,
                                 stream=stream, phase=phase)
        # the stencil framework's loop engines work on one (ny, nx) array: one launch per variable
        self.rhs2d = None if self.kernel in ("array", "fused") else RightHandSide(
            self.kernel, self.shape, axis, h, boundary, 0.0, self.dtype, self.xp, stream)
        self.work = None if self.fused else self.xp.empty((nv_max,) + self.shape, dtype=self.dtype)

    def __call__(self, f, out) -> None:
        """out = ∂f/∂(axis) (f, out: C-contiguous (nv, ny, nx), nv ≤ nv_max; out must not be f)."""
        if self.fused:
            self.solver.derivative(f, out, self.h)
            return
        nv = f.shape[0]
        work = self.work[:nv]
        ax = -1 if self.axis == "x" else -2
        with self.phase("rhs"):
            if self.rhs2d is not None:
                for v in range(nv):
                    self.rhs2d(f[v], work[v], closures=False)
                self.rhs2d.closures(f[:nv], work)  # every variable's closure rows at once
            elif self.stacked:
                schemes.rhs(self.xp, f, self.h, self.boundary, 0.0, axis=ax, out=work)
            else:
                for v in range(nv):
                    schemes.rhs(self.xp, f[v], self.h, self.boundary, 0.0, axis=ax, out=work[v])
        self.solver(work, out)

    def launches(self, nv: int) -> int:
        """Tridiagonal-solver launches for a stack of nv variables (the batching axis' point)."""
        return self.solver.launches(nv)

    def rhs_sweeps(self, nv: int) -> int:
        """Explicit right-hand-side sweeps for a stack of nv variables (one whole-array ``array`` sweep
        per stack; the stencil framework's engines and per-variable: one per variable; ``fused``: none,
        the solve's launches compute it)."""
        if self.fused:
            return 0
        return 1 if (self.stacked and self.rhs2d is None) else nv


def grouping_reason(preset, selection: dict) -> str | None:
    """Why ``batching = grouped`` cannot put this preset's x- and y-derivatives in one batch (None when
    it can): one batch is one matrix on contiguous lines, so x and y need the same n and the same
    boundary rows, and the y-lines must be transposed."""
    if preset is None:
        return None
    if preset.physics.problem != "navier-stokes":
        return "only the Navier–Stokes problem has stacks of x- and y-derivatives to group"
    ny, nx = preset.shape
    if nx != ny:
        return f"nx = {nx} ≠ ny = {ny}: the x- and y-systems differ in size (one batch is one matrix)"
    kind = {a: "periodic" if preset.axis_periodic(a) else "closures" for a in ("x", "y")}
    if kind["x"] != kind["y"]:
        return (f"x is {kind['x']}, y is {kind['y']}: the x- and y-systems differ in their boundary rows "
                f"(one batch is one matrix)")
    if not solvers.transposes_y(selection):
        return "needs y-direction = transpose (strided y-lines are not contiguous systems like the x-lines)"
    return None


class GroupedDerivative:
    """∂/∂x of one (nv, n, n) stack and ∂/∂y of another (or of the same) as *one* batch of tridiagonal
    systems — ``batching = grouped``, P4's "14 variables grouped 8 + 6" (more systems per launch raise
    concurrency). Needs one matrix for both directions (n = nx = ny, the same boundary rows:
    :func:`grouping_reason`) and transposed y-lines. Layout, two (2·nv·n, n) arrays:

    - ``inp``: rows [0, nv·n) the x-lines of fx (``x_in``: a caller that builds fx there saves a copy),
      rows [nv·n, 2·nv·n) fy's (nv·ny, nx) array transposed to (nx, nv·ny) — row x holds the nv
      y-lines at x, each a contiguous system of length n;
    - ``work``: the explicit right-hand side of every row — one sweep (phase ``rhs``) when h_x = h_y,
      else one per half —, then the solution in place: one solve of 2·nv·n systems (stride n); rows
      [0, nv·n) are ∂fx/∂x (``x_out``), the rest transposes back into ∂fy/∂y.

    The two transposes are the ones ``stacked`` makes of the y-lines, moved from the right-hand side to
    f (a transpose is exact). Every line sees the operations ``stacked`` performs on it, so NumPy agrees
    bit for bit; only the batching differs."""

    def __init__(self, *, n: int, nv: int, h: dict, boundary: str, dtype, selection: dict, backend,
                 stream=None, phase=None):
        self.n, self.nv, self.rows = n, nv, nv * n
        self.dtype = np.dtype(dtype)
        self.xp, self.gpu = backend.xp, backend.is_gpu
        self.phase = phase or (lambda name: nullcontext())
        rows = self.rows
        self.inp = self.xp.empty((2 * rows, n), dtype=self.dtype)
        self.work = self.xp.empty((2 * rows, n), dtype=self.dtype)
        self.x_in = self.inp[:rows].reshape(nv, n, n)
        self.x_out = self.work[:rows].reshape(nv, n, n)
        self._ty_in = self.inp[rows:].reshape(n, rows)
        self._ty_out = self.work[rows:].reshape(n, rows)
        self._stack = self.work.reshape(1, 2 * rows, n)  # one (nv, ny, nx) stack for LineSolver, solved in place
        fac = tridiag.factorise(*schemes.bands(n, boundary, 0.0), boundary == "periodic")
        self.solver = LineSolver(fac, shape=(2 * rows, n), axis="x", dtype=self.dtype,
                                 selection=dict(selection, batching="stacked"), backend=backend, stream=stream,
                                 phase=phase)

        self.fused = selection["kernel"] == "fused"  # GPU, a fusing solver: one derivative launch per h

        def sweep(shape, hh):
            if self.fused:
                return hh
            return RightHandSide(selection["kernel"], shape, "x", hh, boundary, 0.0, self.dtype, self.xp, stream)

        if h["x"] == h["y"]:  # the same stencil on every row: one sweep
            self._rhs = [(sweep((2 * rows, n), h["x"]), self.inp, self.work)]
        else:
            self._rhs = [(sweep((rows, n), h["x"]), self.inp[:rows], self.work[:rows]),
                         (sweep((rows, n), h["y"]), self.inp[rows:], self.work[rows:])]

    def launches(self) -> int:
        """Solver launches per call: one (``fused``: one per spacing, the right-hand side included)."""
        return len(self._rhs) if self.fused else self.solver.launches(1)

    def rhs_sweeps(self) -> int:
        """Explicit right-hand-side sweeps per call (one, two if h_x ≠ h_y; ``fused``: none)."""
        return 0 if self.fused else len(self._rhs)

    def _transpose(self, src, dst) -> None:
        if self.gpu:
            gpu.transpose(src, dst)
        else:
            dst[...] = src.T

    def __call__(self, fx, fy, outx, outy) -> None:
        """outx = ∂fx/∂x, outy = ∂fy/∂y (C-contiguous (nv, n, n); fx may be ``x_in``, outx ``x_out``, fy fx)."""
        rows, n = self.rows, self.n
        with self.phase("transpose"):
            self._transpose(fy.reshape(rows, n), self._ty_in)  # (nv·ny, nx) -> (nx, nv·ny)
        if fx is not self.x_in:
            with self.phase("rhs" if not self.fused else "derivative"):
                self.x_in[...] = fx
        if self.fused:
            for hh, src, dst in self._rhs:
                self.solver.derivative(src.reshape(1, -1, n), dst.reshape(1, -1, n), hh)
        else:
            with self.phase("rhs"):
                for rhs, src, dst in self._rhs:
                    rhs(src, dst)
            self.solver(self._stack, self._stack)  # the same object: an in-place solve (gtsv2 copies nothing)
        if outx is not self.x_out:
            outx[...] = self.x_out
        with self.phase("transpose"):
            self._transpose(self._ty_out, outy.reshape(rows, n))

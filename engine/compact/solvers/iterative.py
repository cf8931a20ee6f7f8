"""``solver = cgs`` and ``bicgstab``: P4's iterative solvers of the compact schemes' tridiagonal
systems, batched.

The systems are the ones the direct solvers solve — one matrix (tridiagonal, or cyclic tridiagonal for
periodic lines), many right-hand sides — so they stand beside ``thomas``/``cr``/``pcr`` as ``solver``
choices (docs/compact-iterative.md). One :class:`IterativeSolver` is prepared per operator and serves
both backends: it is its own device side.
The code is written against ``xp`` (NumPy or CuPy, taken from the right-hand side's array type):
every system iterates at once, per-system scalars (ρ, α, ω, residual norms) are arrays of shape
``[..., 1]``, and the matrix–vector product is three shifted multiplies along the line axis.

Stopping rule (per system): ‖b − A x‖₂ ≤ tol·‖b‖₂ on the recursively updated residual; once a
system meets it its step lengths are set to exactly 0, so its x and r no longer change (the
arithmetic still runs for the whole batch — that is the SIMD shape of the GPU version — but a
line's result does not depend on how long the other lines iterate). The loop ends when every system
has converged or at ``max_iter``. The recursive residual can drift from the true one in finite
precision, so after the loop the true residual is computed; systems above tol are restarted from
their x (at most ``RESTARTS`` times). Breakdown — ρ = r̂·r, σ = r̂·A p or ω = (t·s)/(t·t) numerically
zero, i.e. below the rounding bound of the inner product itself — and non-convergence raise one
:class:`IterativeError` (a one-line message) instead of returning NaNs.

Initial guess: ``x0`` if given (e.g. the previous solution; :class:`IterativeSolver` keeps it when
``warm_start``), else the right-hand side b: the compact matrices are I + (off-diagonals ≤ 1/3 in
the interior), so x = b is already within ‖A − I‖ of the solution, unlike x = 0.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ...errors import NagareError
from .base import Solver

SOLVERS = ("cgs", "bicgstab")
# Relative residual targets ‖b − A x‖₂/‖b‖₂. The forward error is ≤ κ₂·tol relative to ‖x‖₂, and every
# matrix the family solves has κ₂ ≤ 100 (compact6 5 / 75, dissipative5 5 / 89 periodic / closures, the
# Navier–Stokes filter 99; docs/compact-iterative.md). fp64: 1e-13 (≈ 450 ε) keeps κ·tol ≤ 1e-11, ten
# times inside the family's equivalence tolerance (variants.SOLVER_ATOL = 1e-10; with 1e-12 the
# filtered Navier–Stokes preset missed it by 17 % after 16 steps, measured) and sits far above the fp64
# residual floor (a converged solve's true residual is ~1e-16), at ~3 iterations more than 1e-12.
# fp32: 1e-6 (≈ 8 ε): the fp32-rounded solution itself has a true residual of a few ε (measured up to
# ~2e-7), so 1e-6 is the tightest target every line reaches (sometimes after a true-residual restart).
DEFAULT_TOL = {np.dtype(np.float64): 1e-13, np.dtype(np.float32): 1e-6}
RESTARTS = 4  # restarts after a breakdown or a recursive residual that drifted from the true one


def default_max_iter(n: int) -> int:
    """In exact arithmetic both methods finish in ≤ n steps; 2n (at least 100) leaves room for
    round-off without letting a stagnating solve run for ever."""
    return max(100, 2 * n)


class IterativeError(NagareError):
    """A CGS/Bi-CGSTAB solve broke down or did not converge (one-line message)."""


@dataclass(frozen=True)
class Matrix:
    """The matrix as three float64 bands (schemes.bands convention): ``lower[i]`` multiplies
    x_{i-1}, ``upper[i]`` x_{i+1}; periodic: ``lower[0]`` and ``upper[n-1]`` are the cyclic corners."""

    lower: np.ndarray
    diag: np.ndarray
    upper: np.ndarray
    periodic: bool

    @property
    def n(self) -> int:
        return int(self.diag.size)

    @classmethod
    def from_bands(cls, lower, diag, upper, periodic: bool) -> Matrix:
        lower, diag, upper = (np.array(v, dtype=np.float64) for v in (lower, diag, upper))
        if not periodic:
            lower[0] = upper[-1] = 0.0  # the corners do not exist in a non-cyclic system (as factorise)
        return cls(lower, diag, upper, bool(periodic))

    @classmethod
    def from_factors(cls, fac) -> Matrix:
        """Recover A from tridiag.Factors (so ``solve`` accepts what the direct solvers get).

        Periodic factors hold A' = A − u vᵀ: diag'₀ = 2 b₀ (γ = −b₀), the corners removed, and
        diag'ₙ₋₁ = bₙ₋₁ − α_c β_c/γ; α_c = r γ, and β_c = u_{n-1} = (A' z)_{n-1}. Exact for closures,
        to a few ulps for the periodic corners — far below any solver tolerance."""
        lower, diag, upper = (np.array(v, dtype=np.float64) for v in (fac.lower, fac.diag, fac.upper))
        if fac.periodic:
            gamma = -0.5 * diag[0]
            beta_c = lower[-1] * fac.z[-2] + diag[-1] * fac.z[-1]
            alpha_c = fac.r * gamma
            diag[0] = 0.5 * diag[0]
            diag[-1] = diag[-1] + alpha_c * beta_c / gamma
            lower[0], upper[-1] = alpha_c, beta_c
        return cls(lower, diag, upper, bool(fac.periodic))

    def dense(self) -> np.ndarray:
        a = np.diag(self.diag) + np.diag(self.lower[1:], -1) + np.diag(self.upper[:-1], 1)
        if self.periodic:
            a[0, -1] += self.lower[0]
            a[-1, 0] += self.upper[-1]
        return a


@dataclass(frozen=True)
class Stats:
    """One batched solve: iterations per system (max, mean; restarts included), restarts, the runs
    (first start + restarts) in which some system broke down, the worst true relative
    residual ‖b − A x‖/‖b‖ after the solve, and the tolerance it was held to."""

    kind: str
    systems: int
    iterations_max: int
    iterations_mean: float
    restarts: int
    breakdowns: int
    residual_max: float
    tol: float

    def as_dict(self) -> dict:
        return asdict(self)


def array_module(a):
    """NumPy or CuPy, whichever ``a`` belongs to (CuPy imported only when it is one of its arrays)."""
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy  # optional dependency: only reached for a CuPy array

        return cupy
    return np


class _Bands:
    """The bands cast to the arithmetic's dtype and moved to xp, and A·x into ``out``."""

    def __init__(self, xp, m: Matrix, dtype):
        self.xp, self.periodic = xp, m.periodic
        self.lower, self.diag, self.upper = (xp.asarray(v.astype(dtype)) for v in (m.lower, m.diag, m.upper))
        self.lo0, self.upn = dtype.type(m.lower[0]), dtype.type(m.upper[-1])

    def apply(self, x, out):
        """out = A x along the last axis: the diagonal, then the sub- and super-diagonal products
        as shifted slices (for periodic lines the corner terms wrap around)."""
        xp = self.xp
        xp.multiply(self.diag, x, out=out)
        out[..., 1:] += self.lower[1:] * x[..., :-1]
        out[..., :-1] += self.upper[:-1] * x[..., 1:]
        if self.periodic:
            out[..., :1] += self.lo0 * x[..., -1:]
            out[..., -1:] += self.upn * x[..., :1]
        return out


class _Run:
    """Per-solve state shared by the two methods: norms, masks, breakdown bookkeeping."""

    def __init__(self, xp, kind: str, n: int, dtype, tol: float, max_iter: int):
        self.xp, self.kind, self.n, self.dtype = xp, kind, n, dtype
        self.tol, self.max_iter = tol, max_iter
        # An inner product whose magnitude is below √n·ε·‖a‖‖b‖ — the typical rounding error of a sum
        # of n products (independent roundings) — cannot be told from zero: its sign and size are
        # noise. The worst case n·ε is never attained and would flag healthy lines (fp32, n = 1024:
        # n·ε = 0.12 of ‖a‖‖b‖).
        self.zero_bound = dtype.type(math.sqrt(n) * np.finfo(dtype).eps)
        self.broken = None  # [..., 1] int8: 0, or the code of the quantity that vanished (frozen system)

    def dot(self, a, b, tmp):
        self.xp.multiply(a, b, out=tmp)
        return tmp.sum(axis=-1, keepdims=True)

    def norm(self, a, tmp):
        return self.xp.sqrt(self.dot(a, a, tmp))

    def vanished(self, active, value, na, nb, what: str):
        """Mark active systems whose ``value`` (an inner product of vectors with norms na, nb) is
        numerically zero as broken down; returns the still-active mask."""
        xp = self.xp
        bad = active & ~(xp.abs(value) > self.zero_bound * na * nb)  # ~(>) also catches NaN
        self.broken = xp.where(bad & (self.broken == 0), np.int8(_QUANTITIES.index(what) + 1), self.broken)
        return active & ~bad

    def check(self, active, it: int) -> bool:
        """One host sync per iteration: is any system still active, did any break down. A system
        that breaks down is frozen and restarted later from its x with r̂ = r (the usual remedy: a
        near-zero ρ or σ is often an accident of the particular r̂). Only a breakdown in the first
        iteration after a (re)start raises: then r̂ = r, ρ = ‖r‖² > 0, so σ = r·Ar itself vanished —
        A is singular or indefinite along r, and restarting cannot help."""
        flags = self.xp.stack([active.any(), (self.broken != 0).any()]).tolist()
        if flags[1] and it == 1:
            self.raise_breakdown(it)
        self.any_broken = bool(flags[1])
        return bool(flags[0])

    def raise_breakdown(self, it: int):
        code = np.asarray(_host(self.xp, self.broken)).ravel()
        bad = np.flatnonzero(code)
        what = _QUANTITIES[code[bad[0]] - 1]
        raise IterativeError(
            f"{self.kind} broke down at iteration {it} after a fresh start in {bad.size} of {code.size} systems "
            f"(first: system {int(bad[0])}, {what} = {_QUANTITY_TEXT[what]} vanished to round-off): the matrix "
            f"is singular or indefinite; use a direct solver (thomas)")


_QUANTITIES = ("rho", "sigma", "omega")
_QUANTITY_TEXT = {"rho": "r̂·r", "sigma": "r̂·Ap", "omega": "t·s/t·t"}


def _host(xp, a):
    return a.get() if hasattr(a, "get") and xp is not np else a


def _safe(xp, mask, den):
    """den where mask, 1 elsewhere: divisions of frozen systems never produce inf/NaN."""
    return xp.where(mask, den, den.dtype.type(1))


def _bicgstab(run: _Run, A: _Bands, b, x, r, active, it):
    """van der Vorst's Bi-CGSTAB (unpreconditioned), r̂ = r₀. Two mat-vecs per iteration; a system
    whose half-step residual s already meets tol takes x + α p and stops (standard early exit)."""
    xp, dt = run.xp, run.dtype
    zero = dt.type(0)
    tmp, p, v, s, t = (xp.zeros_like(b) for _ in range(5))
    rhat = r.copy()
    rhat_norm = run.norm(rhat, tmp)
    target = run.tol * run.bnorm
    rnorm = run.norm(r, tmp)
    one = xp.ones_like(rnorm)
    rho_old, alpha, omega = one, one, one
    k = 0
    while k < run.max_iter and run.check(active, k):
        k += 1
        rho = run.dot(rhat, r, tmp)
        active = run.vanished(active, rho, rhat_norm, rnorm, "rho")
        beta = xp.where(active, rho * alpha / _safe(xp, active, rho_old * omega), zero)
        w = xp.where(active, omega, zero)
        p -= w * v  # p = r + β (p − ω v)
        p *= beta
        p += r
        A.apply(p, v)
        sigma = run.dot(rhat, v, tmp)
        active = run.vanished(active, sigma, rhat_norm, run.norm(v, tmp), "sigma")
        alpha = xp.where(active, rho / _safe(xp, active, sigma), zero)
        xp.multiply(alpha, v, out=s)
        xp.subtract(r, s, out=s)
        snorm = run.norm(s, tmp)
        half = active & ~(snorm > target)
        cont = active & ~half
        A.apply(s, t)
        ts, tt = run.dot(t, s, tmp), run.dot(t, t, tmp)
        cont = run.vanished(cont, ts, xp.sqrt(tt), snorm, "omega")
        omega = xp.where(cont, ts / _safe(xp, cont, tt), zero)
        x += xp.where(half | cont, alpha, zero) * p
        x += omega * s
        xp.multiply(omega, t, out=r)
        xp.subtract(s, r, out=r)  # r = s − ω t (= s for systems that stopped at the half step)
        rnorm = run.norm(r, tmp)
        it += active
        active = cont & (rnorm > target)
        rho_old = rho
        omega = xp.where(active, omega, dt.type(1))
    run.check(active, k + 1)  # breakdowns of the last iteration are recorded too
    return x, k


def _cgs(run: _Run, A: _Bands, b, x, r, active, it):
    """Sonneveld's conjugate gradient squared (unpreconditioned), r̂ = r₀. Two mat-vecs per
    iteration (A p and A (u + q))."""
    xp, dt = run.xp, run.dtype
    zero = dt.type(0)
    tmp, u, p, q, v, w = (xp.zeros_like(b) for _ in range(6))
    rhat = r.copy()
    rhat_norm = run.norm(rhat, tmp)
    target = run.tol * run.bnorm
    rnorm = run.norm(r, tmp)
    rho_old = xp.ones_like(rnorm)
    k = 0
    while k < run.max_iter and run.check(active, k):
        k += 1
        rho = run.dot(rhat, r, tmp)
        active = run.vanished(active, rho, rhat_norm, rnorm, "rho")
        beta = xp.where(active, rho / _safe(xp, active, rho_old), zero)  # first pass: q = p = 0
        xp.multiply(beta, q, out=u)
        u += r  # u = r + β q
        p *= beta
        p += q
        p *= beta
        p += u  # p = u + β (q + β p)
        A.apply(p, v)
        sigma = run.dot(rhat, v, tmp)
        active = run.vanished(active, sigma, rhat_norm, run.norm(v, tmp), "sigma")
        alpha = xp.where(active, rho / _safe(xp, active, sigma), zero)
        xp.multiply(alpha, v, out=q)
        xp.subtract(u, q, out=q)  # q = u − α v
        xp.add(u, q, out=w)
        x += alpha * w
        A.apply(w, v)
        v *= alpha
        r -= v
        rnorm = run.norm(r, tmp)
        it += active
        active = active & (rnorm > target)
        rho_old = rho
    run.check(active, k + 1)  # breakdowns of the last iteration are recorded too
    return x, k


_METHODS = {"cgs": _cgs, "bicgstab": _bicgstab}


class IterativeSolver:
    """CGS or Bi-CGSTAB for one matrix, prepared once (bands cast and moved to ``xp``).

    ``solver(d, x0=None)`` solves ``d[..., n]`` (any memory layout: the work vectors follow it) and
    returns x; ``solver.solve(d, x, nsys, sys_stride, elem_stride)`` is a device side's interface
    (element i of system s at ``s·sys_stride + i·elem_stride``; ``x`` may be ``d``). ``stats`` holds
    the last solve's :class:`Stats`, ``iterations`` its per-system counts. ``warm_start``: start from
    the previous solution when the shape matches (off by default: then a result depends only on its
    right-hand side, not on the call history).
    """

    def __init__(self, kind: str, matrix, dtype=np.float64, xp=np, *, tol: float | None = None,
                 max_iter: int | None = None, warm_start: bool = False, stream=None):
        if kind not in SOLVERS:
            raise ValueError(f"unknown iterative solver {kind!r}; allowed: {', '.join(SOLVERS)}")
        self.kind = kind
        self.matrix = matrix if isinstance(matrix, Matrix) else Matrix.from_factors(matrix)
        self.n = self.matrix.n
        self.dtype = np.dtype(dtype)
        self.xp = xp
        self.tol = float(tol if tol is not None else DEFAULT_TOL.get(self.dtype, 1e-6))
        self.max_iter = int(max_iter if max_iter is not None else default_max_iter(self.n))
        self.warm_start = warm_start
        self.stream = stream  # unused: like the kernels' launches, the work goes on CuPy's current stream
        self.bands = _Bands(xp, self.matrix, self.dtype)
        self.stats: Stats | None = None
        self.iterations = None
        self._previous = None

    def __call__(self, d, x0=None):
        xp, dt = self.xp, self.dtype
        b = d.astype(dt, copy=False)
        if b.shape[-1] != self.n:
            raise ValueError(f"systems of {b.shape[-1]} equations given to a solver of {self.n}")
        if x0 is None and self.warm_start and self._previous is not None and self._previous.shape == b.shape:
            x0 = self._previous
        x = xp.empty_like(b)  # same memory order as b (interleaved y-lines stay interleaved)
        x[...] = b if x0 is None else x0
        run = _Run(xp, self.kind, self.n, dt, self.tol, self.max_iter)
        tmp, r = xp.empty_like(b), xp.empty_like(b)
        run.bnorm = run.norm(b, tmp)
        x *= (run.bnorm > 0)  # b = 0: x = 0 exactly (a relative residual cannot be met otherwise)
        it = xp.zeros(run.bnorm.shape, dtype=np.int64)
        method, runs, used, breakdowns = _METHODS[self.kind], 0, 0, 0
        while True:
            xp.subtract(b, self.bands.apply(x, r), out=r)  # the true residual
            rel = run.norm(r, tmp) / _safe(xp, run.bnorm > 0, run.bnorm)
            active = rel > self.tol
            if runs > RESTARTS or used >= self.max_iter or not bool(active.any()):
                break
            run.max_iter = self.max_iter - used  # restarts share the budget
            run.broken = xp.zeros(run.bnorm.shape, dtype=np.int8)
            run.any_broken = False
            x, k = method(run, self.bands, b, x, r, active, it)
            used += k
            runs += 1
            breakdowns += run.any_broken
        restarts = max(runs - 1, 0)
        self.iterations = it[..., 0]
        worst = float(xp.max(rel)) if rel.size else 0.0
        self.stats = Stats(self.kind, int(rel.size), int(xp.max(it)) if it.size else 0,
                           float(xp.mean(it.astype(np.float64))) if it.size else 0.0, restarts, breakdowns,
                           worst, self.tol)
        nbad = int(active.sum())
        if nbad:
            raise IterativeError(
                f"{self.kind} did not converge: {nbad} of {rel.size} systems above relative residual "
                f"{self.tol:g} (worst {worst:.3g}) after {used} iterations and {restarts} restarts "
                f"(breakdowns in {breakdowns} of {runs} runs); use a direct solver (thomas)")
        if self.warm_start:
            self._previous = x
        return x

    def solve(self, d, x, nsys: int, sys_stride: int, elem_stride: int) -> None:
        """A device side's interface (solvers/base.py): strided line batches of flat (C-contiguous) arrays."""
        dv = _lines(self.xp, d, self.n, nsys, sys_stride, elem_stride)
        result = self(dv)
        _lines(self.xp, x, self.n, nsys, sys_stride, elem_stride)[...] = result


def _lines(xp, a, n: int, nsys: int, sys_stride: int, elem_stride: int):
    """A (nsys, n) view of line batch (sys_stride, elem_stride) of the C-contiguous array ``a``."""
    if not a.flags.c_contiguous:
        raise ValueError("line batches are views of C-contiguous arrays")
    if nsys and (nsys - 1) * sys_stride + (n - 1) * elem_stride >= a.size:
        raise ValueError(f"line batch ({n}, {nsys}, {sys_stride}, {elem_stride}) exceeds an array of {a.size}")
    item = a.dtype.itemsize
    return xp.lib.stride_tricks.as_strided(a, shape=(nsys, n), strides=(sys_stride * item, elem_stride * item))


def solve(kind: str, fac, d, sched=None, dtype=None, *, x0=None, tol=None, max_iter=None):
    """``fac`` the direct solvers' Factors (or a :class:`Matrix`),
    ``sched`` an :class:`IterativeSolver` prepared once (its ``stats`` then report the iterations),
    or None to prepare one here."""
    dt = np.dtype(dtype or d.dtype)
    if sched is None:
        sched = IterativeSolver(kind, fac, dt, array_module(d), tol=tol, max_iter=max_iter)
    elif sched.kind != kind or sched.dtype != dt:
        raise ValueError(f"prepared solver is {sched.kind}/{sched.dtype}, asked for {kind}/{dt}")
    return sched(d, x0)


DOCS = {
    "cgs": "conjugate gradient squared (P4), batched array code: all lines iterate at once, converged lines "
           "frozen, relative residual 1e-13 (fp64) / 1e-6 (fp32), iteration counts in the timing extras",
    "bicgstab": "Bi-CGSTAB (P4), batched array code, the same stopping rule as cgs",
}


class Iterative(Solver):
    def __init__(self, kind: str):
        self.name, self.doc = kind, DOCS[kind]

    def prepare(self, fac, dtype, xp, stream=None):
        """Prepared once per operator: the bands on ``xp``; it keeps the last solve's statistics."""
        return IterativeSolver(self.name, fac, dtype, xp, stream=stream)

    def solve(self, fac, prepared, d, dtype=None):
        return solve(self.name, fac, d, prepared, dtype)

    def device(self, fac, prepared, dtype, stream=None):
        return prepared

    def stats(self, prepared):
        return prepared.stats.as_dict() if prepared.stats is not None else None


STRATEGIES = tuple(Iterative(kind) for kind in SOLVERS)


def condition_number(m: Matrix) -> float:
    """2-norm condition number of the dense matrix (tests and docs: tolerances derive from it)."""
    return float(np.linalg.cond(m.dense()))


__all__ = ["SOLVERS", "STRATEGIES", "DEFAULT_TOL", "IterativeError", "IterativeSolver", "Matrix", "Stats", "solve",
           "condition_number", "default_max_iter", "array_module"]

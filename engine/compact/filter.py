"""Gaitonde–Visbal low-pass compact filter (Gaitonde & Visbal 2000, AIAA J. 38:2103; Visbal &
Gaitonde 2002, J. Comput. Phys. 181:155), the standard companion of Lele's central scheme for
Navier–Stokes at high Reynolds number:

    α_f f̂_{i-1} + f̂_i + α_f f̂_{i+1} = Σ_{n=0..N} (a_n/2) (f_{i+n} + f_{i-n}),

of order 2N (N = 5: tenth order in the interior). The transfer function
T(ω) = Σ a_n cos nω / (1 + 2α_f cos ω) is 1 at ω = 0 and 0 at ω = π (the odd-even mode that a
central scheme cannot damp); α_f ∈ (-½, ½) tunes it, α_f → ½ filters only the shortest waves.

Why: the central compact scheme has no dissipation, and with one-sided boundary closures and
characteristic boundaries spurious grid-scale (π) modes are created at the boundaries and are not
damped; the filter removes them once per time step while leaving resolved scales alone (α_f = 0.49:
T(ω) > 0.99 for ω < 0.45π).

Boundaries: periodic (cyclic system) or, on a bounded axis, reduced centred stencils: the boundary
point is not filtered (identity row), point i = 1…4 from either end uses the centred filter of order
2i (it fits in the line) with its own α_b, points ≥ 5 the tenth-order one with α_f — Gaitonde &
Visbal's "reduced order centred" boundary treatment (their one-sided high-order formulas are the
alternative). Why α_b close to ½ (default 0.4999): a low-order filter's damping of resolved waves is
(½ - α)(1 - cos ω)/(1 + 2α cos ω) per application, so with α_b = α_f = 0.49 the 2nd/4th-order rows
eat into the vortex as it crosses the outflow and send pressure waves back (measured, 64²: reflected
pressure 10 % of the vortex's dip, against 2.2 % with α_b = 0.499 and 0.3 % with 0.4999); near ½ those
rows still remove the odd-even mode (T(π) = 0) and nothing else. On a
periodic line the filter conserves Σ f exactly (the coefficients sum to 1 + 2α_f), so mass, momentum
and energy stay conserved to round-off.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from ..cuda import KernelSpec, ctype, template
from . import tridiag
from .lines import LineSolver
from .rhs import line_layout

ORDER = 10
HALF = ORDER // 2


def coefficients(order: int, alpha: float) -> tuple[float, ...]:
    """a_0 … a_{order/2} of the centred filter of the given (even) order (Gaitonde & Visbal, Table)."""
    a = alpha
    if order == 2:
        return (0.5 + a, 0.5 + a)
    if order == 4:
        return (5 / 8 + 3 * a / 4, 0.5 + a, -1 / 8 + a / 4)
    if order == 6:
        return (11 / 16 + 5 * a / 8, 15 / 32 + 17 * a / 16, -3 / 16 + 3 * a / 8, 1 / 32 - a / 16)
    if order == 8:
        return ((93 + 70 * a) / 128, (7 + 18 * a) / 16, (-7 + 14 * a) / 32, (1 - 2 * a) / 16, (-1 + 2 * a) / 128)
    if order == 10:
        return ((193 + 126 * a) / 256, (105 + 302 * a) / 256, 15 * (-1 + 2 * a) / 64, 45 * (1 - 2 * a) / 512,
                5 * (-1 + 2 * a) / 256, (1 - 2 * a) / 512)
    raise ValueError(f"no centred filter of order {order}")


def transfer(omega, order: int, alpha: float):
    """T(ω) of the centred filter (real)."""
    c = coefficients(order, alpha)
    omega = np.asarray(omega, dtype=np.float64)
    return sum(cn * np.cos(n * omega) for n, cn in enumerate(c)) / (1 + 2 * alpha * np.cos(omega))


def bands(n: int, alpha: float, boundary: str, alpha_b: float | None = None):
    lower, diag, upper = np.full(n, alpha), np.ones(n), np.full(n, alpha)
    if boundary != "periodic":
        ab = alpha if alpha_b is None else alpha_b
        for i in range(1, HALF):
            lower[i] = upper[i] = lower[-1 - i] = upper[-1 - i] = ab
        lower[0] = upper[0] = lower[-1] = upper[-1] = 0.0  # boundary points: identity rows
    return lower, diag, upper


def _centred(xp, f, i0, i1, coef, dt):
    """Σ (a_n/2)(f_{i+n} + f_{i-n}) for i in [i0, i1) along the last axis, in a fixed order."""
    c = f[..., i0:i1]
    r = dt(coef[0]) * c
    for n, cn in enumerate(coef[1:], start=1):
        r = r + dt(cn / 2) * (f[..., i0 + n:i1 + n] + f[..., i0 - n:i1 - n])
    return r


def rhs(xp, f, alpha: float, boundary: str, axis: int = -1, out=None, alpha_b: float | None = None):
    """The filter's explicit side along ``axis`` (xp-generic, whole-array slices)."""
    f = xp.moveaxis(f, axis, -1)
    if out is None:
        out = xp.empty_like(f)
    else:
        out = xp.moveaxis(out, axis, -1)
    dt = f.dtype.type
    coef = coefficients(ORDER, alpha)
    if boundary == "periodic":
        r = dt(coef[0]) * f
        for n, cn in enumerate(coef[1:], start=1):
            r = r + dt(cn / 2) * (xp.roll(f, -n, axis=-1) + xp.roll(f, n, axis=-1))
        out[...] = r
        return xp.moveaxis(out, -1, axis)
    n = f.shape[-1]
    out[..., HALF:n - HALF] = _centred(xp, f, HALF, n - HALF, coef, dt)
    out[..., 0] = f[..., 0]
    out[..., -1] = f[..., -1]
    for i in range(1, HALF):
        ci = coefficients(2 * i, alpha if alpha_b is None else alpha_b)
        out[..., i:i + 1] = _centred(xp, f, i, i + 1, ci, dt)
        out[..., n - 1 - i:n - i] = _centred(xp, f, n - 1 - i, n - i, ci, dt)
    return xp.moveaxis(out, -1, axis)


FILTER_SOURCE = "cuda/compact/filter.cu"
FILTER_BLOCK = 256


@cache
def filter_spec(dtype):
    return KernelSpec(FILTER_SOURCE, (template("compact_filter_rhs", ctype(np.dtype(dtype)), HALF),),
                      ("--fmad=false",))


def coefficient_table(alpha: float, alpha_b: float | None, dtype) -> np.ndarray:
    """(HALF + 1, HALF + 1) of dtype: row r = the centred sum with r neighbours a side as :func:`rhs`
    casts it — a_0, then a_n / 2 — row HALF with α_f (order 2·HALF), rows 1 … HALF-1 with α_b (order 2r)."""
    dt = np.dtype(dtype).type
    tab = np.zeros((HALF + 1, HALF + 1), dtype=np.dtype(dtype))
    for r in range(1, HALF + 1):
        coef = coefficients(2 * r, alpha if (r == HALF or alpha_b is None) else alpha_b)
        tab[r, 0] = dt(coef[0])
        for k, cn in enumerate(coef[1:], start=1):
            tab[r, k] = dt(cn / 2)
    return tab


def lines_fastest(layout) -> bool:
    """Whether the kernel should give consecutive threads consecutive lines rather than consecutive
    points of a line: when a line's points are strided and its neighbouring line is the next element
    (y-lines of a C-ordered array or stack), so that either way a warp touches consecutive addresses."""
    lines, inner, outer, inner_stride, elem = layout
    step = inner_stride if inner > 1 else outer
    return elem != 1 and step == 1 and lines > 1


class DeviceFilterRhs:
    """:func:`rhs` as one CUDA launch over every point of a stack (shaders/cuda/compact/filter.cu)."""

    def __init__(self, xp, alpha: float, alpha_b: float | None, boundary: str, dtype):
        spec = filter_spec(np.dtype(dtype))
        self.kernel = spec.function(spec.name_expressions[0])
        self.table = xp.asarray(coefficient_table(alpha, alpha_b, dtype))
        self.periodic = np.int32(boundary == "periodic")

    def __call__(self, xp, f, out, axis: int) -> bool:
        """out = rhs(f) along ``axis``; False (nothing done) for a layout the kernel does not address."""
        fv, ov = f.swapaxes(axis, -1), out.swapaxes(axis, -1)
        lay = line_layout(fv)
        if lay is None or line_layout(ov) != lay or fv.shape != ov.shape:
            return False
        lines, inner, outer, inner_stride, elem = lay
        n = fv.shape[-1]
        i64 = np.int64
        self.kernel(((lines * n + FILTER_BLOCK - 1) // FILTER_BLOCK,), (FILTER_BLOCK,),
                    (fv, ov, self.table, np.int32(n), self.periodic, i64(lines), i64(inner), i64(outer),
                     i64(inner_stride), i64(elem), np.int32(lines_fastest(lay))))
        return True


class Filter:
    """Filters every variable of a (nv, ny, nx) stack in place along ``axis`` (phase ``filter``)."""

    def __init__(self, *, shape, axis: str, alpha: float, boundary: str, dtype, selection: dict, backend,
                 stream=None, phase=None, nv_max: int = 4, alpha_b: float | None = None):
        n = shape[1] if axis == "x" else shape[0]
        if boundary != "periodic" and n < 2 * HALF + 1:
            raise ValueError(f"the filter needs at least {2 * HALF + 1} points on a bounded axis, got {n}")
        self.axis, self.alpha, self.alpha_b, self.boundary = axis, alpha, alpha_b, boundary
        self.xp = backend.xp
        self.phase = phase
        fac = tridiag.factorise(*bands(n, alpha, boundary, alpha_b), boundary == "periodic")
        self.solver = LineSolver(fac, shape=shape, axis=axis, dtype=dtype, selection=selection, backend=backend,
                                 stream=stream)  # its solve is timed as part of the phase "filter"
        self.work = self.xp.empty((nv_max,) + tuple(shape), dtype=np.dtype(dtype))
        # on the GPU the explicit side is one launch (the array form: ~40 mostly single-column operations)
        self.device = (DeviceFilterRhs(self.xp, alpha, alpha_b, boundary, dtype) if getattr(backend, "is_gpu", False)
                       else None)

    def __call__(self, f) -> None:
        nv = f.shape[0]
        work = self.work[:nv]
        axis = -1 if self.axis == "x" else -2
        with self.phase("filter"):
            if self.device is None or not self.device(self.xp, f, work, axis):
                rhs(self.xp, f, self.alpha, self.boundary, axis=axis, out=work, alpha_b=self.alpha_b)
            self.solver(work, f)

"""Compact first-derivative schemes of P4 (Lele 1992; Deng et al. 1996), NumPy reference.

Every scheme is a tridiagonal system ``A f' = r(f)/h`` with one matrix for every line of a grid:

- ``compact6`` — Lele's sixth-order tridiagonal scheme: α = 1/3, a = 14/9, b = 1/9,
  ``α f'_{i-1} + f'_i + α f'_{i+1} = a (f_{i+1} - f_{i-1})/2h + b (f_{i+2} - f_{i-2})/4h``.
- ``dissipative5`` — Deng's dissipative compact scheme on one half of a Lax–Friedrichs split flux:
  ``α(1-δ) F'_{i-1} + F'_i + α(1+δ) F'_{i+1} = a (F_{i+1}-F_{i-1})/2h + b (F_{i+2}-F_{i-2})/4h
  + δ d (F_{i+1} - 2F_i + F_{i-1})/h + δ e (F_{i+2} - 2F_i + F_{i-2})/2h``.
  Fifth order needs d + 2e = 2α and d/12 + 2e/3 = α/3 (Taylor expansion), i.e. d = 4/9, e = 1/9
  (the slides print d = 4, e = 1: with the terms as printed that is inconsistent; 4/9 and 1/9 are
  the printed values times α/3). |δ| = 1/4; the sign is the upwind one: δ < 0 for a flux whose
  waves move towards +x (F⁺), δ > 0 for F⁻ (:func:`upwind_delta`, checked by the tests through the
  modified wavenumber).

Boundaries: ``periodic`` (a cyclic tridiagonal system) or ``closures`` — P4's matrix rows:
row 0 ``f'_0 + 3 f'_1 = (-17/6 f_0 + 3/2 f_1 + 3/2 f_2 - 1/6 f_3)/h`` (Lele's one-sided family with
α = 3, eq. 4.1.4: fourth order for this α, third for any other), row 1 the fourth-order Padé
``1/4 f'_0 + f'_1 + 1/4 f'_2 = 3/4 (f_2 - f_0)/h``, mirrored (with the sign of a derivative) at the
far end. The dissipative scheme uses the same boundary rows.
"""
from __future__ import annotations

import math

import numpy as np

ALPHA, A6, B6 = 1.0 / 3.0, 14.0 / 9.0, 1.0 / 9.0
D5, E5 = 4.0 / 9.0, 1.0 / 9.0
DELTA = 0.25
SCHEMES = ("compact6", "dissipative5")
BOUNDARIES = ("periodic", "closures")
# One-sided closure at the boundary point (α = 3) and the Padé row next to it.
CLOSURE0_ALPHA = 3.0
CLOSURE0_RHS = (-17.0 / 6.0, 1.5, 1.5, -1.0 / 6.0)
PADE_ALPHA, PADE_A = 0.25, 1.5


def upwind_delta(speed_sign: float) -> float:
    """δ of the dissipative scheme for a flux whose waves move with the given sign."""
    return -DELTA if speed_sign > 0 else DELTA


def bands(n: int, boundary: str, delta: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The matrix as three bands (float64): ``lower[i]`` multiplies f'_{i-1}, ``upper[i]`` f'_{i+1}.

    Periodic: ``lower[0]`` and ``upper[n-1]`` are the cyclic corner entries (f'_{n-1} in row 0,
    f'_0 in row n-1). Closures: ``lower[0] = upper[n-1] = 0``. ``delta`` = 0 is the central scheme.
    """
    if boundary not in BOUNDARIES:
        raise ValueError(f"unknown boundary {boundary!r}; allowed: {', '.join(BOUNDARIES)}")
    lower = np.full(n, ALPHA * (1.0 - delta))
    upper = np.full(n, ALPHA * (1.0 + delta))
    diag = np.ones(n)
    if boundary == "closures":
        if n < 8:
            raise ValueError(f"closures need at least 8 points, got {n}")
        lower[0], upper[0] = 0.0, CLOSURE0_ALPHA
        lower[1], upper[1] = PADE_ALPHA, PADE_ALPHA
        lower[-2], upper[-2] = PADE_ALPHA, PADE_ALPHA
        lower[-1], upper[-1] = CLOSURE0_ALPHA, 0.0
    elif n < 5:
        raise ValueError(f"the periodic scheme needs at least 5 points, got {n}")
    return lower, diag, upper


def dense(n: int, boundary: str, delta: float = 0.0) -> np.ndarray:
    """The full n×n matrix (tests)."""
    lower, diag, upper = bands(n, boundary, delta)
    a = np.diag(diag) + np.diag(lower[1:], -1) + np.diag(upper[:-1], 1)
    if boundary == "periodic":
        a[0, -1] += lower[0]
        a[-1, 0] += upper[-1]
    return a


def rhs(xp, f, h: float, boundary: str, delta: float = 0.0, axis: int = -1, out=None):
    """The explicit right-hand side r(f)/h along ``axis`` (whole-array slices; any dtype, xp-generic).

    The interior sums are written in one fixed order, which the stencil framework's version
    (engine/compact/rhs.py) repeats, so the two agree bit for bit on the host.
    """
    f = xp.moveaxis(f, axis, -1)
    dt = f.dtype.type
    inv_h = dt(1.0 / h)
    if out is None:
        out = xp.empty_like(f)
    else:
        out = xp.moveaxis(out, axis, -1)
    if boundary == "periodic":
        fm2, fm1 = xp.roll(f, 2, axis=-1), xp.roll(f, 1, axis=-1)
        fp1, fp2 = xp.roll(f, -1, axis=-1), xp.roll(f, -2, axis=-1)
        out[...] = interior(f, fm2, fm1, fp1, fp2, delta) * inv_h
        return xp.moveaxis(out, -1, axis)
    c = f[..., 2:-2]
    out[..., 2:-2] = interior(c, f[..., :-4], f[..., 1:-3], f[..., 3:-1], f[..., 4:], delta) * inv_h
    closure_rows(xp, f, out, inv_h)
    return xp.moveaxis(out, -1, axis)


def interior(c, fm2, fm1, fp1, fp2, delta: float):
    """The interior right-hand side times h, in the order the stencil repeats."""
    dt = c.dtype.type
    r = dt(A6 / 2) * (fp1 - fm1) + dt(B6 / 4) * (fp2 - fm2)
    if delta:
        two = dt(2.0)
        r = r + (dt(delta * D5) * ((fp1 + fm1) - two * c) + dt(delta * E5 / 2) * ((fp2 + fm2) - two * c))
    return r


def closure_rows(xp, f, out, inv_h) -> None:
    """Rows 0, 1, n-2, n-1 of the closed scheme (last axis)."""
    dt = f.dtype.type
    c0, c1, c2, c3 = (dt(v) for v in CLOSURE0_RHS)
    pa = dt(PADE_A / 2)
    out[..., 0] = (((c0 * f[..., 0] + c1 * f[..., 1]) + c2 * f[..., 2]) + c3 * f[..., 3]) * inv_h
    out[..., 1] = pa * (f[..., 2] - f[..., 0]) * inv_h
    out[..., -2] = pa * (f[..., -1] - f[..., -3]) * inv_h
    out[..., -1] = -(((c0 * f[..., -1] + c1 * f[..., -2]) + c2 * f[..., -3]) + c3 * f[..., -4]) * inv_h


def derivative_dense(f, h: float, boundary: str, delta: float = 0.0, axis: int = -1) -> np.ndarray:
    """f' by a general direct solve of the full matrix — the tests' ground truth for every solver: LU with
    partial pivoting of :func:`dense` (np.linalg.solve), or, where SciPy is installed, SuperLU's sparse
    LU with partial pivoting of the same entries (:func:`_solve_sparse`: the same answer to round-off
    in O(n); the dense LU of a 16384-point line is 2 GiB and ~2 minutes of one core)."""
    f = np.moveaxis(np.asarray(f, dtype=np.float64), axis, -1)
    r = rhs(np, f, h, boundary, delta)
    n = f.shape[-1]
    columns = r.reshape(-1, n).T
    x = _solve_sparse(n, boundary, delta, columns)
    if x is None:
        x = np.linalg.solve(dense(n, boundary, delta), columns)
    return np.moveaxis(x.T.reshape(f.shape), -1, axis)


def _solve_sparse(n: int, boundary: str, delta: float, columns) -> np.ndarray | None:
    """A⁻¹ columns by SciPy's SuperLU on :func:`dense`'s nonzero entries (None without SciPy)."""
    try:
        from scipy.sparse import coo_matrix  # optional dependency (SciPy): the dense solve otherwise
        from scipy.sparse.linalg import splu
    except ImportError:
        return None
    lower, diag, upper = bands(n, boundary, delta)
    i = np.arange(n)
    rows = [i, i[1:], i[:-1]]
    cols = [i, i[1:] - 1, i[:-1] + 1]
    vals = [diag, lower[1:], upper[:-1]]
    if boundary == "periodic":  # the corners; COO sums duplicates, as dense() adds them
        rows += [np.array([0]), np.array([n - 1])]
        cols += [np.array([n - 1]), np.array([0])]
        vals += [lower[:1], upper[-1:]]
    a = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)).tocsc()
    return splu(a).solve(np.ascontiguousarray(columns))


def modified_wavenumber(kh, delta: float = 0.0):
    """k'h of the periodic scheme (complex; real for the central scheme):
    ``(a sin kh + b/2 sin 2kh)/(1 + 2α cos kh)`` for δ = 0 (Lele 1992, eq. 2.1.4)."""
    kh = np.asarray(kh, dtype=np.float64)
    num = 1j * (A6 * np.sin(kh) + B6 / 2 * np.sin(2 * kh)) \
        + delta * (D5 * (2 * np.cos(kh) - 2) + E5 / 2 * (2 * np.cos(2 * kh) - 2))
    den = 1 + 2 * ALPHA * np.cos(kh) + 2j * ALPHA * delta * np.sin(kh)
    kp = -1j * num / den
    return kp if delta else kp.real


def max_modified_wavenumber(delta: float = 0.0, samples: int = 4097) -> float:
    kh = np.linspace(0, math.pi, samples)
    return float(np.max(np.abs(modified_wavenumber(kh, delta))))

"""Batched tridiagonal solvers for one matrix and many right-hand sides (P4), NumPy versions.

The matrix of a compact scheme never changes, so everything that depends only on it is computed
once, on the host, in float64 (:func:`factorise`): the LU factors of the Thomas algorithm, and the
elimination multipliers of every level of cyclic reduction (CR), parallel cyclic reduction (PCR)
and their hybrid (CR down to a small system, PCR on it, CR back up) — :class:`Schedule`. A solve
then touches only the right-hand sides. The CUDA kernels (shaders/cuda/compact/tridiag.cu) run the
same algorithms with the same operation order; these NumPy versions are their CPU reference and
what the NumPy backend runs.

Periodic (cyclic) systems are solved by Sherman–Morrison: A = A' + u vᵀ with
u = (γ, 0, …, 0, β_c)ᵀ, v = (1, 0, …, 0, α_c/γ)ᵀ, γ = -b_0, where α_c = A[0, n-1], β_c = A[n-1, 0];
A' is tridiagonal. x = y - q (y_0 + r y_{n-1}) z with A' y = d, A' z = u, r = α_c/γ,
q = 1/(1 + v·z). The Thomas kernel folds the correction into its two sweeps: y_0 = Σ w_i g_i
(w = row 0 of U⁻¹, g the forward sweep), so the correction factor is known before the back
substitution starts and no third pass over the line is needed.

All functions take right-hand sides as ``d[..., n]`` (systems along the last axis).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SOLVERS = ("thomas", "cr", "pcr", "cr-pcr", "scan")
HYBRID_SIZE = 32  # the CR–PCR hybrid reduces by CR until at most this many equations remain


@dataclass
class Factors:
    n: int
    periodic: bool
    lower: np.ndarray  # bands of A (periodic: of A', corners removed)
    diag: np.ndarray
    upper: np.ndarray
    l: np.ndarray  # Thomas: L multipliers (l[0] = 0)
    inv_d: np.ndarray  # 1/D
    z: np.ndarray  # periodic: A' z = u (zeros otherwise)
    w: np.ndarray  # periodic: row 0 of U⁻¹ (zeros otherwise)
    r: float = 0.0
    q: float = 0.0


def factorise(lower, diag, upper, periodic: bool) -> Factors:
    """Factors of the tridiagonal (or cyclic tridiagonal) matrix given by its bands (schemes.bands)."""
    lower, diag, upper = (np.array(v, dtype=np.float64) for v in (lower, diag, upper))
    n = diag.size
    r = 0.0
    if periodic:
        alpha_c, beta_c = lower[0], upper[-1]
        gamma = -diag[0]
        diag[0] -= gamma
        diag[-1] -= alpha_c * beta_c / gamma
        r = alpha_c / gamma
    lower[0] = upper[-1] = 0.0
    l = np.zeros(n)
    d = np.empty(n)
    d[0] = diag[0]
    for i in range(1, n):
        l[i] = lower[i] / d[i - 1]
        d[i] = diag[i] - l[i] * upper[i - 1]
    inv_d = 1.0 / d
    z = np.zeros(n)
    w = np.zeros(n)
    fac = Factors(n, periodic, lower, diag, upper, l, inv_d, z, w)
    if periodic:
        u = np.zeros(n)
        u[0], u[-1] = gamma, beta_c
        fac.z = _thomas_plain(fac, u[None, :])[0]
        w[0] = inv_d[0]
        for i in range(1, n):
            w[i] = -upper[i - 1] * w[i - 1] * inv_d[i]
        fac.w = w
        fac.r = r
        fac.q = 1.0 / (1.0 + fac.z[0] + r * fac.z[-1])
    return fac


def _thomas_plain(fac: Factors, d):
    x = np.array(d, dtype=np.float64)
    for i in range(1, fac.n):
        x[..., i] -= fac.l[i] * x[..., i - 1]
    x[..., -1] *= fac.inv_d[-1]
    for i in range(fac.n - 2, -1, -1):
        x[..., i] = (x[..., i] - fac.upper[i] * x[..., i + 1]) * fac.inv_d[i]
    return x


def thomas(fac: Factors, d, dtype=None):
    """Thomas with the kernel's operation order (``dtype``: the arithmetic's precision)."""
    dt = np.dtype(dtype or np.asarray(d).dtype)
    d = np.asarray(d, dtype=dt)
    if dt == np.float64 and d.size == fac.n:
        return _thomas_scalar(fac, d)
    c = _cast(fac, dt)
    n = fac.n
    g = np.empty_like(d)
    g[..., 0] = d[..., 0]
    acc = c["w"][0] * g[..., 0]
    for i in range(1, n):
        g[..., i] = d[..., i] - c["l"][i] * g[..., i - 1]
        if fac.periodic:
            acc = acc + c["w"][i] * g[..., i]
    out = np.empty_like(d)
    y = g[..., -1] * c["inv_d"][-1]
    if fac.periodic:
        s = c["q"] * (acc + c["r"] * y)
        out[..., -1] = y - s * c["z"][-1]
    else:
        out[..., -1] = y
    for i in range(n - 2, -1, -1):
        y = (g[..., i] - c["upper"][i] * y) * c["inv_d"][i]
        out[..., i] = y - s * c["z"][i] if fac.periodic else y
    return out


def _thomas_scalar(fac: Factors, d):
    """One float64 system: the same operations on Python floats (IEEE double, no FMA: the same
    bits as the vectorised loop), ~20× faster than NumPy's per-element overhead on 1D problems."""
    n = fac.n
    dl = d.ravel().tolist()
    lf, inv_d, up, z, w = (v.tolist() for v in (fac.l, fac.inv_d, fac.upper, fac.z, fac.w))
    g = [0.0] * n
    g[0] = gi = dl[0]
    acc = w[0] * gi
    for i in range(1, n):
        gi = dl[i] - lf[i] * gi
        g[i] = gi
        acc = acc + w[i] * gi
    out = [0.0] * n
    y = gi * inv_d[-1]
    s = fac.q * (acc + fac.r * y) if fac.periodic else 0.0
    out[-1] = y - s * z[-1] if fac.periodic else y
    for i in range(n - 2, -1, -1):
        y = (g[i] - up[i] * y) * inv_d[i]
        out[i] = y - s * z[i] if fac.periodic else y
    return np.array(out, dtype=np.float64).reshape(d.shape)


def _cast(fac: Factors, dt) -> dict:
    t = dt.type
    return {"l": fac.l.astype(dt), "inv_d": fac.inv_d.astype(dt), "upper": fac.upper.astype(dt),
            "z": fac.z.astype(dt), "w": fac.w.astype(dt), "r": t(fac.r), "q": t(fac.q)}


# ---- cyclic reduction, parallel cyclic reduction and their hybrid ---------------------------------
@dataclass
class Schedule:
    """Precomputed reduction of one matrix: ``lc`` CR levels (multipliers ``k1c``, ``k2c`` [lc, n];
    back substitution coefficients ``ca``, ``cc``, ``cinvb`` [n]), then ``p`` PCR steps on the
    equations left (stride 2^lc; multipliers ``k1p``, ``k2p`` [p, n]; ``pinvb`` [n])."""

    n: int
    lc: int
    p: int
    k1c: np.ndarray
    k2c: np.ndarray
    ca: np.ndarray
    cc: np.ndarray
    cinvb: np.ndarray
    k1p: np.ndarray
    k2p: np.ndarray
    pinvb: np.ndarray

    def packed(self) -> np.ndarray:
        """One array in the order the kernel reads it (float64)."""
        return np.concatenate([self.k1c.ravel(), self.k2c.ravel(), self.ca, self.cc, self.cinvb,
                               self.k1p.ravel(), self.k2p.ravel(), self.pinvb])


def cr_levels(kind: str, n: int) -> int:
    """CR levels of a solver: all of them (cr), none (pcr), or down to ≤ HYBRID_SIZE equations."""
    full = int(math.floor(math.log2(n)))
    if kind == "cr":
        return full
    if kind == "pcr":
        return 0
    if kind == "cr-pcr":
        lc = 0
        while n >> lc > HYBRID_SIZE:
            lc += 1
        return min(lc, full)
    raise ValueError(f"unknown reduction solver {kind!r}")


def schedule(fac: Factors, kind: str) -> Schedule:
    n = fac.n
    a, b, c = fac.lower.copy(), fac.diag.copy(), fac.upper.copy()
    lc = cr_levels(kind, n)
    k1c, k2c = np.zeros((lc, n)), np.zeros((lc, n))
    for lev in range(lc):
        s = 1 << lev
        i = np.arange(2 * s - 1, n, 2 * s)
        ip = i + s
        ok = ip < n
        k1 = a[i] / b[i - s]
        k2 = np.zeros(i.size)
        k2[ok] = c[i[ok]] / b[ip[ok]]
        a_left, c_left = a[i - s], c[i - s]
        a_right, c_right = np.zeros(i.size), np.zeros(i.size)
        a_right[ok], c_right[ok] = a[ip[ok]], c[ip[ok]]
        b[i] = b[i] - k1 * c_left - k2 * a_right
        a[i] = -k1 * a_left
        c[i] = -k2 * c_right
        k1c[lev, i], k2c[lev, i] = k1, k2
    ca, cc, cinvb = a.copy(), c.copy(), 1.0 / b
    # PCR on the members i = (j+1)·S - 1 (stride S = 2^lc)
    stride = 1 << lc
    idx = np.arange(stride - 1, n, stride)
    m = idx.size
    p = int(math.ceil(math.log2(m))) if m > 1 else 0
    ra, rb, rc = a[idx].copy(), b[idx].copy(), c[idx].copy()
    k1p, k2p = np.zeros((p, n)), np.zeros((p, n))
    for step in range(p):
        t = 1 << step
        j = np.arange(m)
        lo, hi = j - t, j + t
        okl, okh = lo >= 0, hi < m
        k1, k2 = np.zeros(m), np.zeros(m)
        k1[okl] = ra[okl] / rb[lo[okl]]
        k2[okh] = rc[okh] / rb[hi[okh]]
        na, nb, nc = np.zeros(m), rb.copy(), np.zeros(m)
        na[okl] = -k1[okl] * ra[lo[okl]]
        nb[okl] -= k1[okl] * rc[lo[okl]]
        nb[okh] -= k2[okh] * ra[hi[okh]]
        nc[okh] = -k2[okh] * rc[hi[okh]]
        ra, rb, rc = na, nb, nc
        k1p[step, idx], k2p[step, idx] = k1, k2
    pinvb = np.zeros(n)
    pinvb[idx] = 1.0 / rb
    return Schedule(n, lc, p, k1c, k2c, ca, cc, cinvb, k1p, k2p, pinvb)


def reduce_solve(sched: Schedule, d, fac: Factors | None = None, dtype=None):
    """CR / PCR / hybrid solve with the kernel's operation order; periodic correction if ``fac`` is
    periodic."""
    dt = np.dtype(dtype or np.asarray(d).dtype)
    x = np.array(d, dtype=dt)
    n = sched.n
    k1c, k2c = sched.k1c.astype(dt), sched.k2c.astype(dt)
    for lev in range(sched.lc):
        s = 1 << lev
        i = np.arange(2 * s - 1, n, 2 * s)
        ip = i + s
        right = np.zeros(x.shape[:-1] + (i.size,), dt)
        ok = ip < n
        right[..., ok] = x[..., ip[ok]]
        x[..., i] = x[..., i] - (k1c[lev, i] * x[..., i - s] + k2c[lev, i] * right)
    stride = 1 << sched.lc
    idx = np.arange(stride - 1, n, stride)
    m = idx.size
    cur = x[..., idx]
    k1p, k2p = sched.k1p.astype(dt), sched.k2p.astype(dt)
    for step in range(sched.p):
        tt = 1 << step
        left = np.zeros_like(cur)
        right = np.zeros_like(cur)
        left[..., tt:] = cur[..., : m - tt]
        right[..., : m - tt] = cur[..., tt:]
        cur = cur - (k1p[step, idx] * left + k2p[step, idx] * right)
    x[..., idx] = cur * sched.pinvb.astype(dt)[idx]
    ca, cc, cinvb = sched.ca.astype(dt), sched.cc.astype(dt), sched.cinvb.astype(dt)
    for lev in range(sched.lc - 1, -1, -1):
        s = 1 << lev
        i = np.arange(s - 1, n, 2 * s)
        lo, hi = i - s, i + s
        left = np.zeros(x.shape[:-1] + (i.size,), dt)
        right = np.zeros_like(left)
        okl, okh = lo >= 0, hi < n
        left[..., okl] = x[..., lo[okl]]
        right[..., okh] = x[..., hi[okh]]
        x[..., i] = (x[..., i] - (ca[i] * left + cc[i] * right)) * cinvb[i]
    if fac is not None and fac.periodic:
        x = periodic_correction(fac, x, dt)
    return x


def periodic_correction(fac: Factors, y, dt):
    t = np.dtype(dt).type
    s = t(fac.q) * (y[..., :1] + t(fac.r) * y[..., -1:])
    return y - s * fac.z.astype(dt)


def prepare(fac: Factors, kind: str):
    """What a solver precomputes from the matrix: the reduction :class:`Schedule` (cr, pcr, cr-pcr),
    the scan.ScanPlan (scan), None for the others."""
    if kind in ("cr", "pcr", "cr-pcr"):
        return schedule(fac, kind)
    if kind == "scan":
        from . import scan

        return scan.plan(fac)
    return None


def solve(kind: str, fac: Factors, d, sched: Schedule | None = None, dtype=None):
    """Solve with a named solver (NumPy); ``sched``: the reduction :class:`Schedule` or, for ``scan``,
    the scan.ScanPlan (made here when None)."""
    if kind == "thomas":
        return thomas(fac, d, dtype)
    if kind == "scan":
        from . import scan

        return scan.solve(sched or scan.plan(fac), d, dtype)
    if sched is None:
        sched = schedule(fac, kind)
    return reduce_solve(sched, d, fac, dtype)

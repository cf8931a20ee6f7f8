"""The factorisation of a compact scheme's tridiagonal (or cyclic tridiagonal) matrix (P4).

The matrix of a compact scheme never changes, so everything that depends only on it is computed
once, on the host, in float64 (:func:`factorise`): the LU factors of the Thomas algorithm and, for
periodic lines, the Sherman–Morrison terms. What each solver precomputes on top of these and how it
solves a batch of lines: engine/compact/solvers/ (one module per ``solver`` choice).

Periodic (cyclic) systems are solved by Sherman–Morrison: A = A' + u vᵀ with
u = (γ, 0, …, 0, β_c)ᵀ, v = (1, 0, …, 0, α_c/γ)ᵀ, γ = -b_0, where α_c = A[0, n-1], β_c = A[n-1, 0];
A' is tridiagonal. x = y - q (y_0 + r y_{n-1}) z with A' y = d, A' z = u, r = α_c/γ,
q = 1/(1 + v·z). The Thomas kernel folds the correction into its two sweeps: y_0 = Σ w_i g_i
(w = row 0 of U⁻¹, g the forward sweep), so the correction factor is known before the back
substitution starts and no third pass over the line is needed.

Right-hand sides are ``d[..., n]`` (systems along the last axis).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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

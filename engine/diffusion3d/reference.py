"""Array-level 3D diffusion: the NumPy reference, written against ``xp`` so it runs on CuPy too.

Also the analytic solution of a sine mode, used by the validation tests.
"""
from __future__ import annotations

import math


def diffuse_periodic(xp, f, out, r):
    """out = f + r·(Σ neighbours − 6f) with periodic wrap; the summation order matches the CUDA kernel."""
    xm, xp_ = xp.roll(f, 1, axis=2), xp.roll(f, -1, axis=2)
    ym, yp = xp.roll(f, 1, axis=1), xp.roll(f, -1, axis=1)
    zm, zp = xp.roll(f, 1, axis=0), xp.roll(f, -1, axis=0)
    out[...] = f + r * (((xm + xp_) + (ym + yp)) + (zm + zp) - f.dtype.type(6) * f)
    return out


def diffuse_fixed(xp, f, out, r):
    """Interior update; the outermost points keep their values (Dirichlet)."""
    c = f[1:-1, 1:-1, 1:-1]
    out[1:-1, 1:-1, 1:-1] = c + r * (
        ((f[1:-1, 1:-1, :-2] + f[1:-1, 1:-1, 2:]) + (f[1:-1, :-2, 1:-1] + f[1:-1, 2:, 1:-1]))
        + (f[:-2, 1:-1, 1:-1] + f[2:, 1:-1, 1:-1]) - f.dtype.type(6) * c)
    return out


def wavenumbers(shape, dx, mode, periodic):
    """k per axis (x, y, z) of the sine mode on this grid."""
    nz, ny, nx = shape
    ks = []
    for n, m in zip((nx, ny, nz), mode):
        length = n * dx if periodic else (n - 1) * dx
        ks.append((2 if periodic else 1) * math.pi * m / length)
    return ks


def sine_mode(xp, shape, dx, mode, periodic, amplitude=1.0, dtype=None):
    """A·Π_a sin(k_a x_a) over axes with m_a > 0 (axes with m_a = 0 are uniform)."""
    nz, ny, nx = shape
    kx, ky, kz = wavenumbers(shape, dx, mode, periodic)
    # Phase shift for periodic boxes so the mode is not zero on a whole plane (any phase decays alike).
    phase = math.pi / 7 if periodic else 0.0

    def axis(n, k, m):
        x = xp.arange(n, dtype=xp.float64) * dx
        return xp.sin(k * x + phase) if m > 0 else xp.ones(n, dtype=xp.float64)

    f = amplitude * (axis(nz, kz, mode[2])[:, None, None] * axis(ny, ky, mode[1])[None, :, None]
                     * axis(nx, kx, mode[0])[None, None, :])
    return f.astype(dtype or xp.float64)


def analytic_decay(shape, dx, mode, periodic, kappa, t):
    """Continuous solution: each sine mode decays as exp(−κ|k|²t)."""
    k2 = sum(k * k for k in wavenumbers(shape, dx, mode, periodic))
    return math.exp(-kappa * k2 * t)


def discrete_decay(shape, dx, mode, periodic, r, steps):
    """Exact decay of the mode under the discrete scheme: (1 − 4r Σ sin²(k_a Δx/2))^steps."""
    lam = sum(math.sin(k * dx / 2) ** 2 for k in wavenumbers(shape, dx, mode, periodic))
    return (1 - 4 * r * lam) ** steps

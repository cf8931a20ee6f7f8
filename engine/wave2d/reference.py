"""Array-level leapfrog for the 2D wave equation (independent of the stencil framework), and the
exact discrete and continuous standing-wave solutions used by the validation tests."""
from __future__ import annotations

import math


def leapfrog_periodic(xp, u, u_prev, out, c2):
    """out = 2u − u_prev + C²(Σ neighbours − 4u), periodic; same operation order as the stencil."""
    lap = ((xp.roll(u, 1, axis=1) + xp.roll(u, -1, axis=1)) + (xp.roll(u, 1, axis=0) + xp.roll(u, -1, axis=0))) \
        - u.dtype.type(4) * u
    out[...] = (u.dtype.type(2) * u - u_prev) + c2 * lap
    return out


def leapfrog_fixed(xp, u, u_prev, out, c2):
    """Interior update; the outermost points keep their values."""
    c = u[1:-1, 1:-1]
    lap = ((u[1:-1, :-2] + u[1:-1, 2:]) + (u[:-2, 1:-1] + u[2:, 1:-1])) - u.dtype.type(4) * c
    out[1:-1, 1:-1] = (u.dtype.type(2) * c - u_prev[1:-1, 1:-1]) + c2 * lap
    return out


def wavenumbers(shape, dx, mode, periodic):
    ny, nx = shape
    ks = []
    for n, m in zip((nx, ny), mode):
        length = n * dx if periodic else (n - 1) * dx
        ks.append((2 if periodic else 1) * math.pi * m / length)
    return ks


def standing_mode(xp, shape, dx, mode, periodic, amplitude=1.0):
    ny, nx = shape
    kx, ky = wavenumbers(shape, dx, mode, periodic)
    phase = math.pi / 7 if periodic else 0.0

    def axis(n, k, m):
        x = xp.arange(n, dtype=xp.float64) * dx
        return xp.sin(k * x + phase) if m > 0 else xp.ones(n, dtype=xp.float64)

    return amplitude * axis(ny, ky, mode[1])[:, None] * axis(nx, kx, mode[0])[None, :]


def discrete_theta(shape, dx, mode, periodic, courant):
    """Phase advance per step of the mode under leapfrog: cos θ = 1 − 2C² Σ sin²(k_a Δx/2)."""
    s = sum(math.sin(k * dx / 2) ** 2 for k in wavenumbers(shape, dx, mode, periodic))
    return math.acos(1 - 2 * courant ** 2 * s)


def analytic_omega(shape, dx, mode, periodic, c):
    return c * math.sqrt(sum(k * k for k in wavenumbers(shape, dx, mode, periodic)))

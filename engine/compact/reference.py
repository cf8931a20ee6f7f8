"""Initial profiles and exact solutions of the compact family's problems (xp-generic), and a
stand-alone NumPy solution of the 1D advection problems (dense solves, no engine) for the tests."""
from __future__ import annotations

import math

import numpy as np

from . import schemes


def profile(xp, init, x, y, grid, two_d: bool):
    """φ₀ at coordinates x (..., nx) and y (..., ny broadcastable); (ny, nx) result."""
    lx, ly = grid.x1 - grid.x0, grid.y1 - grid.y0
    kind = init.kind
    if kind == "cosine-power":
        fx = ((1 - xp.cos(2 * math.pi * (x - grid.x0) / lx)) / 2) ** init.power
        fy = ((1 - xp.cos(2 * math.pi * (y - grid.y0) / ly)) / 2) ** init.power if two_d else 1.0
        return init.amplitude * fx * fy
    if kind == "sine":
        fx = xp.sin(2 * math.pi * init.mode * (x - grid.x0) / lx)
        fy = xp.sin(2 * math.pi * init.mode * (y - grid.y0) / ly + 0.3) if two_d else 1.0
        return init.amplitude * fx * fy
    if kind == "square":
        return init.amplitude * ((x >= init.lo) & (x <= init.hi)) * (y == y)
    if kind == "box":
        bx0, bx1, by0, by1 = init.box
        return init.amplitude * ((x >= bx0) & (x <= bx1) & (y >= by0) & (y <= by1))
    if kind == "cone":
        (cx, cy), r = init.cone_center, init.cone_radius
        dist = xp.sqrt((x - cx) ** 2 + (y - cy) ** 2)
        return init.amplitude * xp.maximum(0.0, 1.0 - dist / r)
    raise ValueError(f"no analytic profile for initial.kind = {kind!r}")


def has_exact(preset) -> bool:
    return preset.initial.kind != "random" and preset.physics.problem != "derivative"


def exact(xp, preset, x, y, t: float):
    """The exact solution at time t on coordinates x (1, nx) and y (ny, 1): φ₀ carried by the flow
    (advection1d: shifted by c·t, periodic extension of the domain; rotation2d: rotated by ω·t)."""
    g, p = preset.grid, preset.physics
    if p.problem == "advection1d":
        lx = g.x1 - g.x0
        xs = g.x0 + xp.mod(x - p.speed * t - g.x0, lx)
        return profile(xp, preset.initial, xs, y, g, False) + 0 * y
    a = p.omega * t
    ca, sa = math.cos(a), math.sin(a)
    xs = x * ca + y * sa
    ys = -x * sa + y * ca
    return profile(xp, preset.initial, xs, ys, g, True)


# ---- stand-alone reference (tests): 1D advection with dense solves and RK4 --------------------------
def advect_dense(phi0, h: float, c: float, dt: float, steps: int, boundary: str, scheme: str):
    """φ after ``steps`` RK4 steps of φ_t + c φ_x = 0 using np.linalg.solve for every derivative."""
    n = phi0.size
    if scheme == "compact6":
        halves = [(c, 0.0)]
    else:
        lam = abs(c)
        halves = [(0.5 * (c + lam), schemes.upwind_delta(+1)), (0.5 * (c - lam), schemes.upwind_delta(-1))]
    inv = {d: np.linalg.inv(schemes.dense(n, boundary, d)) for _, d in halves}

    def rate(f):
        k = np.zeros_like(f)
        for w, d in halves:
            if w:
                k -= w * (inv[d] @ schemes.rhs(np, f, h, boundary, d))
        if boundary == "closures":
            k[0 if c > 0 else -1] = 0.0
        return k

    phi = np.array(phi0, dtype=np.float64)
    for _ in range(steps):
        k1 = rate(phi)
        k2 = rate(phi + dt / 2 * k1)
        k3 = rate(phi + dt / 2 * k2)
        k4 = rate(phi + dt * k3)
        phi = phi + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return phi

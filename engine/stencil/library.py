"""Built-in stencils (used by the diffusion3d and wave2d engines and `nagare stencil show`)."""
from __future__ import annotations

from .definition import stencil


@stencil(inputs=["f"], outputs=["fn"], params=["r"], halo=1, ndim=3)
def diffusion7(f, r):
    """3D diffusion, 7 points, explicit Euler; r = κΔt/Δx². Same summation order as
    engine/diffusion3d/reference.py, so the results agree bit for bit."""
    c = f[0, 0, 0]
    return c + r * (((f[-1, 0, 0] + f[1, 0, 0]) + (f[0, -1, 0] + f[0, 1, 0])) + (f[0, 0, -1] + f[0, 0, 1]) - 6.0 * c)


@stencil(inputs=["u", "u_prev"], outputs=["u_next"], params=["c2"], halo=1, ndim=2)
def wave2d(u, u_prev, c2):
    """2D wave equation u_tt = c²∇²u, leapfrog (second order in time and space); c2 = (cΔt/Δx)²."""
    c = u[0, 0]
    return 2.0 * c - u_prev[0, 0] + c2 * (((u[-1, 0] + u[1, 0]) + (u[0, -1] + u[0, 1])) - 4.0 * c)


LIBRARY = {s.name: s for s in (diffusion7, wave2d)}

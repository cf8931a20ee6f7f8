"""SPH smoothing kernels as DualSPHysics writes them (support radius r_c = 2h).

Each kernel gives W(r) and F(r) with ∇_i W_ij = F(r_ij)·(r_i − r_j), which is the form the
interaction uses (one scalar per pair, times the pair's displacement vector).
"""
from __future__ import annotations

import math


def wendland_alpha(h: float, dim: int) -> float:
    """Wendland C2 normalisation: 7/(4πh²) in 2D, 21/(16πh³) in 3D."""
    return 7.0 / (4.0 * math.pi * h * h) if dim == 2 else 21.0 / (16.0 * math.pi * h ** 3)


def cubic_alpha(h: float, dim: int) -> float:
    """Cubic spline (Monaghan & Lattanzio 1985) normalisation: 10/(7πh²) 2D, 1/(πh³) 3D."""
    return 10.0 / (7.0 * math.pi * h * h) if dim == 2 else 1.0 / (math.pi * h ** 3)


def wendland_w(xp, r, h, dim):
    q = r / h
    a = wendland_alpha(h, dim)
    t = xp.clip(1.0 - 0.5 * q, 0.0, None)
    return a * t ** 4 * (2.0 * q + 1.0)


def wendland_f(xp, r, h, dim):
    """F = (dW/dr)/r = −5α/h² · (1 − q/2)³ (finite at r = 0, so no division by r)."""
    q = r / h
    t = xp.clip(1.0 - 0.5 * q, 0.0, None)
    return (-5.0 * wendland_alpha(h, dim) / (h * h)) * t ** 3


def cubic_w(xp, r, h, dim):
    q = r / h
    a = cubic_alpha(h, dim)
    inner = 1.0 - 1.5 * q * q + 0.75 * q ** 3
    outer = 0.25 * xp.clip(2.0 - q, 0.0, None) ** 3
    return a * xp.where(q < 1.0, inner, outer)


def cubic_f(xp, r, h, dim):
    """(dW/dr)/r; dW/dq = −3q + 9/4 q² (q<1), −3/4 (2−q)² (1≤q<2); /r = /(q·h)."""
    q = r / h
    a = cubic_alpha(h, dim)
    inner = (-3.0 + 2.25 * q) / (h * h)  # (−3q + 2.25q²)/(q h²): the q cancels, finite at 0
    safe_q = xp.where(q > 0, q, 1.0)
    outer = -0.75 * xp.clip(2.0 - q, 0.0, None) ** 2 / (safe_q * h * h)
    return a * xp.where(q < 1.0, inner, outer)


KERNELS = {"wendland": (wendland_w, wendland_f), "cubic": (cubic_w, cubic_f)}

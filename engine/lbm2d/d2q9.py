"""The D2Q9 velocity set as data (XLB's "velocity sets as data"): one place for c, w and opp.

Order and numbering are fixed by docs/lbm2d.md (the step semantics every lbm2d variant shares);
the CUDA header shaders/cuda/lbm2d/d2q9.cuh spells out the same tables.
"""
from __future__ import annotations

import numpy as np

Q = 9
# (cx, cy) per direction: rest, the four axis directions, the four diagonals.
C = np.array([(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (1, 1), (-1, 1), (-1, -1), (1, -1)], dtype=np.int64)
CX = C[:, 0]
CY = C[:, 1]
W = np.array([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4, dtype=np.float64)
OPP = np.array([0, 3, 4, 1, 2, 7, 8, 5, 6], dtype=np.int64)
CS2 = 1.0 / 3.0  # lattice speed of sound squared

# Node codes of the mask (uint8, shape (ny, nx)).
FLUID, SOLID, MOVING_WALL, INLET, OUTLET = 0, 1, 2, 3, 4


def viscosity(tau: float) -> float:
    """Kinematic viscosity of BGK with relaxation time τ: ν = (τ − ½)/3 (lattice units)."""
    return (tau - 0.5) * CS2


def tau_for(nu: float) -> float:
    return 3.0 * nu + 0.5


def _check() -> None:
    assert np.all(C[OPP] == -C)
    np.testing.assert_allclose(W.sum(), 1.0, rtol=1e-15)
    np.testing.assert_allclose((W[:, None] * C).sum(0), 0.0, atol=1e-15)


_check()

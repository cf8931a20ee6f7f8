"""The reference step on one level of leaves (any xp): pull streaming through a gather table, then
BGK with P0's body force (or the MRT / Smagorinsky / CSM operators of collision.py) — the operations of
shaders/cuda/amr3d (ladder.cu, d3q27.cuh).

The gather table is plain data built once from the neighbour table (kernels and reference never
search a tree): sources[q, leaf·m³ + p] is where direction q of point p of that leaf pulls from,
as a flat index into f[q] (shape (nleaf, m, m, m)). A point's own leaf serves the pull when the
source stays inside it; otherwise the same-level neighbour across the face, edge or corner, whose
shared face node makes x−1 its index m−2.
"""
from __future__ import annotations

import numpy as np

from . import collision, d3q27


def gather_sources(nbr: np.ndarray, m: int) -> np.ndarray:
    """int64 (27, nleaf·m³) flat source indices for the pull step (host NumPy)."""
    nleaf = nbr.shape[0]
    m3 = m**3
    k, j, i = (a.ravel() for a in np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij"))
    out = np.empty((d3q27.Q, nleaf, m3), np.int64)
    for q, (cx, cy, cz) in enumerate(d3q27.C):
        src, off = [], []
        for idx, c in ((i, cx), (j, cy), (k, cz)):
            s = idx - c
            n = np.where(s < 0, -1, np.where(s > m - 1, 1, 0))
            src.append(s - n * (m - 1))
            off.append(n)
        slot = (off[2] + 1) * 9 + (off[1] + 1) * 3 + (off[0] + 1)
        local = (src[2] * m + src[1]) * m + src[0]
        out[q] = nbr[:, slot].astype(np.int64) * m3 + local[None, :]
    return out.reshape(d3q27.Q, nleaf * m3)


def collide(xp, f, omega, accel, model=None, coef=None):
    """BGK with P0's force term on f[27, ...] (a new array), in the kernels' operation order.
    ``model`` (collision.Collision): MRT and/or Smagorinsky or CSM in the same order
    (collision.collide_kernels; ``coef`` the CSM's C per point); None or P0's BGK takes the code
    below, unchanged."""
    if model is not None and not model.plain:
        return collision.collide_kernels(xp, f, omega, accel, model, coef=coef)
    c = d3q27.C
    w = xp.asarray(d3q27.W, dtype=f.dtype).reshape((-1,) + (1,) * (f.ndim - 1))
    rho = f.sum(axis=0)
    mom = [sum(int(c[q, a]) * f[q] for q in range(d3q27.Q) if c[q, a]) for a in range(3)]
    ux, uy, uz = (mm / rho for mm in mom)
    usq = 1.5 * (ux * ux + uy * uy + uz * uz)
    out = xp.empty_like(f)
    ax, ay, az = accel
    for q in range(d3q27.Q):
        cu = int(c[q, 0]) * ux + int(c[q, 1]) * uy + int(c[q, 2]) * uz
        feq = w[q] * rho * (1 + 3 * cu + 4.5 * cu * cu - usq)
        ca = float(c[q, 0] * ax + c[q, 1] * ay + c[q, 2] * az)
        out[q] = f[q] - omega * (f[q] - feq) + 3 * w[q] * rho * ca
    return out


def step(xp, f, sources, omega, accel, model=None, coef=None, copies=None):
    """One pull + collide step of f[27, nleaf, m, m, m]; returns the new array. With the CSM
    (model.les = csm) the coefficient per point comes from the pulled populations
    (collision.csm_coefficient, with the shared ``copies`` taking their owner's value:
    ladder.shared_copies) unless ``coef`` (nleaf, m, m, m) is given (a tree's level, whose
    interface points see other populations: tree_stepper.NumpyKernels)."""
    flat = f.reshape(d3q27.Q, -1)
    g = xp.take_along_axis(flat, sources, axis=1)
    if model is not None and model.csm:
        if coef is None:
            coef = collision.csm_coefficient(xp, g.reshape(f.shape), copies)
        coef = coef.reshape(-1)
    return collide(xp, g, f.dtype.type(omega), accel, model, coef).reshape(f.shape)


def macroscopic(xp, f):
    """(rho, ux, uy, uz) of f[27, ...]."""
    c = d3q27.C
    rho = f.sum(axis=0)
    u = [sum(int(c[q, a]) * f[q] for q in range(d3q27.Q) if c[q, a]) / rho for a in range(3)]
    return rho, u[0], u[1], u[2]


def equilibrium(xp, rho, ux, uy, uz):
    """f_eq[27, ...] of the given moments."""
    c = d3q27.C
    usq = 1.5 * (ux * ux + uy * uy + uz * uz)
    out = xp.empty((d3q27.Q, *rho.shape), rho.dtype)
    for q in range(d3q27.Q):
        cu = int(c[q, 0]) * ux + int(c[q, 1]) * uy + int(c[q, 2]) * uz
        out[q] = d3q27.W[q] * rho * (1 + 3 * cu + 4.5 * cu * cu - usq)
    return out

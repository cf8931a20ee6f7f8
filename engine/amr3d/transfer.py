"""State transfer when the tree changes: every leaf of the new forest takes its populations from
the old one (host NumPy, per-leaf loop; the step never runs this).

- unchanged leaf → copied.
- new leaf inside an old, coarser leaf (refinement) → prolongation: trilinear interpolation of f
  from the old leaf's nodes (exact on coincident nodes), then the non-equilibrium part rescaled
  from the old level to the new (levels.rescale).
- new leaf covering old, finer leaves (coarsening) → restriction: injection of the coincident
  node of the finest old leaf that has it, rescaled to the new level.

Mass (the trapezoidal ∫ρ dV of reference.mass): prolongation conserves it exactly (to round-off):
ρ of the interpolated f is the interpolated ρ, rescaling leaves ρ unchanged, and the trapezoidal
rule on the fine nodes integrates the coarse leaf's trilinear interpolant exactly (it is trilinear
on every fine cell). Restriction by injection does not: it drops the fine field's deviation from
a trilinear one, an O(h² ∇²ρ) change per coarsened leaf; it is exact when the fine data are
trilinear on the coarse cells (e.g. a refine immediately undone).
"""
from __future__ import annotations

import numpy as np

from . import d3q27, levels
from .tree import Forest


def _node_positions(forest: Forest, leaf: int) -> np.ndarray:
    m = forest.m
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    ijk = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)
    return forest.origin[leaf] + ijk * forest.spacing[leaf]


def transfer(old: Forest, new: Forest, f_old: np.ndarray, tau0: float, accel0=(0.0, 0.0, 0.0)) -> np.ndarray:
    """f on ``new`` from f_old (Q, L_old, m, m, m) on ``old`` (same roots, m, max_level, periodicity)."""
    if (old.roots, old.m, old.max_level, old.periodic) != (new.roots, new.m, new.max_level, new.periodic):
        raise ValueError("transfer needs forests of the same roots, m, max_level and periodicity")
    m, m3, Q = new.m, new.m ** 3, d3q27.Q
    f_old = np.asarray(f_old)
    src = f_old.reshape(Q, -1)
    out = np.empty((Q, new.n_leaves, m, m, m), f_old.dtype)
    same = old.find(new.level, new.block)
    for leaf in range(new.n_leaves):
        lv = int(new.level[leaf])
        if same[leaf] >= 0:
            out[:, leaf] = f_old[:, same[leaf]]
            continue
        cov, cl = old.cover(lv, new.block[leaf][None])
        pos, _ = new.wrap_points(_node_positions(new, leaf))
        if cov[0] >= 0:  # refinement: interpolate from the old coarser leaf
            vals = _prolong(old, int(cov[0]), pos, src)
            vals = levels.rescale(np, vals, tau0, int(cl[0]), lv, accel0)
        else:  # coarsening: inject from the finest old leaf having each node
            vals = np.empty((Q, m3), f_old.dtype)
            todo = np.ones(m3, bool)
            for olv in range(old.max_level, lv, -1):
                if not todo.any():
                    break
                hit = np.where(todo, old.containing(olv, pos), -1)
                s = hit >= 0
                if not s.any():
                    continue
                off = old.local_offset(hit[s], pos[s]) // int(old.spacing_of(olv))
                pid = hit[s] * m3 + (off[:, 2] * m + off[:, 1]) * m + off[:, 0]
                vals[:, s] = levels.rescale(np, src[:, pid], tau0, olv, lv, accel0)
                todo &= ~s
            if todo.any():
                raise ValueError("coarsened leaf has nodes no old leaf holds: forests do not tile alike")
        out[:, leaf] = vals.reshape(Q, m, m, m)
    return out


def _prolong(old: Forest, leaf: int, pos: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Trilinear interpolation of every population at ``pos`` inside old leaf ``leaf``."""
    m, m3 = old.m, old.m ** 3
    h = int(old.spacing[leaf])
    off = old.local_offset(np.full(len(pos), leaf), pos)
    i0 = np.minimum(off // h, m - 2)
    frac = (off - i0 * h) / h  # in [0, 1]; exactly 0 or 1 on coincident nodes
    vals = None
    for corner in ((0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)):
        c = np.asarray(corner)
        idx = i0 + c
        w = np.prod(np.where(c == 1, frac, 1.0 - frac), axis=1)
        term = w * src[:, leaf * m3 + (idx[:, 2] * m + idx[:, 1]) * m + idx[:, 0]]
        vals = term if vals is None else vals + term
    return vals

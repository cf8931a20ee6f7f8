"""State transfer when the tree changes: every leaf of the new forest takes its populations from
the old one, on the state's own device (any xp: a GPU state never leaves the GPU).

- unchanged leaf → copied.
- new leaf inside an old, coarser leaf (refinement) → prolongation: trilinear interpolation of f
  from the old leaf's nodes (exact on coincident nodes), then the non-equilibrium part rescaled
  from the old level to the new (levels.rescale).
- new leaf covering old, finer leaves (coarsening) → restriction: injection of the coincident
  node of the finest old leaf that has it, rescaled to the new level.

The host decides only per leaf (which old leaf each new leaf copies or interpolates from: a few
array operations over the leaves) and, for coarsened leaves, which old node each of their points
injects (Forest.containing over those points); the points' positions, the interpolation stencils
and weights, the gathers and the rescaling run as whole-array xp code, one batch per pair of
levels. Every point's value is computed by the same sequence of operations as a leaf-by-leaf loop
would (elementwise, fixed order), so the result does not depend on the batching.

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
from .tree import CHILD_OFFSETS, Forest
from .uploads import constant, upload_together

# new leaves interpolated per batch: bounds the float64 temporaries of the prolongation and the
# rescaling (27 populations × m³ points × 8 bytes a leaf, about 15 such arrays alive) and the 8
# corners' gathers (8 × 27 × m³ values of the state's dtype a leaf): 32 leaves of 17³ take ~680 MB
# at the peak. On the host a few leaves keep them in the caches (64 leaves of 17³
# ran at half the speed of 4 on NumPy); on a GPU a batch is a few dozen launches whatever its size,
# so a batch holds the leaves a regrid usually splits from one level (vortex-adapt: 48 new leaves
# in groups of at most 32 per source level; 16 a batch took 254 operations, 32 take 180).
PROLONG_BATCH = {"host": 4, "device": 32}


def node_ijk(m: int) -> np.ndarray:
    """(m³, 3) local (i, j, k) of a leaf's nodes in storage order ((k · m + j) · m + i)."""
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    return np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1).astype(np.int64)


def transfer(old: Forest, new: Forest, f_old, tau0: float, accel0=(0.0, 0.0, 0.0), xp=np):
    """f on ``new`` from f_old (Q, L_old, m, m, m) on ``old`` (same roots, m, max_level, periodicity),
    an xp array; returns a new xp array of f_old's dtype."""
    if (old.roots, old.m, old.max_level, old.periodic) != (new.roots, new.m, new.max_level, new.periodic):
        raise ValueError("transfer needs forests of the same roots, m, max_level and periodicity")
    m, Q = new.m, d3q27.Q
    f_old = xp.asarray(f_old)
    src = f_old.reshape(Q, -1)
    out = xp.empty((Q, new.n_leaves, m, m, m), f_old.dtype)
    same = old.find(new.level, new.block)
    kept = np.flatnonzero(same >= 0)
    if kept.size:
        out[:, xp.asarray(kept)] = f_old[:, xp.asarray(same[kept])]
    changed = np.flatnonzero(same < 0)
    batch = PROLONG_BATCH["host" if xp is np else "device"]
    for lv in np.unique(new.level[changed]).tolist():
        leaves = changed[new.level[changed] == lv]
        cov, cl = old.cover(lv, new.block[leaves])
        inside = cov >= 0  # refinement: inside an old coarser leaf
        for s in np.unique(cl[inside]).tolist():
            pick = inside & (cl == s)
            for c0 in range(0, int(pick.sum()), batch):
                part = slice(c0, c0 + batch)
                _prolong_into(xp, out, src, old, new, leaves[pick][part], cov[pick][part], tau0, s, lv, accel0)
        if (~inside).any():
            _inject_into(xp, out, src, old, new, leaves[~inside], lv, tau0, accel0)
    return out


def _prolong_into(xp, out, src, old: Forest, new: Forest, leaves, parents, tau0, src_level: int, lv: int,
                  accel0) -> None:
    """New leaves ``leaves`` (all of level lv) interpolated trilinearly from their old coarser leaves
    ``parents`` (all of level src_level), rescaled src_level → lv, into ``out``."""
    m, m3, Q = new.m, new.m ** 3, d3q27.Q
    n = len(leaves)
    periodic = [d for d in range(3) if new.periodic[d]]
    # the batch's host tables in one upload (uploads.py)
    dom, new_origin, old_origin, base, at = upload_together(xp, (
        new.domain, new.origin[leaves], old.origin[parents], (np.asarray(parents, np.int64) * m3)[:, None],
        np.asarray(leaves)))
    ijk = constant(xp, ("node ijk", m), lambda: node_ijk(m))  # (on the device once)
    # node positions (finest units), wrapped into the domain on periodic axes (Forest.wrap_points)
    pos = new_origin[:, None, :] + ijk[None] * int(new.spacing_of(lv))
    for d in periodic:
        pos[..., d] %= dom[d]
    # offsets in the old leaf, modulo the domain on periodic axes (Forest.local_offset)
    off = pos - old_origin[:, None, :]
    for d in periodic:
        off[..., d] %= dom[d]
    h = int(old.spacing_of(src_level))
    i0 = xp.minimum(off // h, m - 2)
    frac = (off - i0 * h) / h  # in [0, 1]; exactly 0 or 1 on coincident nodes
    # the 8 corners' indices, weights and gathers as (8, …) arrays (a few launches instead of a
    # dozen per corner), the terms then summed corner by corner in CHILD_OFFSETS' order
    c = constant(xp, "child offsets", lambda: np.asarray(CHILD_OFFSETS, np.int64))[:, None, None, :]
    idx = i0[None] + c
    w = xp.prod(xp.where(c == 1, frac[None], (1.0 - frac)[None]), axis=-1).reshape(len(CHILD_OFFSETS), -1)
    g = src[:, (base[None] + (idx[..., 2] * m + idx[..., 1]) * m + idx[..., 0]).reshape(-1)]
    g = g.reshape(Q, len(CHILD_OFFSETS), -1)
    vals = w[0] * g[:, 0]
    for k in range(1, len(CHILD_OFFSETS)):
        vals = vals + w[k] * g[:, k]
    vals = levels.rescale(xp, vals, tau0, src_level, lv, accel0)
    out[:, at] = vals.reshape(Q, n, m, m, m)


def _inject_into(xp, out, src, old: Forest, new: Forest, leaves, lv: int, tau0, accel0) -> None:
    """New leaves ``leaves`` (level lv) covering finer old leaves: each node injected from the finest
    old leaf that has it (the lowest-numbered among those of that level), rescaled to lv."""
    m, m3, Q = new.m, new.m ** 3, d3q27.Q
    ijk = node_ijk(m)
    pos = (new.origin[leaves][:, None, :] + ijk[None] * int(new.spacing_of(lv))).reshape(-1, 3)
    pos, _ = new.wrap_points(pos)
    dst = (np.asarray(leaves, np.int64)[:, None] * m3 + np.arange(m3)[None]).reshape(-1)
    flat = out.reshape(Q, -1)
    todo = np.ones(len(pos), bool)
    for olv in range(old.max_level, lv, -1):
        if not todo.any():
            break
        hit = np.where(todo, old.containing(olv, pos), -1)
        s = hit >= 0
        if not s.any():
            continue
        off = old.local_offset(hit[s], pos[s]) // int(old.spacing_of(olv))
        pid = hit[s] * m3 + (off[:, 2] * m + off[:, 1]) * m + off[:, 0]
        flat[:, xp.asarray(dst[s])] = levels.rescale(xp, src[:, xp.asarray(pid)], tau0, olv, lv, accel0)
        todo &= ~s
    if todo.any():
        raise ValueError("coarsened leaf has nodes no old leaf holds: forests do not tile alike")

"""Adaptive regridding (docs/amr3d-flows.md "Adaptive regridding"): the per-leaf criterion
and the new tree. Host-side decisions on plain NumPy arrays; the criterion itself runs on any xp and
returns one number per leaf (so a GPU state leaves the device only as per-leaf maxima).

Criterion: c = max over a leaf's nodes of |ω| · h_leaf / U_ref. With the curl taken in the leaf's
own index units (collision.leaf_derivative: central inside, second-order one-sided on the faces),
|∇ × u| per index step *is* |ω| · h_leaf, so no spacing enters the arithmetic. c is the velocity
change across one node spacing, relative to the flow's speed: a resolution indicator that halves
when a leaf is split (h halves, |ω| stays), hence the hysteresis rule coarsen_below ≤ refine_above/2.

Decisions (``plan``), deterministic (sorted arrays, no hashing order):
- refine: leaves with c > refine_above and level < max_level, split once, then 2:1 balance (the
  ripple may split more). Skipped altogether when the result would exceed max_leaves.
- coarsen: a family of 8 sibling leaves of the *old* tree, all still leaves after the refinement,
  every one with c < coarsen_below, whose parent is not finer-required by the floor forest (the
  bodies' refinement or the whole preset tree) and not below the base level (the preset tree's
  coarsest level: one engine step stays one step of that level, so Δt is constant). All candidate
  families merge at once; a merged parent that breaks 2:1 balance is split back, to a fixpoint.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import d3q27, levels
from .collision import leaf_derivative
from .tree import CHILD_OFFSETS, Forest, _unbalanced_coarse_leaves, refine

# a device's criterion takes every level in one batch while the state is at most this big (the
# batch is a copy of it, beside the per-level temporaries)
CRITERION_BATCH_BYTES = 256 << 20


def level_criterion(xp, f, accel=(0.0, 0.0, 0.0)):
    """max |ω|·h over each leaf of f[Q, n, m, m, m] (one level's leaves; ω in index units): (n,) on xp."""
    _, ux, uy, uz = d3q27.fluid_velocity(xp, f, accel)
    # the two components each axis's derivative enters, stacked: one leaf_derivative per axis
    # (elementwise, so each component's derivative has the same bits as on its own)
    ddx = leaf_derivative(xp, xp.stack([uy, uz]), -1)  # axes of u[n, k, j, i]: x = −1, y = −2, z = −3
    ddy = leaf_derivative(xp, xp.stack([ux, uz]), -2)
    ddz = leaf_derivative(xp, xp.stack([ux, uy]), -3)
    wx = ddy[1] - ddz[1]
    wy = ddz[0] - ddx[1]
    wz = ddx[0] - ddy[0]
    w2 = wx * wx + wy * wy + wz * wz
    return xp.sqrt(w2.reshape(w2.shape[0], -1).max(axis=1))


def criterion(xp, chunks, accel0, u_ref: float, to_host) -> np.ndarray:
    """Per-leaf criterion (L,) float64 on the host from ``chunks`` [(level, f of that level's leaves)]
    in leaf order; ``to_host``: the backend's asnumpy (only the per-leaf maxima travel)."""
    accels = {levels.accel_at(accel0, lv) for lv, _ in chunks}
    if (xp is not np and len(chunks) > 1 and len(accels) == 1 and len({f.dtype for _, f in chunks}) == 1
            and sum(f.nbytes for _, f in chunks) <= CRITERION_BATCH_BYTES):
        # on a device the levels as one batch of leaves: each pass one launch for all of them (the
        # criterion is elementwise within each leaf, so the same bits), at the cost of one copy of
        # the state
        chunks = [(None, xp.concatenate([f for _, f in chunks], axis=1))]
    parts = [level_criterion(xp, f, accels.pop() if lv is None else levels.accel_at(accel0, lv))
             for lv, f in chunks]
    if xp is not np and len(parts) > 1 and len({p.dtype for p in parts}) == 1:
        parts = [xp.concatenate(parts)]  # one read-back (a wait for the device) instead of one a level
    out = [np.asarray(to_host(p), np.float64) for p in parts]
    return (np.concatenate(out) if out else np.zeros(0)) / float(u_ref)


@dataclass(frozen=True)
class Plan:
    forest: Forest
    refined: int  # leaves split by the criterion (not counting the balance ripple)
    coarsened: int  # families merged
    capped: bool  # refinement skipped: it would exceed max_leaves


def _required_level(floor: Forest, level: int, block) -> np.ndarray:
    """True where the floor forest has leaves finer than ``level`` inside block(s) (level, block)."""
    _, lev = floor.cover(level, np.asarray(block, np.int64))
    return lev == -1


def plan(forest: Forest, crit: np.ndarray, *, refine_above: float, coarsen_below: float, max_level: int,
         base_level: int, floor: Forest, max_leaves: int) -> Plan:
    crit = np.asarray(crit, np.float64)
    if crit.shape != (forest.n_leaves,):
        raise ValueError(f"criterion has shape {crit.shape}, the tree {forest.n_leaves} leaves")
    split = np.flatnonzero((crit > refine_above) & (forest.level < max_level))
    capped = False
    new = forest
    if split.size:
        new = refine(forest, split)
        if new.n_leaves > max_leaves:
            new, capped, split = forest, True, split[:0]
    # coarsening candidates: families of old leaves, all below the threshold, all still leaves
    low = (crit < coarsen_below) & (forest.level > base_level)
    idx = np.flatnonzero(low)
    fams = []
    if idx.size:
        lev = forest.level[idx]
        parent = forest.block[idx] >> 1
        key = np.unique(np.concatenate([lev[:, None], parent], axis=1), axis=0)  # sorted: deterministic
        for row in key:
            lv, pb = int(row[0]), row[1:]
            sib_old = forest.find(np.full(8, lv), 2 * pb[None] + CHILD_OFFSETS)
            if np.any(sib_old < 0) or not np.all(low[sib_old]):
                continue
            if np.any(new.find(np.full(8, lv), 2 * pb[None] + CHILD_OFFSETS) < 0):
                continue  # a sibling was split by this regrid's refinement or its ripple
            if _required_level(floor, lv - 1, pb[None])[0]:
                continue  # the floor (bodies' refinement) needs finer leaves there
            fams.append((lv, pb))
    merged = _merge_balanced(new, fams)
    return Plan(merged[0], int(split.size), merged[1], capped)


def _merge_balanced(forest: Forest, fams) -> tuple[Forest, int]:
    """Merge every family in ``fams`` [(child level, parent block)] at once; split back the merged
    parents that break 2:1 balance until none does. Returns (forest, families merged)."""
    active = list(fams)
    while active:
        drop = np.zeros(forest.n_leaves, bool)
        for lv, pb in active:
            drop[forest.find(np.full(8, lv), 2 * pb[None] + CHILD_OFFSETS)] = True
        keep = ~drop
        cand = forest.replace(np.concatenate([forest.level[keep], [lv - 1 for lv, _ in active]]),
                              np.concatenate([forest.block[keep].reshape(-1, 3),
                                              np.array([pb for _, pb in active], np.int64).reshape(-1, 3)]))
        bad = _unbalanced_coarse_leaves(cand)
        if bad.size == 0:
            return cand, len(active)
        bad_keys = {(int(cand.level[b]), tuple(int(x) for x in cand.block[b])) for b in bad}
        kept = [(lv, pb) for lv, pb in active if (lv - 1, tuple(int(x) for x in pb)) not in bad_keys]
        if len(kept) == len(active):  # an imbalance not caused by a merge: the input was not balanced
            raise ValueError("regrid: the tree before coarsening is not 2:1 balanced")
        active = kept
    return forest, 0


def check_tree(forest: Forest, floor: Forest, base_level: int) -> str | None:
    """Why a (restored) tree cannot be this preset's adaptive tree, or None: the leaves tile the
    domain once, 2:1 balanced, levels from the base level to max_level, the floor kept."""
    if forest.n_leaves == 0:
        return "it has no leaves"
    if forest.level.min() < base_level:
        return f"it has leaves of level {int(forest.level.min())}, below the preset tree's coarsest level {base_level}"
    n = np.asarray(forest.roots, np.int64)[None] << forest.level[:, None]
    if np.any(forest.block < 0) or np.any(forest.block >= n):
        return "it has leaves outside the domain"
    vol = np.sum((forest.extent.astype(np.float64)) ** 3)
    if vol != float(np.prod(forest.domain.astype(np.float64))):
        return "its leaves do not tile the domain"
    keys = forest._key(forest.level, forest.block)
    if np.unique(keys).size != keys.size:
        return "it holds a leaf twice"
    # tiling: every leaf's parent chain free of other leaves (volumes add up and no leaf repeats; an
    # overlap would need a leaf inside another: check that no leaf's ancestor is a leaf)
    for up in range(1, forest.max_level + 1):
        sel = forest.level >= up
        anc = forest.find(forest.level[sel] - up, forest.block[sel] >> up)
        if np.any(anc >= 0):
            return "a leaf lies inside another leaf"
    if _unbalanced_coarse_leaves(forest).size:
        return "it is not 2:1 balanced"
    need = floor.level
    cov, lev = forest.cover(int(floor.max_level), floor.block << (floor.max_level - need)[:, None])
    # every floor leaf must be covered by leaves at least as fine: the forest's leaf containing the
    # floor leaf's first finest block is at a level ≥ the floor leaf's
    if np.any((lev >= 0) & (lev < need)):
        return "it is coarser than the bodies' refinement somewhere"
    return None

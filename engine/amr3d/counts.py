"""Honest counts for the bench: distinct lattice nodes per level of a forest, and P0's break-even
arithmetic from measured rates (docs/amr3d.md, "Reading `nagare bench amr3d`").

P0 counts points as stored: every leaf's m³ nodes, so a face node shared by two leaves counts
twice, an edge node up to four times and a corner node up to eight. The distinct count takes each
lattice node once per update of its level. Where levels meet, a coarse node on a 2:1 interface is
also a node of the finer leaves (the coarse lattice is a sublattice of the fine one); it counts
once, for the finest level that has it. Why: that level owns it (docs/amr3d.md, "Ownership of shared
nodes": the coarse copy is overwritten by the restriction of the fine value at the end of every
coarse step), and a uniform lattice at the finest spacing holds that position once too, so counting
the coarse copy as well would credit the tree with a duplicate that exists only for the coupling —
the same kind of duplicate as a shared face copy, which this count exists to drop.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .tree import Forest

# A leaf's nodes fall into 27 elements: its inner block ((m−2)³ nodes), 6 face interiors ((m−2)²
# each), 12 edge interiors (m−2) and 8 corners (1). On the doubled block grid of its level an element
# of block b sits at 2b + 1 + δ, δ ∈ {−1, 0, 1}³: an odd coordinate lies inside the block along that
# axis, an even one on a block-boundary plane, where neighbouring blocks share it.
_DELTAS = np.array([(x, y, z) for z in (-1, 0, 1) for y in (-1, 0, 1) for x in (-1, 0, 1)], np.int64)


def _elements(forest: Forest, level: int, blocks: np.ndarray) -> np.ndarray:
    """Keys of the distinct elements of the given level-``level`` blocks (periodic sides wrapped)."""
    n2 = 2 * forest.blocks_per_axis(level)
    e = (2 * blocks[:, None, :] + 1 + _DELTAS[None, :, :]).reshape(-1, 3)
    for d in range(3):
        if forest.periodic[d]:
            e[:, d] %= n2[d]
    span = n2 + 1
    return np.unique((e[:, 2] * span[1] + e[:, 1]) * span[0] + e[:, 0])


@lru_cache(maxsize=8)  # a Forest is immutable and hashed by identity: one count per tree
def distinct_nodes_per_level(forest: Forest) -> dict[int, int]:
    """Distinct lattice nodes each level updates, every position counted once, at the finest level
    that has it (the module docstring says why).

    Counted by elements, not nodes (a box of 8,192 leaves of 17³ has 12.6 M shell nodes but
    221,184 element candidates): an element of a level-l leaf is a level-l node set that other
    level-l leaves may share (face, edge, corner: same key on the doubled grid), so the level's
    distinct nodes are its distinct elements' node counts. An element belongs to a finer level
    exactly when a block next to it on level l's grid is refined: that block's children that touch
    the element also touch the level-l leaf, so by 2:1 balance (faces, edges, corners) they are
    level-(l+1) leaves, whose nodes cover the element's (the coarse lattice is a sublattice of the
    fine one). A block next to it that lies in a coarser leaf, or beyond a wall, takes nothing."""
    m = forest.m
    out = {}
    for lv in forest.levels:
        sl = forest.level_slice(lv)
        own = _elements(forest, lv, forest.block[sl])
        finer = forest.level > lv
        if finer.any():  # the level-lv blocks that finer leaves cover, and the elements they touch
            shift = (forest.level[finer] - lv)[:, None]
            refined = np.unique(forest.block[finer] >> shift, axis=0)
            own = own[~np.isin(own, _elements(forest, lv, refined), assume_unique=True)]
        span = 2 * forest.blocks_per_axis(lv) + 1
        odd = ((own % span[0]) % 2) + ((own // span[0] % span[1]) % 2) + ((own // (span[0] * span[1])) % 2)
        out[lv] = int(np.sum((m - 2) ** odd))
    return out


def uniform_lattice_nodes(forest: Forest, level: int) -> int:
    """Nodes of the uniform lattice of ``level``'s spacing over the whole domain: D/h per
    periodic axis, D/h + 1 per walled one (its boundary nodes on both sides)."""
    n = forest.domain // int(forest.spacing_of(level))
    return int(np.prod([int(v) + (not p) for v, p in zip(n, forest.periodic)], dtype=object))


def figures(forest: Forest, base_level: int) -> dict:
    """The bench's distinct counts for one engine step (one step of ``base_level``, the coarsest
    present level, in which level l takes 2^(l − base_level) steps):
    ``distinct_nodes`` (Σ over levels), ``distinct_updates_per_step`` (each level's distinct nodes
    times its steps), ``finest_lattice_nodes`` (the uniform lattice at the finest present spacing)
    and ``finest_steps_per_step`` (that lattice's steps in the same physical time)."""
    per = distinct_nodes_per_level(forest)
    finest = max(per)
    return {"distinct_nodes": float(sum(per.values())),
            "distinct_updates_per_step": float(sum(n * 2.0 ** (lv - base_level) for lv, n in per.items())),
            "finest_lattice_nodes": float(uniform_lattice_nodes(forest, finest)),
            "finest_steps_per_step": 2.0 ** (finest - base_level)}


# ---- P0's break-even, from measured rates ----------------------------------------------------
# P0 §4 compares its AMR code's measured speed with what a uniform code reaches (its improved
# roofline, 385.8 GFLOPS on the K20X; the tree code 108.7 GFLOPS = 28.2 % of it) and concludes that
# the tree wins whenever it needs fewer than 28.2 % of the uniform lattice's points. Here both sides
# are measured on the same card in the same bench: the tree's rate in distinct node updates per
# second, R_tree, against the uniform rung's rate on the filling box, R_uniform (a uniform lattice
# counts each node once, so its two counts agree on a periodic box). To reach the same physical
# time the uniform lattice at the finest spacing takes N_f nodes × S_f steps (S_f = 2^(finest −
# coarsest) per coarse step), the tree W = Σ_l D_l 2^(l − l_min) distinct node updates per coarse
# step; so t_tree / t_uniform = (W / R_tree) / (N_f S_f / R_uniform), and the tree is faster exactly
# when its work share W / (N_f S_f) is below R_tree / R_uniform — P0's break-even fraction. On one
# level (P0's benchmark box, S_f = 1) the work share is P0's share of the uniform lattice's points.
def work_share(distinct_updates_per_step: float, finest_lattice_nodes: float, finest_steps_per_step: float) -> float:
    """The tree's node updates per coarse step as a share of the uniform finest lattice's in the
    same physical time: W / (N_f S_f)."""
    return distinct_updates_per_step / (finest_lattice_nodes * finest_steps_per_step)


def break_even_fraction(tree_distinct_rate: float, uniform_rate: float) -> float:
    """P0's break-even: the work share below which the tree beats the uniform lattice,
    R_tree / R_uniform (both in distinct node updates per second)."""
    return tree_distinct_rate / uniform_rate


def uniform_ms_per_step(finest_lattice_nodes: float, finest_steps_per_step: float, uniform_rate: float) -> float:
    """The uniform finest lattice's time for one coarse step of the tree (the same physical time),
    from the uniform rung's measured rate: N_f S_f / R_uniform, in ms."""
    return 1e3 * finest_lattice_nodes * finest_steps_per_step / uniform_rate


def effective_speedup(tree_ms_per_step: float, finest_lattice_nodes: float, finest_steps_per_step: float,
                      uniform_rate: float) -> float:
    """Time to the same physical time, uniform finest lattice over tree; equal to
    break_even_fraction / work_share."""
    return uniform_ms_per_step(finest_lattice_nodes, finest_steps_per_step, uniform_rate) / tree_ms_per_step

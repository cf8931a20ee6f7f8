"""The fix-up descriptors of a level written per (reader leaf, position class) group, in whole-array
passes over the (direction, point) grid: the regrid's coupling tables without per-read lists.

``tables.point_tables`` classifies every read and returns lists of entries (destination, source)
that ``interface.level_coupling`` then scatters into the descriptors. But every read of one group —
reader leaf, and the class of its source position ijk − c (``tables._position_class``) — has the
same outcome from the same source leaf, and its node there is linear in the position (docs/amr3d.md
"Lookups per position class"). So here each group is classified once (``tables._classify_groups``
on one canonical member per class) into dense per-group tables, and the descriptor of read (q, p)
is a gather from those tables plus a term in the point alone and a term in the direction alone:
own leaf or same level  q · n m³ + (base − lo m³) + lf(ijk) − lf(c_q)
bounce-back             opp(q) · n m³ + point id
finer / coarser         the slot of base + 2 lf(ijk − c_q) among the fine points / of the source
                        position's stencil among the distinct stencils (as ``level_coupling``).
Only flows without bodies or free-slip sides take this path (their reads need per-read lookups or
a reflected population); ``interface.level_coupling`` builds the others through ``point_tables``.
The descriptors, buffers and stencils are those of the general path, bit for bit
(tests/unit/test_amr3d_group_desc.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import d3q27, tables
from .tree import Forest

_DIRS = np.arange(1, d3q27.Q)


@lru_cache(maxsize=8)
def _class_of_reads(m: int) -> np.ndarray:
    """(26, m³) int64: the position class of the source ijk − c_q of every local point (by local
    flat index) and direction q = 1 … 26 — a read's class is then one gather by its point."""
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    ijk = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)
    out = tables._position_class(m, ijk[None, :, :] - d3q27.C[_DIRS][:, None, :])
    out.flags.writeable = False
    return out


def _class_members(m: int) -> np.ndarray:
    """(343, 3) one leaf-local position (−1 … m per axis) in each position class; for m = 3 the
    interior classes are empty and get the half-way position (no read falls in them)."""
    half = (m - 1) // 2
    per_axis = np.array([-1, 0, 1 if half > 1 else half, half,
                         half + 1 if half + 1 < m - 1 else half, m - 1, m], np.int64)
    c = np.arange(tables.POSITION_CLASSES)
    return np.stack([per_axis[c % 7], per_axis[(c // 7) % 7], per_axis[c // 49]], axis=1)


def _group_tables(forest: Forest, lv: int, present: np.ndarray):
    """(kind, base) per group g = (leaf − lo) · 343 + class of level lv, filled at the ``present``
    groups: tables._classify_groups on each class's canonical member."""
    lo = forest.level_slice(lv).start
    size = (forest.level_slice(lv).stop - lo) * tables.POSITION_CLASSES
    kind = np.zeros(size, np.int64)
    base = np.zeros(size, np.int64)
    if not present.size:
        return kind, base
    leaf, cls = np.divmod(present, tables.POSITION_CLASSES)
    k, b = tables._classify_groups(forest, lv, leaf + lo, _class_members(forest.m)[cls])
    kind[present] = k
    base[present] = b
    return kind, base


@dataclass
class GroupDescriptors:
    """A level's descriptors (27, R) with their direct, bounce-back and fine entries written, and
    the coarse reads in ``tables.point_tables(..., compact=True)``'s form for level_coupling to
    group and write: flat descriptor index q · R + p, population, distinct stencils, each read's."""
    desc: np.ndarray
    fine_pts: np.ndarray  # (UF,) global point ids on level lv + 1
    coarse_pts: np.ndarray  # (UC,) global point ids on level lv − 1
    coarse_dst: np.ndarray  # (K,)
    coarse_q: np.ndarray  # (K,)
    coarse_slot: np.ndarray  # (V, S) into coarse_pts
    coarse_w: np.ndarray  # (V, S)
    coarse_row: np.ndarray  # (K,)


def descriptors(forest: Forest, lv: int, leaves, ijk, interp: str) -> GroupDescriptors:
    """The descriptors of the level's fix-up points (leaves global, ijk (R, 3), ascending point id)
    as ``interface.level_coupling`` writes them from ``tables.point_tables``, for a flow without
    bodies or free-slip sides."""
    m, m3 = forest.m, forest.m ** 3
    sl = forest.level_slice(lv)
    lo, n = sl.start, sl.stop - sl.start
    R = len(leaves)
    lf = tables.local_flat(m, ijk)
    pid = (leaves - lo) * m3 + lf  # level-relative point ids
    group = _class_of_reads(m)[:, lf]  # (26, R) the read's position class …
    group += ((leaves - lo) * tables.POSITION_CLASSES)[None, :]  # … and its group
    mark = np.zeros(n * tables.POSITION_CLASSES, bool)
    mark[group] = True
    kind_g, base_g = _group_tables(forest, lv, np.flatnonzero(mark))
    if lv == 0 and np.any(kind_g >= 4):
        raise ValueError("level-0 point without a source: the forest does not tile the domain")
    if np.any(kind_g == 5):
        raise ValueError("a pull source lies in no leaf within one level: forest not 2:1 balanced")
    lfc = tables.local_flat(m, d3q27.C[_DIRS])  # (26,)
    desc = np.empty((d3q27.Q, R), np.int64)
    desc[0] = pid  # the rest population stays at the point
    body = desc[1:]
    # own leaf and same level (most reads): base − lo m³ + lf(ijk) + (q n m³ − lf(c_q))
    np.take(base_g - lo * m3, group, out=body)
    body += lf[None, :]
    body += (_DIRS * (n * m3) - lfc)[:, None]
    # the other reads, by flat index r = (q − 1) · R + p into the (26, R) grid
    at = np.flatnonzero(((kind_g != 1) & (kind_g != 2))[group])
    g = group.reshape(-1)[at]
    k = kind_g[g]
    qi, p = np.divmod(at, R)
    flat = body.reshape(-1)
    s = k == 0  # beyond a non-periodic side: bounce-back, the own point's opposite population
    flat[at[s]] = d3q27.OPP[qi[s] + 1] * (n * m3) + pid[p[s]]
    s = k == 3  # a finer leaf having the node (its spacing h / 2)
    fine_pts, fine_slot = tables._uniq(base_g[g[s]] + 2 * (lf[p[s]] - lfc[qi[s]]))
    flat[at[s]] = -1 - ((qi[s] + 1) * fine_pts.size + fine_slot)
    s = k == 4  # inside a coarser leaf: the source position's key (tables._tables_from)
    ext = 2 * (m - 1)
    keys = (base_g[g[s]] + tables._position_key(0, ijk[p[s]], ext)
            - tables._position_key(0, d3q27.C[_DIRS], ext)[qi[s]])
    cpts, cw, crow = tables._coarse_stencils(forest, lv, keys, interp)
    coarse_pts, coarse_slot = tables._uniq(cpts)
    return GroupDescriptors(desc=desc, fine_pts=fine_pts, coarse_pts=coarse_pts,
                            coarse_dst=at[s] + R, coarse_q=qi[s] + 1,
                            coarse_slot=coarse_slot.reshape(-1, tables.STENCILS[interp] ** 3), coarse_w=cw,
                            coarse_row=crow)

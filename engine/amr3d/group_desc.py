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
The passes, the stencils and their grouping are xp code, run on the GPU by a CuPy engine (a regrid
then keeps only the groups' classification on the host) and on NumPy elsewhere. The descriptors,
buffers and stencils are those of the general path, bit for bit (tests/unit/test_amr3d_group_desc.py).
"""
from __future__ import annotations

import time
from functools import lru_cache

import numpy as np

from . import d3q27, distinct_rows, tables
from .tree import Forest
from .uploads import constant, upload_together

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
    leaf += lo
    ld = _class_members(forest.m)[cls]
    own = _inside_own_leaf(forest, lv, leaf, ld)
    kind[present[own]] = 1  # the node ld of the reader's own leaf: base = its first point id
    base[present[own]] = leaf[own] * forest.m ** 3
    k, b = tables._classify_groups(forest, lv, leaf[~own], ld[~own])
    kind[present[~own]] = k
    base[present[~own]] = b
    return kind, base


def _inside_own_leaf(forest: Forest, lv: int, leaf, ld) -> np.ndarray:
    """(G,) bool: the groups whose positions ``ld`` (G, 3) lie in the reader leaf (0 … m − 1 on
    every axis) and stay there through the wrap — on a periodic axis the position m − 1 of a leaf
    that ends at the domain's side is wrapped to 0 (tables._own_leaf_reads): _classify_groups'
    own-leaf outcome without its tree lookups."""
    m, h = forest.m, int(forest.spacing_of(lv))
    ok = np.all((ld >= 0) & (ld <= m - 1), axis=1)
    end = forest.origin[leaf] + (m - 1) * h  # (G, 3)
    for d in range(3):
        if forest.periodic[d]:
            ok &= (ld[:, d] < m - 1) | (end[:, d] < forest.domain[d])
    return ok


def descriptors(forest: Forest, lv: int, leaves, ijk, interp: str, xp=np, timing: dict | None = None,
                device: dict | None = None):
    """(desc (27, R), fine_pts (UF,), coarse_pts (UC,) global point ids, interp_slot (U, S),
    interp_w (U, S)) of the level's fix-up points (leaves global, ijk (R, 3), ascending point id),
    NumPy arrays: what ``interface.level_coupling`` builds from ``tables.point_tables`` for a flow
    without bodies or free-slip sides. The passes over the (direction, point) grid and the
    stencils run on xp's device (the same array code on NumPy and CuPy: the same tables bit for
    bit); the groups' classification (a few hundred tree lookups) runs on the host. ``timing``:
    with a device, its part (the passes, their launches and the waits for them) is added to
    ``timing["device_s"]`` (seconds): the rest of the call is host work. ``device``: with a
    device, filled with the five arrays as they are there (the same values; a stepper takes them
    without uploading the host copies again)."""
    start = time.perf_counter()
    m, m3 = forest.m, forest.m ** 3
    sl = forest.level_slice(lv)
    lo, n = sl.start, sl.stop - sl.start
    R = len(leaves)
    lf_h = tables.local_flat(m, ijk)
    lfc_h = tables.local_flat(m, d3q27.C[_DIRS])  # (26,)
    ext = 2 * (m - 1)
    # the level's host inputs cross in one upload (uploads.py: one copy instead of one per table)
    lf, pid, leaf_group, ijk_d, dir_term, opp, lfc, dir_key = upload_together(xp, (
        lf_h, (leaves - lo) * m3 + lf_h, (leaves - lo) * tables.POSITION_CLASSES, np.asarray(ijk, np.int64),
        _DIRS * (n * m3) - lfc_h, d3q27.OPP, lfc_h, _offset_key(d3q27.C[_DIRS], ext)))
    group = _device_class_of_reads(xp, m)[:, lf]  # (26, R) the read's position class …
    group += leaf_group[None, :]  # … and its group
    mark = xp.zeros(n * tables.POSITION_CLASSES, bool)
    mark[group] = True
    present = _host(xp, xp.flatnonzero(mark))
    host = time.perf_counter()
    kind_h, base_h = _group_tables(forest, lv, present)
    host = time.perf_counter() - host
    if lv == 0 and np.any(kind_h >= 4):
        raise ValueError("level-0 point without a source: the forest does not tile the domain")
    if np.any(kind_h == 5):
        raise ValueError("a pull source lies in no leaf within one level: forest not 2:1 balanced")
    kind_g, base_g, other = upload_together(xp, (kind_h, base_h, (kind_h != 1) & (kind_h != 2)))
    desc = xp.empty((d3q27.Q, R), np.int64)
    desc[0] = pid  # the rest population stays at the point
    body = desc[1:]
    # own leaf and same level (most reads): base − lo m³ + lf(ijk) + (q n m³ − lf(c_q))
    xp.take(base_g - lo * m3, group, out=body)
    body += lf[None, :]
    body += dir_term[:, None]
    # the other reads, by flat index r = (q − 1) · R + p into the (26, R) grid
    at = xp.flatnonzero(other[group])
    g = group.reshape(-1)[at]
    k = kind_g[g]
    qi, p = xp.divmod(at, R)
    flat = body.reshape(-1)

    def of_kind(value):  # the reads of one outcome: (at, g, qi, p) of them, gathered by their positions
        s = xp.flatnonzero(k == value)  # (one read-back of its size; boolean masks would take one each)
        return at[s], g[s], qi[s], p[s]

    a, _, q, pp = of_kind(0)  # beyond a non-periodic side: bounce-back, the own point's opposite population
    flat[a] = opp[q + 1] * (n * m3) + pid[pp]
    a, gg, q, pp = of_kind(3)  # a finer leaf having the node (its spacing h / 2)
    fine_pts, fine_slot = _uniq(xp, base_g[gg] + 2 * (lf[pp] - lfc[q]))
    flat[a] = -1 - ((q + 1) * fine_pts.size + fine_slot)
    a, gg, q, pp = of_kind(4)  # inside a coarser leaf: the source position's stencil among the distinct ones
    keys = base_g[gg] + _offset_key(ijk_d[pp], ext) - dir_key[q]
    coarse_pts, islot, iw, inv = _distinct_stencils(xp, forest, lv, keys, interp)
    flat[a] = -1 - (d3q27.Q * fine_pts.size + (q + 1) * len(islot) + inv)
    arrays = (desc, fine_pts, coarse_pts, islot, iw)
    out = _download_together(xp, arrays)
    if device is not None and xp is not np:
        device.update(zip(("desc", "fine_pts", "coarse_pts", "interp_slot", "interp_w"), arrays))
    if timing is not None and xp is not np:
        timing["device_s"] = timing.get("device_s", 0.0) + time.perf_counter() - start - host
    return out


def _device_class_of_reads(xp, m: int):
    """_class_of_reads(m) on xp's device, uploaded once (1 MB for leaves of 17³: every level of every
    regrid reads it). Never written."""
    return constant(xp, ("class of reads", m), lambda: _class_of_reads(m))


def _download_together(xp, arrays) -> tuple:
    """The int64 / float64 arrays on the host (NumPy arrays of their shapes and dtypes) in one copy
    back: their bytes joined on the device, one read-back, then split (views of one host buffer)."""
    if xp is np:
        return tuple(arrays)
    flat = xp.concatenate([a.reshape(-1).view(np.int64) for a in arrays])
    host = xp.asnumpy(flat)
    out, at = [], 0
    for a in arrays:
        out.append(host[at:at + a.size].view(a.dtype).reshape(a.shape))
        at += a.size
    return tuple(out)


def _offset_key(off, ext: int):
    """tables._position_key(0, off, ext) in the array's own module: the key is linear in the offset."""
    e = ext + 1
    return (off[..., 2] * e + off[..., 1]) * e + off[..., 0]


def _host(xp, a) -> np.ndarray:
    return a if xp is np else xp.asnumpy(a)


def _uniq(xp, ids):
    """tables._uniq in xp: (sorted distinct ids, inverse), by a mark array where the ids are bounded
    by a few times their count."""
    flat = ids.reshape(-1)
    if not flat.size:
        return xp.zeros(0, np.int64), xp.zeros(ids.shape, np.int64)
    lo, hi = (int(v) for v in _host(xp, xp.stack([flat.min(), flat.max()])))  # (one read-back for both)
    if lo >= 0 and hi < 8 * flat.size + (1 << 20):
        mark = xp.zeros(hi + 1, bool)
        mark[flat] = True
        u = xp.flatnonzero(mark)
        rank = xp.empty(mark.size, np.int64)
        rank[u] = xp.arange(u.size)
        return u, rank[flat].reshape(ids.shape)
    u, inv = xp.unique(flat, return_inverse=True)
    return u, inv.reshape(ids.shape)


def _distinct_stencils(xp, forest: Forest, lv: int, keys, interp: str):
    """(coarse_pts (UC,) global ids on level lv − 1, interp_slot (U, S), interp_w (U, S), the
    stencil of each read (K,)) for the coarse reads with position keys ``keys``: tables'
    _coarse_stencils (one stencil per distinct position, 1D stencils per axis gathered from
    tables._axis_stencils) and interface.level_coupling's grouping of the distinct rows
    (distinct_rows.unique_rows), in xp."""
    m, width = forest.m, tables.STENCILS[interp] ** 3
    if not keys.size:
        return (xp.zeros(0, np.int64), xp.zeros((0, width), np.int64), xp.zeros((0, width)),
                xp.zeros(0, np.int64))
    h = int(forest.spacing_of(lv))
    e = 2 * (m - 1) + 1
    distinct, row = _uniq(xp, keys)
    leaf, rest = xp.divmod(distinct, e ** 3)
    off = xp.stack([rest % e, (rest // e) % e, rest // (e * e)], axis=1) * h
    idx1, w1 = (constant(xp, ("axis stencils", m, 2 * h, interp, i),  # (on the device once)
                         lambda i=i: tables._axis_stencils(m, 2 * h, interp)[i]) for i in range(2))
    idx, w = idx1[off], w1[off]  # (V, 3 axes, n): tables._stencil_rows
    ix = idx[:, 0, :, None, None]
    iy = idx[:, 1, None, :, None]
    iz = idx[:, 2, None, None, :]
    pts = ((iz * m + iy) * m + ix).reshape(len(off), -1)
    cw = (w[:, 0, :, None, None] * w[:, 1, None, :, None] * w[:, 2, None, None, :]).reshape(len(off), -1)
    cpts = (leaf[:, None] + forest.level_slice(lv - 1).start) * m ** 3 + pts
    coarse_pts, slot = _uniq(xp, cpts)
    key = xp.concatenate([slot, cw.view(np.int64)], axis=1)
    order = distinct_rows.distinct_order(xp, key, stencil_lead(width))
    if order is None:  # rows not all distinct (never seen): NumPy's grouping on the host
        first, inv = (xp.asarray(a) for a in distinct_rows.unique_rows(_host(xp, key)))
    else:
        first = order
        inv = xp.empty_like(order)
        inv[order] = xp.arange(len(order))
    return coarse_pts, slot[first], cw[first], inv[row]


def stencil_lead(width: int) -> np.ndarray:
    """The stencil columns where a distinct position's row first differs from another's: a stencil
    of n³ nodes (x slowest, tables._stencil_rows) meets each new node index of an axis at column
    k · n^d; the compact tables hold one row per distinct position, so rows that tie there differ
    in the weights (at a leaf's low face two positions share nodes with mirrored weights)."""
    n = round(width ** (1 / 3))
    return np.array(sorted({k * n ** d for d in range(3) for k in range(n)}), np.int64)

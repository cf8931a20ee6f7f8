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
    NumPy arrays — or, with a device and ``device``, five None, the arrays left in ``device`` (see
    :func:`level_descriptors`): what ``interface.level_coupling`` builds from ``tables.point_tables``
    for a flow without bodies or free-slip sides. One level of :func:`level_descriptors` (its ``timing``;
    ``device``: this level's dict there)."""
    return level_descriptors(forest, {lv: (leaves, ijk)}, interp, xp, timing,
                             None if device is None else {lv: device})[lv]


def level_descriptors(forest: Forest, points: dict, interp: str, xp=np, timing: dict | None = None,
                      device: dict | None = None) -> dict:
    """:func:`descriptors` of several levels at once: ``points`` {level: (leaves global, ijk (R, 3))}
    → {level: (desc, fine_pts, coarse_pts, interp_slot, interp_w)}, each level's arrays those of
    its own call. The levels' reads are one (direction, point) grid, so each pass is one launch for
    all of them (a regrid builds every level: on a GPU a pass costs its launch, not its points);
    what differs per level (its first leaf, its leaf count, its fine and coarse points, its distinct
    stencils) is a per-point or per-row table. The passes and the stencils run on xp's device (the
    same array code on NumPy and CuPy: the same tables bit for bit); the groups' classification (a
    few hundred tree lookups a level) runs on the host. ``timing``: with a device, its part (the
    passes, their launches and the waits for them) is added to ``timing["device_s"]`` (seconds):
    the rest of the call is host work. ``device``: {level: dict} filled, with a device, with each
    level's five arrays as they are there (the same values; a stepper takes them without
    uploading the host copies again); then nothing but the counts is read back: a level's result is
    five None, and its dict also has the descriptors' (min, max) over 0 and them as "desc_bounds")."""
    start = time.perf_counter()
    m, m3 = forest.m, forest.m ** 3
    lvs = sorted(points)
    k = len(lvs)
    sizes = np.array([len(points[lv][0]) for lv in lvs], np.int64)
    cut = np.concatenate([[0], np.cumsum(sizes)])  # each level's columns of the grid
    P = int(cut[-1])
    leaves = np.concatenate([np.asarray(points[lv][0], np.int64) for lv in lvs])
    ijk = np.concatenate([np.asarray(points[lv][1], np.int64).reshape(-1, 3) for lv in lvs])
    lo = np.array([forest.level_slice(lv).start for lv in lvs], np.int64)
    n = np.array([forest.level_slice(lv).stop for lv in lvs], np.int64) - lo
    at_level = np.repeat(np.arange(k), sizes)  # each point's level (index into lvs)
    lf_h = tables.local_flat(m, ijk)
    lfc_h = tables.local_flat(m, d3q27.C[_DIRS])  # (26,)
    ext = 2 * (m - 1)
    e = ext + 1
    # each level's fine points lie on the next finer level's leaves, its coarse points on the next
    # coarser level's: their ranges of global point ids split the distinct points of all levels
    def span(lv):
        sl = forest.level_slice(lv) if lv in forest.levels else slice(0, 0)
        return sl.start * m3, sl.stop * m3
    fine_span = np.array([span(lv + 1) for lv in lvs], np.int64).reshape(k, 2)
    coarse_span = np.array([span(lv - 1) for lv in lvs], np.int64).reshape(k, 2)
    # the coarse reads' positions are keyed by their coarse leaf (global): that leaf's level + 1 is
    # the reading level (its index in lvs, the spacing h of its positions, its axis stencils' rows)
    reader = np.full(forest.n_leaves, -1, np.int64)
    for i, lv in enumerate(lvs):
        if lv > 0 and lv - 1 in forest.levels:
            reader[forest.level_slice(lv - 1)] = i
    h_of = np.array([int(forest.spacing_of(lv)) for lv in lvs], np.int64)
    axis_rows = np.array([(m - 1) * 2 * h + 1 for h in h_of], np.int64)
    axis_first = np.concatenate([[0], np.cumsum(axis_rows)[:-1]]).astype(np.int64)
    # the host inputs cross in one upload (uploads.py: one copy instead of one per table)
    (lf, pid, leaf_group, ijk_d, nm3, lfc, opp, dir_key, level_d, dirs, fine_span_d, coarse_span_d, reader_d,
     h_d, axis_first_d) = upload_together(xp, (
        lf_h, (leaves - lo[at_level]) * m3 + lf_h, leaves * tables.POSITION_CLASSES, ijk, n[at_level] * m3, lfc_h,
        d3q27.OPP, _offset_key(d3q27.C[_DIRS], ext), at_level, _DIRS, fine_span, coarse_span, reader, h_of,
        axis_first))
    group = _device_class_of_reads(xp, m)[:, lf]  # (26, P) the read's position class …
    group += leaf_group[None, :]  # … and its group (global leaf)
    mark = xp.zeros(forest.n_leaves * tables.POSITION_CLASSES, bool)
    mark[group] = True
    present = _host(xp, xp.flatnonzero(mark))
    host = time.perf_counter()
    kind_h = np.zeros(forest.n_leaves * tables.POSITION_CLASSES, np.int64)
    base_h = np.zeros_like(kind_h)  # the base of a group's reads in global terms (coarser: global leaf keys)
    body_h = np.zeros_like(kind_h)  # … and for the own-leaf and same-level reads, level-relative
    for i, lv in enumerate(lvs):
        g0, g1 = lo[i] * tables.POSITION_CLASSES, (lo[i] + n[i]) * tables.POSITION_CLASSES
        mine = present[np.searchsorted(present, g0):np.searchsorted(present, g1)] - g0
        kind_l, base_l = _group_tables(forest, lv, mine)
        if lv == 0 and np.any(kind_l >= 4):
            raise ValueError("level-0 point without a source: the forest does not tile the domain")
        if np.any(kind_l == 5):
            raise ValueError("a pull source lies in no leaf within one level: forest not 2:1 balanced")
        kind_h[g0:g1] = kind_l
        body_h[g0:g1] = base_l - lo[i] * m3
        if lv > 0:
            base_l = np.where(kind_l == 4, base_l + forest.level_slice(lv - 1).start * e ** 3, base_l)
        base_h[g0:g1] = base_l
    host = time.perf_counter() - host
    kind_g, base_g, body_g, other = upload_together(xp, (kind_h, base_h, body_h, (kind_h != 1) & (kind_h != 2)))
    desc = xp.empty((d3q27.Q, P), np.int64)
    desc[0] = pid  # the rest population stays at the point
    body = desc[1:]
    # own leaf and same level (most reads): base − lo m³ + lf(ijk) + (q n m³ − lf(c_q))
    xp.take(body_g, group, out=body)
    body += lf[None, :]
    body += dirs[:, None] * nm3[None, :]
    body -= lfc[:, None]
    # the other reads, by flat index r = (q − 1) · P + p into the (26, P) grid
    at = xp.flatnonzero(other[group])
    g = group.reshape(-1)[at]
    kd = kind_g[g]
    qi, p = xp.divmod(at, P) if P else (at, at)
    flat = body.reshape(-1)

    def of_kind(value):  # the reads of one outcome: (at, g, qi, p) of them, gathered by their positions
        s = xp.flatnonzero(kd == value)  # (one read-back of its size; boolean masks would take one each)
        return at[s], g[s], qi[s], p[s]

    a, _, q, pp = of_kind(0)  # beyond a non-periodic side: bounce-back, the own point's opposite population
    flat[a] = opp[q + 1] * nm3[pp] + pid[pp]
    a, gg, q, pp = of_kind(3)  # a finer leaf having the node (its spacing h / 2)
    fine_all, fine_rank = _uniq(xp, base_g[gg] + 2 * (lf[pp] - lfc[q]))
    fine_cut = xp.searchsorted(fine_all, fine_span_d)  # (k, 2) each level's fine points among them
    uf = fine_cut[:, 1] - fine_cut[:, 0]
    lv_a = level_d[pp]
    flat[a] = -1 - ((q + 1) * uf[lv_a] + (fine_rank - fine_cut[lv_a, 0]))
    a, gg, q, pp = of_kind(4)  # inside a coarser leaf: the source position's stencil among the distinct ones
    keys = base_g[gg] + _offset_key(ijk_d[pp], ext) - dir_key[q]
    coarse_all, coarse_cut, islot, iw, u_first, u_count, inv = _distinct_stencils(
        xp, forest, keys, interp, k, coarse_span_d, reader_d, h_d, axis_first_d, tuple(h_of.tolist()))
    lv_a = level_d[pp]
    flat[a] = -1 - (d3q27.Q * uf[lv_a] + (q + 1) * u_count[lv_a] + (inv - u_first[lv_a]))
    # each level's descriptors as its own (27, R) array; the levels' counts read back with the arrays
    descs = [desc if k == 1 else xp.ascontiguousarray(desc[:, cut[i]:cut[i + 1]]) for i in range(k)]
    counts = [fine_cut.reshape(-1), coarse_cut.reshape(-1), u_first, u_count]
    # with ``device`` the arrays stay there: each level's descriptors' (min, max) comes back with the
    # counts (the stepper's index width; the host copies are read at their first use)
    keep = device is not None and xp is not np
    bounded = [i for i in range(k) if sizes[i]] if keep else []
    if bounded:
        counts.append(xp.stack([r for i in bounded for r in (descs[i].min(), descs[i].max())]))
    # (with ``device`` only the counts: every array stays there, LevelCoupling.keep_on_device)
    host_arrays = _download_together(xp, [xp.concatenate(counts)] if keep else
                                     [xp.concatenate(counts), *descs, fine_all, coarse_all, islot, iw])
    fc, cc, u0, un, dr = np.split(np.asarray(host_arrays[0]), [2 * k, 4 * k, 5 * k, 6 * k])
    fc, cc = fc.reshape(k, 2), cc.reshape(k, 2)
    bounds = {i: (min(int(dr[2 * j]), 0), max(int(dr[2 * j + 1]), 0)) for j, i in enumerate(bounded)}
    out = {}
    for i, lv in enumerate(lvs):
        parts = (slice(fc[i, 0], fc[i, 1]), slice(cc[i, 0], cc[i, 1]), slice(u0[i], u0[i] + un[i]))
        out[lv] = (None,) * 5 if keep else (
            host_arrays[1 + i], host_arrays[1 + k][parts[0]], host_arrays[2 + k][parts[1]],
            host_arrays[3 + k][parts[2]], host_arrays[4 + k][parts[2]])
        if device is not None and lv in device and xp is not np:
            device[lv].update(zip(("desc", "fine_pts", "coarse_pts", "interp_slot", "interp_w"),
                                  (descs[i], fine_all[parts[0]], coarse_all[parts[1]], islot[parts[2]],
                                   iw[parts[2]])))
            device[lv]["desc_bounds"] = bounds.get(i, (0, 0))
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
    if any(a.dtype.itemsize != 8 for a in arrays):  # (a narrower one would shift every later slice)
        raise TypeError("_download_together joins 8-byte items: " + ", ".join(str(a.dtype) for a in arrays))
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


def _distinct_stencils(xp, forest: Forest, keys, interp: str, k: int, coarse_span, reader, h, axis_first, hs):
    """The coarse reads' stencils of :func:`level_descriptors`' k levels at once, from their
    position keys ``keys`` (K,) (global coarse leaf): (coarse points (UC,) global ids, (k, 2) each
    level's range of them, interp_slot (U, S) (slots within the level's coarse points), interp_w
    (U, S), the first row (k,) and row count (k,) of each level's distinct stencils, the stencil
    row of each read (K,)). tables' _coarse_stencils (one stencil per distinct position, 1D
    stencils per axis gathered from tables._axis_stencils) and interface.level_coupling's
    grouping of the distinct rows (distinct_rows.unique_rows), per level — the level a leading
    column of the rows — in xp. ``coarse_span`` (k, 2), ``reader`` (leaves,), ``h`` (k,),
    ``axis_first`` (k,) on the device: each level's coarse point ids, the reading level of a
    coarse leaf, its spacing, its rows in the levels' axis tables; ``hs``: the spacings (host)."""
    m, width = forest.m, tables.STENCILS[interp] ** 3
    if not keys.size:
        zero = xp.zeros(k, np.int64)
        return (xp.zeros(0, np.int64), xp.zeros((k, 2), np.int64), xp.zeros((0, width), np.int64),
                xp.zeros((0, width)), zero, zero, xp.zeros(0, np.int64))
    e = 2 * (m - 1) + 1
    distinct, row = _uniq(xp, keys)
    leaf, rest = xp.divmod(distinct, e ** 3)
    level = reader[leaf]  # each distinct position's reading level
    off = xp.stack([rest % e, (rest // e) % e, rest // (e * e)], axis=1) * h[level][:, None]
    # the levels' 1D stencils (tables._axis_stencils at each coarse spacing 2h) as one table
    idx1, w1 = (constant(xp, ("axis stencils", m, hs, interp, i),  # (on the device once)
                         lambda i=i: np.concatenate([tables._axis_stencils(m, 2 * hl, interp)[i] for hl in hs]))
                for i in range(2))
    at = off + axis_first[level][:, None]
    idx, w = idx1[at], w1[at]  # (V, 3 axes, n): tables._stencil_rows
    ix = idx[:, 0, :, None, None]
    iy = idx[:, 1, None, :, None]
    iz = idx[:, 2, None, None, :]
    pts = ((iz * m + iy) * m + ix).reshape(len(off), -1)
    cw = (w[:, 0, :, None, None] * w[:, 1, None, :, None] * w[:, 2, None, None, :]).reshape(len(off), -1)
    cpts = leaf[:, None] * m ** 3 + pts
    coarse_pts, rank = _uniq(xp, cpts)
    coarse_cut = xp.searchsorted(coarse_pts, coarse_span)  # (k, 2)
    slot = rank - coarse_cut[level, 0][:, None]  # within the level's coarse points
    key = xp.concatenate([level[:, None], slot, cw.view(np.int64)], axis=1)
    order = distinct_rows.distinct_order(xp, key, np.concatenate([[0], stencil_lead(width) + 1]))
    if order is None:  # rows not all distinct (never seen): NumPy's grouping on the host
        first, inv = (xp.asarray(a) for a in distinct_rows.unique_rows(_host(xp, key)))
    else:
        first = order
        inv = xp.empty_like(order)
        inv[order] = xp.arange(len(order))
    # each level's rows: level leads the rows' order, so a search (no bincount: it reads the
    # counts' range back, twice) and per row, not per position (rows may repeat positions' stencils)
    ends = xp.searchsorted(level[first], xp.arange(1, k + 1, dtype=level.dtype))
    u_first = xp.concatenate([xp.zeros(1, ends.dtype), ends[:-1]])
    u_count = ends - u_first
    return coarse_pts, coarse_cut, slot[first], cw[first], u_first, u_count, inv[row]


def stencil_lead(width: int) -> np.ndarray:
    """The stencil columns where a distinct position's row first differs from another's: a stencil
    of n³ nodes (x slowest, tables._stencil_rows) meets each new node index of an axis at column
    k · n^d; the compact tables hold one row per distinct position, so rows that tie there differ
    in the weights (at a leaf's low face two positions share nodes with mirrored weights)."""
    n = round(width ** (1 / 3))
    return np.array(sorted({k * n ** d for d in range(3) for k in range(n)}), np.int64)

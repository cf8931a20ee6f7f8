"""Gather tables: for every shell point and direction, where the pull streaming reads from.

Built once per tree on the host (per-leaf-chunk loops, vectorised inside); the reference step and
the GPU kernels only index these flat arrays, they never search the tree (docs/amr3d.md, "Gather tables").

Index conventions (all int64 here; kernels may narrow them):
- point id   p = leaf · m³ + (k · m + j) · m + i   (i = x fastest, as f[q, leaf, k, j, i])
- state flat     q · (L · m³) + p                 (f.reshape(-1))
- level buffer   q · (n_l · m³) + (leaf − lo_l) · m³ + local   (the gathered, pre-collision values of
  the n_l leaves of level l, leaves lo_l … lo_l + n_l − 1)

Inner points (indices 1 … m−2 on every axis) read their own leaf at the fixed offset −c_q and are
not in the tables. A shell point's source s = x − c_q h_l is classified (docs/amr3d.md):
0. a solid node of a body (``solid``: flows, boundaries.py) → bounce-back, as 1         (direct)
1. beyond a non-periodic side → bounce-back: own point, population opp(q)            (direct)
   — unless every side it crosses is free-slip (``slip``): specular reflection at the half-way
   wall, the population R(q) (c with the crossed components negated) of the mirrored source
   x − c_q h_l with the crossed components dropped (a node of the same boundary layer), which is
   then classified by 2–5 like any source (it may lie in another leaf, finer or coarser)
2. inside the own leaf's closed box → own leaf                                        (direct)
3. a node of a same-level leaf (lowest index)                                         (direct)
4. a node of a level l+1 leaf (coincident fine node; value rescaled fine → coarse)    (fine)
5. inside a level l−1 leaf: interpolated from that leaf's nodes — tensor-product quadratic
   (27 nodes, default) or P0's trilinear (8 nodes); dyadic weights; time-interpolated
   and rescaled                                                                        (coarse)
The preference (own, same level, finer, coarser) reads the copy that is exact at the reader's
time: all copies of a node agree (same-level copies by construction, coarse copies of fine-owned
nodes after restriction), but a coarse copy is only time-interpolated at intermediate fine steps.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np

from . import d3q27
from .tree import Forest

CHUNK = 32  # leaves per vectorised block while building (bounds host memory for m = 33)
# point_tables' chunks classified in parallel: at least this many points a task (smaller ones
# spend more in Python than in NumPy's loops), on up to 8 threads; with fewer than 4 cores one
# (two threads on two busy cores ran slower than one)
POINTS_PER_TASK = 2048
_WORKERS = min(8, os.cpu_count() or 1) if (os.cpu_count() or 1) >= 4 else 1


def shell_points(m: int) -> np.ndarray:
    """(S, 3) (i, j, k) of a leaf's outer shell, in local flat order."""
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    ijk = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)
    on = np.any((ijk == 0) | (ijk == m - 1), axis=1)
    return ijk[on]


def local_flat(m: int, ijk) -> np.ndarray:
    ijk = np.asarray(ijk, np.int64)
    return (ijk[..., 2] * m + ijk[..., 1]) * m + ijk[..., 0]


@dataclass
class LevelTables:
    level: int
    lo: int
    n: int  # leaves lo … lo + n − 1
    direct_dst: np.ndarray  # (D,) into the level buffer
    direct_src: np.ndarray  # (D,) into f.reshape(-1)
    fine_dst: np.ndarray  # (F,) into the level buffer
    fine_q: np.ndarray  # (F,) population read
    fine_slot: np.ndarray  # (F,) index into fine_pts
    fine_pts: np.ndarray  # (UF,) point ids on level + 1, rescaled once per step
    coarse_dst: np.ndarray  # (K,) into the level buffer
    coarse_q: np.ndarray  # (K,)
    coarse_slot: np.ndarray  # (K, S) indices into coarse_pts (S = 8 linear, 27 quadratic)
    coarse_w: np.ndarray  # (K, S) interpolation weights (each row sums to 1)
    coarse_pts: np.ndarray  # (UC,) point ids on level − 1 (time-interpolated, rescaled per step)
    restrict_dst: np.ndarray  # (R,) point ids on this level that coincide with a level + 1 node
    restrict_src: np.ndarray  # (R,) the level + 1 point ids they take their value from
    dup_dst: np.ndarray  # (U,) point ids on this level stored by a lower-numbered same-level leaf
    dup_src: np.ndarray  # (U,) that leaf's point ids
    # compact tables (point_tables(..., compact=True)): coarse_slot / coarse_w hold each distinct
    # source position's stencil once, (V, S), and coarse_row (K,) names the one of each coarse read
    coarse_row: np.ndarray = None


@dataclass
class Tables:
    forest: Forest
    level: dict  # level → LevelTables
    interp: str = "quadratic"

    @property
    def m3(self) -> int:
        return self.forest.m ** 3


def on_device(xp, t: Tables) -> Tables:
    """The tables with their index arrays on xp's device (the reference step indexes with them)."""
    if xp is np:
        return t

    def move(lt):
        return replace(lt, **{f.name: xp.asarray(getattr(lt, f.name)) for f in fields(lt)
                              if isinstance(getattr(lt, f.name), np.ndarray)})
    return Tables(t.forest, {lv: move(lt) for lv, lt in t.level.items()}, t.interp)


def _uniq(ids: np.ndarray):
    """``np.unique(ids, return_inverse=True)`` for non-negative point ids, without a sort when the
    ids are bounded by a few times their count (a mark array, ranks at the marked ids): the same
    sorted unique ids and inverse."""
    flat = np.asarray(ids, np.int64).reshape(-1)
    if flat.size and flat.min() >= 0 and int(flat.max()) < 8 * flat.size + (1 << 20):
        mark = np.zeros(int(flat.max()) + 1, bool)
        mark[flat] = True
        u = np.flatnonzero(mark)
        # ranks written at the marked ids only (a running count over the whole range touched every
        # page of an int64 array as long as that range)
        rank = np.empty(mark.size, np.int64)
        rank[u] = np.arange(u.size)
        return u, rank[flat].reshape(ids.shape)
    u, inv = np.unique(flat, return_inverse=True)
    return u, inv.reshape(ids.shape)


def build(forest: Forest, interp: str = "quadratic", solid=None, near=None, slip=()) -> Tables:
    """interp: "quadratic" (default: 3 coarse nodes per half-way axis, 27-point stencil) or
    "linear" (P0's trilinear 8-point stencil); docs/amr3d.md says why quadratic. ``solid`` (see
    _classify) and ``near`` ({level: (leaves, ijk)}: the points next to a body, boundaries.py) add
    the bodies' bounce-back: inner points among ``near`` get table rows too (their other
    directions repeat what the inner slices read). ``slip``: the free-slip sides ("y-", "z+", …;
    non-periodic), specular reflection instead of bounce-back (:func:`slip_sides`)."""
    if interp not in STENCILS:
        raise ValueError(f"interp = {interp!r}: one of {sorted(STENCILS)}")
    near = near or {}
    slip = slip_sides(forest, slip)
    return Tables(forest, {lv: _build_level(forest, lv, interp, solid, near.get(lv), slip) for lv in forest.levels},
                  interp)


def slip_sides(forest: Forest, sides) -> tuple:
    """The free-slip sides as a canonical tuple ("x-", …, "z+" order), checked: each names a side
    of a non-periodic axis, once."""
    order = ("x-", "x+", "y-", "y+", "z-", "z+")
    sides = tuple(sides or ())
    for s in sides:
        if s not in order:
            raise ValueError(f"free-slip side {s!r}: one of {', '.join(order)}")
        if forest.periodic[order.index(s) // 2]:
            raise ValueError(f"free-slip side {s!r} lies on a periodic axis (a periodic axis has no sides)")
    if len(set(sides)) != len(sides):
        raise ValueError(f"free-slip sides {list(sides)} name a side twice")
    return tuple(s for s in order if s in sides)


def _reflect_slip(forest: Forest, pos, src, q, slip):
    """Free-slip sides on the pull sources ``src`` (P, 26, 3) of the points at ``pos`` (P, 3) in
    directions ``q``: where every side a source lies beyond is free-slip, the source becomes the
    mirrored node (the crossed components taken from the point itself) and the population read
    becomes R(q), c_q with the crossed components negated (d3q27.REFLECT). Specular reflection at
    the half-way wall: the population that left x − t h (t: c_q without the crossed components)
    in direction R(q) reaches the wall half a spacing out and comes back to x as q, so no mass
    crosses the side and the tangential momentum it carries is kept (no shear stress).
    Where a source crosses a free-slip side *and* another non-periodic side (a wall, an inlet or an
    outflow: their pull is bounce-back), bounce-back wins: it satisfies the free-slip side's
    condition (no normal flux) and the wall's (no slip), specular reflection would break the
    wall's, and the pairing stays one to one (each outgoing population is read by exactly one
    incoming link: a link's class depends only on the set of sides it crosses, and the reflected
    link crosses the same set), so a closed box conserves mass exactly.
    Returns (src, read population)."""
    if not slip:
        return src, q
    read = np.broadcast_to(q, src.shape[:-1]).copy()
    walled = ~np.asarray(forest.periodic, bool)  # (periodic axes wrap: no side there)
    low, high = (src < 0) & walled, (src > forest.domain) & walled
    crossed = np.zeros(src.shape, bool)  # crossed free-slip sides
    for side in slip:
        d = "xyz".index(side[0])
        crossed[..., d] |= (high if side[1] == "+" else low)[..., d]
    mirror = ((low | high) == crossed).all(axis=-1) & crossed.any(axis=-1)
    if not mirror.any():
        return src, read
    src = np.where(mirror[..., None] & crossed, pos[:, None, :], src)
    mask = crossed[..., 0] * 1 + crossed[..., 1] * 2 + crossed[..., 2] * 4
    read = np.where(mirror, d3q27.REFLECT[mask, read], read)
    return src, read


# 1D weights at a half-way point between nodes i0 and i0+1, as (offsets from i0, weights).
# linear: (½, ½). quadratic: the parabola through three nodes of the same coarse leaf, centred-left
# (i0−1, i0, i0+1) → (−1/8, 3/4, 3/8), or, at the leaf's low face, (i0, i0+1, i0+2) → (3/8, 3/4, −1/8).
STENCILS = {"linear": 2, "quadratic": 3}


def _stencil_rows(m: int, off, hc: int, interp: str):
    """Tensor-product interpolation stencil in a coarse leaf for local offsets ``off`` (K, 3)
    (finest units, coarse spacing hc): local flat indices and weights, (K, n³) each. Axes where
    the point is a coarse node get weight 1 on it (zero-weight padding elsewhere), so
    coincident nodes are copied exactly. Called once per distinct source position
    (:func:`_coarse_stencils`); each axis's 1D stencil is gathered from :func:`_axis_stencils`."""
    idx1, w1 = _axis_stencils(m, hc, interp)
    off = np.asarray(off, np.int64)
    idx, w = idx1[off], w1[off]  # (K, 3 axes, n)
    ix = idx[:, 0, :, None, None]
    iy = idx[:, 1, None, :, None]
    iz = idx[:, 2, None, None, :]
    flat = (iz * m + iy) * m + ix  # (K, n, n, n)
    wt = w[:, 0, :, None, None] * w[:, 1, None, :, None] * w[:, 2, None, None, :]
    return flat.reshape(len(off), -1), wt.reshape(len(off), -1)


@lru_cache(maxsize=32)
def _axis_stencils(m: int, hc: int, interp: str) -> tuple[np.ndarray, np.ndarray]:
    """The 1D stencil (node indices, weights; (E, n) each) at every local offset 0 … (m − 1) hc of
    a coarse leaf (finest units, coarse spacing hc): a few dozen offsets, gathered per axis of each
    stencil by :func:`_stencil_rows`."""
    off = np.arange((m - 1) * hc + 1)
    i0 = off // hc
    half = (off % hc) != 0
    n = STENCILS[interp]
    idx = np.repeat(i0[:, None], n, axis=1)  # (E, n)
    w = np.zeros(idx.shape)
    w[:, 0] = 1.0
    if interp == "linear":
        idx[:, 1] = np.minimum(i0 + 1, m - 1)
        w[:, 0] = np.where(half, 0.5, 1.0)
        w[:, 1] = np.where(half, 0.5, 0.0)
    else:
        left = half & (i0 >= 1)
        right = half & (i0 < 1)
        for k, (dl, wl, dr, wr) in enumerate(((-1, -0.125, 0, 0.375), (0, 0.75, 1, 0.75), (1, 0.375, 2, -0.125))):
            idx[:, k] = np.where(left, i0 + dl, np.where(right, i0 + dr, i0))
            w[:, k] = np.where(left, wl, np.where(right, wr, 1.0 if k == 0 else 0.0))
    idx.flags.writeable = False
    w.flags.writeable = False
    return idx, w


def _classify(forest: Forest, lv: int, leaves, ijk, row, stride: int, interp: str, acc, solid=None,
              slip=()) -> None:
    """Classify the pull sources of the points (leaves[p], ijk[p]) of level lv (shell points, and the
    inner points next to a body) into ``acc``; a destination is q · stride + row[p]. ``solid``:
    finest-lattice integer positions (..., 3) → bool, True on a body's solid nodes. ``slip``: the
    free-slip sides (canonical, :func:`slip_sides`)."""
    m, m3, N = forest.m, forest.m ** 3, forest.n_leaves * forest.m ** 3
    h = int(forest.spacing_of(lv))
    dirs = np.arange(1, d3q27.Q)
    leaves = np.asarray(leaves, np.int64)
    row = np.asarray(row, np.int64)
    pos = forest.origin[leaves] + ijk * h  # (P, 3)
    pid = leaves * m3 + local_flat(m, ijk)  # (P,)
    c = d3q27.C[dirs]  # (26, 3)
    # most reads stay in the own leaf: classified without the tree lookups (bounce-back from a solid
    # node first, as below); the source's node there is ijk − c, local flat index lf(ijk) − lf(c)
    easy = _own_leaf_reads(forest, ijk, pos, c, h)  # (P, 26)
    ep, ed = np.nonzero(easy)
    e_dst = dirs[ed] * stride + row[ep]
    e_src = dirs[ed] * N + pid[ep] - local_flat(m, c)[ed]
    if solid is not None:
        sb = solid(pos[ep] - c[ed] * h)
        acc["dd"].append(e_dst[sb])
        acc["ds"].append(d3q27.OPP[dirs[ed[sb]]] * N + pid[ep[sb]])
        e_dst, e_src = e_dst[~sb], e_src[~sb]
    acc["dd"].append(e_dst)
    acc["ds"].append(e_src)
    # the other reads, one entry each, in (point, direction) order
    gp, gd = np.nonzero(~easy)
    _other_reads(forest, lv, leaves, ijk, pos, pid, row, stride, gp, gd, acc, solid, slip)


def _other_reads_per_read(forest: Forest, lv: int, leaves, ijk, pos, pid, row, stride: int, gp, gd, acc,
                          solid=None, slip=()) -> None:
    """The reads (point gp[k], direction dirs[gd[k]]) that leave the own leaf or that the wrap moves,
    classified one by one (the general path; :func:`_other_reads_grouped` gives the same entries)."""
    m, m3, N = forest.m, forest.m ** 3, forest.n_leaves * forest.m ** 3
    h = int(forest.spacing_of(lv))
    ext = (m - 1) * h
    dirs = np.arange(1, d3q27.Q)
    c = d3q27.C[dirs]
    q = dirs[gd]
    dst = q * stride + row[gp]
    own_pid = pid[gp]
    leaf_b = leaves[gp]
    src, rq = _reflect_slip(forest, pos[gp], (pos[gp] - c[gd] * h)[:, None, :], q[:, None], slip)
    src, rq = src[:, 0], rq[:, 0]  # rq: the population read (q, or R(q) at free slip)
    sw, inside = forest.wrap_points(src)
    cls = _position_class(m, ijk[gp] + (src - pos[gp]) // h)
    todo = np.ones(q.shape, bool)
    # 0./1. bounce-back from a body's solid node or beyond a non-periodic side
    b = ~inside
    if solid is not None:
        b |= inside & solid(sw)
    acc["dd"].append(dst[b])
    acc["ds"].append(d3q27.OPP[q[b]] * N + own_pid[b])
    todo &= ~b
    # 2. own leaf
    off = forest.local_offset(leaf_b, sw)
    own = todo & np.all((off >= 0) & (off <= ext), axis=-1)
    acc["dd"].append(dst[own])
    acc["ds"].append(rq[own] * N + leaf_b[own] * m3 + local_flat(m, off[own] // h))
    todo &= ~own
    # 3. a same-level leaf having the node
    same = _containing_near(forest, lv, leaf_b, cls, sw, todo)
    s = same >= 0
    o = forest.local_offset(same[s], sw[s]) // h
    acc["dd"].append(dst[s])
    acc["ds"].append(rq[s] * N + same[s] * m3 + local_flat(m, o))
    todo &= ~s
    # 4. a finer leaf having the node
    if lv < forest.max_level and todo.any():
        fine = _containing_near(forest, lv + 1, leaf_b, cls, sw, todo)
        s = fine >= 0
        o = forest.local_offset(fine[s], sw[s]) // (h // 2)
        acc["fd"].append(dst[s])
        acc["fq"].append(rq[s])
        acc["fp"].append(fine[s] * m3 + local_flat(m, o))
        todo &= ~s
    # 5. inside a coarser leaf: interpolation stencil of that leaf's nodes
    if todo.any():
        if lv == 0:
            raise ValueError("level-0 point without a source: the forest does not tile the domain")
        coarse = _containing_near(forest, lv - 1, leaf_b, cls, sw, todo)
        if np.any(todo & (coarse < 0)):
            raise ValueError("a pull source lies in no leaf within one level: forest not 2:1 balanced")
        s = todo
        o = forest.local_offset(coarse[s], sw[s])
        # the source position as (coarse leaf, offset in it in this level's spacings): its stencil
        # is built once per distinct position in _tables_from (a position serves up to 27 reads)
        acc["cd"].append(dst[s])
        acc["cq"].append(rq[s])
        acc["ck"].append(_position_key(coarse[s] - forest.level_slice(lv - 1).start, o // h, 2 * (m - 1)))




def _other_reads_grouped(forest: Forest, lv: int, leaves, ijk, pos, pid, row, stride: int, gp, gd, acc,
                         solid=None, slip=()) -> None:
    """:func:`_other_reads_per_read`'s entries, in its order, with the classification done once per
    (reader leaf, position class) on one member: every read of a group has its source in the same
    leaf and class (bounce-back beyond a side, own leaf, same level, finer, coarser: _position_class
    says why), and its node there is the member's node shifted by the difference of their
    positions — the index (local flat, or position key) is linear in the position, and the wrap
    adds the same multiple of the domain to a whole class. Only a body's solid nodes are looked up
    per read."""
    m, N = forest.m, forest.n_leaves * forest.m ** 3
    h = int(forest.spacing_of(lv))
    dirs = np.arange(1, d3q27.Q)
    c = d3q27.C[dirs]
    q = dirs[gd]
    dst = q * stride + row[gp]
    leaf_b = leaves[gp]
    if slip:
        src, rq = _reflect_slip(forest, pos[gp], (pos[gp] - c[gd] * h)[:, None, :], q[:, None], slip)
        src, rq = src[:, 0], rq[:, 0]  # rq: the population read (q, or R(q) at free slip)
        ld = ijk[gp] + (src - pos[gp]) // h  # the source in the reader leaf's spacings
    else:
        src, rq, ld = None, q, ijk[gp] - c[gd]
    groups, inv = _uniq(leaf_b * POSITION_CLASSES + _position_class(m, ld))
    rep = np.empty(len(groups), np.int64)
    rep[inv] = np.arange(len(inv))
    kind, base = _classify_groups(forest, lv, leaf_b[rep], ld[rep])
    kind = kind[inv]
    # 0./1. bounce-back from a body's solid node or beyond a non-periodic side
    b = kind == 0
    if solid is not None:
        if src is None:
            src = pos[gp] - c[gd] * h
        sw, _ = forest.wrap_points(src)
        b |= ~b & solid(sw)
    acc["dd"].append(dst[b])
    acc["ds"].append(d3q27.OPP[q[b]] * N + pid[gp[b]])
    lf = local_flat(m, ld)
    for k in (1, 2):  # 2. own leaf, 3. a same-level leaf having the node
        s = ~b & (kind == k)
        acc["dd"].append(dst[s])
        acc["ds"].append(rq[s] * N + base[inv[s]] + lf[s])
    s = ~b & (kind == 3)  # 4. a finer leaf having the node (its spacing h / 2)
    if s.any():
        acc["fd"].append(dst[s])
        acc["fq"].append(rq[s])
        acc["fp"].append(base[inv[s]] + 2 * lf[s])
    s = ~b & (kind >= 4)  # 5. inside a coarser leaf: the source position's key (_tables_from)
    if s.any():
        if lv == 0:
            raise ValueError("level-0 point without a source: the forest does not tile the domain")
        if np.any(kind[s] == 5):
            raise ValueError("a pull source lies in no leaf within one level: forest not 2:1 balanced")
        acc["cd"].append(dst[s])
        acc["cq"].append(rq[s])
        acc["ck"].append(base[inv[s]] + _position_key(0, ld[s], 2 * (m - 1)))


def _classify_groups(forest: Forest, lv: int, leaf, ld) -> tuple[np.ndarray, np.ndarray]:
    """For one read of each group (reader leaf ``leaf`` (G,) of level lv, source ``ld`` (G, 3) in its
    spacings): its kind — 0 beyond a non-periodic side, 1 own leaf, 2 same level, 3 finer, 4 coarser,
    5 in no leaf within one level — and the base that a read of the group adds to its position's
    index: the source leaf's point id − lf(ld) (finer: − 2 lf(ld), its spacing is half), or for a
    coarser leaf the position key (_position_key) − key(0, ld)."""
    m, m3 = forest.m, forest.m ** 3
    h = int(forest.spacing_of(lv))
    ext = (m - 1) * h
    sw, inside = forest.wrap_points(forest.origin[leaf] + ld * h)
    kind = np.zeros(len(leaf), np.int64)
    base = np.zeros(len(leaf), np.int64)
    lf = local_flat(m, ld)
    off = forest.local_offset(leaf, sw)
    s = inside & np.all((off >= 0) & (off <= ext), axis=-1)
    kind[s] = 1
    base[s] = leaf[s] * m3 + local_flat(m, off[s] // h) - lf[s]
    todo = inside & ~s
    steps = [(2, lv, h)] + ([(3, lv + 1, h // 2)] if lv < forest.max_level else [])
    for k, target, ht in steps:
        hit = np.full(len(leaf), -1, np.int64)
        hit[todo] = forest.containing(target, sw[todo])
        s = hit >= 0
        kind[s] = k
        base[s] = hit[s] * m3 + local_flat(m, forest.local_offset(hit[s], sw[s]) // ht) - (h // ht) * lf[s]
        todo &= ~s
    if lv > 0 and todo.any():
        hit = np.full(len(leaf), -1, np.int64)
        hit[todo] = forest.containing(lv - 1, sw[todo])
        s = todo & (hit >= 0)
        kind[s] = 4
        off = forest.local_offset(hit[s], sw[s]) // h
        base[s] = (_position_key(hit[s] - forest.level_slice(lv - 1).start, off, 2 * (m - 1))
                   - _position_key(0, ld[s], 2 * (m - 1)))
        todo &= ~s
    kind[todo] = 5
    return kind, base


_other_reads = _other_reads_grouped


def _own_leaf_reads(forest: Forest, ijk, pos, c, h: int) -> np.ndarray:
    """(P, 26) bool: the reads, by the points (leaf-local ``ijk``, finest-unit ``pos``, (P, 3) each)
    in directions ``c`` (26, 3), whose source the general path of _classify classifies as the node
    ijk − c of the reader's own leaf: inside it, unless the wrap moves it — on a periodic axis a
    source at D, or an offset of D (a leaf spanning the axis), which the general path takes as the
    node at 0."""
    # per point and axis, which of c_d = −1, 0, 1 keep the source in the leaf (3 bits): the 26 reads'
    # answer is then one row of a (512, 26) table, gathered once (no (P, 26) temporaries per axis)
    code = np.zeros(len(ijk), np.int64)
    for d in range(3):
        for bit, cd in enumerate((-1, 0, 1)):
            ld = ijk[:, d] - cd
            ok = (ld >= 0) & (ld <= forest.m - 1)
            if forest.periodic[d]:
                ok &= (pos[:, d] - cd * h < forest.domain[d]) & (ld * h < forest.domain[d])
            code |= ok.astype(np.int64) << (3 * d + bit)
    codes = np.arange(512)[:, None]
    table = np.ones((512, len(c)), bool)
    for d in range(3):
        table &= ((codes >> (3 * d + np.asarray(c)[None, :, d] + 1)) & 1).astype(bool)
    return table[code]


# A position relative to a level-l leaf, per axis in the leaf's spacings ld = −1 … m (a pull
# source or a node of the leaf), falls in one of 7 classes: −1, 0, inside the lower half, (m−1)/2,
# inside the upper half, m−1, m. These are the intervals between the faces of level-(l+1) blocks
# (in the leaf: 0, (m−1)/2, m−1; at ld = −1 and m only for m = 3), and the faces of level-l and
# level-(l−1) blocks and the domain's sides are among those, so every point of one class lies in
# the same closed blocks of levels l−1, l and l+1 (the periodic wrap shifts by whole blocks):
# Forest.containing(l', ·) for l' = l−1 … l+1 takes one value per (leaf, class).
POSITION_CLASSES = 7 ** 3


def _position_class(m: int, ld) -> np.ndarray:
    """The class (0 … 342) of leaf-local positions ``ld`` (..., 3), each component in −1 … m."""
    half = (m - 1) // 2
    v = np.arange(-1, m + 1)
    lut = ((v >= 0).astype(np.int64) + (v > 0) + (v >= half) + (v > half) + (v >= m - 1) + (v > m - 1))
    c = lut[np.asarray(ld, np.int64) + 1]
    return (c[..., 2] * 7 + c[..., 1]) * 7 + c[..., 0]


def _containing_near(forest: Forest, lv: int, leaves, cls, points, where=None) -> np.ndarray:
    """Forest.containing(lv, points) (−1 where ``where`` is False) for points in class ``cls`` of
    the leaves ``leaves`` (level lv − 1 … lv + 1: _position_class): looked up for one point of
    each (leaf, class) present and gathered for the others (a few hundred lookups instead of one
    per point, each a dense-grid gather per block that may hold the point)."""
    out = np.full(len(points), -1, np.int64)
    sel = np.flatnonzero(where) if where is not None else np.arange(len(points))
    if sel.size:
        groups, inv = _uniq(np.asarray(leaves, np.int64)[sel] * POSITION_CLASSES + cls[sel])
        rep = np.empty(len(groups), np.int64)
        rep[inv] = sel  # any member of a group stands for it
        out[sel] = forest.containing(lv, points[rep])[inv]
    return out


def _position_key(leaves, off, ext: int) -> np.ndarray:
    """One int64 per (leaf, offset (..., 3) in 0 … ext): ordered by leaf, then z, y, x; bounded by
    the leaves' count · (ext + 1)³, so _uniq groups them with a mark array."""
    e = ext + 1
    return ((np.asarray(leaves, np.int64) * e + off[..., 2]) * e + off[..., 1]) * e + off[..., 0]


def _coarse_stencils(forest: Forest, lv: int, keys: np.ndarray, interp: str):
    """(stencil points (V, S) global ids on level lv − 1, weights (V, S), row (K,)) of the coarse
    reads of level lv with position keys ``keys`` (K,: _position_key of the level lv − 1 leaf
    counted from the level's first and the offset in level lv spacings): one stencil per distinct
    position."""
    m, width = forest.m, STENCILS[interp] ** 3
    if not keys.size:
        return np.zeros((0, width), np.int64), np.zeros((0, width)), np.zeros(0, np.int64)
    h = int(forest.spacing_of(lv))
    e = 2 * (m - 1) + 1
    distinct, row = _uniq(keys)
    leaf, rest = np.divmod(distinct, e ** 3)
    off = np.stack([rest % e, (rest // e) % e, rest // (e * e)], axis=1) * h
    pts, wts = _stencil_rows(m, off, 2 * h, interp)
    return (leaf[:, None] + forest.level_slice(lv - 1).start) * forest.m ** 3 + pts, wts, row


def _tables_from(acc, forest: Forest, lv: int, interp: str, compact: bool = False) -> LevelTables:
    """The level's tables from the classified reads; ``compact``: the coarse stencils once per
    distinct source position (LevelTables.coarse_row) and the direct reads in classification
    order, else one stencil row per read and the direct reads by destination."""
    def cat(k, shape=(0,), dtype=np.int64):
        return np.concatenate(acc[k]) if acc[k] else np.zeros(shape, dtype)

    sl = forest.level_slice(lv)
    fine_pts, fine_slot = _uniq(cat("fp"))
    width = STENCILS[interp] ** 3
    cpts, cw, crow = _coarse_stencils(forest, lv, cat("ck"), interp)
    coarse_pts, coarse_slot = _uniq(cpts)  # (every read's stencil nodes are among the distinct ones)
    coarse_slot = coarse_slot.reshape(-1, width)
    if not compact:
        coarse_slot, cw, crow = coarse_slot[crow], cw[crow], None
    direct_dst, direct_src = cat("dd"), cat("ds")
    if not compact:  # ascending destinations: friendlier scatter (compact tables' callers only scatter)
        order = np.argsort(direct_dst, kind="stable")
        direct_dst, direct_src = direct_dst[order], direct_src[order]
    return LevelTables(
        level=lv, lo=sl.start, n=sl.stop - sl.start,
        direct_dst=direct_dst, direct_src=direct_src,
        fine_dst=cat("fd"), fine_q=cat("fq"), fine_slot=fine_slot, fine_pts=fine_pts,
        coarse_dst=cat("cd"), coarse_q=cat("cq"), coarse_slot=coarse_slot,
        coarse_w=cw, coarse_pts=coarse_pts, coarse_row=crow,
        restrict_dst=cat("rd"), restrict_src=cat("rs"), dup_dst=cat("ud"), dup_src=cat("us"))


def _new_acc() -> dict:
    return {k: [] for k in ("dd", "ds", "fd", "fq", "fp", "cd", "cq", "ck", "rd", "rs", "ud", "us")}


def _build_level(forest: Forest, lv: int, interp: str, solid=None, near=None, slip=()) -> LevelTables:
    m, m3 = forest.m, forest.m ** 3
    sl = forest.level_slice(lv)
    lo, n = sl.start, sl.stop - sl.start
    shell = shell_points(m)
    shell_local = local_flat(m, shell)
    acc = _new_acc()
    for c0 in range(lo, lo + n, CHUNK):
        leaves = np.arange(c0, min(c0 + CHUNK, lo + n))
        lf = np.repeat(leaves, len(shell))
        ijk = np.tile(shell, (len(leaves), 1))
        pid = lf * m3 + np.tile(shell_local, len(leaves))
        _owners(forest, lv, lf, forest.origin[lf] + ijk * int(forest.spacing_of(lv)), pid, acc)
        _classify(forest, lv, lf, ijk, (lf - lo) * m3 + local_flat(m, ijk), n * m3, interp, acc, solid, slip)
    if near is not None:
        lf, ijk = (np.asarray(a, np.int64) for a in near)
        inner = np.all((ijk > 0) & (ijk < m - 1), axis=1)
        lf, ijk = lf[inner], ijk[inner].reshape(-1, 3)
        if lf.size:
            _classify(forest, lv, lf, ijk, (lf - lo) * m3 + local_flat(m, ijk), n * m3, interp, acc, solid, slip)
    return _tables_from(acc, forest, lv, interp)


def point_tables(forest: Forest, lv: int, leaves, ijk, interp: str = "quadratic", solid=None,
                 slip=(), compact: bool = False) -> LevelTables:
    """The tables of chosen shell points of level lv only (the GPU's interface points: the kernels
    handle the others), destinations q · P + p for the p-th point; ``restrict``/``dup`` over these
    points only. Same classification as :func:`build`. ``compact``: the coarse stencils once per
    distinct source position (LevelTables.coarse_row), the direct reads unsorted."""
    if interp not in STENCILS:
        raise ValueError(f"interp = {interp!r}: one of {sorted(STENCILS)}")
    slip = slip_sides(forest, slip)
    m, m3 = forest.m, forest.m ** 3
    leaves = np.asarray(leaves, np.int64)
    ijk = np.asarray(ijk, np.int64).reshape(-1, 3)
    # chunks of points classified on worker threads (NumPy releases the GIL inside its loops), each
    # into its own lists, joined in point order: each list gets one block per chunk in point order,
    # so the tables are those of one pass whatever the chunking (direct sources are sorted anyway)
    step = min(CHUNK * m * m * 6, max(POINTS_PER_TASK, -(-len(leaves) // _WORKERS)))
    # (the forest's lazily built lookups may be built twice by racing threads: the same arrays)

    def chunk(c0):
        acc = _new_acc()
        lf, pt = leaves[c0:c0 + step], ijk[c0:c0 + step]
        pid = lf * m3 + local_flat(m, pt)
        _owners(forest, lv, lf, forest.origin[lf] + pt * int(forest.spacing_of(lv)), pid, acc)
        _classify(forest, lv, lf, pt, np.arange(c0, c0 + len(lf)), len(leaves), interp, acc, solid, slip)
        return acc
    starts = range(0, len(leaves), step)
    if len(starts) > 1:
        with ThreadPoolExecutor(min(_WORKERS, len(starts))) as pool:
            parts = list(pool.map(chunk, starts))
    else:
        parts = [chunk(c0) for c0 in starts]
    acc = _new_acc()
    for part in parts:
        for k, v in part.items():
            acc[k].extend(v)
    return _tables_from(acc, forest, lv, interp, compact)


def _owners(forest: Forest, lv: int, leaves, pos, pid, acc) -> None:
    """Shell nodes stored in several leaves: the owner is the finest leaf that has the node (lowest
    index among equals). Level l+1 owners give the restriction table, same-level ones the
    duplicates (kept equal by the step itself; used to make an arbitrary initial state consistent)."""
    m, m3 = forest.m, forest.m ** 3
    h = int(forest.spacing_of(lv))
    pw, _ = forest.wrap_points(pos)
    cls = _position_class(m, (pos - forest.origin[leaves]) // h)
    found = np.zeros(pid.shape, bool)
    if lv < forest.max_level:
        fine = _containing_near(forest, lv + 1, leaves, cls, pw)
        s = fine >= 0
        o = forest.local_offset(fine[s], pw[s]) // (h // 2)
        acc["rd"].append(pid[s])
        acc["rs"].append(fine[s] * m3 + local_flat(m, o))
        found |= s
    same = _containing_near(forest, lv, leaves, cls, pw)  # includes the leaf itself: a one-root periodic axis stores
    s = ~found & (same >= 0)           # index 0 and m−1 of one node in the same leaf
    owner = same[s] * m3 + local_flat(m, forest.local_offset(same[s], pw[s]) // h)
    dup = owner != pid[s]
    acc["ud"].append(pid[s][dup])
    acc["us"].append(owner[dup])

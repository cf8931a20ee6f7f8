"""P0's mother leaves (§3.3) on a tree: each level's leaves stored in their parents, with
provisional points where a sibling is refined, the fine values overwriting them.

P0 names a node "mother leaf" when at least one of its children is a leaf, and stores the points
of those children in it as one (2m−1)³ block at the children's spacing (33³ for leaves of 17³).
A child that is not a leaf (it is refined) gets a *provisional* grid inside the block; where
mother leaves of two levels overlap, the finer grid's values overwrite the coarser's. The shell
points — the ones that read other blocks — fall to about half, because siblings now read each
other inside one block.

Here, per level l ≥ 1 the mothers are the distinct parents of the level's leaves (block // 2);
level 0's leaves are roots without a parent, so on level 0 the mothers are 2 × 2 × 2 groups of
roots where the root grid is even on every axis (P0's tree has one root, whose children are the
first leaves), and otherwise level 0 keeps leaves of m³ (:func:`layout` leaves it out). A level's
storage is then a leaf grid of blocks of M = 2m − 1 points, and P0's split kernels run on it
unchanged (ladder.cu), with a neighbour row of the same-level mothers.

Why the result is the reference's (tables.py classifies every pull): a point of a real leaf
reads, at x − c_q h_l, either a node of a same-level leaf (stored, real, in its own or a
neighbouring mother) or the coincident node of a level l+1 leaf, rescaled to level l (the
reference's "fine" source). By 2:1 balance every position within one spacing of a level-l leaf
that lies in a refined region is a node of a level-(l+1) leaf, so there the mother holds a
provisional point, and the provisional points are filled, after every level-l cycle, with the
rescaled values of the level-(l+1) mother at the same node (the restriction kernel; the refined
sibling touches a leaf sibling at the block's centre, so by 2:1 balance it has a leaf child and
is itself a mother on level l+1). Reads the block cannot serve — into a coarser leaf
(interpolation), beyond a wall (bounce-back), a free-slip side, or a neighbouring region with no
mother on this level — are fix-up points, their descriptors built from the reference's tables as
on leaves (interface.level_coupling), mapped into the mother storage.

Flows: the bodies' fluid points next to a solid join the fix-up list (bounce-back or Bouzidi's
interpolated links through the descriptors), and the boundary lists (solid, inlet, outlet, link
points: :func:`boundaries`) move into the mother storage through the same leaf map; provisional
points take the finer level's boundary values with the rest of its state. Not built (variants.py
says so): Kobayashi's CSM (its coefficient needs every copy's owner), fp16 storage.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import interface, tables
from .interface import LevelCoupling
from .storage import mother_size
from .tree import CHILD_OFFSETS, OFFSETS, SELF_SLOT, Forest


@dataclass
class MotherLevel:
    level: int
    m: int  # the leaves' points per axis
    lo: int  # the level's first leaf (global)
    block: np.ndarray  # (n, 3) mother block (x, y, z): the level's leaf blocks // 2
    child: np.ndarray  # (n, 8) level-relative leaf of each child (CHILD_OFFSETS order), −1: refined
    nbr: np.ndarray  # (n, 27) int32 same-level neighbouring mother, the mother itself where none
    same: np.ndarray  # (n, 27) bool: a same-level mother in that slot
    leaf_map: np.ndarray  # (n_leaves · m³,) level-relative leaf point id → mother point id

    @property
    def M(self) -> int:
        return mother_size(self.m)

    @property
    def n(self) -> int:
        return len(self.block)

    @property
    def points(self) -> int:
        return self.n * self.M ** 3

    def real(self) -> np.ndarray:
        """(n · M³,) bool: the points that belong to a leaf of the level (the rest are provisional)."""
        out = np.zeros(self.points, bool)
        out[self.leaf_map] = True
        return out

    def interface_ids(self) -> np.ndarray:
        """Real shell points of the mothers with a pull that crosses into a slot without a
        same-level mother (ascending mother point ids)."""
        M, M3 = self.M, self.M ** 3
        shell, cross = interface.crossing_slots(M)
        fix = (cross[None, :, :] & ~self.same[:, None, :]).any(axis=2)  # (n, S)
        u, s = np.nonzero(fix)
        ids = u * M3 + tables.local_flat(M, shell[s])
        return np.unique(ids[self.real()[ids]])

    def leaf_points(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(leaves global, ijk (R, 3)) of real mother points: a leaf child that holds each."""
        M, M3, h = self.M, self.M ** 3, self.m - 1
        ids = np.asarray(ids, np.int64)
        u, loc = np.divmod(ids, M3)
        IJK = np.stack([loc % M, loc // M % M, loc // (M * M)], axis=1)
        leaf = np.full(len(ids), -1, np.int64)
        ijk = np.zeros((len(ids), 3), np.int64)
        for c, off in enumerate(CHILD_OFFSETS):
            lo = off * h
            inside = np.all((IJK >= lo) & (IJK <= lo + h), axis=1) & (leaf < 0)
            hit = inside & (self.child[u, c] >= 0)
            leaf[hit] = self.child[u[hit], c]
            ijk[hit] = IJK[hit] - lo
        if np.any(leaf < 0):
            raise AssertionError(f"level {self.level}: a mother point without a leaf (provisional)")
        return leaf + self.lo, ijk

    def provisional(self, finer: MotherLevel) -> tuple[np.ndarray, np.ndarray]:
        """(dst, src): every provisional point of this level and the same node in the next finer
        level's mother storage (the refined child is that level's mother)."""
        M, M3, h = self.M, self.M ** 3, self.m - 1
        dst = np.flatnonzero(~self.real())
        if not dst.size:
            return dst.astype(np.int64), dst.astype(np.int64)
        u, loc = np.divmod(dst, M3)
        IJK = np.stack([loc % M, loc // M % M, loc // (M * M)], axis=1)
        c = np.minimum(IJK // h, 1)
        idx = _lookup(finer.block, 2 * self.block[u] + c)
        if np.any(idx < 0):
            raise AssertionError(f"level {self.level}: a provisional point without a mother on level {self.level + 1}")
        src = idx * M3 + tables.local_flat(M, 2 * (IJK - c * h))
        return dst.astype(np.int64), src.astype(np.int64)


def _keys(block) -> np.ndarray:
    b = np.asarray(block, np.int64)
    return (b[..., 2] << 42) | (b[..., 1] << 21) | b[..., 0]


def _lookup(blocks, want) -> np.ndarray:
    """Index of each wanted block in ``blocks`` (sorted by (z, y, x)), or −1."""
    keys = _keys(blocks)
    k = _keys(want)
    pos = np.minimum(np.searchsorted(keys, k), max(len(keys) - 1, 0))
    hit = (keys[pos] == k) if len(keys) else np.zeros(k.shape, bool)
    return np.where(hit, pos, -1)


def level_zero_reason(forest: Forest) -> str | None:
    """Why level 0 keeps leaves of m³ (None where its roots group 2 × 2 × 2)."""
    if any(int(r) % 2 for r in forest.roots):
        return (f"level 0 keeps leaves of m³: its roots {list(forest.roots)} do not group 2 × 2 × 2 "
                "(an even number per axis makes them mother leaves too)")
    return None


def mother_level(forest: Forest, lv: int) -> MotherLevel:
    m, sl = forest.m, forest.level_slice(lv)
    B = forest.block[sl]
    mb = B // 2
    order_keys = np.unique(_keys(mb))
    block = np.stack([order_keys & ((1 << 21) - 1), (order_keys >> 21) & ((1 << 21) - 1), order_keys >> 42], axis=1)
    owner = np.searchsorted(order_keys, _keys(mb))
    cslot = ((B[:, 2] % 2) * 2 + B[:, 1] % 2) * 2 + B[:, 0] % 2
    child = np.full((len(block), 8), -1, np.int64)
    child[owner, cslot] = np.arange(len(B))
    # same-level neighbours (periodic axes wrap on the mother grid)
    nb = forest.blocks_per_axis(lv) // 2
    tgt = block[:, None, :] + OFFSETS[None, :, :]
    valid = np.ones(tgt.shape[:2], bool)
    for d in range(3):
        if forest.periodic[d]:
            tgt[..., d] %= nb[d]
        else:
            valid &= (tgt[..., d] >= 0) & (tgt[..., d] < nb[d])
    idx = np.where(valid, _lookup(block, np.where(valid[..., None], tgt, 0)), -1)
    same = idx >= 0
    same[:, SELF_SLOT] = True
    own = np.arange(len(block))[:, None]
    nbr = np.where(same, np.where(idx >= 0, idx, own), own).astype(np.int32)
    # leaf point → mother point
    M = mother_size(m)
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    local = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)  # (m³, 3) in local flat order
    off = (B % 2) * (m - 1)  # (n_leaves, 3)
    IJK = off[:, None, :] + local[None, :, :]
    leaf_map = (owner[:, None] * M ** 3 + tables.local_flat(M, IJK)).reshape(-1)
    return MotherLevel(level=lv, m=m, lo=sl.start, block=block, child=child, nbr=nbr, same=same,
                       leaf_map=leaf_map.astype(np.int64))


def layout(forest: Forest) -> dict[int, MotherLevel]:
    """The mother levels of a forest: every level ≥ 1, and level 0 where its roots group."""
    return {lv: mother_level(forest, lv) for lv in forest.levels
            if lv > 0 or level_zero_reason(forest) is None}


def _special(pt, R: int, N: int) -> np.ndarray:
    """(R,) bool: the points of reference tables ``pt`` (tables.point_tables over R points; N the
    forest's points) that hold a read a mother block cannot serve by a plain pull — an interpolated
    coarse source, a bounce-back (walls, bodies) or a free-slip reflection: a source population
    other than the pulled one; plain same-level and coincident fine reads it can.
    By the layout these reads all cross into a slot without a same-level mother, so on a tree
    without bodies the points are already among MotherLevel.interface_ids (a review's 200 random
    trees never found one outside); next to a body they are the points whose pull meets a solid
    node. It makes the fix-up list follow the reference's classification, not the argument."""
    out = np.zeros(R, bool)
    if not R:
        return out
    out[pt.coarse_dst % R] = True
    qd, r = np.divmod(pt.direct_dst, R)
    out[r[pt.direct_src // N != qd]] = True
    qf, r = np.divmod(pt.fine_dst, R)
    out[r[pt.fine_q != qf]] = True
    return out


def _to_mothers(a, n_leaf_pts: int, ml: MotherLevel) -> np.ndarray:
    """Level-buffer indices q · P + p of leaf storage (P = the level's leaf points) → q · P_M + the
    mother point of p."""
    q, p = np.divmod(a, n_leaf_pts)
    return q * ml.points + ml.leaf_map[p]


def coupling(forest: Forest, lay: dict[int, MotherLevel], interp: str = "quadratic", slip=(), solid=None,
             near=None, links=None) -> dict[int, LevelCoupling]:
    """interface.build for a tree whose levels in ``lay`` are stored as mother leaves: every id in
    that storage, the provisional points' fills appended to the restriction. ``solid``, ``near``,
    ``links``: a flow's bodies as for interface.build (Boundaries.solid / near() / links(), leaf
    storage): the points next to a body join the fix-up list of their mother storage, and the
    links' buffer indices move into it."""
    links = links or {}
    m, m3 = forest.m, forest.m ** 3
    N = forest.n_leaves * m3

    def remap(lv, ids):
        ids = np.asarray(ids, np.int64)
        return lay[lv].leaf_map[ids] if lv in lay and ids.size else ids

    def fine_start(lv):
        return forest.level_slice(lv + 1).start * m3 if lv + 1 in forest.levels else 0

    out = {}
    for lv in forest.levels:
        leaves_r, ijk_r = interface.fixup_points(forest, lv, near)
        if lv not in lay:  # leaves of m³: only the neighbouring levels' ids move
            r = interface.level_coupling(forest, lv, leaves_r, ijk_r, interp, solid, links.get(lv), slip)
            r.fine_pts, r.coarse_pts = remap(lv + 1, r.fine_pts), remap(lv - 1, r.coarse_pts)
            r.restrict_src = remap(lv + 1, r.restrict_src)
            out[lv] = r
            continue
        ml = lay[lv]
        n_leaf_pts = (forest.level_slice(lv).stop - ml.lo) * m3
        # the reference's tables of the points leaves of m³ would fix up: which of them the mother
        # blocks cannot serve, and the restriction (coarse copies of fine-owned nodes) among them
        pt = tables.point_tables(forest, lv, leaves_r, ijk_r, interp, solid, slip)
        special = _special(pt, len(leaves_r), N)
        ids = np.union1d(ml.interface_ids(),
                         ml.leaf_map[(leaves_r[special] - ml.lo) * m3 + tables.local_flat(m, ijk_r[special])])
        leaves, ijk = ml.leaf_points(ids)
        # in the order of the leaf point ids of these representatives (level_coupling finds the
        # links' points by bisection)
        rep_pid = (leaves - ml.lo) * m3 + tables.local_flat(m, ijk)
        order = np.argsort(rep_pid, kind="stable")
        ids, leaves, ijk, rep_pid = ids[order], leaves[order], ijk[order], rep_pid[order]
        link = None
        if lv in links:  # each link at its node's representative copy (a sibling's copy is the same point)
            lpts, lq, i1, i2, w1, w2 = links[lv]
            by_id = np.argsort(ids)
            at = by_id[np.minimum(np.searchsorted(ids, ml.leaf_map[lpts], sorter=by_id), len(ids) - 1)]
            if not len(ids) or np.any(ids[at] != ml.leaf_map[lpts]):
                raise AssertionError(f"level {lv}: a bounce-back link at a point outside the mothers' fix-up list")
            link = (rep_pid[at], lq, i1, i2, w1, w2)
        c = interface.level_coupling(forest, lv, leaves, ijk, interp, solid, link, slip)
        if not np.array_equal(ml.leaf_map[c.fix_pts], ids):
            raise AssertionError(f"level {lv}: the mother fix-up points do not map back to themselves")

        desc = c.desc.copy()
        d = desc >= 0
        desc[d] = _to_mothers(desc[d], n_leaf_pts, ml)
        if lv + 1 in lay:
            pd, ps = ml.provisional(lay[lv + 1])
        elif not ml.real().all():
            raise AssertionError(f"level {lv}: provisional points without a finer level")
        else:
            pd = ps = np.zeros(0, np.int64)
        lk = {}
        if c.link_i1.size:
            lk = dict(link_i1=_to_mothers(c.link_i1, n_leaf_pts, ml), link_i2=_to_mothers(c.link_i2, n_leaf_pts, ml),
                      link_w1=c.link_w1,
                      link_w2=c.link_w2)
        out[lv] = LevelCoupling(
            level=lv, lo=ml.lo, n=ml.n, nbr=ml.nbr, fix_pts=ids, desc=desc,
            fine_pts=remap(lv + 1, c.fine_pts), coarse_pts=remap(lv - 1, c.coarse_pts),
            interp_slot=c.interp_slot, interp_w=c.interp_w,
            restrict_dst=np.concatenate([ml.leaf_map[pt.restrict_dst - ml.lo * m3], pd]),
            restrict_src=np.concatenate([remap(lv + 1, pt.restrict_src - fine_start(lv)), ps]),
            block=ml.M, leaf_map=ml.leaf_map, n_prov=len(pd), **lk)
    return out


def point_counts(forest: Forest, lay: dict[int, MotherLevel]) -> dict:
    """Stored, shell and provisional points, with mother leaves and with leaves of m³ (P0's
    Table 2 / Table 3 figures for a tree)."""
    m = forest.m
    leaves = forest.n_leaves * m ** 3
    leaf_shell = forest.n_leaves * (m ** 3 - (m - 2) ** 3)
    stored = shell = prov = 0
    for lv in forest.levels:
        sl = forest.level_slice(lv)
        if lv in lay:
            ml = lay[lv]
            stored += ml.points
            shell += ml.n * (ml.M ** 3 - (ml.M - 2) ** 3)
            prov += int((~ml.real()).sum())
        else:
            n = sl.stop - sl.start
            stored += n * m ** 3
            shell += n * (m ** 3 - (m - 2) ** 3)
    return {"leaf_points": leaves, "leaf_shell": leaf_shell, "mother_points": stored, "mother_shell": shell,
            "provisional": prov}


def boundaries(bnd, lay: dict[int, MotherLevel]):
    """A flow's boundary lists (boundaries.Boundaries, leaf storage) with the point ids of the
    levels in ``lay`` moved into their mother storage (solid, inlet, outlet and link points: each
    copy of a node lands on the node's one mother point, so duplicates write equal values and the
    force still counts each owner link once). ``near`` keeps leaf coordinates (tables read them)."""
    level = {}
    for lv, b in bnd.level.items():
        if lv not in lay:
            level[lv] = b
            continue
        mp = lay[lv].leaf_map
        level[lv] = replace(b, **{k: mp[np.asarray(getattr(b, k), np.int64)]
                                  for k in ("solid_pts", "inlet_pts", "outlet_dst", "outlet_src", "link_pts",
                                            "link_p2")})
    return replace(bnd, level=level)

"""The octree forest on the host: plain NumPy arrays, no device code (docs/amr3d.md, "Data layout").

A forest is nx × ny × nz root blocks; each split makes 8 children. A leaf is named by its level l
and its block index b = (bx, by, bz) among the roots·2^l blocks of that level, and holds m³
node-centred points (m = 2^n + 1) with spacing h_l = 2^(max_level − l) in integer units of the
finest allowed lattice, so every coordinate is an exact integer: a leaf's origin is
b · (m − 1) · h_l, its extent (m − 1) · h_l, and the domain is roots · (m − 1) · 2^max_level.
Neighbouring leaves share their face nodes (both store them).

Leaves are kept sorted by (level, bz, by, bx): each level is one contiguous slice of the leaf
arrays (a level's step is one launch over a slice) and every tree has one canonical numbering,
so two ways of building the same tree give the same indices.

2:1 balance is over faces, edges and corners: leaves whose closed boxes touch differ by at most
one level. ``refine`` restores it by refining the coarser side (the ripple propagates);
``coarsen`` only merges a family when the merged tree is still balanced.

Neighbour slots follow shaders/cuda/amr3d/d3q27.cuh: slot(nx, ny, nz) = (nz+1)·9 + (ny+1)·3 + (nx+1),
27 slots, slot 13 the leaf itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

OFFSETS = np.array([(x, y, z) for z in (-1, 0, 1) for y in (-1, 0, 1) for x in (-1, 0, 1)], dtype=np.int64)
SELF_SLOT = 13
CHILD_OFFSETS = np.array([(x, y, z) for z in (0, 1) for y in (0, 1) for x in (0, 1)], dtype=np.int64)


def slot(nx: int, ny: int, nz: int) -> int:
    return (nz + 1) * 9 + (ny + 1) * 3 + (nx + 1)


@dataclass(frozen=True, eq=False)
class Forest:
    """A balanced (or not yet balanced) set of leaves. Immutable: operations return a new forest."""

    roots: tuple
    m: int
    max_level: int
    periodic: tuple
    level: np.ndarray = field(repr=False)  # (L,) int64
    block: np.ndarray = field(repr=False)  # (L, 3) int64, (bx, by, bz) at the leaf's level

    def __post_init__(self):
        if self.m < 3 or (self.m - 1) & (self.m - 2):
            raise ValueError(f"m = {self.m}: a leaf needs 2^n + 1 points per axis (9, 17, 33)")
        lev = np.asarray(self.level, np.int64).reshape(-1)
        blk = np.asarray(self.block, np.int64).reshape(-1, 3)
        if lev.size and (lev.min() < 0 or lev.max() > self.max_level):
            raise ValueError(f"leaf levels must lie in 0..{self.max_level}")
        order = np.lexsort((blk[:, 0], blk[:, 1], blk[:, 2], lev))
        object.__setattr__(self, "level", lev[order])
        object.__setattr__(self, "block", blk[order])
        object.__setattr__(self, "roots", tuple(int(r) for r in self.roots))
        object.__setattr__(self, "periodic", tuple(bool(p) for p in self.periodic))

    # ---- construction --------------------------------------------------------------------
    @classmethod
    def uniform(cls, roots=(1, 1, 1), level: int = 0, m: int = 17, max_level: int | None = None,
                periodic=(True, True, True)) -> Forest:
        """Every leaf at ``level`` (the roots split ``level`` times)."""
        max_level = level if max_level is None else max_level
        n = np.asarray(roots, np.int64) << level
        bz, by, bx = np.meshgrid(np.arange(n[2]), np.arange(n[1]), np.arange(n[0]), indexing="ij")
        blk = np.stack([bx.ravel(), by.ravel(), bz.ravel()], axis=1)
        return cls(tuple(roots), m, max_level, tuple(periodic), np.full(len(blk), level), blk)

    def replace(self, level, block) -> Forest:
        return Forest(self.roots, self.m, self.max_level, self.periodic, level, block)

    # ---- geometry (integer units of the finest lattice) -----------------------------------
    @property
    def n_leaves(self) -> int:
        return int(self.level.size)

    def spacing_of(self, level) -> np.ndarray:
        return np.left_shift(1, self.max_level - np.asarray(level, np.int64))

    def block_size(self, level) -> np.ndarray:
        return (self.m - 1) * self.spacing_of(level)

    @cached_property
    def spacing(self) -> np.ndarray:
        return self.spacing_of(self.level)

    @cached_property
    def extent(self) -> np.ndarray:
        return (self.m - 1) * self.spacing

    @cached_property
    def origin(self) -> np.ndarray:
        return self.block * self.extent[:, None]

    @cached_property
    def domain(self) -> np.ndarray:
        """Domain size per axis (x, y, z) in finest units."""
        return np.asarray(self.roots, np.int64) * (self.m - 1) << self.max_level

    def blocks_per_axis(self, level: int) -> np.ndarray:
        return np.asarray(self.roots, np.int64) << int(level)

    @cached_property
    def levels(self) -> list[int]:
        return sorted(set(int(x) for x in self.level))

    def level_slice(self, level: int) -> slice:
        """Leaves of one level are contiguous (the sort order)."""
        lo, hi = np.searchsorted(self.level, [level, level + 1])
        return slice(int(lo), int(hi))

    # ---- lookup ----------------------------------------------------------------------------
    def _key(self, level, block) -> np.ndarray:
        n = self.blocks_per_axis(self.max_level)
        level = np.asarray(level, np.int64)
        return ((level * n[2] + block[..., 2]) * n[1] + block[..., 1]) * n[0] + block[..., 0]

    @cached_property
    def _sorted_keys(self):
        keys = self._key(self.level, self.block)
        order = np.argsort(keys, kind="stable")
        return keys[order], order

    def wrap_blocks(self, level: int, block) -> tuple[np.ndarray, np.ndarray]:
        """Blocks wrapped on periodic axes; ``valid`` is False outside a non-periodic axis."""
        n = self.blocks_per_axis(level)
        block = np.array(block, np.int64, copy=True)
        valid = np.ones(block.shape[:-1], bool)
        for d in range(3):
            if self.periodic[d]:
                block[..., d] %= n[d]
            else:
                valid &= (block[..., d] >= 0) & (block[..., d] < n[d])
        if not valid.all():  # (in place: the copy above is ours)
            block[~valid] = 0
        return block, valid

    _DENSE_LIMIT = 1 << 24  # blocks of one level held in a dense lookup grid (int32: ≤ 64 MB)

    def _dense(self, level: int):
        """(nz, ny, nx) int32 grid of the leaf index of each block of ``level`` (−1: no leaf of that
        level there), or None where the level has too many blocks for a dense grid. Built once."""
        cache = self.__dict__.setdefault("_dense_grids", {})
        if level not in cache:
            n = self.blocks_per_axis(level)
            grid = None
            if int(np.prod(n)) <= self._DENSE_LIMIT and len(self.level) < 2 ** 31:
                grid = np.full((int(n[2]), int(n[1]), int(n[0])), -1, np.int32)
                sel = np.flatnonzero(self.level == level)
                b = self.block[sel]
                grid[b[:, 2], b[:, 1], b[:, 0]] = sel
            cache[level] = grid
        return cache[level]

    def find_level(self, level: int, block) -> np.ndarray:
        """:meth:`find` for one level (blocks wrapped/valid): a dense-grid gather where it fits."""
        grid = self._dense(int(level))
        block = np.asarray(block, np.int64)
        if grid is None:
            return self.find(np.full(block.shape[:-1], level), block)
        return grid[block[..., 2], block[..., 1], block[..., 0]].astype(np.int64)

    def find(self, level, block) -> np.ndarray:
        """Leaf index of (level, block) or −1 (blocks must be wrapped/valid)."""
        keys, order = self._sorted_keys
        k = self._key(level, np.asarray(block, np.int64))
        pos = np.searchsorted(keys, k)
        pos = np.minimum(pos, max(len(keys) - 1, 0))
        hit = keys[pos] == k if len(keys) else np.zeros(k.shape, bool)
        return np.where(hit, order[pos], -1)

    def cover(self, level: int, block) -> tuple[np.ndarray, np.ndarray]:
        """The leaf at level ≤ ``level`` that contains block (level, block), and its level;
        (−1, −1) where the block is subdivided into finer leaves, (−1, −2) outside the domain."""
        block, valid = self.wrap_blocks(level, block)
        leaf = np.full(block.shape[:-1], -1, np.int64)
        lev = np.full(block.shape[:-1], -1, np.int64)
        for lv in range(level, -1, -1):
            hit = self.find_level(lv, block >> (level - lv))
            new = (leaf < 0) & (hit >= 0)
            leaf[new], lev[new] = hit[new], lv
        lev[~valid], leaf[~valid] = -2, -1
        return leaf, lev

    def containing(self, level: int, points) -> np.ndarray:
        """For points (..., 3) in finest units, the lowest-numbered leaf of ``level`` whose closed
        box contains the point, or −1. Points on block boundaries belong to both sides."""
        pts = np.asarray(points, np.int64)
        shape = pts.shape[:-1]
        pts = pts.reshape(-1, 3)
        size = int(self.block_size(level))
        base = pts // size
        blk, valid = self.wrap_blocks(level, base)  # the block below the point: every point
        best = np.where(valid, self.find_level(level, blk), -1)
        # Points on a block face also lie in the block before it on that axis (corners: up to 8
        # blocks). Only those few points are looked up again: a leaf's face nodes are ~6 % of its
        # points per axis, so this is most of the work saved on a flow's tree.
        on = (pts % size) == 0
        sub = np.flatnonzero(on.any(axis=1))
        if sub.size:
            s_base, s_on, s_best = base[sub], on[sub], best[sub]
            for corner in CHILD_OFFSETS[1:]:
                idx = np.flatnonzero(s_on[:, corner.astype(bool)].all(axis=1))
                if not idx.size:
                    continue
                blk, valid = self.wrap_blocks(level, s_base[idx] - corner)
                hit = np.where(valid, self.find_level(level, blk), -1)
                cur = s_best[idx]
                s_best[idx] = np.where((hit >= 0) & ((cur < 0) | (hit < cur)), hit, cur)
            best[sub] = s_best
        return best.reshape(shape)

    def wrap_points(self, points) -> tuple[np.ndarray, np.ndarray]:
        """Points wrapped into [0, D) on periodic axes; ``inside`` False beyond a non-periodic side."""
        pts = np.array(points, np.int64, copy=True)
        inside = np.ones(pts.shape[:-1], bool)
        for d in range(3):
            if self.periodic[d]:
                pts[..., d] %= self.domain[d]
            else:
                inside &= (pts[..., d] >= 0) & (pts[..., d] <= self.domain[d])
        return pts, inside

    def local_offset(self, leaves, points) -> np.ndarray:
        """points − origin(leaf), taken modulo the domain on periodic axes (so a point at 0 is at
        the far face of a leaf that ends at D). Finest units."""
        off = np.asarray(points, np.int64) - self.origin[leaves]
        for d in range(3):
            if self.periodic[d]:
                off[..., d] %= self.domain[d]
        return off

    # ---- tree structure ----------------------------------------------------------------------
    @cached_property
    def nodes(self) -> NodeTable:
        return build_nodes(self)

    @cached_property
    def neighbours(self) -> NeighbourTable:
        return build_neighbours(self)


@dataclass(frozen=True)
class NodeTable:
    """Every node of the forest (roots, internal nodes, leaves), sorted like the leaves."""

    level: np.ndarray  # (N,)
    block: np.ndarray  # (N, 3)
    parent: np.ndarray  # (N,) node index, −1 for roots
    children: np.ndarray  # (N, 8) node indices in CHILD_OFFSETS order, −1 for leaves
    leaf: np.ndarray  # (N,) leaf index, −1 for internal nodes
    leaf_node: np.ndarray  # (L,) node index of each leaf


def build_nodes(forest: Forest) -> NodeTable:
    lev, blk = [], []
    for lv in range(forest.max_level + 1):
        sel = forest.level >= lv
        lev.append(np.full(int(sel.sum()), lv))
        blk.append(forest.block[sel] >> (forest.level[sel] - lv)[:, None])
    lev, blk = np.concatenate(lev), np.concatenate(blk)
    n = forest.blocks_per_axis(forest.max_level)
    key = ((lev * n[2] + blk[:, 2]) * n[1] + blk[:, 1]) * n[0] + blk[:, 0]
    key, first = np.unique(key, return_index=True)  # sorted by (level, bz, by, bx) like the leaves
    lev, blk = lev[first], blk[first]

    def find(level, block):
        k = ((level * n[2] + block[..., 2]) * n[1] + block[..., 1]) * n[0] + block[..., 0]
        pos = np.minimum(np.searchsorted(key, k), len(key) - 1)
        return np.where(key[pos] == k, pos, -1)

    parent = np.where(lev > 0, find(lev - 1, blk >> 1), -1)
    children = find(lev[:, None] + 1, 2 * blk[:, None, :] + CHILD_OFFSETS[None])
    leaf_node = find(forest.level, forest.block)
    leaf = np.full(len(key), -1, np.int64)
    leaf[leaf_node] = np.arange(forest.n_leaves)
    children[leaf >= 0] = -1
    return NodeTable(lev, blk, parent, children, leaf, leaf_node)


@dataclass(frozen=True)
class NeighbourTable:
    """Per leaf and slot (27, slot 13 = itself): what lies across that face, edge or corner.

    dlevel = neighbour level − own level: 0 → ``leaf`` is the same-size neighbour; −1 → ``leaf`` is
    the coarser leaf and ``part`` (0/1 per axis) says which half of it, per axis, touches us;
    +1 → the same-size region is split into finer leaves, ``node`` is that region's node (its
    children, NodeTable.children, are the finer leaves). Outside a non-periodic side: node = leaf
    = −1, ``outside`` True."""

    node: np.ndarray  # (L, 27)
    leaf: np.ndarray  # (L, 27)
    dlevel: np.ndarray  # (L, 27) int8
    part: np.ndarray  # (L, 27, 3) int8
    outside: np.ndarray  # (L, 27) bool


def build_neighbours(forest: Forest) -> NeighbourTable:
    L = forest.n_leaves
    node = np.full((L, 27), -1, np.int64)
    leaf = np.full((L, 27), -1, np.int64)
    dlevel = np.zeros((L, 27), np.int8)
    part = np.zeros((L, 27, 3), np.int8)
    outside = np.zeros((L, 27), bool)
    nodes = forest.nodes
    n = forest.blocks_per_axis(forest.max_level)
    nkey = ((nodes.level * n[2] + nodes.block[:, 2]) * n[1] + nodes.block[:, 1]) * n[0] + nodes.block[:, 0]
    for lv in forest.levels:
        sl = forest.level_slice(lv)
        nb = forest.block[sl][:, None, :] + OFFSETS[None]
        wrapped, valid = forest.wrap_blocks(lv, nb)
        cov, cl = forest.cover(lv, nb)
        if np.any(valid & (cl >= 0) & (cl < lv - 1)):
            raise ValueError("forest is not 2:1 balanced; call balance() first")
        same = cl == lv
        coarse = (cl >= 0) & (cl == lv - 1)
        fine = valid & (cl == -1)
        leaf[sl] = np.where(same | coarse, cov, -1)
        dlevel[sl] = np.where(coarse, -1, np.where(fine, 1, 0))
        part[sl] = np.where(coarse[..., None], wrapped & 1, 0)
        outside[sl] = ~valid
        k = ((lv * n[2] + wrapped[..., 2]) * n[1] + wrapped[..., 1]) * n[0] + wrapped[..., 0]
        pos = np.minimum(np.searchsorted(nkey, k), len(nkey) - 1)
        own = np.where(nkey[pos] == k, pos, -1)  # the same-size node (exists unless coarser)
        coarse_node = nodes.leaf_node[np.where(coarse, cov, 0)]
        node[sl] = np.where(~valid, -1, np.where(coarse, coarse_node, own))
    return NeighbourTable(node, leaf, dlevel, part, outside)


# ---- tree operations ---------------------------------------------------------------------------
def _unbalanced_coarse_leaves(forest: Forest) -> np.ndarray:
    """Leaves that touch (face, edge or corner) a leaf more than one level finer."""
    bad = []
    for lv in forest.levels:
        if lv < 2:
            continue
        sl = forest.level_slice(lv)
        nb = forest.block[sl][:, None, :] + OFFSETS[None]
        cov, cl = forest.cover(lv, nb)
        bad.append(cov[(cl >= 0) & (cl < lv - 1)])
    return np.unique(np.concatenate(bad)) if bad else np.zeros(0, np.int64)


def is_balanced(forest: Forest) -> bool:
    return _unbalanced_coarse_leaves(forest).size == 0


def _split(forest: Forest, leaves) -> Forest:
    leaves = np.unique(np.asarray(leaves, np.int64))
    if leaves.size == 0:
        return forest
    if np.any(forest.level[leaves] >= forest.max_level):
        raise ValueError(f"cannot refine beyond max_level = {forest.max_level}")
    keep = np.ones(forest.n_leaves, bool)
    keep[leaves] = False
    child_blk = (2 * forest.block[leaves][:, None, :] + CHILD_OFFSETS[None]).reshape(-1, 3)
    child_lev = np.repeat(forest.level[leaves] + 1, 8)
    return forest.replace(np.concatenate([forest.level[keep], child_lev]),
                          np.concatenate([forest.block[keep], child_blk]))


def balance(forest: Forest) -> Forest:
    """Refine coarse leaves until every touching pair differs by ≤ 1 level (ripple to a fixpoint)."""
    while True:
        bad = _unbalanced_coarse_leaves(forest)
        if bad.size == 0:
            return forest
        forest = _split(forest, bad)


def refine(forest: Forest, leaves, rebalance: bool = True) -> Forest:
    """Split the given leaves into 8 children each, then restore 2:1 balance."""
    out = _split(forest, leaves)
    return balance(out) if rebalance else out


def coarsen(forest: Forest, leaves) -> Forest:
    """Merge the family (the 8 siblings) of each given leaf into its parent, where all 8 siblings
    are leaves and the merged tree stays balanced; other requests are skipped (never an error:
    coarsening is a wish, refinement a requirement)."""
    for leaf_key in [(int(forest.level[i]), tuple(forest.block[i])) for i in np.atleast_1d(leaves)]:
        lv, blk = leaf_key
        if lv == 0:
            continue
        parent = np.asarray(blk) >> 1
        sib = forest.find(np.full(8, lv), 2 * parent[None] + CHILD_OFFSETS)
        if np.any(sib < 0):
            continue  # not a family of leaves (already merged, or a sibling is split)
        keep = np.ones(forest.n_leaves, bool)
        keep[sib] = False
        cand = forest.replace(np.concatenate([forest.level[keep], [lv - 1]]),
                              np.concatenate([forest.block[keep], parent[None]]))
        if is_balanced(cand):
            forest = cand
    return forest

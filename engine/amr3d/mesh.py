"""From a preset to a forest, and from the forest back to pictures: the refined tree a preset
describes, the uniform sampling lattice its fields are shown on, and its leaves as boxes.

Sampling: the fields of a tree are drawn on a uniform lattice of level s (the finest level whose
lattice stays within a point budget, at least the coarsest present level). Every sample takes the
trilinear interpolant of the finest leaf that contains it — exact (one node, weight 1) wherever the
sample is a node of that leaf, which is everywhere when s is at most that leaf's level. The
gather (8 point ids and weights per sample) is built once per tree: the leaf of each sample on the
host, the ids and weights on the state's device.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tree import Forest, refine


def build_forest(p, bodies=()) -> Forest:
    """The preset's tree: the roots at level 0, every leaf that overlaps a refine box refined until
    it reaches the box's level, then every leaf within a body's band of its surface refined to the
    body's level (2:1 balance after each split restores the neighbours). ``bodies``: the
    bodies.Body objects of ``p.body``, in order."""
    f = Forest.uniform(tuple(p.grid.leaves), 0, p.grid.m, p.max_level, periodic=tuple(p.grid.periodic))
    f = _refine_boxes(f, p)
    for spec, body in zip(p.body, bodies):
        f = refine_near(f, body, spec.level, spec.band)
    return f


def refine_near(f: Forest, body, level: int, band: float) -> Forest:
    """Refine until every leaf that may come within ``band`` (level-0 units) of the body's surface
    is at ``level``: a leaf is taken when |distance(centre)| − half its diagonal ≤ band (never
    misses one for a true signed distance; may take a few more)."""
    unit = float(1 << f.max_level)
    while True:
        centre = (f.origin + 0.5 * f.extent[:, None]) / unit
        half_diag = 0.5 * np.sqrt(3.0) * f.extent / unit
        hit = (np.abs(body.distance(centre)) - half_diag <= band) & (f.level < level)
        if not hit.any():
            return f
        f = refine(f, np.nonzero(hit)[0])


def _refine_boxes(f: Forest, p) -> Forest:
    for box in sorted(p.refine, key=lambda b: b.level):
        lo, hi = np.asarray(box.lo), np.asarray(box.hi)
        while True:
            d = f.domain.astype(np.float64)
            a = f.origin / d
            b = (f.origin + f.extent[:, None]) / d
            hit = np.all((a < hi) & (b > lo), axis=1) & (f.level < box.level)
            if not hit.any():
                break
            f = refine(f, np.nonzero(hit)[0])
    return f


@dataclass
class Sampling:
    level: int
    shape: tuple[int, int, int]  # (nz, ny, nx)
    ids: object  # (8, P) point ids (leaf · m³ + local), int64 (xp)
    weights: object  # (8, P) float64 unless asked for another dtype (xp)
    unit: int  # finest-lattice units per sample spacing


CORNERS = tuple((dx, dy, dz) for dz in (0, 1) for dy in (0, 1) for dx in (0, 1))


def sampling(forest: Forest, budget: int, xp=np, dtype=np.float64) -> Sampling:
    """The sampling lattice (see module doc); periodic axes exclude the far face, walled ones keep it.
    Which leaf holds each sample is painted on the host (a loop over the leaves, not over the
    samples); the per-sample ids and weights are array code on ``xp`` (on the GPU: ~75 CuPy
    launches, where the host's NumPy would spend its time on 8 values a sample). The weights are
    taken in float64 and rounded once to ``dtype`` (the engine's: no float64 copy of all 8 kept)."""
    m = forest.m
    lv = min(forest.levels)
    while lv < forest.max_level and np.prod(_counts(forest, lv + 1)) <= budget:
        lv += 1
    unit = int(forest.spacing_of(lv))
    n = _counts(forest, lv)
    owner = _owners(forest, unit, n)
    leaf = xp.asarray(owner)
    h = xp.asarray(forest.spacing)[leaf]
    origin = xp.asarray(forest.origin)
    # per axis (x, y, z) the corner below the sample (i0, clamped to the leaf's last cell) and the
    # fraction of the way to the next node: the sample's coordinate on that axis only, broadcast
    lower, frac = [], []
    for a in range(3):
        coord = (xp.arange(int(n[a]), dtype=np.int64) * unit).reshape([-1 if 2 - d == a else 1 for d in range(3)])
        off = coord - origin[:, a][leaf]
        if forest.periodic[a]:  # a sample at 0 is at the far face of a leaf that ends at the domain's end
            off %= int(forest.domain[a])
        i0 = xp.minimum(off // h, m - 2)
        lower.append(i0)
        frac.append((off - i0 * h) / h)
    base = leaf.astype(np.int64) * m**3 + (lower[2] * m + lower[1]) * m + lower[0]
    del lower, leaf, h  # (device memory: up to 2^21 samples on the GPU)
    ids = xp.empty((8,) + owner.shape, np.int64)
    w = xp.empty((8,) + owner.shape, dtype)
    # the weight (w_x · w_y) · w_z in float64, the order of the product over the axes the lattice
    # always took, then rounded to dtype
    wx = (1.0 - frac[0], frac[0])
    wy = (1.0 - frac[1], frac[1])
    wz = (1.0 - frac[2], frac[2])
    wxy = {(dx, dy): wx[dx] * wy[dy] for dx in (0, 1) for dy in (0, 1)}
    for c, (dx, dy, dz) in enumerate(CORNERS):
        xp.add(base, (dz * m + dy) * m + dx, out=ids[c])
        w[c] = wxy[dx, dy] * wz[dz]
    return Sampling(lv, (int(n[2]), int(n[1]), int(n[0])), ids.reshape(8, -1), w.reshape(8, -1), unit)


def _owners(forest: Forest, unit: int, n) -> np.ndarray:
    """(nz, ny, nx) int32: the leaf each sample of the lattice of spacing ``unit`` (n samples per
    axis x, y, z) takes its values from: of the leaves whose closed box holds it, one of the finest
    level, the lowest-numbered of that level (Forest.containing's rule). Painted leaf by leaf, the
    coarsest level first and each level's leaves from the highest index down, so the leaf painted
    last on a sample is the one that rule picks."""
    lo = forest.origin
    hi = lo + forest.extent[:, None]
    first = -(-lo // unit)
    last = np.minimum(hi // unit, n - 1)  # a periodic axis has no sample at the far face ...
    wraps = np.asarray(forest.periodic) & (hi == forest.domain)  # ... which is the sample at 0
    grid = np.full((int(n[2]), int(n[1]), int(n[0])), -1, np.int32)
    order = np.lexsort((-np.arange(forest.n_leaves), forest.level))
    for i, f, t, wr in zip(order.tolist(), first[order].tolist(), last[order].tolist(), wraps[order].tolist()):
        spans = [[slice(f[a], t[a] + 1)] + ([slice(0, 1)] if wr[a] else []) for a in range(3)]
        for sz in spans[2]:
            for sy in spans[1]:
                for sx in spans[0]:
                    grid[sz, sy, sx] = i
    if np.any(grid < 0):
        raise AssertionError("a sample outside every leaf: the forest does not tile the domain")
    return grid


def _counts(forest: Forest, level: int) -> np.ndarray:
    """Samples per axis (x, y, z) on the lattice of ``level``."""
    n = forest.domain // forest.spacing_of(level)
    return n + np.array([0 if p else 1 for p in forest.periodic])


def boxes(forest: Forest, unit: int):
    """(lo, hi, level) of every leaf in units of ``unit`` finest-lattice spacings (2^max_level:
    level-0 lattice units, the fields' world units)."""
    lo = forest.origin / unit
    hi = (forest.origin + forest.extent[:, None]) / unit
    return lo.astype(np.float32), hi.astype(np.float32), forest.level.astype(np.int32)

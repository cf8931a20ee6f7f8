"""From a preset to a forest, and from the forest back to pictures: the refined tree a preset
describes, the uniform sampling lattice its fields are shown on, and its leaves as boxes.

Sampling: the fields of a tree are drawn on a uniform lattice of level s (the finest level whose
lattice stays within a point budget, at least the coarsest present level). Every sample takes the
trilinear interpolant of the finest leaf that contains it — exact (one node, weight 1) wherever the
sample is a node of that leaf, which is everywhere when s is at most that leaf's level. The
gather (8 point ids and weights per sample) is built once per tree on the host.
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
    ids: np.ndarray  # (8, P) point ids (leaf · m³ + local)
    weights: np.ndarray  # (8, P)
    unit: int  # finest-lattice units per sample spacing


def sampling(forest: Forest, budget: int) -> Sampling:
    """The sampling lattice (see module doc); periodic axes exclude the far face, walled ones keep it."""
    m = forest.m
    lv = min(forest.levels)
    while lv < forest.max_level and np.prod(_counts(forest, lv + 1)) <= budget:
        lv += 1
    unit = int(forest.spacing_of(lv))
    n = _counts(forest, lv)
    z, y, x = np.meshgrid(*(np.arange(k, dtype=np.int64) * unit for k in n[::-1]), indexing="ij")
    pts = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    leaf = np.full(len(pts), -1, np.int64)
    for level in sorted(forest.levels, reverse=True):
        todo = leaf < 0
        if not todo.any():
            break
        leaf[todo] = forest.containing(level, pts[todo])
    if np.any(leaf < 0):
        raise AssertionError("a sample outside every leaf: the forest does not tile the domain")
    h = forest.spacing[leaf]
    off = forest.local_offset(leaf, pts)
    i0 = np.minimum(off // h[:, None], m - 2)
    frac = (off - i0 * h[:, None]) / h[:, None]
    ids = np.empty((8, len(pts)), np.int64)
    w = np.empty((8, len(pts)), np.float64)
    for c, (dx, dy, dz) in enumerate((x, y, z) for z in (0, 1) for y in (0, 1) for x in (0, 1)):
        ijk = i0 + np.array([dx, dy, dz])
        ids[c] = leaf * m**3 + (ijk[:, 2] * m + ijk[:, 1]) * m + ijk[:, 0]
        w[c] = np.prod(np.where(np.array([dx, dy, dz]) == 1, frac, 1.0 - frac), axis=1)
    return Sampling(lv, (int(n[2]), int(n[1]), int(n[0])), ids, w, unit)


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

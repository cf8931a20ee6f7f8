"""Neighbour search for SPH, vectorised over particles (xp-generic: NumPy or CuPy).

Three searches return the same set of ordered pairs (i, j), i ≠ j, |r_i − r_j| < r_c:

- ``cell-full``: cells of edge r_c (= 2h, the DualSPHysics default), 3^d candidate cells;
- ``cell-half``: cells of edge r_c/2 (= h), 5^d smaller cells, fewer far-away candidates;
- ``verlet``: a list of pairs within R_c = r_c + Δh, built with the cell search and reused, each
  step filtered to r < r_c, rebuilt when any particle travelled more than Δh/2 since the build
  (then no pair can have closed in by more than Δh, so no pair within r_c is missed).

Both cell searches sort particles by cell key and find each cell's [start, end) in the sorted
order (P3 §2, DualSPHysics). Candidate pairs are generated per stencil offset as whole arrays
(np.repeat over cell occupancies), which is how NumPy gets thousands of particles per second
through the search. Periodic axes use the minimum image for distances and wrap cell indices.
Particles outside the box are clamped into the edge cells: clamping is 1-Lipschitz in the cell
index, so two particles closer than r_c still land within the stencil reach, and the search
stays exact (just slower when many particles leave).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Domain:
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    periodic: tuple[bool, ...]

    @property
    def dim(self) -> int:
        return len(self.lo)


@dataclass
class CellGrid:
    """Particles sorted by cell: the state a cell-linked list search needs."""

    ncell: tuple[int, ...]
    cell: tuple[float, ...]
    coords: object  # (n, dim) int64 cell coordinates
    order: object  # particle indices sorted by cell key
    start: object  # first sorted index of each cell
    end: object  # one past the last


def minimum_image(xp, d, domain: Domain):
    for a, per in enumerate(domain.periodic):
        if per:
            length = domain.hi[a] - domain.lo[a]
            d[:, a] -= length * xp.round(d[:, a] / length)
    return d


def build_cells(xp, pos, domain: Domain, cell_size: float) -> CellGrid:
    """Sort by cell key and find cell start/end (the 'sort' phase)."""
    ncell, cell = [], []
    for a in range(domain.dim):
        length = domain.hi[a] - domain.lo[a]
        n = max(1, int(math.floor(length / cell_size)) if domain.periodic[a] else int(math.ceil(length / cell_size)))
        ncell.append(n)
        # periodic: cells tile the period exactly, so they are ≥ cell_size; open: keep cell_size
        cell.append(length / n if domain.periodic[a] else cell_size)
    coords = xp.empty(pos.shape, dtype=xp.int64)
    for a in range(domain.dim):
        c = xp.floor((pos[:, a] - domain.lo[a]) / cell[a]).astype(xp.int64)
        if domain.periodic[a]:
            c %= ncell[a]
        coords[:, a] = xp.clip(c, 0, ncell[a] - 1)
    key = _linear(xp, coords, ncell)
    order = xp.argsort(key, kind="stable")
    skey = key[order]
    cells = xp.arange(int(np.prod(ncell)), dtype=xp.int64)
    start = xp.searchsorted(skey, cells, side="left")
    end = xp.searchsorted(skey, cells, side="right")
    return CellGrid(tuple(ncell), tuple(cell), coords, order, start, end)


def _linear(xp, coords, ncell):
    key = coords[:, -1].copy()
    for a in range(len(ncell) - 2, -1, -1):
        key = key * ncell[a] + coords[:, a]
    return key


def cell_pairs(xp, pos, domain: Domain, radius: float, grid: CellGrid):
    """All ordered pairs (i, j), i ≠ j, with |r_ij| < radius, from a sorted cell grid.

    Returns (i, j, d, r2) with d = r_i − r_j (minimum image) and r2 = |d|².
    """
    n = pos.shape[0]
    reach = [int(math.ceil(radius / c - 1e-12)) for c in grid.cell]
    for a, per in enumerate(domain.periodic):
        if per and grid.ncell[a] < 2 * reach[a] + 1:
            raise ValueError(f"periodic axis {a}: {grid.ncell[a]} cells cannot hold a stencil of "
                             f"{2 * reach[a] + 1}; the periodic length must be ≥ {2 * reach[a] + 1} cells")
    idx = xp.arange(n, dtype=xp.int64)
    r2max = radius * radius
    out_i, out_j = [], []
    for off in itertools.product(*(range(-r, r + 1) for r in reach)):
        nc = grid.coords + xp.asarray(off, dtype=xp.int64)[None, :]
        valid = xp.ones(n, dtype=bool)
        for a in range(domain.dim):
            if domain.periodic[a]:
                nc[:, a] %= grid.ncell[a]
            else:
                valid &= (nc[:, a] >= 0) & (nc[:, a] < grid.ncell[a])
                nc[:, a] = xp.clip(nc[:, a], 0, grid.ncell[a] - 1)
        key = _linear(xp, nc, grid.ncell)
        s, e = grid.start[key], grid.end[key]
        cnt = xp.where(valid, e - s, 0)
        total = int(cnt.sum())
        if total == 0:
            continue
        i = xp.repeat(idx, cnt)
        # position inside the run of candidates: k − (exclusive prefix of cnt)
        first = xp.cumsum(cnt) - cnt
        j = grid.order[xp.arange(total, dtype=xp.int64) - xp.repeat(first - s, cnt)]
        d = minimum_image(xp, pos[i] - pos[j], domain)
        keep = (xp.sum(d * d, axis=1) < r2max) & (i != j)
        out_i.append(i[keep])
        out_j.append(j[keep])
    if not out_i:
        empty = xp.zeros(0, dtype=xp.int64)
        return empty, empty, xp.zeros((0, domain.dim), pos.dtype), xp.zeros(0, pos.dtype)
    i, j = xp.concatenate(out_i), xp.concatenate(out_j)
    d = minimum_image(xp, pos[i] - pos[j], domain)
    return i, j, d, xp.sum(d * d, axis=1)


def brute_force_pairs(pos: np.ndarray, domain: Domain, radius: float) -> set[tuple[int, int]]:
    """O(n²) reference for tests."""
    pos = np.asarray(pos, dtype=np.float64)
    d = pos[:, None, :] - pos[None, :, :]
    for a, per in enumerate(domain.periodic):
        if per:
            length = domain.hi[a] - domain.lo[a]
            d[..., a] -= length * np.round(d[..., a] / length)
    r2 = np.sum(d * d, axis=-1)
    i, j = np.nonzero(r2 < radius * radius)
    return {(int(a), int(b)) for a, b in zip(i, j) if a != b}


CELL_FRACTION = {"cell-full": 1.0, "cell-half": 0.5}


def search_pairs(xp, pos, domain: Domain, radius: float, method: str):
    """One-shot cell search (cell-full or cell-half) for tests and the list build."""
    grid = build_cells(xp, pos, domain, radius * CELL_FRACTION[method])
    return cell_pairs(xp, pos, domain, radius, grid)


@dataclass
class VerletList:
    """Pairs within R_c = r_c + Δh, reused until some particle travelled more than Δh/2.

    In the NumPy reference a list is a pair array (i, j) grouped by i; the CUDA variant stores
    the same lists warp-interleaved (P3 §3.1–3.3). Building uses half-size cells of R_c, as P3.
    """

    rc: float
    skin: float = 0.0  # Δh
    i: object = None
    j: object = None
    travelled: object = None
    builds: int = 0
    steps_since_build: int = 0
    steps_per_build: list = field(default_factory=list)

    @property
    def built(self) -> bool:
        return self.travelled is not None

    def needs_rebuild(self, xp) -> bool:
        if not self.built:
            return True
        return bool(float(xp.max(self.travelled)) > 0.5 * self.skin) if self.travelled.size else False

    def sort(self, xp, pos, domain: Domain, skin: float) -> CellGrid:
        """Sort by cells of half of R_c (P3's list build uses half-size cells)."""
        self.skin = float(skin)
        return build_cells(xp, pos, domain, 0.5 * (self.rc + self.skin))

    def build(self, xp, pos, domain: Domain, grid: CellGrid | None = None) -> None:
        radius = self.rc + self.skin
        if grid is None:
            grid = build_cells(xp, pos, domain, 0.5 * radius)
        i, j, _, _ = cell_pairs(xp, pos, domain, radius, grid)
        # group by i: the pair arrays become per-particle lists laid end to end (CSR), the layout
        # the GPU's per-particle variant uses
        by_i = xp.argsort(i, kind="stable")
        self.i, self.j = i[by_i], j[by_i]
        self.mark_built(xp, pos.shape[0], pos.dtype)

    def mark_built(self, xp, n, dtype) -> None:
        self.travelled = xp.zeros(n, dtype=dtype)
        if self.builds:
            self.steps_per_build.append(self.steps_since_build)
        self.builds += 1
        self.steps_since_build = 0

    def pairs(self, xp, pos, domain: Domain):
        d = minimum_image(xp, pos[self.i] - pos[self.j], domain)
        r2 = xp.sum(d * d, axis=1)
        keep = r2 < self.rc * self.rc
        return self.i[keep], self.j[keep], d[keep], r2[keep]

    def advance(self, xp, displacement):
        """Accumulate each particle's travelled distance D_i += |Δr_i|."""
        self.travelled += xp.sqrt(xp.sum(displacement * displacement, axis=1))
        self.steps_since_build += 1

    @property
    def mean_length(self) -> float:
        n = self.travelled.size if self.travelled is not None else 0
        return float(self.i.size) / n if n and self.i is not None else 0.0

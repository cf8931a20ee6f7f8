"""Passive tracers on the octree: continuous release at seeds, trilinear velocity inside the
containing leaf, Heun (RK2) steps, parking, short trails (docs/amr3d.md §"Tracers").

Written against ``xp``: the same code runs on NumPy and CuPy, with no host round trip and no
Python loop over tracers in :meth:`Tracers.advance`: the step and ring counters live on the
backend and the release is a masked write, so nothing in a step reads the device back.

Units: positions in level-0 lattice units (finest units / 2^max_level; a root block is m − 1),
velocities in lattice units per level-0 time unit (level independent under acoustic scaling),
times in level-0 time units.

Point location never searches the tree on the device: ``leaf_of_cell`` has one cell per block of
the finest allowed level (roots · 2^max_level per axis) and names the leaf covering it; a leaf of
level l covers 8^(max_level − l) cells. Cell sizes and leaf spacings are powers of two, so the
cell index and the local coordinate are exact in floating point.

Layout: N = capacity · S slots, slot r · S + s is ring row r of seed s; one release writes row
``cursor`` of every seed. Parked slots (never released, left through an open side, entered a
solid, or non-finite) have ``alive`` False and NaN positions: ``alive`` is the truth, the NaNs let
a renderer draw ``positions()`` without the mask.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .reference import point_coordinates
from .tree import Forest

CORNERS = tuple((x, y, z) for z in (0, 1) for y in (0, 1) for x in (0, 1))


# ---- point location ---------------------------------------------------------------------------
def leaf_of_cell(forest: Forest) -> np.ndarray:
    """(Bz, By, Bx) int32 on the host: the leaf covering each finest-level block."""
    n = forest.blocks_per_axis(forest.max_level)
    lut = np.full((int(n[2]), int(n[1]), int(n[0])), -1, np.int32)
    for lv in forest.levels:
        sl = forest.level_slice(lv)
        k = 1 << (forest.max_level - lv)
        off = np.stack(np.meshgrid(np.arange(k), np.arange(k), np.arange(k), indexing="ij"), -1).reshape(-1, 3)
        cells = forest.block[sl][:, None, :] * k + off[None, :, ::-1]  # (n_l, k³, (x, y, z))
        leaves = np.broadcast_to(np.arange(sl.start, sl.stop)[:, None], cells.shape[:2])
        lut[cells[..., 2], cells[..., 1], cells[..., 0]] = leaves
    if np.any(lut < 0):
        raise ValueError("the forest does not tile the domain")
    return lut


@dataclass(frozen=True)
class Lookup:
    """What locating a point needs, on the backend (built once per forest by :meth:`build`)."""

    leaf_of_cell: Any  # (Bz, By, Bx) int32
    origin: Any  # (L, 3) leaf origins, level-0 units, positions' dtype
    inv_spacing: Any  # (L,) 2^level: level-0 units → the leaf's node index
    cell: float  # level-0 size of a finest-level block, (m − 1) / 2^max_level
    cells: tuple  # (Bx, By, Bz)
    domain: tuple  # (Dx, Dy, Dz) level-0 units
    periodic: tuple
    m: int

    @classmethod
    def build(cls, xp, forest: Forest, dtype=np.float64) -> Lookup:
        scale = float(1 << forest.max_level)
        lut = leaf_of_cell(forest)
        return cls(xp.asarray(lut), xp.asarray((forest.origin / scale).astype(dtype)),
                   xp.asarray((2.0 ** forest.level).astype(dtype)), (forest.m - 1) / scale,
                   tuple(int(b) for b in lut.shape[::-1]), tuple(float(d) / scale for d in forest.domain),
                   forest.periodic, forest.m)


def wrap(xp, lookup: Lookup, pos):
    """Positions (N, 3) wrapped into [0, D) on periodic axes (other axes untouched)."""
    cols = []
    for d in range(3):
        x = pos[:, d]
        if lookup.periodic[d]:
            D = lookup.domain[d]
            x = x - D * xp.floor(x / D)
            x = xp.where(x >= D, x - D, x)  # a tiny negative x rounds to D
        cols.append(x)
    return xp.stack(cols, axis=1)


def locate(xp, lookup: Lookup, pos):
    """(leaf (N,) int64, i0 (N, 3) int64 lower stencil node (x, y, z), t (N, 3) fractions in [0, 1]).
    Beyond a walled side the point is clamped to the nearest leaf face (constant extrapolation)."""
    p = wrap(xp, lookup, pos)
    c = [xp.clip(xp.floor(p[:, d] / lookup.cell).astype(xp.int64), 0, lookup.cells[d] - 1) for d in range(3)]
    leaf = lookup.leaf_of_cell[c[2], c[1], c[0]].astype(xp.int64)
    local = (p - lookup.origin[leaf]) * lookup.inv_spacing[leaf][:, None]
    local = xp.clip(local, 0, lookup.m - 1)
    i0 = xp.clip(xp.floor(local).astype(xp.int64), 0, lookup.m - 2)
    return leaf, i0, local - i0.astype(local.dtype)  # (int64 would promote fp32 to fp64)


def stencil(xp, lookup: Lookup, pos):
    """The 8 trilinear stencil nodes as point ids (leaf · m³ + (k·m + j)·m + i) and weights, each
    (8, N), in CORNERS order."""
    m = lookup.m
    leaf, i0, t = locate(xp, lookup, pos)
    base = leaf * m**3 + (i0[:, 2] * m + i0[:, 1]) * m + i0[:, 0]
    lo, hi = 1 - t, t
    ids, w = [], []
    for dx, dy, dz in CORNERS:
        ids.append(base + (dz * m + dy) * m + dx)
        w.append((hi if dx else lo)[:, 0] * (hi if dy else lo)[:, 1] * (hi if dz else lo)[:, 2])
    return xp.stack(ids), xp.stack(w)


def interpolate(xp, field, ids, w):
    """field (C, L, m, m, m) at a stencil → (C, N); summed in CORNERS order (same bits for any
    batch of points)."""
    f = field.reshape(field.shape[0], -1)
    val = w[0] * f[:, ids[0]]
    for c in range(1, 8):
        val = val + w[c] * f[:, ids[c]]
    return val


def velocity_at(xp, lookup: Lookup, u, pos):
    """Trilinear velocity (N, 3) at positions (N, 3) from u (3, L, m, m, m), inside the leaf the
    lookup gives (the coarse one where a coarse and a fine leaf meet); exact at nodes."""
    ids, w = stencil(xp, lookup, pos)
    return interpolate(xp, u, ids, w).T.astype(pos.dtype, copy=False)


# ---- the tracers ------------------------------------------------------------------------------
class Tracers:
    """Rings of tracers released at seeds; see the module docstring for units and layout.

    State (everything that decides the future, :meth:`state_arrays`): positions (N, 3), age (N,)
    level-0 time since release, alive (N,), trail (T, N, 3), step (1,) = advance() calls so far,
    cursor (1,) = the ring row the next release writes. Releases happen on calls whose step index
    is a multiple of ``release_every`` and trail samples on multiples of ``trail_every``: both are
    functions of ``step`` alone, so one call per coarse step gives the same bits however the caller
    groups its calls, and a reloaded checkpoint continues bit for bit."""

    def __init__(self, xp, forest: Forest, seeds, capacity: int, release_every: int = 1, solid=None,
                 dtype=np.float64, trail_length: int = 8, trail_every: int = 1):
        if capacity < 1 or release_every < 1 or trail_length < 1 or trail_every < 1:
            raise ValueError("capacity, release_every, trail_length and trail_every must be ≥ 1")
        self.xp = xp
        self.dtype = np.dtype(dtype)
        self.release_every = int(release_every)
        self.trail_every = int(trail_every)
        self.solid_fn = solid
        self.forest = None
        self.set_forest(forest)
        seeds = wrap(np, self.lookup, np.asarray(seeds, np.float64).reshape(-1, 3))
        for d in range(3):
            D = self.lookup.domain[d]
            if np.any((seeds[:, d] < 0) | (seeds[:, d] > D)):
                raise ValueError(f"a seed lies outside the walled axis {'xyz'[d]} (0..{D})")
        if len(seeds) == 0:
            raise ValueError("tracers need at least one seed")
        self.n_seeds = len(seeds)
        self.seeds = xp.asarray(seeds.astype(self.dtype))
        self._seed_index = xp.arange(self.n_seeds, dtype=xp.int64)
        n = int(capacity) * self.n_seeds
        self.pos = xp.full((n, 3), np.nan, dtype=self.dtype)
        self.age = xp.zeros(n, dtype=xp.float64)
        self.alive = xp.zeros(n, dtype=bool)
        self.trail = xp.full((int(trail_length), n, 3), np.nan, dtype=self.dtype)
        self.step = xp.zeros(1, dtype=xp.int64)
        self.cursor = xp.zeros(1, dtype=xp.int64)

    # ---- the tree ----
    def set_forest(self, forest: Forest) -> None:
        """Rebuild the lookup (and the solid mask) for a new tree over the same domain; positions
        are in level-0 units and stay valid."""
        lookup = Lookup.build(self.xp, forest, self.dtype)
        if self.forest is not None and (lookup.domain != self.lookup.domain or lookup.periodic != self.lookup.periodic):
            raise ValueError("set_forest: the new tree covers a different domain")
        self.forest, self.lookup = forest, lookup
        self.solid = None
        if self.solid_fn is not None:
            pts = point_coordinates(forest).reshape(-1, 3)
            mask = np.asarray(self.solid_fn(pts), bool).reshape(1, forest.n_leaves, forest.m, forest.m, forest.m)
            # Interpolated like the velocity: the tracer is parked where the indicator reaches ½,
            # i.e. half-way between a fluid and a solid node (the bounce-back wall), at the
            # resolution of the leaf it is in.
            self.solid = self.xp.asarray(mask.astype(self.dtype)) if mask.any() else None

    def seeds_in_solid(self) -> np.ndarray:
        """Indices of the seeds where a released tracer is parked at once: the solid indicator,
        interpolated as in :meth:`advance`, reaches ½ there (inside a body, or within half a node
        of its wall). A host array (one device read)."""
        if self.solid is None:
            return np.zeros(0, np.int64)
        ids, w = stencil(self.xp, self.lookup, self.seeds)
        ind = interpolate(self.xp, self.solid, ids, w)[0]
        return np.flatnonzero(np.asarray(ind.get() if hasattr(ind, "get") else ind) >= 0.5)

    # ---- sizes ----
    @property
    def capacity(self) -> int:
        return self.pos.shape[0] // self.n_seeds

    @property
    def trail_length(self) -> int:
        return self.trail.shape[0]

    @property
    def count(self) -> int:
        """Alive tracers (a host read: a sync on the GPU)."""
        return int(self.xp.count_nonzero(self.alive))

    def velocity_at(self, u, pos):
        return velocity_at(self.xp, self.lookup, u, pos)

    # ---- the step ----
    def advance(self, u_old, u_new, dt: float) -> None:
        """One coarse step of length dt: Heun with u_old at the start and u_new at the predicted
        end point; then parking, the release (if due), the trail sample (if due), ages."""
        xp, lk = self.xp, self.lookup
        alive = self.alive
        dt_ = self.dtype.type(dt)
        x = xp.where(alive[:, None], self.pos, self.dtype.type(0))  # parked NaNs stay out of the casts
        k1 = velocity_at(xp, lk, u_old, x)
        k2 = velocity_at(xp, lk, u_new, x + dt_ * k1)
        x = wrap(xp, lk, x + (dt_ * self.dtype.type(0.5)) * (k1 + k2))
        ok = xp.all(xp.isfinite(x), axis=1)
        for d in range(3):
            if not lk.periodic[d]:
                ok &= (x[:, d] >= 0) & (x[:, d] <= lk.domain[d])
        if self.solid is not None:
            ids, w = stencil(xp, lk, xp.where(ok[:, None], x, self.dtype.type(0)))
            ok &= interpolate(xp, self.solid, ids, w)[0] < 0.5
        alive &= ok
        self.pos[...] = xp.where(alive[:, None], x, self.dtype.type(np.nan))
        self.age += xp.where(alive, dt, 0.0)

        # Release: row `cursor` of every seed, when the step index says so (no host branch).
        rel = (self.step % self.release_every) == 0
        rows = self.cursor * self.n_seeds + self._seed_index
        self.pos[rows] = xp.where(rel[:, None], self.seeds, self.pos[rows])
        self.age[rows] = xp.where(rel, 0.0, self.age[rows])
        alive[rows] |= rel
        # A released tracer's trail starts at its seed, not at the previous occupant's path.
        self.trail[:, rows] = xp.where(rel[:, None, None], self.seeds[None], self.trail[:, rows])
        self.cursor[...] = xp.where(rel, (self.cursor + 1) % self.capacity, self.cursor)

        sample = (self.step % self.trail_every) == 0
        row = (self.step // self.trail_every) % self.trail_length
        self.trail[row] = xp.where(sample[:, None, None], self.pos[None], self.trail[row])
        self.step += 1

    # ---- drawing ----
    def positions(self):
        """(N, 3) positions, NaN where parked (the live array: copy it to keep it)."""
        return self.pos

    def trails(self):
        """(T, N, 3) the last T samples, oldest first, NaN for parked tracers and samples not yet
        taken. Positions are wrapped, so a trail can jump across a periodic domain: a renderer
        should break segments longer than half the domain."""
        xp = self.xp
        taken = (self.step + self.trail_every - 1) // self.trail_every
        order = (taken + xp.arange(self.trail_length, dtype=xp.int64)) % self.trail_length
        return xp.where(self.alive[None, :, None], self.trail[order], self.dtype.type(np.nan))

    # ---- live count ----
    def set_capacity(self, capacity: int) -> None:
        """Resize every seed's ring to ``capacity``, keeping the newest min(old, new) rows in ring
        order (and their trails); new rows start parked and the next release fills the first of
        them, or overwrites the oldest kept row."""
        xp = self.xp
        capacity = int(capacity)
        if capacity < 1:
            raise ValueError("capacity must be ≥ 1")
        old, S = self.capacity, self.n_seeds
        keep = min(old, capacity)
        src_rows = (self.cursor - keep + xp.arange(keep, dtype=xp.int64)) % old  # oldest first
        src = (src_rows[:, None] * S + self._seed_index[None]).reshape(-1)
        n = capacity * S
        pos = xp.full((n, 3), np.nan, dtype=self.dtype)
        age = xp.zeros(n, dtype=xp.float64)
        alive = xp.zeros(n, dtype=bool)
        trail = xp.full((self.trail_length, n, 3), np.nan, dtype=self.dtype)
        pos[:keep * S], age[:keep * S], alive[:keep * S] = self.pos[src], self.age[src], self.alive[src]
        trail[:, :keep * S] = self.trail[:, src]
        self.pos, self.age, self.alive, self.trail = pos, age, alive, trail
        self.cursor = xp.full(1, keep % capacity, dtype=xp.int64)

    # ---- checkpoints ----
    def state_arrays(self) -> dict:
        """Copies of every array that decides the future."""
        return {"positions": self.pos.copy(), "age": self.age.copy(), "alive": self.alive.copy(),
                "trail": self.trail.copy(), "step": self.step.copy(), "cursor": self.cursor.copy()}

    def load_state_arrays(self, d: dict) -> None:
        """Continue from :meth:`state_arrays` (capacity and trail length come from the arrays)."""
        xp = self.xp
        pos = xp.array(d["positions"], dtype=self.dtype).reshape(-1, 3)
        if pos.shape[0] % self.n_seeds:
            raise ValueError(f"{pos.shape[0]} tracer slots do not divide among {self.n_seeds} seeds")
        n = pos.shape[0]
        trail = xp.array(d["trail"], dtype=self.dtype)
        if trail.ndim != 3 or trail.shape[1:] != (n, 3):
            raise ValueError(f"trail of shape {trail.shape} for {n} tracers")
        self.pos, self.trail = pos, trail
        self.age = xp.array(d["age"], dtype=xp.float64).reshape(n)
        self.alive = xp.array(d["alive"], dtype=bool).reshape(n)
        self.step = xp.array(d["step"], dtype=xp.int64).reshape(1)
        self.cursor = xp.array(d["cursor"], dtype=xp.int64).reshape(1) % self.capacity

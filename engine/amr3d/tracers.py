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

Velocity: a step needs the fluid velocity only at the 8 stencil nodes of each tracer. The engine
hands :meth:`Tracers.begin` / :meth:`Tracers.finish` the stepper's ``populations(ids)`` (the 27 f at
canonical point ids, gathered straight from its storage), and :func:`node_velocity` turns those into
u at the nodes: the cost of a step follows the number of tracers, not the size of the grid. A
velocity field u (3, L, m, m, m) (tests, :meth:`Tracers.advance`) goes through the same
interpolation.

On the GPU, when the populations come from a TreeStepper, begin and finish are two CUDA launches
instead (tracer_kernels.py, shaders/cuda/amr3d/tracers.cu): the same operations in the same order on
the same state arrays, so this module's array code is their reference, and the path of every other
case.

Layout: N = capacity · S slots, slot r · S + s is ring row r of seed s; one release writes row
``cursor`` of every seed. Parked slots (never released, left through an open side, entered a
solid, or non-finite) have ``alive`` False and NaN positions: ``alive`` is the truth, the NaNs let
a renderer draw ``positions()`` without the mask.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .d3q27 import PAIR, PAIR_C, PAIR_OPP
from .reference import point_coordinates
from .tracer_kernels import FusedStep
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
    # the same numbers as small backend arrays, so that a step treats the three axes (and the eight
    # corners) in one operation each
    period: Any = None  # (3,) domain, positions' dtype
    periodic_axes: Any = None  # (3,) bool
    last_cell: Any = None  # (3,) int64 cells − 1
    node_stride: Any = None  # (3,) int64 (1, m, m²): node (i, j, k) → (k·m + j)·m + i
    corner_offset: Any = None  # (8,) int64 point-id offset of each corner, CORNERS order
    corner_upper: Any = None  # (8, 3, 1) bool: the corner takes the upper node on that axis
    pair: Any = None  # (13,) int64 PAIR, (13,) PAIR_OPP, (13, 3, 1, 1) PAIR_C in the positions' dtype
    pair_opp: Any = None
    pair_c: Any = None

    @classmethod
    def build(cls, xp, forest: Forest, dtype=np.float64) -> Lookup:
        scale = float(1 << forest.max_level)
        lut = leaf_of_cell(forest)
        m = forest.m
        domain = tuple(float(d) / scale for d in forest.domain)
        corners = np.array(CORNERS, np.int64)
        host = {"period": np.array(domain, dtype), "periodic_axes": np.array(forest.periodic, bool),
                "last_cell": np.array(lut.shape[::-1], np.int64) - 1, "node_stride": np.array([1, m, m * m], np.int64),
                "corner_offset": corners @ np.array([1, m, m * m], np.int64),
                "corner_upper": corners[:, :, None].astype(bool), "pair": PAIR, "pair_opp": PAIR_OPP,
                "pair_c": PAIR_C[:, :, None, None].astype(dtype)}
        return cls(xp.asarray(lut), xp.asarray((forest.origin / scale).astype(dtype)),
                   xp.asarray((2.0 ** forest.level).astype(dtype)), (m - 1) / scale,
                   tuple(int(b) for b in lut.shape[::-1]), domain, forest.periodic, m,
                   **{k: xp.asarray(v) for k, v in host.items()})


def wrap(xp, lookup: Lookup, pos):
    """Positions (N, 3) wrapped into [0, D) on periodic axes (other axes untouched). ``lookup`` must
    live on ``xp`` (a host lookup for host positions)."""
    if not any(lookup.periodic):
        return pos
    D = lookup.period
    x = pos - D * xp.floor(pos / D)
    x = xp.where(x >= D, x - D, x)  # a tiny negative x rounds to D
    return x if all(lookup.periodic) else xp.where(lookup.periodic_axes, x, pos)


def locate(xp, lookup: Lookup, pos, wrapped: bool = False):
    """(leaf (N,) int64, i0 (N, 3) int64 lower stencil node (x, y, z), t (N, 3) fractions in [0, 1]).
    Beyond a walled side the point is clamped to the nearest leaf face (constant extrapolation).
    ``wrapped``: the positions are already wrapped (wrapping again would change nothing)."""
    p = pos if wrapped else wrap(xp, lookup, pos)
    c = xp.clip(xp.floor(p / lookup.cell).astype(xp.int64), 0, lookup.last_cell)
    leaf = lookup.leaf_of_cell[c[:, 2], c[:, 1], c[:, 0]].astype(xp.int64)
    local = (p - lookup.origin[leaf]) * lookup.inv_spacing[leaf][:, None]
    local = xp.clip(local, 0, lookup.m - 1)
    i0 = xp.clip(xp.floor(local).astype(xp.int64), 0, lookup.m - 2)
    return leaf, i0, local - i0.astype(local.dtype)  # (int64 would promote fp32 to fp64)


def stencil(xp, lookup: Lookup, pos, wrapped: bool = False):
    """The 8 trilinear stencil nodes as point ids (leaf · m³ + (k·m + j)·m + i) and weights, each
    (8, N), in CORNERS order (a weight is the product of its x, y and z factors, in that order)."""
    leaf, i0, t = locate(xp, lookup, pos, wrapped)
    base = leaf * lookup.m**3 + (i0 * lookup.node_stride).sum(axis=1)
    ids = base[None, :] + lookup.corner_offset[:, None]
    t = xp.ascontiguousarray(t.T)  # (3, N): the points on the fast axis
    f = xp.where(lookup.corner_upper, t[None], (1 - t)[None])  # (8, 3, N)
    return ids, f[:, 0] * f[:, 1] * f[:, 2]


def ordered_sum(xp, a, axis: int):
    """Σ over ``axis`` in index order, ((a₀ + a₁) + a₂) + …, for a C-contiguous ``a``. NumPy sums an
    axis in that order when the axes after it hold two or more elements (the points of a batch); with
    a single one it would sum pairwise, so that case is written out: a point's bits never depend on
    the batch it is in. (CuPy: its reduction's order, fixed for a shape.)"""
    if math.prod(a.shape[axis + 1:]) >= 2:
        return a.sum(axis=axis)
    lead = (slice(None),) * axis
    out = a[lead + (0,)]
    for k in range(1, a.shape[axis]):
        out = out + a[lead + (k,)]
    return out


def interpolate(xp, values, w):
    """Trilinear sum of node values (C, 8, N) with weights (8, N) → (N, C), in CORNERS order."""
    return ordered_sum(xp, w[None] * values, 1).T


def field_at(xp, field, ids):
    """field (C, L, m, m, m) at point ids (8, N) → (C, 8, N)."""
    return field.reshape(field.shape[0], -1)[:, ids]


def node_velocity(xp, lookup: Lookup, f):
    """u = Σ c f / Σ f (d3q27.velocity: the engine's tracer velocity, no force shift) of populations
    f (27, 8, N) → (3, 8, N): ρ summed over axis 0, the momentum from the 13 opposite pairs in pair
    order (exactly zero at rest nodes: the solid nodes, which the step resets to rest). (The steppers'
    gathers hand f with q fastest in memory, so NumPy sums ρ with its pairwise loop, not in index
    order: tracers.cu's numpy_sum27 follows it.)"""
    rho = ordered_sum(xp, f, 0)
    d = f[lookup.pair]
    d -= f[lookup.pair_opp]
    del f  # (the caller's gather: freed before the largest temporary, d × c (13, 3, 8, N))
    j = ordered_sum(xp, d[:, None] * lookup.pair_c, 0)
    return j * (rho.dtype.type(1) / rho)[None]


def velocity_at(xp, lookup: Lookup, u, pos):
    """Trilinear velocity (N, 3) at positions (N, 3) from u (3, L, m, m, m), inside the leaf the
    lookup gives (the coarse one where a coarse and a fine leaf meet); exact at nodes."""
    ids, w = stencil(xp, lookup, pos)
    return interpolate(xp, field_at(xp, u, ids), w).astype(pos.dtype, copy=False)


def velocity_from_populations(xp, lookup: Lookup, populations, pos, wrapped: bool = False):
    """Trilinear velocity (N, 3) at positions (N, 3) from the populations at the 8 stencil nodes
    (``populations(ids)``: ids (8, N) → f (27, 8, N), e.g. a stepper's ``populations``)."""
    ids, w = stencil(xp, lookup, pos, wrapped)
    return interpolate(xp, node_velocity(xp, lookup, populations(ids)), w).astype(pos.dtype, copy=False)


# ---- the tracers ------------------------------------------------------------------------------
_FUSED = object()  # Tracers._heun between a fused begin and its finish (k₁ is in the kernels' buffer)


class Tracers:
    """Rings of tracers released at seeds; see the module docstring for units and layout.

    State (everything that decides the future, :meth:`state_arrays`): positions (N, 3), age (N,)
    level-0 time since release, alive (N,), trail (T, N, 3), step (1,) = steps so far (advance, or begin + finish),
    cursor (1,) = the ring row the next release writes. Releases happen on calls whose step index
    is a multiple of ``release_every`` and trail samples on multiples of ``trail_every``: both are
    functions of ``step`` alone, so one call per coarse step gives the same bits however the caller
    groups its calls, and a reloaded checkpoint continues bit for bit."""

    def __init__(self, xp, forest: Forest, seeds, capacity: int, release_every: int = 1, solid=None,
                 dtype=np.float64, trail_length: int = 8, trail_every: int = 1, kernels: bool | None = None):
        """``kernels``: whether begin/finish may take the CUDA kernels when given the stepper's level
        buffers (tracer_kernels.py); None = on any backend but NumPy (``use_kernels`` switches it)."""
        self.use_kernels = (xp is not np) if kernels is None else bool(kernels)
        self._fused = None  # tracer_kernels.FusedStep, made at the first fused begin
        if capacity < 1 or release_every < 1 or trail_length < 1 or trail_every < 1:
            raise ValueError("capacity, release_every, trail_length and trail_every must be ≥ 1")
        self.xp = xp
        self.dtype = np.dtype(dtype)
        self.release_every = int(release_every)
        self.trail_every = int(trail_every)
        self.solid_fn = solid
        self.forest = None
        self._heun = None  # (x, k₁) between begin and finish: tracer-sized
        self.set_forest(forest)
        host = Lookup.build(np, forest, self.dtype)
        seeds = wrap(np, host, np.asarray(seeds, np.float64).reshape(-1, 3))
        for d in range(3):
            D = self.lookup.domain[d]
            if np.any((seeds[:, d] < 0) | (seeds[:, d] > D)):
                raise ValueError(f"a seed lies outside the walled axis {'xyz'[d]} (0..{D})")
        if len(seeds) == 0:
            raise ValueError("tracers need at least one seed")
        self.n_seeds = len(seeds)
        # wrapped again in the positions' dtype (a seed just below D may round to D): positions are
        # always stored wrapped, which lets a step locate them without wrapping
        self.seeds = xp.asarray(wrap(np, host, seeds.astype(self.dtype)))
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
        ind = interpolate(self.xp, field_at(self.xp, self.solid, ids), w)[:, 0]
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
    def _level_buffers(self, levels):
        """The stepper's level buffers (``levels()``, tracer_kernels.LevelBuffers) when the fused
        kernels take this step, else None (the array code)."""
        if levels is None or not self.use_kernels:
            return None
        if self._fused is None:
            self._fused = FusedStep(self.xp)
        lv = levels()
        return lv if self._fused.supports(self, lv) else None

    def begin(self, populations, levels=None) -> None:
        """The first half of a coarse step, before the fluid steps: k₁ = u(x) from the populations
        at the start of the step (``populations(ids)``: ids (8, N) → f (27, 8, N), the stepper's
        own storage). Only tracer-sized arrays are kept until :meth:`finish`. ``levels``: the
        stepper's ``level_buffers`` (a TreeStepper's), which lets the CUDA kernels read its storage
        directly (see :attr:`use_kernels`); give the same to :meth:`finish`."""
        lv = self._level_buffers(levels)
        if lv is not None:
            self._fused.begin(self, lv)
            self._heun = _FUSED
            return
        xp = self.xp
        x = xp.where(self.alive[:, None], self.pos, self.dtype.type(0))  # parked NaNs stay out of the casts
        self._heun = (x, velocity_from_populations(xp, self.lookup, populations, x, wrapped=True))

    def finish(self, populations, dt: float, levels=None) -> None:
        """The second half, after the fluid has stepped: k₂ = u(x + dt·k₁) from the populations at the
        end of the step, x += dt (k₁ + k₂)/2; then parking, the release (if due), the trail sample (if
        due), ages."""
        if self._heun is None:
            raise RuntimeError("Tracers.finish without begin")
        heun, self._heun = self._heun, None
        if heun is _FUSED:
            if levels is None:
                raise RuntimeError("Tracers.finish: begin took the stepper's level buffers, finish needs them too")
            self._fused.finish(self, levels(), dt)
            return
        x, k1 = heun
        dt_ = self.dtype.type(dt)
        k2 = velocity_from_populations(self.xp, self.lookup, populations, x + dt_ * k1)
        self._move(x, k1, k2, dt)

    def advance(self, u_old, u_new, dt: float) -> None:
        """One coarse step of length dt from two velocity fields (3, L, m, m, m): Heun with u_old at
        the start and u_new at the predicted end point (the same arithmetic as begin/finish)."""
        xp, lk = self.xp, self.lookup
        dt_ = self.dtype.type(dt)
        x = xp.where(self.alive[:, None], self.pos, self.dtype.type(0))
        k1 = velocity_at(xp, lk, u_old, x)
        k2 = velocity_at(xp, lk, u_new, x + dt_ * k1)
        self._move(x, k1, k2, dt)

    def _move(self, x, k1, k2, dt: float) -> None:
        xp, lk = self.xp, self.lookup
        alive = self.alive
        dt_ = self.dtype.type(dt)
        x = wrap(xp, lk, x + (dt_ * self.dtype.type(0.5)) * (k1 + k2))
        ok = xp.isfinite(x)
        if not all(lk.periodic):  # inside [0, D] on walled axes
            ok &= lk.periodic_axes | ((x >= 0) & (x <= lk.period))
        ok = xp.all(ok, axis=1)
        if self.solid is not None:
            ids, w = stencil(xp, lk, xp.where(ok[:, None], x, self.dtype.type(0)), wrapped=True)
            ok &= interpolate(xp, field_at(xp, self.solid, ids), w)[:, 0] < 0.5
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
        self._heun = None
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
        self.pos, self.trail = wrap(xp, self.lookup, pos), trail  # (a no-op on positions this class wrote)
        self._heun = None
        self.age = xp.array(d["age"], dtype=xp.float64).reshape(n)
        self.alive = xp.array(d["alive"], dtype=bool).reshape(n)
        self.step = xp.array(d["step"], dtype=xp.int64).reshape(1)
        self.cursor = xp.array(d["cursor"], dtype=xp.int64).reshape(1) % self.capacity

"""Initial particle layouts: water columns, tanks of DBC wall particles, an obstacle, a piston.

Particles sit on a lattice of spacing dp with centres at (k + ½)·dp; the inner tank is
[0, L] × [0, H_t] (× [0, W] in 3D, gravity along the last axis). Walls are
``boundary_layers`` lattice layers outside the inner box, so fluid and wall particles are dp apart.
Kinds: FLUID, WALL (fixed DBC particle), PISTON (DBC particle with prescribed motion).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLUID, WALL, PISTON = 0, 1, 2


@dataclass
class Layout:
    pos: np.ndarray  # (n, dim) float64
    kind: np.ndarray  # (n,) int8
    fluid_height: float  # H for c0 = coefsound·√(gH) and the hydrostatic initial density
    lo: tuple[float, ...]  # search box (particles outside are clamped into edge cells)
    hi: tuple[float, ...]


def _lattice(counts, start, dp):
    axes = [(np.arange(s, s + c) + 0.5) * dp for s, c in zip(start, counts)]
    grids = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1)


def _n(length, dp):
    return max(1, int(round(length / dp)))


def build(preset) -> Layout:
    g, dp, nl = preset.geometry, preset.particles.dp, preset.particles.boundary_layers
    if g.kind == "dambreak3d":
        return _tank3d(g, dp, nl)
    width = g.tank_length if g.kind in ("hydrostatic2d", "piston2d") else g.column_width
    nx, nxf, nyf, nyt = _n(g.tank_length, dp), _n(width, dp), _n(g.column_height, dp), _n(g.tank_height, dp)
    fluid = _lattice((nxf, nyf), (0, 0), dp)
    extra = 0
    if g.kind == "piston2d":
        extra = int(np.ceil(g.piston_amplitude / dp)) + 1  # floor under the piston's travel
    box = _lattice((nx + 2 * nl + extra, nyt + nl), (-nl - extra, -nl), dp)
    outside = (box[:, 0] < 0) | (box[:, 0] > nx * dp) | (box[:, 1] < 0)
    walls = box[outside]
    kind_w = np.full(len(walls), WALL, np.int8)
    if g.kind == "piston2d":
        # the left wall columns above the floor are the piston
        piston = (walls[:, 0] < 0) & (walls[:, 0] > -nl * dp) & (walls[:, 1] > 0)
        kind_w[piston] = PISTON
        # drop the wall columns behind the piston above the floor (the piston moves into them)
        keep = ~((walls[:, 0] < -nl * dp) & (walls[:, 1] > 0))
        walls, kind_w = walls[keep], kind_w[keep]
    pos = np.concatenate([fluid, walls])
    kind = np.concatenate([np.full(len(fluid), FLUID, np.int8), kind_w])
    margin = (nl + extra + 1) * dp
    return Layout(pos, kind, nyf * dp, (-margin, -margin), (nx * dp + margin, nyt * dp + margin))


def count(preset) -> int:
    """How many particles :func:`build` makes, from the sizes alone (an upper bound, within a few
    per cent): the memory estimate runs before anything is allocated, and a preset whose dp is
    small enough to exhaust memory must not build its positions first."""
    g, dp, nl = preset.geometry, preset.particles.dp, preset.particles.boundary_layers
    if g.kind == "dambreak3d":
        nx, ny, nzt = _n(g.tank_length, dp), _n(g.tank_width, dp), _n(g.tank_height, dp)
        fluid = _n(g.column_width, dp) * ny * _n(g.column_height, dp)
        _, _, sx, sy = g.obstacle
        obstacle = (_n(sx, dp) + 1) * (_n(sy, dp) + 1) * nzt
        return fluid + (nx + 2 * nl) * (ny + 2 * nl) * (nzt + nl) - nx * ny * nzt + obstacle
    width = g.tank_length if g.kind in ("hydrostatic2d", "piston2d") else g.column_width
    nx, nyt = _n(g.tank_length, dp), _n(g.tank_height, dp)
    extra = int(np.ceil(g.piston_amplitude / dp)) + 1 if g.kind == "piston2d" else 0
    return _n(width, dp) * _n(g.column_height, dp) + (2 * nl + extra) * (nyt + nl) + nx * nl


def _tank3d(g, dp, nl) -> Layout:
    nx, ny, nzt = _n(g.tank_length, dp), _n(g.tank_width, dp), _n(g.tank_height, dp)
    fluid = _lattice((_n(g.column_width, dp), ny, _n(g.column_height, dp)), (0, 0, 0), dp)
    box = _lattice((nx + 2 * nl, ny + 2 * nl, nzt + nl), (-nl, -nl, -nl), dp)
    x, y, z = box[:, 0], box[:, 1], box[:, 2]
    outside = (x < 0) | (x > nx * dp) | (y < 0) | (y > ny * dp) | (z < 0)
    ox, oy, sx, sy = g.obstacle
    obstacle = ~outside & (x > ox) & (x < ox + sx) & (y > oy) & (y < oy + sy)
    fluid_in_obstacle = (fluid[:, 0] > ox) & (fluid[:, 0] < ox + sx) & (fluid[:, 1] > oy) & (fluid[:, 1] < oy + sy)
    fluid = fluid[~fluid_in_obstacle]
    walls = box[outside | obstacle]
    pos = np.concatenate([fluid, walls])
    kind = np.concatenate([np.full(len(fluid), FLUID, np.int8), np.full(len(walls), WALL, np.int8)])
    m = (nl + 1) * dp
    return Layout(pos, kind, _n(g.column_height, dp) * dp, (-m, -m, -m), (nx * dp + m, ny * dp + m, nzt * dp + m))


def piston_motion(t: float, amplitude: float, period: float) -> tuple[float, float]:
    """Piston displacement and velocity: s = A·sin(2πt/T)."""
    w = 2 * np.pi / period
    return amplitude * np.sin(w * t), amplitude * w * np.cos(w * t)

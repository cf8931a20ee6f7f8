"""Memory the SPH engine needs for a preset, before anything is allocated (Engine._check_memory).

The neighbour search dominates: every pair within the interaction radius costs work arrays in the
array code (NumPy, or CuPy running the reference) and list entries on the GPU. The pair count is
taken from a full neighbourhood — the lattice points within 2h of a particle, what an interior
particle of the initial lattice has — so the estimate is an upper bound for small tanks (surfaces
and walls have fewer neighbours) and close for the large ones, where running out of memory is
the risk (a 3D dam break with dp = 0.002 m: ~10 million particles, far beyond a host's memory on
NumPy: refused in one line instead of being killed by the kernel's OOM killer).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from . import geometry

# NumPy (array code): bytes per neighbour pair at a search's peak — i, j (int64), the candidate
# arrays of one cell offset, d = r_i − r_j and its temporaries, then the interaction's per-pair
# kernel values and products — as (fixed, per byte of the dtype) by dimension. Measured with
# tracemalloc (Verlet search, per pair actually found): 3D 161 B in fp64, 94 B in fp32; 2D ~200 B
# in fp64 (the cell searches ~10 % less).
PAIR_BYTES = {2: (80, 20), 3: (40, 16)}
# GPU: a Verlet list entry is an int32; warp-interleaved lists pad every warp to its longest list
# (P3 §3.3); the skin widens the radius (Δh ≤ 25 % of r_c assumed), and CuPy's pool rounds up.
LIST_PADDING = 1.5
SKIN = 1.25
POOL_SLACK = 1.2


def full_neighbourhood(dim: int, radius_over_dp: float) -> int:
    """Lattice points (spacing 1) strictly within ``radius_over_dp`` of one, itself excluded."""
    r = int(math.floor(radius_over_dp)) + 1
    r2 = radius_over_dp * radius_over_dp
    return sum(1 for p in itertools.product(range(-r, r + 1), repeat=dim) if 0 < sum(x * x for x in p) < r2)


def estimate(preset, backend: str, selection: dict) -> int:
    """Peak bytes of an SPH engine for ``preset`` on ``backend`` ("numpy" or "cupy") with the
    variant ``selection`` (the search choice matters on the GPU)."""
    dim, dp = preset.dim, preset.particles.dp
    item = np.dtype(preset.physics.dtype).itemsize
    n = geometry.count(preset)
    rc = 2.0 * preset.h
    pairs = full_neighbourhood(dim, rc / dp)
    # the state: pos, pos0, vel, vel_m1, ace (dim each), rho, rho_m1, arho (1 each), kind, masks
    state = (5 * dim + 3) * item + 8
    if backend != "cupy":
        fixed, per_item = PAIR_BYTES[dim]
        return int(n * (state + 8 * dim + 64 + pairs * (fixed + per_item * item)))
    # GPU (engine/sph/gpu.py): sorted copies p (≤ 8 values a particle), v (5), sound speed, kinds,
    # rates; cell keys, order and sorted keys (int32), list counts and bases, the scan (int64)
    device = (8 + 5 + 1 + dim + 1) * item + 1 + 3 * 4 + 4 + 8 + 16
    lists = 0
    if selection.get("search") == "verlet":
        lists = 4 * LIST_PADDING * full_neighbourhood(dim, SKIN * rc / dp)
    g = preset.geometry
    extent = [g.tank_length, g.tank_width, g.tank_height][:dim] if dim == 3 else [g.tank_length, g.tank_height]
    margin = 2 * (preset.particles.boundary_layers + 2) * dp
    cells = math.prod(math.ceil((e + margin) / (0.5 * rc)) + 1 for e in extent)  # half-size cells of R_c
    return int(POOL_SLACK * (n * (state + device + lists) + 8 * cells))

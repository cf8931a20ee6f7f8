"""From a preset to the objects an amr3d engine steps: its bodies, its forest, the flow's boundaries
and its tracers, and the memory all of that will take (checked before anything is allocated)."""
from __future__ import annotations

import os

import numpy as np

from ..errors import PresetError
from . import bodies as body_shapes
from . import boundaries, mesh
from .config import AMR3DPreset
from .tracers import Tracers


def tracer_bytes(slots: int, trail_length: int) -> int:
    """Memory of ``slots`` tracers with their trails: positions (3 fp32), age (fp64), alive, the trail
    (T × 3 fp32) and its validity, held about four times over at a peak (the state, a checkpoint's
    copies, a frame's snapshot, set_capacity's new arrays), plus ~2 kB a tracer of temporaries
    while they move (the 27 populations at its 8 stencil nodes and their pair differences: measured
    1.9 kB in fp32 with tracemalloc)."""
    per = 12 + 8 + 1 + trail_length * 13
    return int(slots) * (4 * per + 2000)


def make_bodies(p: AMR3DPreset) -> list:
    """The preset's bodies (STL paths relative to the preset's folder), each inside the domain and
    clear of periodic sides (its images are not searched)."""
    src = getattr(p, "source", "<memory>")
    base = os.path.dirname(os.path.abspath(src)) if src and not src.startswith("<") else "."
    made = []
    for k, spec in enumerate(p.body):
        try:
            made.append(body_shapes.make(spec, base))
        except ValueError as exc:  # a bad mesh file or size: one line naming the preset and the body
            raise PresetError(src, f"body[{k}]", PresetError.NOTHING, str(exc)) from None
    s = p.grid.m - 1
    domain = np.array(p.grid.leaves, np.float64) * s
    for k, b in enumerate(made):
        lo, hi = b.bounds()
        if np.any(lo <= 0) or np.any(hi >= domain):
            raise PresetError(src, f"body[{k}]", PresetError.NOTHING,
                              f"the {p.body[k].kind} reaches from {np.round(lo, 3).tolist()} to "
                              f"{np.round(hi, 3).tolist()}: it must lie inside the domain (0 … "
                              f"{domain.tolist()} level-0 units), clear of every side")
    body_shapes.check_resolved(made, p.body, src)
    return made


def build_boundaries(p: AMR3DPreset, forest, bodies):
    """The flow's boundaries on ``forest`` (boundaries.build), or None for a flow without any."""
    if bodies or p.flow.inlet != "none" or p.flow.outlet != "none" or p.grid.free_slip:
        return boundaries.build(forest, bodies, p.flow.inlet, p.flow.outlet, p.flow.velocity, p.flow.wall,
                                p.grid.free_slip)
    return None


def make_tracers(xp, p: AMR3DPreset, forest, bodies, dtype) -> Tracers:
    """The preset's tracers on ``forest``, parked where they enter a body; a seed that would park every
    tracer it releases is refused (check_seeds)."""
    def solid(x):
        out = np.zeros(len(x), bool)
        for b in bodies:
            out |= b.inside(x)
        return out
    tracers = Tracers(xp, forest, p.tracers.seeds, p.tracers.count, p.tracers.release_every,
                      solid if bodies else None, dtype=dtype, trail_length=p.tracers.trail_length,
                      trail_every=p.tracers.trail_every)
    check_seeds(p, bodies, tracers)
    return tracers


def check_seeds(p: AMR3DPreset, bodies, tracers: Tracers) -> None:
    """A seed inside a body, or within half a node of its wall (where the tracers' interpolated
    solid indicator reaches ½), parks every tracer it releases or leaves it stuck in the wall:
    refused in one line naming the seed and the body."""
    seeds = np.asarray(p.tracers.seeds, np.float64).reshape(-1, 3)
    inside = np.zeros(len(seeds), bool)
    for b in bodies:
        inside |= b.inside(seeds)
    parked = np.zeros(len(seeds), bool)
    parked[tracers.seeds_in_solid()] = True  # the tracers' own test (half-way to a solid node)
    bad = np.flatnonzero(inside | parked)
    if not len(bad):
        return
    i = int(bad[0])
    seed = seeds[i:i + 1]
    k = int(np.argmin([float(b.distance(seed)[0]) for b in bodies]))
    where = "inside" if inside[i] else "within half a node of the wall of"
    raise PresetError(getattr(p, "source", "<memory>"), f"tracers.seeds[{i}]", list(p.tracers.seeds[i]),
                      f"lies {where} body[{k}] (the {p.body[k].kind}): every tracer released there is parked "
                      "at once; put the seed in the fluid")


def reserved_leaves(p: AMR3DPreset, bodies) -> int:
    """The leaves the memory estimate reserves: the preset tree's, or for an adaptive tree what it
    may grow to — its cap (adapt.leaf_cap: a regrid refines nothing that would pass it), or every
    leaf split down to adapt.max_level if that is fewer."""
    forest = mesh.build_forest(p, bodies)
    leaves = forest.n_leaves
    if p.adapt.on:
        grow = (8 ** np.maximum(p.adapt.max_level - forest.level.astype(np.int64), 0)).sum()
        leaves = max(leaves, min(int(grow), p.adapt.leaf_cap(forest.n_leaves)))
    return int(leaves)


def estimated_bytes(p: AMR3DPreset, backend, leaves: int, shape) -> int:
    """Memory of ``leaves`` leaves of the preset on ``backend``: the two buffers, the reference's
    tables and temporaries, the CSM's arrays, what frames and checkpoints allocate, and what the
    ``shape`` (box or tree: shapes.shape_class) adds."""
    item = np.dtype(p.physics.dtype).itemsize
    points = leaves * p.grid.m**3
    work = 27 * points * item * 2  # two buffers
    if not backend.is_gpu:
        work += 27 * points * 8 + 27 * points * item * 5  # gather table + the reference's temporaries
    if p.physics.les == "csm":
        # Kobayashi's CSM: the coefficient C, one value a point (the pre-pass keeps u in the next
        # buffer on the GPU), and the shared nodes' copies that take their owner's C (two int64
        # each: the stored points beyond each leaf's own (m − 1)³); on NumPy also u, its 9
        # derivatives and their products while C is formed
        m = p.grid.m
        work += points * item + leaves * (m**3 - (m - 1) ** 3) * 16
        if not backend.is_gpu:
            work += points * item * 15
    if backend.is_gpu:
        # what a frame and a checkpoint allocate in the pool besides the two buffers: a storage
        # conversion, the checkpoint copy, the macroscopic arrays (measured: 3.8 state copies on
        # the P0 box)
        work += 27 * points * item * 5
    return work + shape.extra_bytes(p, backend, leaves)

"""What amr3d shows, exports and checks: the named fields (sampled on the display lattice of the
engine's shape), the leaves as boxes and blocks, the tracers, the diagnostics and their sanity
bounds, the forces on the bodies, and the throughput figures of the bench."""
from __future__ import annotations

import math

import numpy as np

from ..fields import Boxes, Grid3D, Particles
from . import cases, counts, d3q27, leafgrid, mesh

FIELD_LABELS = {"speed": "speed |u|", "rho": "density ρ", "ux": "ux", "uy": "uy", "uz": "uz"}

# sanity bound on the smallest population (sanity_bounds): f_i > −this = −2/27, the rest weight of
# a face direction. Measured (NumPy, amr3d-bench): the shipped flows keep min f ≈ 3e-3 … 4e-3 (the
# corner weight 1/216 ≈ 4.6e-3 is the smallest equilibrium); an under-resolved random start at
# τ = 0.51 dips to −0.034 for a few steps and recovers; the diverging τ = 0.5001 runs
# pass −0.074 at step 24 (random start, |u| then 0.34, below every other bound until step ~48)
# and go on to −3.5 before NaN.
MIN_POPULATION_SLACK = 2.0 / 27.0

# sanity bound on the largest density: ten times the rest density 1. A low-Mach flow moves ρ by
# O(Ma²) and the speed bound stops a run long before Mach 1; a state above this is a blow-up or one
# that never was a flow (a checkpoint whose populations are all 1e30 has ρ = 2.7e31 and u = 0).
MAX_DENSITY = 10.0

# what every position the fields give is in: level-0 lattice units (a level-0 cell is 1 long)
LENGTH_UNITS = "lattice (level 0)"


# ---- fields -----------------------------------------------------------------------------------
def field_names(e) -> list[str]:
    return ["speed", "rho", "ux", "uy", "uz", "leaves"] + (["tracers"] if e._tracers is not None else [])


def field(e, name: str):
    if name == "leaves":
        return boxes(e)
    if name == "tracers" and e._tracers is not None:
        return tracer_field(e)
    if name not in ("speed", "rho", "ux", "uy", "uz"):
        raise KeyError(name)
    if name == "speed":  # the velocity only: a tree then neither samples nor keeps the density
        data = e.shape.speed()
    else:
        (data,) = e.shape.macroscopic((name,))
    return Grid3D(data, label=FIELD_LABELS[name], units="lattice", symmetric=name in ("ux", "uy", "uz"),
                  **grid_kw(e))


def fields(e) -> dict:
    rho, ux, uy, uz = e.shape.macroscopic()
    kw = grid_kw(e)
    g = {"speed": Grid3D(e.xp.sqrt(ux * ux + uy * uy + uz * uz), label=FIELD_LABELS["speed"], units="lattice", **kw),
         "rho": Grid3D(rho, label=FIELD_LABELS["rho"], units="lattice", **kw)}
    for name, d in (("ux", ux), ("uy", uy), ("uz", uz)):
        g[name] = Grid3D(d, label=name, units="lattice", symmetric=True, **kw)
    g["leaves"] = boxes(e)
    if e._tracers is not None:
        g["tracers"] = tracer_field(e)
    return g


def grid_kw(e) -> dict:
    """Spacing, placement, units and bodies of the sampled fields (the shape's display lattice)."""
    return {**e.shape.sample_kw(), "surfaces": surfaces(e), "length_units": LENGTH_UNITS}


def surfaces(e) -> tuple:
    """The bodies as triangle meshes in the fields' world units (built once: the view uploads a
    surface again only when its arrays change)."""
    if getattr(e, "_surface_cache", None) is None:
        e._surface_cache = tuple(b.surface() for b in e.bodies)
    return e._surface_cache


def tracer_field(e) -> Particles:
    t, forest = e._tracers, e.forest
    unit = float(1 << forest.max_level)
    dom = tuple(float(d) / unit for d in forest.domain)
    return Particles(t.positions(), {"age": t.age}, label="tracers (age)", bounds=((0.0, 0.0, 0.0), dom),
                     spacing=float(forest.spacing_of(forest.max_level)) / unit, trails=t.trails(),
                     length_units=LENGTH_UNITS, attribute_units={"age": "level-0 steps"})


def boxes(e) -> Boxes:
    """The leaves as boxes with their level, in the fields' world units (level-0 lattice units:
    a Grid3D sample index times its spacing). The same object until the forest changes (a
    regrid makes a new one: forests are immutable), so a display that keeps the arrays it was
    given uploads the leaves once per regrid, not every frame."""
    cached = getattr(e, "_boxes_cache", None)
    if cached is not None and cached[0] is e.forest:
        return cached[1]
    xp = e.xp
    lo, hi, lev = mesh.boxes(e.forest, 1 << e.forest.max_level)
    out = Boxes(xp.asarray(lo), xp.asarray(hi), xp.asarray(lev), label="leaves (level)",
                levels=tuple(int(v) for v in np.unique(lev)))
    e._boxes_cache = (e.forest, out)
    return out


def leaf_blocks(e) -> dict:
    """The leaves as stored, as host NumPy (read-only; for exports such as ParaView's
    OverlappingAMR): per leaf its ``level``, ``origin`` (x, y, z) and point ``spacing`` in
    level-0 lattice units (the fields' world units), and at its m³ node-centred points
    ``rho`` [leaf, z, y, x] and ``u`` [3, leaf, z, y, x] (the moments the fields show), in the
    forest's leaf order (by level, then z, y, x). Neighbouring leaves share their face nodes:
    each holds its own copy (where levels meet, the coarse copy follows the fine one to the
    coupling's accuracy: within 2e-5 of the flow's scale in tests/app/test_vtkhdf_amr.py)."""
    forest = e.forest
    unit = float(1 << forest.max_level)
    rho, ux, uy, uz = leafgrid.macroscopic(e.xp, e.shape.leaves())
    asnumpy = e.backend.asnumpy
    return {"level": forest.level.astype(np.int32), "origin": forest.origin / unit, "spacing": forest.spacing / unit,
            "m": e.m, "rho": asnumpy(rho), "u": np.stack([asnumpy(ux), asnumpy(uy), asnumpy(uz)])}


# ---- diagnostics ------------------------------------------------------------------------------
def device_diagnostics(e) -> dict:
    xp = e.xp
    rho, ux, uy, uz = e.shape.macroscopic()
    return {"mass": e.shape.mass(rho), "max_speed": xp.sqrt(xp.max(ux * ux + uy * uy + uz * uz)),
            "min_density": xp.min(rho), "max_density": xp.max(rho),
            "min_population": e.shape.min_population()}


def sanity_bounds(p) -> dict:
    """Density positive; speed below the lattice sound speed 1/√3 and, in an open flow (an inflow
    and no body force), below 3 × the inflow speed. A sphere's or the Ahmed body's fastest point
    moves at ~1.6 × the inflow; a run past 3 × is diverging, and a checkpoint of it is no "last
    good" state (one diverged again within an interval when the bound was 1/√3 alone). Decaying
    box flows (Taylor–Green, shear wave) are bounded at 1.2 × u0 (physically they only slow);
    random and force-driven ones keep the sound-speed bound: their scale is not known in advance."""
    inflow = float(np.linalg.norm(p.flow.velocity)) if p.flow.inlet != "none" else 0.0
    top = 1.0 / math.sqrt(3.0)
    if inflow > 0.0 and not any(p.physics.force):
        top = min(top, 3.0 * inflow)
    elif p.initial.kind in ("taylor-green", "shear-wave") and p.flow.inlet == "none" and not any(p.physics.force):
        top = min(top, 1.2 * p.initial.u0)  # decaying flows: the fastest point starts at u0 and slows
    # populations: a distribution is never negative; an under-resolved start dips a little below
    # 0 and recovers, a diverging run goes far below while its speed still looks plausible, so a
    # population below −MIN_POPULATION_SLACK (−2/27, measured: see there) is a divergence.
    return {"min_density": (0.0, math.inf), "max_density": (-math.inf, MAX_DENSITY), "max_speed": (-math.inf, top),
            "min_population": (-MIN_POPULATION_SLACK, math.inf)}


def body_force(e):
    """Momentum-exchange force (3,) on all bodies, level-0 lattice units (device array)."""
    if e._bnd is None or not e.bodies:
        return e.xp.zeros(3, np.float64)
    return e.shape.body_force()


def force_coefficients(e) -> dict:
    """C_d along the inflow, and the two transverse coefficients: C_l on ``flow.lift`` (default:
    the axis after the inflow's — flow along x, lift along y), C_s on the remaining axis; with the
    first body's frontal area and ρ = 1: C = F / (½ |u_in|² A)."""
    if not has_force_coefficients(e):
        return {}
    return coefficients_of_force(e, e.backend.asnumpy(e.body_force()))


def has_force_coefficients(e) -> bool:
    """Bodies in a flow: the coefficients need both."""
    return bool(e.bodies) and bool(np.any(np.asarray(e.preset.flow.velocity, np.float64)))


def coefficients_of_force(e, force) -> dict:
    """:func:`force_coefficients` of a body force (3,) already on the host."""
    p = e.preset
    u = np.asarray(p.flow.velocity, np.float64)
    speed = float(np.linalg.norm(u))
    axis = int(np.argmax(np.abs(u)))
    F = np.asarray(force).astype(np.float64)
    q = 0.5 * speed * speed * e.bodies[0].frontal_area(axis)
    unit = u / speed
    lift = (axis + 1) % 3 if p.flow.lift is None else "xyz".index(p.flow.lift)
    side = 3 - axis - lift
    return {"cd": float(F @ unit) / q, "cl": float(F[lift]) / q, "cs": float(F[side]) / q}


# ---- throughput -------------------------------------------------------------------------------
def bytes_per_update(e) -> float:
    """P0's B = 220 bytes in fp32 (27 reads + 27 writes of 4 bytes, plus 4 of table/flags);
    the fp16 kernels move 2 bytes a population (112); the reference with fp16 storage keeps
    its rounded state in fp32 and moves what fp32 does."""
    return 2.0 * d3q27.Q * e.shape.population_bytes() + 4.0


def fp32_peak_flops(backend) -> float | None:
    """FMA peak of the device: SMs × 128 fp32 lanes × 2 flop × clock (Volta and newer)."""
    if not backend.is_gpu:
        return None
    try:
        dev = backend.xp.cuda.Device()
        attrs = dev.attributes
        return attrs["MultiProcessorCount"] * 128 * 2 * attrs["ClockRate"] * 1e3
    except Exception:
        return None


def timing_extra(e) -> dict:
    """P0's figures: GFLOPS at F = 377 flop per point and % of the improved roofline
    P = F / (F/P_peak + B/B_peak) with the measured copy bandwidth and the fp32 peak; on a box the
    points P0's inner kernel updates, on a tree the points against the uniform lattice of the
    finest spacing (the shape's timing_figures); and the distinct counts beside the stored ones
    (counts.figures: each lattice node once per update of its level, whatever the storage)."""
    out = {"flops_per_point": cases.P0_FLOPS}
    out.update(e.shape.timing_figures())
    out.update(counts.figures(e.forest, e.base_level))
    peak = fp32_peak_flops(e.backend)
    if peak:
        bw = e.roofline_bytes_per_s()
        out["fp32_peak_gflops"] = peak / 1e9
        b = bytes_per_update(e)  # P0's B = 220 in fp32; fp16 storage moves 112
        out["improved_roofline_gflops"] = cases.P0_FLOPS / (cases.P0_FLOPS / peak + b / bw) / 1e9 if bw else None
    return out

"""Bodies and open sides of an amr3d flow, as plain point lists per level (docs/amr3d-flows.md).

Everything here is decided once per tree on the host, like the gather tables; the step only
applies lists:

- **Bodies.** A node is *solid* when it lies inside a body (bodies.py). A fluid node whose pull
  source in direction q is solid takes half-way bounce-back, f_q(x) = f*_opp(q)(x): tables.py
  classifies such a source like one beyond a wall, and the points concerned (``near``) join the
  GPU fix-up list (interface.py), so the ladder kernels stay as they are. Solid nodes themselves are
  reset to rest (ρ = 1, u = 0) after every step of their level: nothing reads them, but a value
  that drifts there could reach a coarse interpolation stencil or a drawn field.
- **Force** (momentum exchange, Ladd 1994): every link (x, q) from a fluid node x to a solid source
  carries 2 f*_opp(q)(x) c_opp(q) into the body per step of its level. In level-0 units (mass h³,
  time h, velocity 1 under acoustic scaling) one link adds 2 h_l² f*_opp(q) c_opp(q) to the force.
  Each physical node counts once: only the copy its owner stores (the finest leaf holding it,
  lowest index) carries links.
- **Velocity inlet** on one side: every stored copy of a node on that side is set to the
  equilibrium at (ρ = 1, u_in) after each step of its level (an equilibrium boundary: first order
  in the non-equilibrium part, robust, and the usual choice for a far-field inflow).
- **Outflow** on one side: every stored copy of a node on that side takes all 27 populations of
  the next node inwards, in the same leaf (zero normal gradient, first order), scaled by 1/ρ of
  that node: the velocity and the shape of the populations extrapolated, the density (the
  pressure) held at 1 — as lbm2d's pressure outlet. A plain copy leaves the density level of the
  whole flow undetermined (the velocity inlet does not fix it either: a uniform offset of ρ in the
  domain stays for good), so the smallest bias of the step moves it for as long as the run lasts:
  fp16 storage's rounding (f − w in IEEE half) lowered it by ~2.5e-7 a step on a one-level sphere
  and raised C_d with it (docs/amr3d-flows.md, tests/unit/test_amr3d_outflow.py).
- **Free-slip sides** (``slip``): specular reflection at the half-way wall instead of bounce-back,
  c' = c − 2(c·n)n. Nothing is applied after the step: the pull itself reads the mirrored node's
  reflected population, classified once per tree like every pull source (tables.py
  ``_reflect_slip``, which states the rule at edges and corners: bounce-back wins where a link
  also crosses a wall, inlet or outflow side), and on the GPU through the fix-up descriptors that
  already carry the walls (a side point crosses a slot without a neighbour, so it is an interface
  point): no kernel of its own.
Other non-periodic sides keep the engine's half-way bounce-back walls.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from . import d3q27
from .tables import local_flat, slip_sides
from .tree import Forest
from .uploads import constant

AXES = {"x": 0, "y": 1, "z": 2}


@dataclass
class LevelBoundary:
    """Point ids are level-relative: (leaf − lo) · m³ + local (as interface.py)."""

    level: int
    solid_pts: np.ndarray  # reset to rest
    inlet_pts: np.ndarray  # set to the inflow equilibrium
    outlet_dst: np.ndarray  # ← outlet_src, all populations
    outlet_src: np.ndarray
    link_pts: np.ndarray  # links, every stored copy: fluid point x …
    link_q: np.ndarray  # … and the direction q whose pull source x − c_q h is solid
    link_w1: np.ndarray  # the incoming f_q(x) = w1 f*_opp(q)(x) + w2 f*_{q2}(p2) (post-collision
    link_q2: np.ndarray  # values of this level; half-way: w1 = 1, w2 = 0)
    link_p2: np.ndarray
    link_w2: np.ndarray
    link_owner: np.ndarray  # bool: the copy its node's owner stores (the force counts these); on a
    # device its indices instead (on_device): a boolean mask read there waits for the device's queue
    near_leaves: np.ndarray  # fluid points with a solid source (global leaf, ijk): bounce-back
    near_ijk: np.ndarray

    @property
    def empty(self) -> bool:
        return not (self.solid_pts.size or self.inlet_pts.size or self.outlet_dst.size)


@dataclass
class Boundaries:
    forest: Forest
    level: dict  # level → LevelBoundary
    inlet_velocity: tuple
    solid: object  # finest-lattice positions → bool (tables.py), or None without bodies
    interpolated: bool = False  # links carry Bouzidi weights (else half-way bounce-back)
    slip: tuple = ()  # free-slip sides ("y-", …): the tables' and descriptors' specular reflection

    def links(self) -> dict:
        """{level: (point ids, q, i1, i2, w1, w2)} of interpolated links, i1/i2 flat level-buffer
        indices q' · P + p with P = that level's points (interface.py's link buffer); {} when half-way."""
        if not self.interpolated:
            return {}
        m3 = self.forest.m ** 3
        out = {}
        for lv, b in self.level.items():
            if b.link_pts.size:
                sl = self.forest.level_slice(lv)
                P = (sl.stop - sl.start) * m3
                out[lv] = (b.link_pts, b.link_q, d3q27.OPP[b.link_q] * P + b.link_pts, b.link_q2 * P + b.link_p2,
                           b.link_w1, b.link_w2)
        return out

    def near(self) -> dict:
        return {lv: (b.near_leaves, b.near_ijk) for lv, b in self.level.items() if b.near_leaves.size}


def solid_function(forest: Forest, bodies):
    """Finest-lattice integer positions (..., 3) → bool: inside any body. Points outside every
    body's bounding box skip the (possibly costly: STL) inside test."""
    if not bodies:
        return None
    unit = float(1 << forest.max_level)
    boxes = [b.bounds() for b in bodies]

    def solid(pts):
        x = np.asarray(pts, np.float64).reshape(-1, 3) / unit
        out = np.zeros(len(x), bool)
        for body, (lo, hi) in zip(bodies, boxes):
            near = np.all((x >= lo) & (x <= hi), axis=1) & ~out
            if near.any():
                out[near] = body.inside(x[near])
        return out.reshape(np.shape(pts)[:-1])
    return solid


def _side_points(forest: Forest, sl: slice, side: str, inward: int):
    """(leaf, local index) of every stored node on ``side`` of the domain among leaves ``sl``, and
    the local index of the node ``inward`` spacings inside along the normal."""
    m = forest.m
    ax, high = AXES[side[0]], side[1] == "+"
    leaves = np.arange(sl.start, sl.stop)
    org, ext = forest.origin[leaves, ax], forest.extent[leaves]
    on = (org + ext == forest.domain[ax]) if high else (org == 0)
    leaves = leaves[on]
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    ijk = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)
    face = ijk[ijk[:, ax] == (m - 1 if high else 0)]
    src = face.copy()
    src[:, ax] += -inward if high else inward
    lf = np.repeat(leaves, len(face))
    return lf, np.tile(face, (len(leaves), 1)), np.tile(src, (len(leaves), 1))


def build(forest: Forest, bodies=(), inlet: str = "none", outlet: str = "none",
          inlet_velocity=(0.0, 0.0, 0.0), wall: str = "halfway", slip=()) -> Boundaries:
    """``wall``: "halfway" (bounce-back half-way between a fluid and a solid node) or
    "interpolated" (Bouzidi, Firdaouss & Lallemand 2001, linear: the wall where the body's surface
    cuts the link). ``slip``: free-slip sides (none of them the inlet or the outlet)."""
    if wall not in ("halfway", "interpolated"):
        raise ValueError(f"wall = {wall!r}: halfway or interpolated")
    slip = slip_sides(forest, slip)
    for name, side in (("inlet", inlet), ("outlet", outlet)):
        if side in slip:
            raise ValueError(f"side {side} is both the {name} and free-slip")
    m, m3 = forest.m, forest.m ** 3
    solid = solid_function(forest, list(bodies))
    unit = float(1 << forest.max_level)
    out = {}
    for lv in forest.levels:
        sl = forest.level_slice(lv)
        lo = sl.start
        h = int(forest.spacing_of(lv))
        e = np.zeros(0, np.int64)
        solid_pts, near_l, near_ijk = e, e, np.zeros((0, 3), np.int64)
        links = {k: e for k in ("pts", "q", "q2", "p2")}
        links.update(w1=np.zeros(0), w2=np.zeros(0), owner=np.zeros(0, bool))
        if solid is not None:
            cand = _candidates(forest, sl, bodies, unit)
            solid_pts, near_l, near_ijk, links = _body_points(forest, lv, cand, h, solid, bodies, wall)
            solid_pts = solid_pts - lo * m3
            links["pts"], links["p2"] = links["pts"] - lo * m3, links["p2"] - lo * m3
        inlet_pts = e
        if inlet != "none":
            lf, ijk, _ = _side_points(forest, sl, inlet, 1)
            inlet_pts = (lf - lo) * m3 + local_flat(m, ijk)
        od = os_ = e
        if outlet != "none":
            lf, ijk, src = _side_points(forest, sl, outlet, 1)
            od = (lf - lo) * m3 + local_flat(m, ijk)
            os_ = (lf - lo) * m3 + local_flat(m, src)
        out[lv] = LevelBoundary(lv, solid_pts, inlet_pts, od, os_, links["pts"], links["q"], links["w1"], links["q2"],
                                links["p2"], links["w2"], links["owner"], near_l, near_ijk)
    return Boundaries(forest, out, tuple(float(v) for v in inlet_velocity), solid, wall == "interpolated", slip)


def _candidates(forest: Forest, sl: slice, bodies, unit: float) -> np.ndarray:
    """Leaves of the slice whose box, grown by one spacing, meets a body's bounding box."""
    leaves = np.arange(sl.start, sl.stop)
    a = (forest.origin[leaves] - forest.spacing[leaves, None]) / unit
    b = (forest.origin[leaves] + (forest.extent + forest.spacing)[leaves, None]) / unit
    hit = np.zeros(len(leaves), bool)
    for body in bodies:
        lo, hi = body.bounds()
        hit |= np.all((a <= hi) & (b >= lo), axis=1)
    # periodic images are not searched: a body must not cross a periodic side (checked by the engine)
    return leaves[hit]


def _body_points(forest: Forest, lv: int, leaves: np.ndarray, h: int, solid, bodies, wall: str):
    """Solid point ids, the fluid points next to a body and their links (global ids), for the given
    leaves of level lv. Solidity is evaluated once per leaf on its nodes grown by one layer,
    (m + 2)³, and shifted for the 26 directions."""
    m, m3 = forest.m, forest.m ** 3
    e = np.zeros(0, np.int64)
    links = {k: e for k in ("pts", "q", "q2", "p2")}
    links.update(w1=np.zeros(0), w2=np.zeros(0), owner=np.zeros(0, bool))
    if leaves.size == 0:
        return e, e, np.zeros((0, 3), np.int64), links
    g = np.arange(-1, m + 1)
    k, j, i = np.meshgrid(g, g, g, indexing="ij")
    ext = np.stack([i, j, k], axis=-1)  # (m+2, m+2, m+2, 3) local indices
    pos = forest.origin[leaves][:, None, None, None, :] + ext[None] * h
    pw, inside = forest.wrap_points(pos)
    s_ext = np.zeros(pw.shape[:-1], bool)
    s_ext[inside] = solid(pw[inside])
    own = s_ext[:, 1:-1, 1:-1, 1:-1]  # (n, m, m, m) [leaf, k, j, i]
    src = np.zeros((d3q27.Q,) + own.shape, bool)
    for q in range(1, d3q27.Q):
        cx, cy, cz = (int(c) for c in d3q27.C[q])
        src[q] = s_ext[:, 1 - cz:m + 1 - cz, 1 - cy:m + 1 - cy, 1 - cx:m + 1 - cx] & ~own
    near = src.any(axis=0)
    local = np.arange(m3).reshape(m, m, m)
    li, kk, jj, ii = np.nonzero(own)
    solid_pts = leaves[li] * m3 + local[kk, jj, ii]
    li, kk, jj, ii = np.nonzero(near)
    near_l = leaves[li]
    near_ijk = np.stack([ii, jj, kk], axis=1).astype(np.int64)
    # every link (x, q) of every stored copy; the owner copy of each node carries the force
    pos_n = forest.origin[near_l] + near_ijk * h
    pwn, _ = forest.wrap_points(pos_n)
    owner = forest.containing(lv, pwn) == near_l
    if lv < forest.max_level:
        owner &= forest.containing(lv + 1, pwn) < 0
    qq, ss = np.nonzero(src[:, li, kk, jj, ii])  # (Q, S) → links
    pts = near_l[ss] * m3 + local[kk[ss], jj[ss], ii[ss]]
    w1, q2, p2, w2 = _weights(forest, lv, h, pwn[ss], qq, pts, solid, bodies, wall)
    links = {"pts": pts, "q": qq.astype(np.int64), "w1": w1, "q2": q2, "p2": p2, "w2": w2, "owner": owner[ss]}
    return solid_pts, near_l, near_ijk, links


def _weights(forest: Forest, lv: int, h: int, x, q, pts, solid, bodies, wall: str):
    """Bouzidi's linear interpolated bounce-back for links (fluid node x, direction q, solid source
    x − c_q h), Δ the fraction of the link from x to the wall:
        Δ < ½:  f_q(x) = 2Δ f*_o(x) + (1 − 2Δ) f*_o(x + c_q h)      (o = opp(q))
        Δ ≥ ½:  f_q(x) = f*_o(x)/(2Δ) + (1 − 1/(2Δ)) f*_q(x)
    Half-way (Δ = ½, or ``wall`` = "halfway", or when x + c_q h is not a fluid node of this level):
    f_q(x) = f*_o(x)."""
    n = len(q)
    opp = d3q27.OPP[q]
    w1, w2 = np.ones(n), np.zeros(n)
    q2, p2 = opp.astype(np.int64), np.asarray(pts, np.int64).copy()
    if wall == "halfway" or n == 0:
        return w1, q2, p2, w2
    unit = float(1 << forest.max_level)
    c = d3q27.C[q] * h
    xs = x - c  # the solid source
    delta = np.ones(n)
    for body in bodies:
        hit = body.inside(xs / unit)
        if hit.any():
            delta[hit] = np.minimum(delta[hit], body.wall_fraction(x[hit] / unit, xs[hit] / unit))
    far = x + c  # the next node away from the wall
    fw, ok = forest.wrap_points(far)
    leaf = np.where(ok, forest.containing(lv, np.where(ok[:, None], fw, 0)), -1)
    ok &= leaf >= 0
    ok[ok] &= ~solid(fw[ok])
    m = forest.m
    off = forest.local_offset(np.maximum(leaf, 0), fw) // h
    far_pid = np.maximum(leaf, 0) * m ** 3 + (off[:, 2] * m + off[:, 1]) * m + off[:, 0]
    low = (delta < 0.5) & ok
    high = delta >= 0.5
    w1[low], w2[low] = 2 * delta[low], 1 - 2 * delta[low]
    p2[low] = far_pid[low]
    w1[high], w2[high] = 0.5 / delta[high], 1 - 0.5 / delta[high]
    q2[high] = q[high]
    return w1, q2, p2, w2


def on_device(xp, bnd: Boundaries) -> Boundaries:
    """The lists as xp arrays (the host copies stay for building tables)."""
    if xp is np:
        return bnd

    def move(b):
        moved = {f.name: xp.asarray(getattr(b, f.name)) for f in fields(b)
                 if isinstance(getattr(b, f.name), np.ndarray) and not f.name.startswith("near")}
        # the force selects the owners' links with a gather, not a mask: the app reads the force
        # while the GPU runs ahead, and a boolean mask's count would wait for all of it
        moved["link_owner"] = xp.asarray(np.flatnonzero(b.link_owner))
        return replace(b, **moved)
    return Boundaries(bnd.forest, {lv: move(b) for lv, b in bnd.level.items()}, bnd.inlet_velocity, bnd.solid,
                      bnd.interpolated, bnd.slip)


# ---- applying the lists (any xp: NumPy reference, NumpyKernels; CUDA kernels in coupling.cu) ----------
def rest_values(dtype, velocity=(0.0, 0.0, 0.0)) -> np.ndarray:
    """(Q,) equilibrium populations at ρ = 1 and ``velocity``."""
    u = [np.array(v, np.float64) for v in velocity]
    return d3q27.equilibrium(np, np.array(1.0), *u).astype(dtype)


def outflow_values(xp, src):
    """The outlet's populations (Q, n) from those of the nodes inwards, ``src`` (Q, n): src / ρ(src),
    in src's precision and the kernels' order (ρ summed over q in index order, one reciprocal, one
    rounded product per population: coupling.cu amr3d_outflow_points)."""
    rho = src[0].copy()
    for q in range(1, d3q27.Q):
        rho = rho + src[q]
    return src * (src.dtype.type(1.0) / rho)


def apply(xp, f2, b: LevelBoundary, offset: int, inlet_velocity) -> None:
    """In place on f2 (Q, N): the lists of one level (point ids + ``offset``): the outflow
    (:func:`outflow_values`), the inlet equilibrium, solid nodes to rest — in this order, so an
    inlet or solid node on the outlet side keeps its own value."""
    if b.outlet_dst.size:
        f2[:, b.outlet_dst + offset] = outflow_values(xp, f2[:, b.outlet_src + offset])
    if b.inlet_pts.size:
        f2[:, b.inlet_pts + offset] = xp.asarray(rest_values(f2.dtype, inlet_velocity))[:, None]
    if b.solid_pts.size:
        f2[:, b.solid_pts + offset] = xp.asarray(rest_values(f2.dtype))[:, None]


def force(xp, f2, b: LevelBoundary, offset: int, level: int):
    """Momentum-exchange force (3,) on the bodies from one level's owner links, level-0 units, as
    a device array: Σ h_l² (f*_o(x) + f_q(x)) c_o over the links (x, q), o = opp(q), with f_q(x)
    the population the wall sends back at the next step (2 f*_o(x) c_o for half-way bounce-back)."""
    if not b.link_pts.size:
        return xp.zeros(3, np.float64)
    own = b.link_owner  # a mask on the host, its indices on a device (on_device): the same links, in order
    opp = constant(xp, "d3q27 opposites", lambda: d3q27.OPP)[b.link_q[own]]
    fo = f2[opp, b.link_pts[own] + offset].astype(np.float64)
    back = b.link_w1[own] * fo + b.link_w2[own] * f2[b.link_q2[own], b.link_p2[own] + offset].astype(np.float64)
    c = constant(xp, "d3q27 velocities fp64", lambda: d3q27.C.astype(np.float64))[opp]
    return (2.0 ** -level) ** 2 * ((fo + back)[:, None] * c).sum(axis=0)


def bounce(xp, g_flat, f2, b: LevelBoundary, plane: int, offset: int) -> None:
    """Interpolated bounce-back in the reference's pull: the level's gathered pre-collision values
    g_flat (q · plane + p) of the links from the post-collision state f2 (Q, N) of the step's start."""
    if not b.link_pts.size:
        return
    o = xp.asarray(d3q27.OPP)[b.link_q]
    t = f2.dtype.type
    val = (b.link_w1.astype(f2.dtype) * f2[o, b.link_pts + offset]
           + b.link_w2.astype(f2.dtype) * f2[b.link_q2, b.link_p2 + offset])
    g_flat[b.link_q * plane + b.link_pts] = val.astype(t)

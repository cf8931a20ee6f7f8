"""The NumPy (any-xp) reference step on the octree: pull streaming through the gather tables,
BGK with P0's body force (or collision.py's MRT / Smagorinsky / CSM: Physics.collision), sub-cycled levels
with non-equilibrium rescaling, time interpolation
and restriction (docs/amr3d.md §"Level coupling").

State: f[q, leaf, k, j, i] (i = x fastest) holds post-collision populations of every leaf, each
level at the same physical time between steps; f_prev holds, per level, the state at the start of
that level's latest step (the GPU's second pull buffer plays this role) for the time
interpolation of coarse values at a fine level's intermediate step.

One ``step`` advances the coarsest present level l_min by one of its steps; level l takes
2^(l − l_min) steps of Δt_l = Δt_0 / 2^l. Order (Berger–Colella style recursion, coarse first):
    advance(l, θ): pull level l (coarser level read at fraction θ of its last step), collide;
                   then, if level l+1 exists: advance(l+1, 0), advance(l+1, ½), restrict(l+1 → l).
No per-point Python loops: per level, 27 block slices for the inner points and flat fancy-indexing
for the shell points.

fp16 storage (``half``, the registry's reference for the kernels' fp16 storage): the state is
rounded to what the kernels' level buffers keep (storage.round_fp16) wherever they store it — a
level's new state after its collision and again after its boundaries (which read the stored step:
the outflow scales its source node's populations), the coarse copies after a restriction —
and the arithmetic stays in the state's fp32, as the kernels' (rounding a rounded value returns it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import boundaries, collision, d3q27, levels, storage
from .collision import Collision
from .interface import level_copies
from .tables import Tables
from .tables import build as build_tables
from .tree import Forest


@dataclass(frozen=True)
class Physics:
    """τ and body acceleration given on level 0 (level-0 lattice units); levels derive theirs.
    ``collision``: the collision operator (collision.py; default P0's BGK)."""

    tau0: float
    accel0: tuple = (0.0, 0.0, 0.0)
    collision: Collision = Collision()


def collide(xp, f, tau, accel=(0.0, 0.0, 0.0)):
    """BGK with P0's body force (d3q27.collide; re-exported: shaders/cuda/amr3d cite it here)."""
    return d3q27.collide(xp, f, tau, accel)


def allocate(xp, forest: Forest, dtype=np.float64):
    m = forest.m
    return xp.zeros((d3q27.Q, forest.n_leaves, m, m, m), dtype=dtype)


def point_coordinates(forest: Forest) -> np.ndarray:
    """(L, m, m, m, 3) node coordinates (x, y, z) in level-0 lattice units (root block = m − 1)."""
    m = forest.m
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    ijk = np.stack([i, j, k], axis=-1)  # (m, m, m, 3)
    fin = forest.origin[:, None, None, None, :] + ijk[None] * forest.spacing[:, None, None, None, None]
    return fin / float(1 << forest.max_level)


def init_state(xp, forest: Forest, physics: Physics, rho, u, grad_u=None, dtype=np.float64):
    """Post-collision populations of a given flow: f* = f^eq(u − a_l/2) + (1 − 1/τ_l) f^neq + F_l
    (so that d3q27.fluid_velocity with a_l gives u back), with the
    Chapman–Enskog f^neq_l = −3 τ_l w ρ (c_α c_β − δ_αβ/3) ∂_α u_β h_l (h_l = 2^−l, gradients in
    level-0 units) when grad_u (L, m, m, m, 3, 3) [α, β] = ∂_α u_β is given.
    rho: (L, m, m, m); u: (3, L, m, m, m) in lattice units (level independent)."""
    rho = np.asarray(rho, np.float64)
    u = np.asarray(u, np.float64)
    lev = forest.level.astype(np.float64)
    if any(physics.accel0):  # u is the physical (time-centred) velocity: f^eq at u − a_l/2
        half = 0.5 * np.asarray(physics.accel0, np.float64)[:, None] * 2.0 ** -lev[None]  # (3, L)
        u = u - half[:, :, None, None, None]
    feq = d3q27.equilibrium(np, rho, u[0], u[1], u[2])
    f = feq.copy()
    tau = 0.5 + (physics.tau0 - 0.5) * 2.0 ** lev  # τ_l per leaf
    h = 2.0 ** -lev
    shape = (-1, 1, 1, 1)
    if grad_u is not None:
        g = np.asarray(grad_u, np.float64)
        cc = d3q27.C.astype(np.float64)
        for a in range(d3q27.Q):
            qab = np.outer(cc[a], cc[a]) - np.eye(3) / 3.0
            contr = np.einsum("...ab,ab->...", g, qab)
            f[a] -= ((tau - 1.0) * 3.0 * d3q27.W[a] * h).reshape(shape) * rho * contr
    if any(physics.accel0):
        acc = np.stack([np.asarray(physics.accel0, np.float64) * s for s in h], axis=0)  # (L, 3)
        for a in range(1, d3q27.Q):
            ca = acc @ d3q27.C[a].astype(np.float64)
            f[a] += (3.0 * d3q27.W[a] * ca).reshape(shape) * rho
    return xp.asarray(f.astype(dtype))


# ---- the step -----------------------------------------------------------------------------------
def pull_level(xp, f, f_prev, tables: Tables, lv: int, theta: float, physics: Physics):
    """Pre-collision populations (Q, n, m, m, m) of level lv's leaves: pull streaming."""
    lt = tables.level[lv]
    m = tables.forest.m
    Q = d3q27.Q
    fl = f[:, lt.lo:lt.lo + lt.n]
    g = xp.empty_like(fl)
    g[0] = fl[0]
    for q in range(1, Q):
        cx, cy, cz = (int(c) for c in d3q27.C[q])
        g[q, :, 1:-1, 1:-1, 1:-1] = fl[q, :, 1 - cz:m - 1 - cz, 1 - cy:m - 1 - cy, 1 - cx:m - 1 - cx]
    gf = g.reshape(-1)
    gf[lt.direct_dst] = f.reshape(-1)[lt.direct_src]
    f2 = f.reshape(Q, -1)
    if lt.fine_dst.size:
        r = levels.rescale(xp, f2[:, lt.fine_pts], physics.tau0, lv + 1, lv, physics.accel0)
        gf[lt.fine_dst] = r[lt.fine_q, lt.fine_slot]
    if lt.coarse_dst.size:
        cur = f2[:, lt.coarse_pts]
        if theta == 0.0:
            src = f_prev.reshape(Q, -1)[:, lt.coarse_pts]
        else:
            t = f.dtype.type
            src = t(1.0 - theta) * f_prev.reshape(Q, -1)[:, lt.coarse_pts] + t(theta) * cur
        r = levels.rescale(xp, src, physics.tau0, lv - 1, lv, physics.accel0)
        w = xp.asarray(lt.coarse_w, dtype=f.dtype)
        val = w[:, 0] * r[lt.coarse_q, lt.coarse_slot[:, 0]]
        for k in range(1, w.shape[1]):
            val = val + w[:, k] * r[lt.coarse_q, lt.coarse_slot[:, k]]
        gf[lt.coarse_dst] = val
    return g


def restrict(xp, f, tables: Tables, lv: int, physics: Physics):
    """Level lv's copies of nodes owned by level lv+1 take the fine values (injection, rescaled)."""
    lt = tables.level[lv]
    if lt.restrict_dst.size:
        f2 = f.reshape(d3q27.Q, -1)
        f2[:, lt.restrict_dst] = levels.rescale(xp, f2[:, lt.restrict_src], physics.tau0, lv + 1, lv,
                                                physics.accel0)


def synchronise(xp, f, tables: Tables, physics: Physics):
    """Make every stored copy of a node equal to its owner's value (finest leaf, lowest index):
    needed once for an arbitrary initial state; the step preserves it."""
    f2 = f.reshape(d3q27.Q, -1)
    for lv in sorted(tables.level, reverse=True):
        restrict(xp, f, tables, lv, physics)
        lt = tables.level[lv]
        if lt.dup_dst.size:
            f2[:, lt.dup_dst] = f2[:, lt.dup_src]


def _advance(xp, f, f_prev, tables: Tables, lv: int, theta: float, physics: Physics, bnd=None, csm=None,
             half: bool = False):
    """``csm``: per level the shared copies that take their owner's CSM coefficient
    (interface.level_copies; with physics.collision.les = csm). ``half``: fp16 storage's rounding."""
    lt = tables.level[lv]
    g = pull_level(xp, f, f_prev, tables, lv, theta, physics)
    if bnd is not None and bnd.interpolated and lv in bnd.level:
        m3 = tables.forest.m ** 3
        boundaries.bounce(xp, g.reshape(-1), f.reshape(d3q27.Q, -1), bnd.level[lv], lt.n * m3, lt.lo * m3)
    sl = slice(lt.lo, lt.lo + lt.n)
    f_prev[:, sl] = f[:, sl]
    # the CSM's coefficient per point from the populations the collision sees (collision.py)
    coef = collision.csm_coefficient(xp, g, csm[lv]) if physics.collision.csm else None
    f[:, sl] = collision.collide(xp, g, levels.tau_at(physics.tau0, lv), levels.accel_at(physics.accel0, lv),
                                 physics.collision, coef)
    if bnd is not None and lv in bnd.level:
        if half:  # the boundaries read the stored step (the outflow computes with its source node)
            f[:, sl] = storage.round_fp16(xp, f[:, sl])
        boundaries.apply(xp, f.reshape(d3q27.Q, -1), bnd.level[lv], lt.lo * tables.forest.m ** 3, bnd.inlet_velocity)
    if half:
        f[:, sl] = storage.round_fp16(xp, f[:, sl])
    if lv + 1 in tables.level:
        _advance(xp, f, f_prev, tables, lv + 1, 0.0, physics, bnd, csm, half)
        _advance(xp, f, f_prev, tables, lv + 1, 0.5, physics, bnd, csm, half)
        restrict(xp, f, tables, lv, physics)
        if half:
            f[:, sl] = storage.round_fp16(xp, f[:, sl])


class Stepper:
    """The reference solver on one tree: owns f, f_prev and the tables."""

    def __init__(self, xp, forest: Forest, physics: Physics, f, tables: Tables | None = None,
                 interp: str = "quadratic", synchronised: bool = False, bnd=None, half: bool = False):
        """``bnd``: boundaries.Boundaries of a flow (bodies, inlet, outlet, free-slip sides); the
        tables must then be built with its ``solid``, ``near`` and ``slip`` (done here when they are
        not given). ``half``: round the state as fp16 storage keeps it (the state is taken rounded)."""
        levels.check_taus(physics.tau0, forest.levels)
        self.xp, self.forest, self.physics = xp, forest, physics
        self.bnd = boundaries.on_device(xp, bnd) if bnd is not None else None
        if tables is None:
            tables = (build_tables(forest, interp, bnd.solid, bnd.near(), bnd.slip) if bnd is not None
                      else build_tables(forest, interp))
        self.tables = tables
        self.csm = None  # Kobayashi's CSM: per level, the copies of shared nodes and their owners
        if physics.collision.csm:
            self.csm = {lv: tuple(xp.asarray(a) for a in level_copies(forest, lv)) for lv in forest.levels}
        self.half = half
        self.f = f
        self.f_prev = f.copy()
        if not synchronised:  # (a state that came out of a step, or was synchronised, is left bit for bit)
            synchronise(xp, self.f, self.tables, physics)
        if half:
            self.f[...] = storage.round_fp16(xp, self.f)
            self.f_prev[...] = self.f
        self.time = 0.0  # level-0 time units

    @property
    def dt(self) -> float:
        """Physical time of one step (level-0 units): one step of the coarsest present level."""
        return 2.0 ** -min(self.forest.levels)

    def step(self, n: int = 1):
        lmin = min(self.forest.levels)
        for _ in range(n):
            _advance(self.xp, self.f, self.f_prev, self.tables, lmin, 0.0, self.physics, self.bnd, self.csm, self.half)
            self.time += self.dt

    def populations(self, ids):
        """f (Q, *ids.shape) at canonical point ids (leaf · m³ + (k·m + j)·m + i): one gather from the
        state, which is stored in that order (the tracers read their stencil nodes this way)."""
        return self.f.reshape(d3q27.Q, -1)[:, ids]

    def body_force(self):
        """Momentum-exchange force (3,) on the bodies, level-0 units (device array)."""
        return body_force(self.xp, self.f, self.forest, self.bnd)


def body_force(xp, f, forest: Forest, bnd):
    total = xp.zeros(3, np.float64)
    if bnd is None:
        return total
    f2 = f.reshape(d3q27.Q, -1)
    m3 = forest.m ** 3
    for lv, b in bnd.level.items():
        total = total + boundaries.force(xp, f2, b, forest.level_slice(lv).start * m3, lv)
    return total


# ---- diagnostics ----------------------------------------------------------------------------------
def trapezoid_weights(m: int) -> np.ndarray:
    w = np.ones(m)
    w[0] = w[-1] = 0.5
    return w[:, None, None] * w[None, :, None] * w[None, None, :]


def mass(xp, forest: Forest, f) -> float:
    """∫ρ dV of the leaf-wise trilinear field (trapezoidal rule per leaf, level-0 volume units).
    Each shared face node is weighted ½ by each side, so on one level this is Σ ρ over distinct
    nodes — the quantity LBM streaming and BGK conserve exactly."""
    rho = d3q27.moments(xp, f)[0]  # (L, m, m, m)
    vol = xp.asarray((2.0 ** -forest.level.astype(np.float64)) ** 3)
    tw = xp.asarray(trapezoid_weights(forest.m))
    return float(((rho * tw[None]).sum(axis=(1, 2, 3)) * vol).sum())

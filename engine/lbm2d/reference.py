"""The D2Q9 reference step, written against ``xp`` (NumPy, or CuPy with the same code).

It implements docs/lbm2d.md §"Step semantics" literally: the state holds post-collision
populations f[i, y, x]; one step pulls (periodic wrap, half-way bounce-back from solid sources,
moving-wall correction) and collides (BGK or TRT, Guo forcing); solid/moving-wall nodes are copied
through unchanged. The arithmetic order of the collision matches shaders/cuda/lbm2d/d2q9.cuh so
that fp32 variants agree to round-off.

Open boundaries (inlet code 3, outlet code 4) are an extra pass after the step, the
non-equilibrium extrapolation of Guo, Zheng & Shi (2002): a boundary node takes the equilibrium of
the prescribed quantity (inlet: velocity; outlet: ρ = 1) plus the non-equilibrium part of its
interior neighbour. Chosen over Zou–He because it is one formula for every direction (no case
table per wall orientation), is second-order, and is stable at the Reynolds numbers of a
Kármán street; the price is that it is not exactly mass-conserving at the outlet (an open
boundary is not meant to be).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import d2q9
from .config import load_image
from .d2q9 import CX, CY, OPP, Q, W


@dataclass
class Lattice:
    """Precomputed, per-direction data for the array step (built once per engine/backend)."""

    mask: Any  # (ny, nx) uint8
    fluid: Any  # (ny, nx) bool: mask == 0, the nodes the collision updates
    bounce: list  # per i: (ny, nx) bool, the pull source x − c_i is solid or a moving wall
    wall_term: list  # per i: (ny, nx) dtype, 6 w_i ρ0 (c_i·u_wall) where the source is a moving wall
    omega: Any  # 1/τ in the arithmetic dtype
    omega_minus: Any  # TRT odd relaxation rate (== omega for BGK)
    force: tuple  # (Fx, Fy) in the arithmetic dtype
    trt: bool
    inlet_rows: Any  # y indices of inlet nodes (x = 0)
    outlet_rows: Any  # y indices of outlet nodes (x = nx − 1)
    inlet_velocity: float
    dtype: Any


def trt_omega_minus(tau: float, magic: float = 3.0 / 16.0) -> float:
    """Λ = (τ⁺ − ½)(τ⁻ − ½) = 3/16 puts half-way bounce-back walls exactly midway for Poiseuille."""
    return 1.0 / (0.5 + magic / (tau - 0.5))


def build_lattice(xp, mask: np.ndarray, tau: float, force, wall_velocity, dtype, collision="bgk",
                  inlet_velocity=0.0) -> Lattice:
    dtype = np.dtype(dtype)
    mask = np.asarray(mask, dtype=np.uint8)
    bounce, wall_term = [], []
    for i in range(Q):
        src = np.roll(mask, (CY[i], CX[i]), axis=(0, 1))  # mask at x − c_i
        bounce.append(xp.asarray((src == d2q9.SOLID) | (src == d2q9.MOVING_WALL)))
        # Same operation order and precision as d2q9.cuh: 6·w_i·(c_i·u_wall) in the arithmetic dtype.
        t = dtype.type
        cu = t(CX[i]) * t(wall_velocity[0]) + t(CY[i]) * t(wall_velocity[1])
        moving = src == d2q9.MOVING_WALL
        if moving.any():
            wall_term.append(xp.asarray(np.where(moving, t(6) * t(W[i]) * cu, t(0)).astype(dtype)))
        else:  # no array of zeros for the common case (8192² × 9 of them is gigabytes)
            wall_term.append(t(0))
    omega = 1.0 / tau
    om_minus = trt_omega_minus(tau) if collision == "trt" else omega
    return Lattice(
        mask=xp.asarray(mask), fluid=xp.asarray(mask == d2q9.FLUID), bounce=bounce, wall_term=wall_term,
        omega=dtype.type(omega), omega_minus=dtype.type(om_minus),
        force=(dtype.type(force[0]), dtype.type(force[1])), trt=collision == "trt",
        inlet_rows=xp.asarray(np.nonzero(mask[:, 0] == d2q9.INLET)[0]),
        outlet_rows=xp.asarray(np.nonzero(mask[:, -1] == d2q9.OUTLET)[0]),
        inlet_velocity=float(inlet_velocity), dtype=dtype)


# ---- per-point algebra, vectorised ------------------------------------------------------------
def moments(f, force=(0.0, 0.0)):
    """ρ and u = (Σ f_i c_i + F/2)/ρ, summed in the fixed order of d2q9.cuh."""
    f0, f1, f2, f3, f4, f5, f6, f7, f8 = (f[i] for i in range(Q))
    rho = f0 + f1 + f2 + f3 + f4 + f5 + f6 + f7 + f8
    jx = f1 - f3 + f5 - f6 - f7 + f8
    jy = f2 - f4 + f5 + f6 - f7 - f8
    half = f.dtype.type(0.5)
    ux = (jx + half * force[0]) / rho
    uy = (jy + half * force[1]) / rho
    return rho, ux, uy


def equilibrium_i(i, rho, ux, uy, usq):
    t = rho.dtype.type
    cu = t(CX[i]) * ux + t(CY[i]) * uy
    return t(W[i]) * rho * (t(1) + t(3) * cu + t(4.5) * cu * cu - t(1.5) * usq)


def equilibrium(xp, rho, ux, uy):
    usq = ux * ux + uy * uy
    return xp.stack([equilibrium_i(i, rho, ux, uy, usq) for i in range(Q)])


def _guo_parts(i, ux, uy, F):
    """Guo source split in its even (symmetric) and odd (antisymmetric) parts in c_i."""
    t = ux.dtype.type
    cx, cy = t(CX[i]), t(CY[i])
    cu = cx * ux + cy * uy
    cF = cx * F[0] + cy * F[1]
    even = t(W[i]) * (t(-3) * (ux * F[0] + uy * F[1]) + t(9) * cu * cF)
    odd = t(W[i]) * t(3) * cF
    return even, odd


def c_dot(i, a, b):
    """c_i · (a, b) with the 0/±1 components written out, as d2q9.cuh's c_dot."""
    if i == 0:
        return a.dtype.type(0) if hasattr(a, "dtype") else 0.0
    if i == 1:
        return a
    if i == 2:
        return b
    if i == 3:
        return -a
    if i == 4:
        return -b
    if i == 5:
        return a + b
    if i == 6:
        return b - a
    if i == 7:
        return -(a + b)
    return a - b


def collide_bgk(xp, g, lat: Lattice, shifted: bool = False):
    """BGK + Guo forcing in d2q9.cuh's paired form, the same operations in the same order: with
    R = ωρ, a = 1 − 1.5u², P_i = 3(1 − ω/2) c_i·F, cu3 = 3 c_i·u and K = R a − 3(1 − ω/2) u·F,
    f_i ← (1 − ω) g_i + w_i (K + even_i ± odd_i), even_i = cu3 (R/2 cu3 + P_i), odd_i = R cu3 + P_i,
    the + for i = 1, 2, 5, 6 and the − for their opposites (algebraically the textbook
    (1 − ω) g_i + ω f_eq,i + (1 − ω/2) S_i with Guo's source S_i).
    shifted: g holds f − w (fp16 storage's values): ρ = Σ g + 1 and K − ω (d2q9.cuh SHIFTED)."""
    t = g.dtype.type
    fx, fy = t(lat.force[0]), t(lat.force[1])
    f0, f1, f2, f3, f4, f5, f6, f7, f8 = (g[i] for i in range(Q))
    rho = f0 + f1 + f2 + f3 + f4 + f5 + f6 + f7 + f8
    if shifted:
        rho = rho + t(1)
    jx = f1 - f3 + f5 - f6 - f7 + f8
    jy = f2 - f4 + f5 + f6 - f7 - f8
    inv = t(1) / rho
    ux = (jx + t(0.5) * fx) * inv
    uy = (jy + t(0.5) * fy) * inv
    a = t(1) - t(1.5) * (ux * ux + uy * uy)
    om = t(lat.omega)
    pref3 = t(3) * (t(1) - t(0.5) * om)
    R = om * rho
    K = R * a - pref3 * (ux * fx + uy * fy)
    if shifted:
        K = K - om
    half_R = t(0.5) * R
    omc = t(1) - om
    U, V = t(3) * ux, t(3) * uy
    out = xp.empty_like(g)
    out[0] = omc * g[0] + t(W[0]) * K
    for i in (1, 2, 5, 6):
        j = OPP[i]
        cu3 = c_dot(i, U, V)
        P = pref3 * c_dot(i, fx, fy)
        even = K + cu3 * (half_R * cu3 + P)
        odd = R * cu3 + P
        out[i] = omc * g[i] + t(W[i]) * (even + odd)
        out[j] = omc * g[j] + t(W[i]) * (even - odd)
    return out


def collide(xp, g, lat: Lattice):
    """Post-collision populations of the streamed populations g (all nodes; caller masks)."""
    if not lat.trt:
        return collide_bgk(xp, g, lat)
    t = g.dtype.type
    F = lat.force
    has_force = bool(F[0] != 0 or F[1] != 0)
    rho, ux, uy = moments(g, F)
    usq = ux * ux + uy * uy
    om = lat.omega
    feq = [equilibrium_i(i, rho, ux, uy, usq) for i in range(Q)]
    out = xp.empty_like(g)
    # TRT: relax the even part of f − feq with ω⁺ = 1/τ and the odd part with ω⁻.
    omm = lat.omega_minus
    half = t(0.5)
    for i in range(Q):
        j = OPP[i]
        neq_p = half * ((g[i] - feq[i]) + (g[j] - feq[j]))
        neq_m = half * ((g[i] - feq[i]) - (g[j] - feq[j]))
        post = g[i] - om * neq_p - omm * neq_m
        if has_force:
            even, odd = _guo_parts(i, ux, uy, F)
            post = post + (t(1) - half * om) * even + (t(1) - half * omm) * odd
        out[i] = post
    return out


def stream(xp, f, lat: Lattice):
    """Pull streaming with half-way bounce-back and the moving-wall correction."""
    g = xp.empty_like(f)
    for i in range(Q):
        pulled = xp.roll(f[i], (int(CY[i]), int(CX[i])), axis=(0, 1))  # f_i^post(x − c_i)
        g[i] = xp.where(lat.bounce[i], f[OPP[i]] + lat.wall_term[i], pulled)
    return g


def step(xp, f, out, lat: Lattice):
    """One step: out ← collide(stream(f)) on fluid nodes, f copied through elsewhere."""
    post = collide(xp, stream(xp, f, lat), lat)
    out[...] = xp.where(lat.fluid[None], post, f)
    apply_open_boundaries(xp, out, lat)
    return out


def step_shifted(xp, s, lat: Lattice, storage=None):
    """One step of shifted populations s = f − w (fp16 storage, decoded to fp32 without adding w),
    the operations of the CUDA kernels on such storage: streaming and bounce-back move values
    (w_i = w_opp(i), so they commute with the shift), BGK collides the shifted values
    (collide_bgk(shifted=True)), TRT collides f = g + w and shifts back, and the open boundaries
    work on f = s + w of their columns only (every other node keeps its bits).
    storage: the storage dtype (fp16) when the open boundaries must read the neighbour column as the
    kernels do — after the fused step has rounded it to storage."""
    w = xp.asarray(W.astype(s.dtype)).reshape(Q, 1, 1)
    g = stream(xp, s, lat)
    post = collide(xp, g + w, lat) - w if lat.trt else collide_bgk(xp, g, lat, shifted=True)
    out = xp.where(lat.fluid[None], post, s)
    if lat.inlet_rows.size or lat.outlet_rows.size:
        if storage is not None:  # the fused kernel stored (rounded) every node before the boundary pass
            out = out.astype(storage).astype(s.dtype)
        u = out + w
        apply_open_boundaries(xp, u, lat)
        for rows, col in ((lat.inlet_rows, 0), (lat.outlet_rows, -1)):
            if rows.size:
                out[:, rows, col] = u[:, rows, col] - w[:, 0]
    return out


def apply_open_boundaries(xp, f, lat: Lattice):
    """Inlet (x = 0) and outlet (x = nx−1) nodes by non-equilibrium extrapolation (Guo et al. 2002)."""
    t = f.dtype.type
    for rows, col, ncol, kind in ((lat.inlet_rows, 0, 1, "in"), (lat.outlet_rows, -1, -2, "out")):
        if rows.size == 0:
            continue
        nb = f[:, rows, ncol]  # (9, k) interior neighbour, post-collision
        rho_n, ux_n, uy_n = moments(nb)
        feq_n = equilibrium(xp, rho_n, ux_n, uy_n)
        if kind == "in":
            ub = xp.full_like(rho_n, t(lat.inlet_velocity))
            feq_b = equilibrium(xp, rho_n, ub, xp.zeros_like(rho_n))
        else:
            feq_b = equilibrium(xp, xp.ones_like(rho_n), ux_n, uy_n)
        f[:, rows, col] = feq_b + (nb - feq_n)


# ---- geometry ---------------------------------------------------------------------------------
def build_mask(preset) -> np.ndarray:
    """The node-type mask (ny, nx) of a preset: walls, lid, inlet/outlet columns, obstacle."""
    ny, nx = preset.shape
    mask = np.zeros((ny, nx), dtype=np.uint8)
    b, ob = preset.boundaries, preset.obstacle
    if b.x == "inlet-outlet":
        mask[:, 0] = d2q9.INLET
        mask[:, -1] = d2q9.OUTLET
    if b.x == "walls":
        mask[:, 0] = mask[:, -1] = d2q9.SOLID
    if b.y in ("walls", "lid"):
        mask[0, :] = d2q9.SOLID
        mask[-1, :] = d2q9.MOVING_WALL if b.y == "lid" else d2q9.SOLID
        if b.y == "lid" and b.x == "walls":  # the lid spans the cavity between the side walls
            mask[-1, 0] = mask[-1, -1] = d2q9.SOLID
    y, x = np.ogrid[0:ny, 0:nx]  # open grids: only the obstacle test itself is full-size (8192² bench cells)
    cx, cy = ob.center[0] * nx, ob.center[1] * ny
    if ob.kind == "circle":
        r = ob.diameter / 2
        mask[(x + 0.5 - cx) ** 2 + (y + 0.5 - cy) ** 2 <= r * r] = d2q9.SOLID
    elif ob.kind == "rectangle":
        inside = (np.abs(x + 0.5 - cx) <= ob.width / 2) & (np.abs(y + 0.5 - cy) <= ob.height / 2)
        mask[inside] = d2q9.SOLID
    elif ob.kind == "image":
        img = load_image(ob.path)
        rows = np.minimum((np.arange(ny)[::-1] + 0.5) * img.shape[0] / ny, img.shape[0] - 1).astype(int)
        cols = np.minimum((np.arange(nx) + 0.5) * img.shape[1] / nx, img.shape[1] - 1).astype(int)
        mask[img[rows][:, cols] < ob.threshold] = d2q9.SOLID
    return mask


def vorticity(xp, ux, uy):
    """ω = ∂uy/∂x − ∂ux/∂y, central differences with periodic wrap (lattice units)."""
    half = ux.dtype.type(0.5)
    return half * (xp.roll(uy, -1, axis=1) - xp.roll(uy, 1, axis=1)) - half * (
        xp.roll(ux, -1, axis=0) - xp.roll(ux, 1, axis=0))

"""The D3Q27 velocity set of paper P0 as data (one place for c, w and opp) and its per-point algebra.

P0 eq. (1)/(5) fix the groups: α = 0 rest (w = 8/27); 1–6 axis (2/27); 7–18 planar diagonals
(1/54); 19–26 corners (1/216). P0 does not fix the order inside a group; here every direction is
followed by its opposite (opp(α) = α ± 1), which keeps the table and the kernels' switch short.
Lattice units throughout (c = Δx/Δt = 1, c_s² = 1/3).

Every function takes ``xp`` (NumPy or CuPy) and works on arrays shaped (Q, ...) so the reference
and the later GPU host code share it. Sums are written as explicit sequential loops in a fixed
order so that two calls on differently shaped arrays give bit-identical results (the one-level
tree vs np.roll lattice test relies on it).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .uploads import constant

Q = 27
_AXIS = [(1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1)]
_PLANAR = [(1, 1, 0), (-1, -1, 0), (1, -1, 0), (-1, 1, 0),
           (1, 0, 1), (-1, 0, -1), (1, 0, -1), (-1, 0, 1),
           (0, 1, 1), (0, -1, -1), (0, 1, -1), (0, -1, 1)]
_CORNER = [(1, 1, 1), (-1, -1, -1), (1, 1, -1), (-1, -1, 1),
           (1, -1, 1), (-1, 1, -1), (-1, 1, 1), (1, -1, -1)]
C = np.array([(0, 0, 0)] + _AXIS + _PLANAR + _CORNER, dtype=np.int64)  # (27, 3): (cx, cy, cz)
W_EXACT = tuple([Fraction(8, 27)] + [Fraction(2, 27)] * 6 + [Fraction(1, 54)] * 12 + [Fraction(1, 216)] * 8)
W = np.array([float(x) for x in W_EXACT], dtype=np.float64)  # W_EXACT feeds the CUDA prelude
OPP = np.array([0] + [a + 1 if a % 2 else a - 1 for a in range(1, Q)], dtype=np.int64)
CS2 = 1.0 / 3.0
# Specular reflection (free-slip sides, tables.py): REFLECT[mask, α] is the direction c_α with the
# components of the axes in ``mask`` (bit 0 x, bit 1 y, bit 2 z) negated; REFLECT[7] = OPP.
REFLECT = np.array([[next(b for b in range(27) if all(C[b, d] == (-C[a, d] if mask >> d & 1 else C[a, d])
                                                     for d in range(3))) for a in range(27)]
                    for mask in range(8)], dtype=np.int64)
# D3Q27 as pairs: the 13 directions with their first nonzero component +1 and their opposites;
# PAIR_C[p, d] = c_d of pair p's direction (0 or ±1). Σ c f = Σ_p c_p (f_p − f_opp(p)): a state whose
# opposite populations are equal (the solid nodes, reset to rest) has exactly zero momentum. (The
# tracers' velocity, tracers.py, and its CUDA kernels, tracer_kernels.py, read these tables.)
_FIRST = np.array([next(c for c in C[a] if c) if a else 0 for a in range(Q)])
PAIR = np.flatnonzero(_FIRST == 1)
PAIR_OPP = OPP[PAIR]
PAIR_C = C[PAIR]  # (13, 3)


def viscosity(tau: float) -> float:
    """ν = c_s² (τ − ½) in lattice units of the level τ belongs to (P0 eq. 3 with c = Δt = 1)."""
    return CS2 * (tau - 0.5)


def _moment_terms():
    """moments' additions in their order: ρ's directions, then per axis (+ directions, − directions)."""
    axes = [([a for a in range(Q) if C[a, d] == 1], [a for a in range(Q) if C[a, d] == -1]) for d in range(3)]
    return list(range(Q)), axes


def _moments_source() -> str:
    """The fused kernel's body: moments' additions and subtractions, one variable each, in order
    (additions only: no contraction into FMAs, so the same bits as the array code)."""
    rho, axes = _moment_terms()
    lines = ["T r = f0;"] + [f"r = r + f{a};" for a in rho[1:]] + ["rho = r;"]
    for name, (plus, minus) in zip(("jx", "jy", "jz"), axes):
        lines += [f"T {name}_ = f{plus[0]};"] + [f"{name}_ = {name}_ + f{a};" for a in plus[1:]]
        lines += [f"{name}_ = {name}_ - f{a};" for a in minus] + [f"{name} = {name}_;"]
    return "\n".join(lines)


_FUSED_MOMENTS: dict = {}  # per CuPy module: moments as one elementwise kernel (compiled at first use)


def _fused_moments(xp):
    k = _FUSED_MOMENTS.get(xp)
    if k is None:
        k = _FUSED_MOMENTS[xp] = xp.ElementwiseKernel(", ".join(f"T f{a}" for a in range(Q)),
                                                        "T rho, T jx, T jy, T jz", _moments_source(),
                                                        "nagare_d3q27_moments")
    return k


def moments(xp, f):
    """ρ = Σ f_α and j = Σ c_α f_α (P0 eqs. 6, 7 before the division), fixed summation order. On
    CuPy one elementwise kernel does the 77 additions in the same order (the same bits), instead
    of 77 launches (the regrid's criterion and rescaling call this per level and batch)."""
    if getattr(xp, "ElementwiseKernel", None) is not None and f.dtype.char in "fd":
        return _fused_moments(xp)(*(f[a] for a in range(Q)))
    terms, axes = _moment_terms()
    rho = f[0]
    for a in terms[1:]:
        rho = rho + f[a]
    j = []
    for plus, minus in axes:
        acc = f[plus[0]]
        for a in plus[1:]:
            acc = acc + f[a]
        for a in minus:
            acc = acc - f[a]
        j.append(acc)
    return rho, j[0], j[1], j[2]


def _cdot(a, x, y, z):
    """c_α · (x, y, z) with the 0/±1 components written out (no multiplications by 0 or 1)."""
    out = None
    for comp, v in zip(C[a], (x, y, z)):
        if comp == 0:
            continue
        term = v if comp == 1 else -v
        out = term if out is None else out + term
    return out


def equilibrium_a(a, rho, ux, uy, uz, usq):
    """P0 eq. (4): w ρ (1 + 3 c·u + 9/2 (c·u)² − 3/2 u·u), one direction."""
    t = rho.dtype.type
    if a == 0:
        return t(W[0]) * rho * (t(1) - t(1.5) * usq)
    cu = _cdot(a, ux, uy, uz)
    return t(W[a]) * rho * (t(1) + t(3) * cu + t(4.5) * cu * cu - t(1.5) * usq)


def equilibrium(xp, rho, ux, uy, uz):
    """All 27 f_eq (Q, ...) at once: equilibrium_a's operations on whole (Q, ...) arrays, a dozen
    array operations instead of ~11 per direction (on a GPU each is a launch; a regrid's rescaling
    calls this a few times). The same bits as equilibrium_a for finite velocities: c·u is summed
    over all three components in equilibrium_a's order, and a zero component adds 0·u = ±0, which
    can flip only the sign of a zero c·u, which 1 + 3 c·u and (c·u)² do not see; the operations are
    in place, so the temporaries are the (Q, ...) result and two more, as the stacked directions."""
    t = rho.dtype.type
    ax = (Q,) + (1,) * np.ndim(rho)
    # (the velocity set's columns on the device once: uploads.constant)
    cx, cy, cz = (constant(xp, ("d3q27 C", d, t, ax), lambda d=d: C[:, d].astype(t).reshape(ax)) for d in range(3))
    usq = ux * ux + uy * uy + uz * uz
    cu = cx * ux
    cu += cy * uy
    cu += cz * uz
    sq = t(4.5) * cu
    sq *= cu
    cu *= t(3)
    cu += t(1)  # 1 + 3 c·u
    cu += sq
    del sq
    cu -= t(1.5) * usq
    out = constant(xp, ("d3q27 W", t, ax), lambda: W.astype(t).reshape(ax)) * rho
    out *= cu
    return out


def force_a(a, rho, accel):
    """P0 eq. (8): F_α = w_α ρ 3 (c_α·a) Δt (Δt = 1 in the level's lattice units); None if 0."""
    if a == 0:
        return None
    ca = float(sum(int(C[a, d]) * float(accel[d]) for d in range(3)))
    if ca == 0.0:
        return None
    t = rho.dtype.type
    return t(3.0 * W[a] * ca) * rho


def force(xp, rho, accel):
    """All 27 force terms as a (Q, ...) array (zeros where c_α·a = 0)."""
    out = xp.zeros((Q,) + rho.shape, dtype=rho.dtype)
    for a in range(Q):
        fa = force_a(a, rho, accel)
        if fa is not None:
            out[a] = fa
    return out


def velocity(xp, f):
    """ρ and u = Σ c f / ρ (P0 eq. 7): the velocity that enters the equilibrium."""
    rho, jx, jy, jz = moments(xp, f)
    inv = rho.dtype.type(1) / rho
    return rho, jx * inv, jy * inv, jz * inv


def collide(xp, f, tau: float, accel=(0.0, 0.0, 0.0)):
    """BGK with P0's body force, eq. (2): f* = f − (f − f_eq)/τ + F_α, on pre-collision f.

    P0 takes u = Σ c f / ρ in f_eq (no half-force shift); the momentum of the post-collision state
    is then ρ(u + a), and the flow velocity reported by ``fluid_velocity`` is the time-centred
    ρu + ρa/2 (the usual second-order reading of this forcing)."""
    t = f.dtype.type
    rho, ux, uy, uz = velocity(xp, f)
    usq = ux * ux + uy * uy + uz * uz
    om = t(1.0 / tau)
    out = xp.empty_like(f)
    for a in range(Q):
        feq = equilibrium_a(a, rho, ux, uy, uz, usq)
        post = f[a] - om * (f[a] - feq)
        fa = force_a(a, rho, accel)
        out[a] = post if fa is None else post + fa
    return out


def fluid_velocity(xp, f, accel=(0.0, 0.0, 0.0)):
    """ρ and the physical velocity of a post-collision state: (Σ c f − ρ a/2)/ρ.

    A post-collision state carries momentum ρ(u + a) (see ``collide``); the velocity between two
    steps, which the analytic solutions describe, is u + a/2."""
    rho, ux, uy, uz = velocity(xp, f)
    t = rho.dtype.type
    return (rho, ux - t(0.5 * accel[0]), uy - t(0.5 * accel[1]), uz - t(0.5 * accel[2]))


def _check() -> None:
    assert np.all(C[OPP] == -C)
    assert np.array_equal(REFLECT[0], np.arange(Q)) and np.array_equal(REFLECT[7], OPP)
    assert len({tuple(c) for c in C}) == Q
    np.testing.assert_allclose(W.sum(), 1.0, rtol=1e-15)
    np.testing.assert_allclose((W[:, None] * C).sum(0), 0.0, atol=1e-15)
    np.testing.assert_allclose(np.einsum("a,ai,aj->ij", W, C, C), CS2 * np.eye(3), atol=1e-15)


_check()

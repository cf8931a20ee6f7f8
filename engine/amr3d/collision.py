"""Collision operators of the octree LBM: P0's BGK, a D3Q27 multiple-relaxation-time operator (MRT)
and Smagorinsky's eddy viscosity (LES) on either — NumPy (any xp) here, CUDA in
shaders/cuda/amr3d/d3q27.cuh (``d3q27::collide``, chosen at compile time by the macros that
:func:`prelude` writes; docs/amr3d-flows.md "Collision operators").

All operators act on pre-collision populations f[27, ...] and add P0's force term exactly as BGK
does (F_α = 3 w_α ρ (c_α·a), so the post-collision momentum is ρ(u + a)); u = Σ c f / ρ enters
the equilibrium (P0 eq. 7).

**MRT** (Suga, Kuwata, Takashima & Chikasue 2015, Comput. Math. Appl. 69, 518). Moment basis: the
27 polynomials of Suga et al. — 1; c_x, c_y, c_z; c²; 2c_x² − c_y² − c_z², c_y² − c_z²;
c_x c_y, c_y c_z, c_z c_x; c² c (3); c⁴ c (3); c⁴; c⁶; (2c_x² − c_y² − c_z²) c², (c_y² − c_z²) c²;
c_x c_y c², c_y c_z c², c_z c_x c²; c_x (c_y² − c_z²), c_y (c_z² − c_x²), c_z (c_x² − c_y²);
c_x c_y c_z — Gram–Schmidt orthogonalised in that order under the plain inner product over the 27
velocities (d'Humières' construction) and scaled to the smallest integer rows (:func:`basis`;
entries within ±8). Rates (Suga et al.'s tuned set, taken from a public transcription of their
operator and not re-checked against the paper's table): ρ, j conserved; the five shear moments
ω = 1/τ (so ν = c_s²(τ − ½) exactly as BGK); energy c² 1.54 (the bulk viscosity); energy flux
c² c 1.5; c⁴ c 1.83; c⁴ 1.4; c⁶ 1.61; (2c_x² − …)c², (c_y² − c_z²)c² 1.98; c_x c_y c² … 1.98;
c_x(c_y² − c_z²) … 1.74; c_x c_y c_z 1.74. (A public transcription of Suga's operator ties the
energy flux to ω by d'Humières' "magic" s_q = 8(2 − ω)/(8 − ω), Λ = 3/16; that rate goes to 0 as
τ → ½ and was measured unstable here: a Taylor–Green vortex on 32³ at τ = 0.5005 blows up after
900 steps with it, BGK after 1000, and runs 1500 steps decaying with s_q = 1.5.) The equilibrium
moments are those of P0's second-order f^eq (m^eq = M f^eq), so with every rate = ω the operator
*is* BGK.

Because the rows are orthogonal, M⁻¹ = Mᵀ N⁻¹ (N = diag of the squared row norms) and
M⁻¹ S M = ω I + Σ_k ((s_k − ω)/N_k) M_kᵀ M_k. The operator is therefore written as BGK plus a
correction over the 18 moments whose rate is not ω:
    f* = f − ω (f − f^eq) − Σ_k M_kα λ_k Δm_k + F_α,   Δm_k = Σ_α M_kα (f_α − f^eq_α),
    λ_k = (s_k − ω)/N_k.
The conserved moments' rates are immaterial (their non-equilibrium part vanishes), so they are
taken as ω and skipped. Mass and momentum are conserved to round-off: every correction row is
orthogonal to 1 and c (Σ_α M_kα = Σ_α c_α M_kα = 0 in integers). With every s_k = ω all λ_k are
exactly 0 and the result equals BGK's expression bit for bit.

**Smagorinsky** (Hou, Sterling, Chen & Doolen 1996). Eddy viscosity ν_t = (C_s Δ)² |S̄|,
|S̄| = √(2 S_αβ S_αβ), Δ = Δx = Δt = 1 on the level (so the filter width is the level's spacing),
from the non-equilibrium momentum flux of the *pre-collision* populations,
Π^neq_αβ = Σ_q c_qα c_qβ (f_q − f^eq_q). Derivation (D3Q27, c_s² = 1/3): to first order in
Chapman–Enskog a relaxation time τ_e gives Π^neq = −2 ρ c_s² τ_e S, so with
Q = |Π^neq| = √(Π^neq_αβ Π^neq_αβ):  |S̄| = √2 √(S:S) = Q / (√2 ρ c_s² τ_e).
The total viscosity c_s²(τ_e − ½) = c_s²(τ − ½) + ν_t gives τ_e = τ + C_s² |S̄| / c_s², i.e.
    τ_e² − τ τ_e − C_s² Q / (√2 ρ c_s⁴) = 0,
    τ_e = ½ (τ + √(τ² + 4 C_s² Q / (√2 ρ c_s⁴))) = ½ (τ + √(τ² + 18 √2 C_s² Q / ρ))
(4 · 9 / √2 = 18 √2 with c_s⁴ = 1/9). It is evaluated as ω_e = 1/τ_e = 2ω / (1 + √(1 + 18√2 C_s² ω² Q/ρ)):
with C_s = 0, or Q below round-off, √(1) = 1 and ω_e is ω bit for bit. BGK relaxes every
population with ω_e; MRT its shear moments. The trace of Π^neq (bulk, ~ ∇·u) is
kept in Q as Hou et al. do; P0's force adds O(a u) to Π^neq, not removed (|a| ≤ 1e-2 here).

**Coherent-structure Smagorinsky model (CSM)** (Kobayashi 2005, Phys. Fluids 17, 045104; Kobayashi,
Ham & Wu 2008, Int. J. Heat Fluid Flow 29, 640). ν_t = C Δ² |S̄| with the Smagorinsky C_s² replaced
by a coefficient per point, C = C₁ |F_CS|^{3/2} (1 − F_CS), C₁ = 1/22, from the coherent-structure
function F_CS = Q/E ∈ [−1, 1] (clipped against round-off) of the resolved velocity gradient
A_ab = ∂u_b/∂x_a:  Q = ½(W:W − S:S) = −½ A_ab A_ba,  E = ½(W:W + S:S) = ½ A_ab A_ab  (E = 0 → C = 0).
Pure rotation: F = 1, C = 0; pure strain: F = −1, C = 2 C₁ = 1/11; plain shear: F = 0, C = 0; so
C ∈ [0, 2 C₁] and ν_t ≥ 0 everywhere. |S̄| and τ_e come from Π^neq exactly as Smagorinsky's
(above, with C_s² → C): τ_e = ½ (τ + √(τ² + 18 √2 C |Π^neq| / ρ)), evaluated in the same order.
Only F_CS needs the gradient, which is not local: :func:`csm_coefficient` computes C in a pre-pass
over the pre-collision populations of a level (the same populations the collision sees: after the
pull, and at the interface points of a tree those of the fix-up's gather): u = Σ c f / ρ per point
(d3q27.cuh moments' order), then differences *inside each leaf* of m³ node-centred points —
central, (u_{i+1} − u_{i−1})/2, at every inner index and second-order one-sided,
(−3u_0 + 4u_1 − u_2)/2 and (3u_{m−1} − 4u_{m−2} + u_{m−3})/2, at the leaf's two faces. Why inside the
leaf: a leaf's face nodes are shared with its neighbour (each stores a copy) and hold the same
pre-collision u, so the leaf's own m³ values define the gradient everywhere in it; no neighbour
table, no coarser or finer leaf across a 2:1 interface, no wall or inlet case enters the stencil,
and every storage of leaves of m³ (each rung, each level) computes the same C. The copies of a
shared node (face, edge, corner) would get C from different one-sided stencils, which differ by
the truncation error (O(Δx²) in u''), and would then collide differently: the copies drift apart
and mass is no longer conserved (measured: Taylor–Green on 2 × 2 × 2 leaves of 9³, τ = 0.5005,
copies 1.3e-4 apart and mass off by 1.9e-5 after 400 steps). So every copy takes its node's
*owner's* C (the copy in the lowest-numbered same-level leaf, ladder.shared_copies, the owner
rule of reference.synchronise): the copies stay equal and mass is conserved to round-off, as
without LES. (Coarse copies of fine-owned nodes are overwritten by the restriction anyway.)
Δ = Δx of the level (1 in its units), as for Smagorinsky; F_CS is a ratio, so the gradient's
scale cancels.

**Across levels** the coupling (levels.rescale, coupling.cu) keeps BGK's molecular factor
α = 2^{s−t}(τ_t − 1)/(τ_s − 1) for every non-equilibrium moment: exact for the shear moments of
MRT without LES; approximate for MRT's fixed-rate moments (their post-collision part scales as
(1 − s_k)/s_k Δt_l, which would want 2^{s−t}) and for LES, where the per-point τ_e would replace
τ_l (the usual approximation of refined LBM-LES; a τ_e-aware rescaling is left open). The same holds for
the CSM.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from . import d3q27

KINDS = ("bgk", "mrt")
LES = ("none", "smagorinsky", "csm")
SQRT2 = math.sqrt(2.0)
CSM_C1 = 1.0 / 22.0  # Kobayashi (2005)'s C' (the CSM's only constant)


@dataclass(frozen=True)
class Collision:
    """The collision model of a run: ``kind`` bgk | mrt, ``les`` none | smagorinsky | csm, ``cs`` the
    Smagorinsky constant C_s (read only with les = smagorinsky; the CSM's coefficient is computed
    per point, :func:`csm_coefficient`)."""

    kind: str = "bgk"
    les: str = "none"
    cs: float = 0.1

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"collision kind {self.kind!r}: one of {KINDS}")
        if self.les not in LES:
            raise ValueError(f"les {self.les!r}: one of {LES}")
        if not (float(self.cs) >= 0.0):
            raise ValueError(f"Smagorinsky constant {self.cs!r} must be ≥ 0")
        object.__setattr__(self, "cs", float(self.cs))

    @property
    def plain(self) -> bool:
        """P0's BGK: the code paths (and bits) with no MRT and no LES."""
        return self.kind == "bgk" and self.les == "none"

    @property
    def mrt(self) -> bool:
        return self.kind == "mrt"

    @property
    def smagorinsky(self) -> bool:
        return self.les == "smagorinsky"

    @property
    def csm(self) -> bool:
        """Kobayashi's coherent-structure model: the collision reads a coefficient per point."""
        return self.les == "csm"


def from_physics(physics) -> Collision:
    """The model of an amr3d preset's ``physics`` (config.Physics: collision, les, smagorinsky)."""
    return Collision(physics.collision, physics.les, physics.smagorinsky)


# ---- the MRT basis --------------------------------------------------------------------------------
def _polynomials(c) -> list[int]:
    """Suga et al.'s 27 basis polynomials at one velocity c (in their order)."""
    x, y, z = (int(v) for v in c)
    e2 = x * x + y * y + z * z
    return [1, x, y, z, e2, 2 * x * x - y * y - z * z, y * y - z * z, x * y, y * z, z * x,
            e2 * x, e2 * y, e2 * z, e2 * e2 * x, e2 * e2 * y, e2 * e2 * z, e2 * e2, e2 ** 3,
            (2 * x * x - y * y - z * z) * e2, (y * y - z * z) * e2, x * y * e2, y * z * e2, z * x * e2,
            x * (y * y - z * z), y * (z * z - x * x), z * (x * x - y * y), x * y * z]


# Per moment row: None = ω (conserved moments: immaterial; shear: the viscosity), a number = that
# fixed rate (Suga et al. 2015; the module docstring says why the energy flux has 1.5).
RATES = (None, None, None, None, 1.54, None, None, None, None, None, 1.5, 1.5, 1.5, 1.83, 1.83, 1.83,
         1.4, 1.61, 1.98, 1.98, 1.98, 1.98, 1.98, 1.74, 1.74, 1.74, 1.74)
SHEAR_ROWS = (5, 6, 7, 8, 9)


@lru_cache(maxsize=8)
def _basis(key: bytes) -> tuple[np.ndarray, np.ndarray]:
    c = np.frombuffer(key, np.int64).reshape(-1, 3)
    cols = [[Fraction(v) for v in col] for col in zip(*[_polynomials(ci) for ci in c])]
    rows: list[list[Fraction]] = []
    for p in cols:  # Gram–Schmidt in exact arithmetic, then the smallest integer multiple
        v = list(p)
        for r in rows:
            coef = sum(a * b for a, b in zip(v, r)) / sum(a * a for a in r)
            v = [a - coef * b for a, b in zip(v, r)]
        den = math.lcm(*(a.denominator for a in v))
        iv = [int(a * den) for a in v]
        g = math.gcd(*iv)
        if g == 0:
            raise ValueError("MRT basis: the polynomials are dependent on this velocity set")
        rows.append([Fraction(a // g) for a in iv])
    m = np.array([[int(a) for a in r] for r in rows], np.int64)
    m.setflags(write=False)
    n = (m * m).sum(axis=1)
    n.setflags(write=False)
    return m, n


def basis(c=None) -> tuple[np.ndarray, np.ndarray]:
    """(M, N): the integer orthogonal moment matrix (27 × 27, rows = moments, columns = the
    velocities of ``c``, default d3q27.C) and the squared row norms N_k = Σ_α M_kα²."""
    c = d3q27.C if c is None else np.asarray(c)
    return _basis(np.ascontiguousarray(c, np.int64).tobytes())


def correction_rows(rates=RATES) -> tuple[int, ...]:
    """The moments whose rate is not ω (the 18 of the correction; conserved and shear excluded)."""
    return tuple(k for k, s in enumerate(rates) if s is not None)


def prelude(c, model: Collision) -> str:
    """#define lines that switch d3q27.cuh's collide to ``model`` (empty for P0's BGK, so the BGK
    module's source, and its compiled bits, stay what they were)."""
    if model is None or model.plain:
        return ""
    out = ""
    if model.mrt:
        m, n = basis(c)
        rows = correction_rows()
        out += "#define NAGARE_MRT 1\n"
        out += f"#define D3Q27_MRT_ROWS {len(rows)}\n"
        out += "#define D3Q27_MRT_M {" + ",".join(str(int(v)) for k in rows for v in m[k]) + "}\n"
        out += "#define D3Q27_MRT_N {" + ",".join(str(int(n[k])) for k in rows) + "}\n"
        out += "#define D3Q27_MRT_S {" + ",".join(repr(float(RATES[k])) for k in rows) + "}\n"
    if model.smagorinsky:
        out += "#define NAGARE_SMAGORINSKY 1\n"
        out += f"#define NAGARE_CS2 {model.cs * model.cs!r}\n"
    if model.csm:
        out += "#define NAGARE_CSM 1\n"
        out += f"#define NAGARE_CSM_C1 {CSM_C1!r}\n"
    return out


# ---- shared pieces (the operation order of d3q27.cuh) ----------------------------------------------
def _smagorinsky_omega(xp, d, inv_rho, om, cs2, t):
    """ω_e = 2ω / (1 + √(1 + 18√2 C_s² ω² |Π^neq| / ρ)) from d = f − f^eq (module docstring).
    ``cs2``: C_s² (a number: Smagorinsky), or the CSM's C per point (an array of f's dtype).
    Sums run in direction order, as d3q27.cuh's."""
    c = d3q27.C
    p = [0, 0, 0, 0, 0, 0]  # xx, yy, zz, xy, xz, yz
    for q in range(d3q27.Q):
        cx, cy, cz = (int(v) for v in c[q])
        for i, (a, b) in enumerate(((cx, cx), (cy, cy), (cz, cz), (cx, cy), (cx, cz), (cy, cz))):
            if a * b:
                p[i] = p[i] + t(a * b) * d[q]
    pxx, pyy, pzz, pxy, pxz, pyz = p
    pn = xp.sqrt(pxx * pxx + pyy * pyy + pzz * pzz + t(2) * (pxy * pxy + pxz * pxz + pyz * pyz))
    k = t(18) * t(SQRT2) * (cs2 if isinstance(cs2, xp.ndarray) else t(cs2))
    x = k * pn * inv_rho * om * om
    return (om + om) / (t(1) + xp.sqrt(t(1) + x))


def _mrt_correction(xp, d, om, t, rates):
    """corr[α] = Σ_k M_kα λ_k Δm_k over the rows whose rate differs from ω (module docstring)."""
    m, n = basis()
    rows = correction_rows(RATES)  # the kernels' rows: an override of a rate to ω gives λ = 0 there
    dm = []
    for k in rows:
        acc = 0
        for q in range(d3q27.Q):
            if m[k, q]:
                acc = acc + t(m[k, q]) * d[q]
        s = om if rates[k] is None else t(rates[k])
        dm.append(acc * ((s - om) * (t(1) / t(n[k]))))
    corr = []
    for q in range(d3q27.Q):
        acc = 0
        for dk, k in zip(dm, rows):
            if m[k, q]:
                acc = acc + t(m[k, q]) * dk
        corr.append(acc)
    return corr


# ---- the operators --------------------------------------------------------------------------------
def collide_kernels(xp, f, omega, accel, model: Collision, rates=RATES, coef=None):
    """The operator ``model`` on pre-collision f[27, ...] (a new array) in the kernels' operation
    order: leafgrid.collide's moments and equilibrium, then d3q27.cuh's Smagorinsky and MRT
    steps. ``omega`` = 1/τ of the level (a scalar of f's dtype). ``rates``: per moment row as
    :data:`RATES` (tests set them all to None = ω). ``coef``: the CSM's C per point (shape
    f.shape[1:], :func:`csm_coefficient`), needed with les = csm."""
    t = f.dtype.type
    c = d3q27.C
    Q = d3q27.Q
    w = xp.asarray(d3q27.W, dtype=f.dtype).reshape((-1,) + (1,) * (f.ndim - 1))
    rho = f.sum(axis=0)
    mom = [sum(int(c[q, a]) * f[q] for q in range(Q) if c[q, a]) for a in range(3)]
    ux, uy, uz = (mm / rho for mm in mom)
    usq = 1.5 * (ux * ux + uy * uy + uz * uz)
    d = []
    for q in range(Q):
        cu = int(c[q, 0]) * ux + int(c[q, 1]) * uy + int(c[q, 2]) * uz
        feq = w[q] * rho * (1 + 3 * cu + 4.5 * cu * cu - usq)
        d.append(f[q] - feq)
    om = t(omega)
    if model.smagorinsky:
        om = _smagorinsky_omega(xp, d, t(1) / rho, om, model.cs * model.cs, t)
    elif model.csm:
        om = _smagorinsky_omega(xp, d, t(1) / rho, om, _coef(xp, f, coef), t)
    corr = _mrt_correction(xp, d, om, t, rates) if model.mrt else None
    out = xp.empty_like(f)
    ax, ay, az = accel
    for q in range(Q):
        ca = float(c[q, 0] * ax + c[q, 1] * ay + c[q, 2] * az)
        post = f[q] - om * d[q]
        if corr is not None:
            post = post - corr[q]
        out[q] = post + 3 * w[q] * rho * ca
    return out


def _bgk_smagorinsky(xp, f, tau, accel, cs2):
    """BGK with ω_e, in d3q27.collide's operation order (so C_s = 0 gives its bits); ``cs2`` as
    :func:`_smagorinsky_omega`'s."""
    t = f.dtype.type
    rho, ux, uy, uz = d3q27.velocity(xp, f)
    usq = ux * ux + uy * uy + uz * uz
    d = [f[a] - d3q27.equilibrium_a(a, rho, ux, uy, uz, usq) for a in range(d3q27.Q)]
    om = _smagorinsky_omega(xp, d, t(1) / rho, t(1.0 / tau), cs2, t)
    out = xp.empty_like(f)
    for a in range(d3q27.Q):
        post = f[a] - om * d[a]
        fa = d3q27.force_a(a, rho, accel)
        out[a] = post if fa is None else post + fa
    return out


def _coef(xp, f, coef):
    """The CSM's coefficient array for f[27, ...], checked (it comes from a pre-pass over the leaves)."""
    if coef is None:
        raise ValueError("les = csm: the collision needs the coefficient C per point (collision.csm_coefficient)")
    coef = xp.asarray(coef, dtype=f.dtype)
    if coef.shape != f.shape[1:]:
        raise ValueError(f"les = csm: C has shape {coef.shape}, the populations {f.shape[1:]} points")
    return coef


def collide(xp, f, tau: float, accel=(0.0, 0.0, 0.0), model: Collision | None = None, coef=None):
    """The reference's collision (reference.py): pre-collision f[27, ...] → post-collision (new
    array) with the level's molecular τ and acceleration. P0's BGK is d3q27.collide, unchanged
    bit for bit; BGK + Smagorinsky (or CSM) follows its operation order; MRT (± LES) is
    :func:`collide_kernels` with ω = 1/τ. ``coef``: the CSM's C per point (les = csm)."""
    if model is None or model.plain:
        return d3q27.collide(xp, f, tau, accel)
    if not model.mrt:
        cs2 = _coef(xp, f, coef) if model.csm else model.cs * model.cs
        return _bgk_smagorinsky(xp, f, tau, accel, cs2)
    return collide_kernels(xp, f, f.dtype.type(1.0 / tau), accel, model, coef=coef)


# ---- the coherent-structure model's pre-pass (module docstring; d3q27.cuh, ladder.cu) -------------
def csm_velocity(xp, f):
    """(ux, uy, uz) of pre-collision f[27, ...] in d3q27::moments' order: the sums in direction
    order, then u = m · (1/ρ)."""
    t = f.dtype.type
    c = d3q27.C
    r = f[0]
    for q in range(1, d3q27.Q):
        r = r + f[q]
    inv = t(1) / r
    out = []
    for a in range(3):
        m = None
        for q in range(d3q27.Q):
            if c[q, a]:
                m = (t(c[q, a]) * f[q]) if m is None else m + t(c[q, a]) * f[q]
        out.append(m * inv)
    return tuple(out)


def leaf_derivative(xp, u, axis: int):
    """∂u/∂(index) along ``axis`` of u[..., m, m, m] (one leaf per leading index, axes k, j, i) at
    every node: (u_{i+1} − u_{i−1})·½ inside, and at the leaf's faces the second-order one-sided
    (−3u_0 + 4u_1 − u_2)/2 and (3u_{m−1} − 4u_{m−2} + u_{m−3})/2 written with differences,
    (4(u_1 − u_0) − (u_2 − u_0))·½ and (4(u_{m−1} − u_{m−2}) − (u_{m−1} − u_{m−3}))·½, so a uniform
    field gives exactly 0 (exact for quadratic fields; the kernel's order)."""
    t = u.dtype.type
    ax = axis % u.ndim
    m = u.shape[ax]
    if m < 3:
        raise ValueError(f"CSM gradient: leaves need at least 3 points per edge, not {m}")

    def at(sl):
        return (slice(None),) * ax + (sl,)
    h = t(0.5)
    out = xp.empty_like(u)
    out[at(slice(1, m - 1))] = (u[at(slice(2, m))] - u[at(slice(0, m - 2))]) * h
    out[at(0)] = (t(4) * (u[at(1)] - u[at(0)]) - (u[at(2)] - u[at(0)])) * h
    out[at(m - 1)] = (t(4) * (u[at(m - 1)] - u[at(m - 2)]) - (u[at(m - 1)] - u[at(m - 3)])) * h
    return out


def csm_gradient(xp, ux, uy, uz):
    """A[a][b] = ∂u_b/∂x_a (level lattice units) of u on leaves [..., m, m, m] (k, j, i = z, y, x)."""
    u = (ux, uy, uz)
    return [[leaf_derivative(xp, u[b], -1 - a) for b in range(3)] for a in range(3)]


def csm_function(xp, A):
    """F_CS = Q/E = −(A_ab A_ba)/(A_ab A_ab), clipped to [−1, 1]; 0 where E = 0 (sums in the
    kernel's order: a, then b)."""
    t = A[0][0].dtype.type
    e = s = None
    for a in range(3):
        for b in range(3):
            ee, ss = A[a][b] * A[a][b], A[a][b] * A[b][a]
            e, s = (ee, ss) if e is None else (e + ee, s + ss)
    pos = e > t(0)
    F = xp.where(pos, -s / xp.where(pos, e, t(1)), t(0))
    return xp.minimum(xp.maximum(F, t(-1)), t(1))


def csm_from_function(xp, F):
    """C = C₁ |F|^{3/2} (1 − F), in the kernel's order."""
    t = F.dtype.type
    fa = xp.abs(F)
    return t(CSM_C1) * (fa * xp.sqrt(fa)) * (t(1) - F)


def csm_coefficient(xp, f, copies=None):
    """The CSM's C per point (shape f.shape[1:]) from pre-collision populations f[27, ..., m, m, m]
    stored as leaves of m³ node-centred points (the same populations the collision sees).
    ``copies`` (dst, src): flat point ids of the copies of shared nodes and their owners
    (ladder.shared_copies): C[dst] = C[src], so every copy of a node collides alike."""
    A = csm_gradient(xp, *csm_velocity(xp, f))
    coef = csm_from_function(xp, csm_function(xp, A))
    if copies is not None and len(copies[0]):
        flat = coef.reshape(-1)
        flat[xp.asarray(copies[0])] = flat[xp.asarray(copies[1])]
    return coef

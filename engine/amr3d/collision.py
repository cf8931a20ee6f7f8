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

**Across levels** the coupling (levels.rescale, coupling.cu) keeps BGK's molecular factor
α = 2^{s−t}(τ_t − 1)/(τ_s − 1) for every non-equilibrium moment: exact for the shear moments of
MRT without LES; approximate for MRT's fixed-rate moments (their post-collision part scales as
(1 − s_k)/s_k Δt_l, which would want 2^{s−t}) and for LES, where the per-point τ_e would replace
τ_l (the usual approximation of refined LBM-LES; a τ_e-aware rescaling is left open).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from . import d3q27

KINDS = ("bgk", "mrt")
LES = ("none", "smagorinsky")
SQRT2 = math.sqrt(2.0)


@dataclass(frozen=True)
class Collision:
    """The collision model of a run: ``kind`` bgk | mrt, ``les`` none | smagorinsky, ``cs`` the
    Smagorinsky constant C_s (read only with les = smagorinsky)."""

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
        """P0's BGK: the code paths (and bits) of before this module."""
        return self.kind == "bgk" and self.les == "none"

    @property
    def mrt(self) -> bool:
        return self.kind == "mrt"

    @property
    def smagorinsky(self) -> bool:
        return self.les == "smagorinsky"


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
    return out


# ---- shared pieces (the operation order of d3q27.cuh) ----------------------------------------------
def _smagorinsky_omega(xp, d, inv_rho, om, cs: float, t):
    """ω_e = 2ω / (1 + √(1 + 18√2 C_s² ω² |Π^neq| / ρ)) from d = f − f^eq (module docstring).
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
    k = t(18) * t(SQRT2) * t(cs * cs)
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
def collide_kernels(xp, f, omega, accel, model: Collision, rates=RATES):
    """The operator ``model`` on pre-collision f[27, ...] (a new array) in the kernels' operation
    order: leafgrid.collide's moments and equilibrium, then d3q27.cuh's Smagorinsky and MRT
    steps. ``omega`` = 1/τ of the level (a scalar of f's dtype). ``rates``: per moment row as
    :data:`RATES` (tests set them all to None = ω)."""
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
        om = _smagorinsky_omega(xp, d, t(1) / rho, om, model.cs, t)
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


def _bgk_smagorinsky(xp, f, tau, accel, cs):
    """BGK with ω_e, in d3q27.collide's operation order (so C_s = 0 gives its bits)."""
    t = f.dtype.type
    rho, ux, uy, uz = d3q27.velocity(xp, f)
    usq = ux * ux + uy * uy + uz * uz
    d = [f[a] - d3q27.equilibrium_a(a, rho, ux, uy, uz, usq) for a in range(d3q27.Q)]
    om = _smagorinsky_omega(xp, d, t(1) / rho, t(1.0 / tau), cs, t)
    out = xp.empty_like(f)
    for a in range(d3q27.Q):
        post = f[a] - om * d[a]
        fa = d3q27.force_a(a, rho, accel)
        out[a] = post if fa is None else post + fa
    return out


def collide(xp, f, tau: float, accel=(0.0, 0.0, 0.0), model: Collision | None = None):
    """The reference's collision (reference.py): pre-collision f[27, ...] → post-collision (new
    array) with the level's molecular τ and acceleration. P0's BGK is d3q27.collide, unchanged
    bit for bit; BGK + Smagorinsky follows its operation order; MRT (± Smagorinsky) is
    :func:`collide_kernels` with ω = 1/τ."""
    if model is None or model.plain:
        return d3q27.collide(xp, f, tau, accel)
    if not model.mrt:
        return _bgk_smagorinsky(xp, f, tau, accel, model.cs)
    return collide_kernels(xp, f, f.dtype.type(1.0 / tau), accel, model)

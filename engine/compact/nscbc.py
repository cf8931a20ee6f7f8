"""Navier–Stokes characteristic boundary conditions (Poinsot & Lele 1992, J. Comput. Phys. 101:104)
for the 2D compressible solver of engine/compact/navier_stokes.py.

At a boundary point the normal (n) part of the inviscid flux divergence is rewritten through the
amplitudes of the waves crossing the boundary (LODI; u_n the normal, u_t the tangential velocity):

    L1 = (u_n - c)(∂p/∂n - ρc ∂u_n/∂n)     L2 = u_n (c² ∂ρ/∂n - ∂p/∂n)
    L3 = u_n ∂u_t/∂n                         L5 = (u_n + c)(∂p/∂n + ρc ∂u_n/∂n)
    d1 = (L2 + (L5 + L1)/2)/c²,  d2 = (L5 + L1)/2,  d3 = (L5 - L1)/(2ρc),  d4 = L3
    ∂F_n/∂n (conservative ρ, ρu_n, ρu_t, ρE) = (d1, u_n d1 + ρ d3, u_t d1 + ρ d4,
                                                 |u|²/2 d1 + d2/(γ-1) + ρ u_n d3 + ρ u_t d4).

Outgoing waves (those whose speed points out of the domain) are computed from the interior with
one-sided differences; incoming ones are prescribed — that is the boundary condition:

- the incoming acoustic wave (L1 at a max-side boundary, L5 at a min-side one) relaxes the pressure
  towards p∞: L = K (p - p∞), K = σ (1 - M_n²) c / L_n (Poinsot & Lele's partially non-reflecting
  outflow, after Rudy & Strikwerda; σ = 0.25). M_n = |u_n|/c is the *local normal* Mach number: at a
  side boundary of a supersonic stream (u_n ≈ 0) P&L's "maximum Mach number" would make K negative;
  L_n is the domain's length along the normal;
- every other incoming wave (entropy/vorticity when u_n points inwards, the second acoustic wave of a
  supersonic inflow) is set to 0 (non-reflecting). A supersonic outflow has no incoming wave: the
  condition is then the one-sided scheme itself.

Viscous conditions at an outflow (P&L Table): ∂τ_nt/∂n = 0 and ∂q_n/∂n = 0, so the viscous normal flux
divergence there is (0, ∂τ_nn/∂n, 0, u_n ∂τ_nn/∂n + τ_nn ∂u_n/∂n + τ_nt ∂u_t/∂n).

The normal derivatives at the boundary point are explicit one-sided fourth-order differences
(f'_0 = (-25 f_0 + 48 f_1 - 36 f_2 + 16 f_3 - 3 f_4)/12h, the order of P4's closure row): they need
ρ and p, which the compact passes do not differentiate (only u, v, T and the fluxes), and cost five
points per boundary point instead of another compact pass.
"""
from __future__ import annotations

ONE_SIDED = (-25.0 / 12.0, 4.0, -3.0, 4.0 / 3.0, -0.25)
SIDES = {"west": ("x", -1), "east": ("x", +1), "south": ("y", -1), "north": ("y", +1)}


def line(a, side: str, k: int = 0):
    """The boundary line k points into the domain from ``side`` of a (…, ny, nx) array (a view)."""
    axis, s = SIDES[side]
    i = k if s < 0 else -1 - k
    return a[..., :, i] if axis == "x" else a[..., i, :]


def normal_derivative(f, side: str, h: float):
    """∂f/∂(axis) at the boundary line of ``side`` (explicit one-sided, fourth order)."""
    s = SIDES[side][1]
    c0, c1, c2, c3, c4 = ONE_SIDED
    r = c0 * line(f, side, 0) + c1 * line(f, side, 1) + c2 * line(f, side, 2) + c3 * line(f, side, 3) \
        + c4 * line(f, side, 4)
    return r * (-s / h)  # west/south: +r/h; east/north: the mirrored stencil, -r/h


def normal_flux_derivative(xp, side: str, *, rho, un, ut, p, drho, dun, dut, dp, gamma: float, sigma: float,
                           length: float, p_inf: float):
    """The characteristic ∂F_n/∂n (inviscid) at the boundary points of ``side``: a tuple
    (mass, normal momentum, tangential momentum, energy) of line arrays."""
    s = SIDES[side][1]
    c = xp.sqrt(gamma * p / rho)
    rc = rho * c
    lam1, lam5 = un - c, un + c
    l1 = lam1 * (dp - rc * dun)
    l2 = un * (c * c * drho - dp)
    l3 = un * dut
    l5 = lam5 * (dp + rc * dun)
    # incoming: the wave speed points into the domain (s·λ < 0)
    mn2 = (un / c) ** 2
    k = sigma * xp.maximum(1.0 - mn2, 0.0) * c / length
    relax = k * (p - p_inf)
    if s > 0:
        l1 = xp.where(lam1 < 0, relax, l1)
        l5 = xp.where(lam5 < 0, 0.0, l5)
    else:
        l5 = xp.where(lam5 > 0, relax, l5)
        l1 = xp.where(lam1 > 0, 0.0, l1)
    entering = (s * un) < 0
    l2 = xp.where(entering, 0.0, l2)
    l3 = xp.where(entering, 0.0, l3)
    d1 = (l2 + 0.5 * (l5 + l1)) / (c * c)
    d2 = 0.5 * (l5 + l1)
    d3 = (l5 - l1) / (2.0 * rc)
    d4 = l3
    energy = 0.5 * (un * un + ut * ut) * d1 + d2 / (gamma - 1.0) + rho * un * d3 + rho * ut * d4
    return d1, un * d1 + rho * d3, ut * d1 + rho * d4, energy


def viscous_normal_flux_derivative(*, un, ut, tnn, tnt, dtnn, dun, dut):
    """∂F_v,n/∂n at an outflow under P&L's conditions ∂τ_nt/∂n = 0, ∂q_n/∂n = 0 (same tuple order)."""
    zero = 0.0 * un
    return zero, dtnn, zero, un * dtnn + tnn * dun + tnt * dut

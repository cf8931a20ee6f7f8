"""The largest stable time step of a compact preset (classical RK4), from the preset alone.

Linear (von Neumann) analysis of the periodic interior scheme: a Fourier mode e^{ikx} of the
semi-discrete system φ_t = Lφ is multiplied by the RK4 polynomial R(z) = 1 + z + z²/2 + z³/6 + z⁴/24,
z = Δt·λ(k), every step; the step is stable when |R(z)| ≤ 1 for every resolved k.

- Advection with speed a along an axis of spacing h: λ = -i a k'(kh)/h with k' the scheme's
  modified wavenumber (schemes.modified_wavenumber; complex for the dissipative scheme on its
  Lax–Friedrichs split, sampled over every split weight). ``advective_number(scheme)`` is the
  largest σ with |R(-σ i k')| ≤ 1 for all kh: Δt ≤ σ h/|a| (compact6: σ = 2√2/max k' ≈ 1.42;
  dissipative5: ≈ 1.42 too). Several axes add their rates: Δt ≤ 1/Σ(|a_axis|/(σ h_axis)) — exact
  for the rotating cone (the largest |u| and |v| meet in the corners) and an upper bound of the
  rate otherwise.
- Navier–Stokes (Euler part): the rate max|u|/h_x + max|v|/h_y + max c·√(1/h_x² + 1/h_y²) (an
  acoustic wave runs along any direction) with the speeds bounded from the preset's initial state
  (free stream plus the largest disturbance its initial.kind can add, in closed form: no grid
  array is built); and the viscous and heat fluxes (two compact first derivatives in a row: λ = -ν k'²/h² per axis) with
  ν = max(4/3, γ/Pr)·μ/ρ∞ (normal stress; heat diffusivity γμ/(Pr ρ)); λ on the negative real axis
  is stable for Δt|λ| ≤ 2.785. The two are combined as rates: 1/Δt ≤ 1/Δt_adv + 1/Δt_visc.

The preset loader (config.CompactPreset) refuses ``physics.dt`` above ``SAFETY`` × this limit.
SAFETY = 1: the limit is exact for periodic linear advection (above it the highest resolved mode
grows every step), and for Navier–Stokes it is already conservative (speeds and diffusivities at
their largest, rates added). Boundary closures, nonlinearity and a vortex that speeds up can make
a Δt somewhat *below* the limit diverge; the run's sanity bounds catch that (exit 3).
"""
from __future__ import annotations

import math
from functools import cache

import numpy as np

from . import schemes

SAFETY = 1.0
_KH = np.linspace(0.0, math.pi, 2049)


def rk4_amplification(z):
    return 1.0 + z + z * z / 2.0 + z ** 3 / 6.0 + z ** 4 / 24.0


def _largest_stable(zs: np.ndarray) -> float:
    """The largest σ with |R(σ z)| ≤ 1 for every z of ``zs`` (bisection; the region is star-shaped
    from 0 along each of these rays for the sampled sets used here)."""
    lo, hi = 0.0, 8.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.all(np.abs(rk4_amplification(mid * zs)) <= 1.0 + 1e-12):
            lo = mid
        else:
            hi = mid
    return lo


@cache
def advective_number(scheme: str) -> float:
    """σ: Δt ≤ σ h/|a| for one axis of advection at speed a (periodic interior)."""
    if scheme == "compact6":
        zs = -1j * schemes.modified_wavenumber(_KH, 0.0)
    else:  # Lax–Friedrichs split with λ = max|a|: weights ½(s ± 1) of the two upwind halves, s = a/λ
        kp = schemes.modified_wavenumber(_KH, schemes.upwind_delta(+1))
        km = schemes.modified_wavenumber(_KH, schemes.upwind_delta(-1))
        zs = np.concatenate([-1j * ((1 + s) / 2 * kp + (s - 1) / 2 * km) for s in np.linspace(-1.0, 1.0, 17)])
    return _largest_stable(zs)


@cache
def viscous_number() -> float:
    """σ_v: Δt ≤ σ_v/Σ(ν/h²) for diffusion by two compact6 first derivatives in a row."""
    kmax = schemes.max_modified_wavenumber(0.0)
    return _largest_stable(-np.linspace(0.0, 1.0, 1025)) / (kmax * kmax)


def ns_wave_speeds(preset) -> tuple[float, float, float]:
    """Upper bounds of max|u|, max|v| and max c over the preset's initial Navier–Stokes state
    (navier_stokes.initial_primitives), from closed forms of each initial.kind."""
    ph, init = preset.physics, preset.initial
    ang = math.radians(ph.flow_angle)
    u_inf, v_inf = abs(ph.mach * math.cos(ang)), abs(ph.mach * math.sin(ang))
    du, c = 0.0, 1.0
    if init.kind == "vortex":  # |∇ψ| of ψ = Γ exp(-r²/2r_c²) peaks at r = r_c; p ≤ p∞ there, so c ≤ 1
        du = abs(init.circulation) / init.core * math.exp(-0.5)
    elif init.kind == "isentropic-vortex":  # u_θ peaks at |ε| (r = R); c ≤ 1
        du = abs(init.amplitude)
    elif init.kind == "acoustic-pulse":  # δu = δp = A e^{…}; c² = γ(p∞ + δp)/(1 + δp)
        a = init.amplitude
        du = abs(a)
        if a > 0:
            c = math.sqrt((1.0 + ph.gamma * a) / (1.0 + a))
    elif init.kind == "random":  # ns_engine.random_state: ±2.5 % of smooth noise on ρ, u, v, p
        du = 0.025
        c = math.sqrt(1.025 / 0.975)
    return u_inf + du, v_inf + du, c


def limits(preset) -> dict:
    """{"dt": the limit, "advective": Δt_adv, "viscous": Δt_visc or inf, "speeds": (a_x, a_y, c),
    "h": (h_x, h_y)} of a time-stepped compact preset; None for the derivative benchmark (no time
    integration)."""
    ph = preset.physics
    if ph.problem == "derivative":
        return None
    hx = preset.spacing("x")
    hy = preset.spacing("y") if ph.problem != "advection1d" else math.inf
    g = preset.grid
    c = 0.0
    if ph.problem == "advection1d":
        ax, ay = abs(ph.speed), 0.0
    elif ph.problem == "rotation2d":  # u = -ωy, v = ωx over the closed grid's coordinates
        ax = abs(ph.omega) * max(abs(g.y0), abs(g.y1))
        ay = abs(ph.omega) * max(abs(g.x0), abs(g.x1))
    else:
        ax, ay, c = ns_wave_speeds(preset)
    sigma = advective_number("compact6" if ph.problem == "navier-stokes" else ph.scheme)
    inv_hy = 1.0 / hy if math.isfinite(hy) else 0.0
    rate = ax / hx + ay * inv_hy + c * math.sqrt(1.0 / hx ** 2 + inv_hy ** 2)
    adv = sigma / rate if rate > 0 else math.inf
    visc = math.inf
    if ph.problem == "navier-stokes" and ph.viscous:
        nu = max(4.0 / 3.0, ph.gamma / ph.prandtl) / ph.reynolds
        visc = viscous_number() / (nu * (1.0 / hx ** 2 + 1.0 / hy ** 2))
    dt = 1.0 / (1.0 / adv + 1.0 / visc) if math.isfinite(adv) or math.isfinite(visc) else math.inf
    return {"dt": dt, "advective": adv, "viscous": visc, "speeds": (ax, ay, c), "h": (hx, hy)}


def describe_refusal(preset) -> str | None:
    """The one-line reason ``physics.dt`` is refused (above SAFETY × the limit), or None."""
    lim = limits(preset)
    if lim is None:
        return None
    dt = preset.physics.dt
    if dt <= SAFETY * lim["dt"]:
        return None
    ph = preset.physics
    (ax, ay, c), (hx, hy) = lim["speeds"], lim["h"]
    if ph.problem == "advection1d":
        why = f"|c| = {ax:.4g}, h = {hx:.4g}"
    elif ph.problem == "rotation2d":
        why = f"max|u| = {ax:.4g}, max|v| = {ay:.4g}, h = {hx:.4g} × {hy:.4g}"
    else:
        why = f"max|u| = {ax:.4g}, max|v| = {ay:.4g}, max c = {c:.4g}, h = {hx:.4g} × {hy:.4g}"
    scheme = "compact6" if ph.problem == "navier-stokes" else ph.scheme
    parts = f"advective {lim['advective']:.3g}"
    if math.isfinite(lim["viscous"]):
        parts += f", viscous {lim['viscous']:.3g} at reynolds = {ph.reynolds:g}"
    return (f"physics.dt = {dt:g} exceeds the RK4 stability limit {lim['dt']:.3g} of this {ph.problem} preset "
            f"({scheme}, {why}; {parts}): use physics.dt ≤ {SAFETY * lim['dt']:.3g}")

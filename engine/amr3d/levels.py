"""Level scaling: acoustic scaling with sub-cycling, and the rescaling of the non-equilibrium part.

Level l has Δx_l = Δx_0 / 2^l and Δt_l = Δt_0 / 2^l (acoustic scaling: c = Δx/Δt and the lattice
Mach number are the same on every level). The physical viscosity ν = c_s² (τ_l − ½) Δx_l²/Δt_l is
the same on every level when τ_l − ½ = 2^l (τ_0 − ½), i.e. τ_{l+1} − ½ = 2 (τ_l − ½). A body
acceleration a (physical) is a_l = a Δt_l²/Δx_l = a_0 / 2^l in level-l lattice units. Velocities
in lattice units are level independent.

Non-equilibrium rescaling (Dupuis & Chopard 2003, in the post-collision form of Filippova & Hänel
1998): by Chapman–Enskog the pre-collision non-equilibrium part is f^neq ≈ −τ_l Δt_l w ρ 3 Q:∇u,
so it scales as τ_l Δt_l; the state of this code is post-collision, f* = f^eq + (1 − 1/τ) f^neq + F,
whose non-equilibrium part scales as (τ_l − 1) Δt_l. Moving a post-collision population from
level s to level t therefore keeps f^eq, swaps the force term, and multiplies the rest by
    α_{s→t} = (τ_t − 1) Δt_t / ((τ_s − 1) Δt_s) = 2^{s−t} (τ_t − 1)/(τ_s − 1).
The factor is singular when τ_s = 1 (a BGK post-collision state at τ = 1 is exactly f^eq + F: the
gradient information is gone). ``check_taus`` refuses levels with |τ_l − 1| < 0.05 on a tree with
more than one level.
"""
from __future__ import annotations

from . import d3q27

TAU_ONE_GAP = 0.05


def tau_at(tau0: float, level: int) -> float:
    """τ_l with τ_l − ½ = 2^l (τ_0 − ½) (same physical viscosity on every level)."""
    return 0.5 + (tau0 - 0.5) * 2.0**level


def accel_at(accel0, level: int) -> tuple[float, float, float]:
    """Body acceleration in level-l lattice units: a_0 / 2^l."""
    s = 2.0**-level
    return tuple(float(a) * s for a in accel0)


def alpha(tau0: float, src: int, dst: int) -> float:
    """Post-collision non-equilibrium factor from level ``src`` to level ``dst``."""
    ts, tt = tau_at(tau0, src), tau_at(tau0, dst)
    return 2.0 ** (src - dst) * (tt - 1.0) / (ts - 1.0)


def check_taus(tau0: float, levels) -> None:
    levels = sorted(set(int(x) for x in levels))
    if tau0 <= 0.5:
        raise ValueError(f"τ_0 = {tau0} must exceed 1/2")
    if len(levels) < 2:
        return
    for lv in levels:
        t = tau_at(tau0, lv)
        if abs(t - 1.0) < TAU_ONE_GAP:
            raise ValueError(
                f"τ on level {lv} is {t:.4f}: within {TAU_ONE_GAP} of 1, where the post-collision "
                "non-equilibrium rescaling between levels is singular (docs/amr3d.md); pick another τ_0")


def rescale(xp, f, tau0: float, src: int, dst: int, accel0=(0.0, 0.0, 0.0)):
    """Post-collision populations f (Q, ...) of level ``src`` expressed on level ``dst``:
    f_t = f^eq(ρ, u + (a_s − a_t)/2) + F_t + α_{s→t} (f − F_s − f^eq(ρ, u)), with ρ, u the moments
    of f − F_s. The force term carries momentum ρ a_s; the remainder has the pre-collision
    velocity u = u_phys − a_s/2 (P0's forcing: u_phys is time-centred), which on level t is
    u_phys − a_t/2."""
    if src == dst:
        return f
    a_s, a_t = accel_at(accel0, src), accel_at(accel0, dst)
    t = f.dtype.type
    rho = d3q27.moments(xp, f)[0]
    g = f - d3q27.force(xp, rho, a_s) if any(a_s) else f
    rho, ux, uy, uz = d3q27.velocity(xp, g)
    feq = d3q27.equilibrium(xp, rho, ux, uy, uz)
    neq = t(alpha(tau0, src, dst)) * (g - feq)
    if not (any(a_s) or any(a_t)):
        return feq + neq
    # the equilibrium velocity is the physical (time-centred) one minus a/2 of the level
    sh = [t(0.5 * (s - d)) for s, d in zip(a_s, a_t)]
    return d3q27.equilibrium(xp, rho, ux + sh[0], uy + sh[1], uz + sh[2]) + neq + d3q27.force(xp, rho, a_t)

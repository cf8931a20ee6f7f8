"""2D compressible Navier–Stokes with compact derivatives (P4's test 4): the time derivative of the
conservative state U = (ρ, ρu, ρv, ρE) (stack (4, ny, nx)), its initial states and the filter step.

    U_t + ∂F/∂x + ∂G/∂y = 0,
    F = (ρu, ρu² + p - τxx, ρuv - τxy, (ρE + p)u - uτxx - vτxy + qx),
    G = (ρv, ρuv - τxy, ρv² + p - τyy, (ρE + p)v - uτxy - vτyy + qy),
    E = |u|²/2 + p/(ρ(γ-1)),  τxx = μ(4/3 ux - 2/3 vy),  τyy = μ(4/3 vy - 2/3 ux),  τxy = μ(uy + vx),
    q = -κ ∇T,  T = γp/ρ (= c²),  κ = μ c_p/Pr, c_p = 1/(γ-1)   (units ρ∞ = c∞ = l = 1; μ = 1/Re).

Why conservative: on a periodic grid a compact derivative sums to zero exactly (1ᵀA = (1+2α)1ᵀ and
the explicit side's columns sum to zero), so Σ U is conserved to round-off (tested), and the flux
form is what shocks would need; the characteristic boundary terms (nscbc.py) are written in the
same conservative variables (P&L's eq. 29), so nothing converts the state back and forth.

Each evaluation is two compact passes, P4's 14 derivatives:
1. velocity and temperature gradients: ∂/∂x and ∂/∂y of the stack (u, v, T) — 6 (skipped for Euler);
2. the flux divergence: ∂/∂x of the stack F (4) and ∂/∂y of the stack G (4) — 8.
With ``batching = stacked`` each stack is one batch of tridiagonal systems (4 solves per evaluation);
with ``per-variable`` each variable is its own (14); with ``grouped`` (P4's 8 + 6) each pass is one
batch — the x-lines of (u, v, T) with its transposed y-lines, the x-lines of F with G's transposed
y-lines (2 solves per evaluation; square grids with the same closures on both axes and
``y-direction = transpose``: batched.grouping_reason). Under ``grouped`` the stacks (u, v, T) and F
and the x-derivatives live in the groups' own buffers (batched.GroupedDerivative.x_in / x_out), so
no copy moves them in or out.

Around the two passes the evaluation is pointwise: primitives and Euler fluxes, the viscous stresses
and their flux terms, out = -(DF + DG) and the characteristic boundary lines. ``pointwise = array`` (the
reference) writes them as whole-array operations (``_euler_array``, ``_viscous_array``, ``_boundaries``);
``pointwise = fused`` (GPU) runs the same arithmetic as 3 kernels (ns_pointwise.py).
"""
from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np

from ..errors import VariantUnavailable
from . import nscbc
from .batched import GroupedDerivative, StackDerivative, grouping_reason
from .filter import Filter
from .ns_pointwise import FusedPointwise

SIDE_AXES = {"west": "x", "east": "x", "south": "y", "north": "y"}


# ---- gas and states ----------------------------------------------------------------------------
class Gas:
    def __init__(self, physics):
        self.gamma = float(physics.gamma)
        self.viscous = bool(physics.viscous)
        self.mu = 1.0 / physics.reynolds if self.viscous else 0.0
        self.kappa = self.mu / ((self.gamma - 1.0) * physics.prandtl)
        self.p_inf = 1.0 / self.gamma
        ang = math.radians(physics.flow_angle)
        self.u_inf = physics.mach * math.cos(ang)
        self.v_inf = physics.mach * math.sin(ang)


def vortex_dip(init) -> float:
    """P4's vortex pressure dip ρ∞Γ²/(2r_c²) (units ρ∞ = c∞ = l = 1)."""
    return init.circulation ** 2 / (2.0 * init.core ** 2)


def initial_primitives(preset, x, y):
    """(ρ, u, v, p) of the preset's initial state on host coordinates x (1, nx), y (ny, 1), float64."""
    gas, init = Gas(preset.physics), preset.initial
    shape = np.broadcast_shapes(x.shape, y.shape)
    one = np.ones(shape)
    rho, u, v, p = one.copy(), gas.u_inf * one, gas.v_inf * one, gas.p_inf * one
    xc, yc = init.center
    dx, dy = x - xc, y - yc
    r2 = dx * dx + dy * dy
    kind = init.kind
    if kind == "vortex":
        # ψ = Γ exp(-r²/2r_c²), u = U∞ + ∂ψ/∂y, v = -∂ψ/∂x; p from the radial momentum balance
        # dp/dr = ρ∞ u_θ²/r (P4's p - p∞ = -ρΓ²/(2r_c²) exp(-r²/r_c²)); ρ isentropic, ρ = (p/p∞)^(1/γ)
        # (so the vortex carries no entropy spot and the density field shows the pressure dip).
        g, rc = init.circulation, init.core
        e = np.exp(-r2 / (2 * rc * rc))
        u = u - g * dy / (rc * rc) * e
        v = v + g * dx / (rc * rc) * e
        p = p - g * g / (2 * rc * rc) * e * e
        rho = (p / gas.p_inf) ** (1.0 / gas.gamma)
    elif kind == "isentropic-vortex":
        # exact steady Euler vortex (homentropic): u_θ = ε (r/R) exp((1 - r²/R²)/2),
        # c² = 1 - (γ-1)/2 ε² exp(1 - r²/R²) from dh/dr = u_θ²/r, ρ = (c²)^(1/(γ-1)), p = ρc²/γ
        eps, big_r = init.amplitude, init.core
        e = np.exp(0.5 * (1.0 - r2 / (big_r * big_r)))
        u = u - eps * dy / big_r * e
        v = v + eps * dx / big_r * e
        c2 = 1.0 - 0.5 * (gas.gamma - 1.0) * eps * eps * e * e
        rho = c2 ** (1.0 / (gas.gamma - 1.0))
        p = rho * c2 / gas.gamma
    elif kind == "acoustic-pulse":
        # a right-running simple wave (linear): δp = A exp(-(x-xc)²/w²), δu = δp/(ρc), δρ = δp/c²
        dp = init.amplitude * np.exp(-dx * dx / (init.core * init.core)) * one
        p, u, rho = p + dp, u + dp, rho + dp
    elif kind != "uniform":
        raise ValueError(f"no navier-stokes initial state {kind!r}")
    return rho * one, u * one, v * one, p * one


def conservative(xp, rho, u, v, p, gamma: float, out):
    out[0] = rho
    out[1] = rho * u
    out[2] = rho * v
    out[3] = p / (gamma - 1.0) + 0.5 * rho * (u * u + v * v)
    return out


def primitives(xp, U, gamma: float):
    """(ρ, u, v, p) of a conservative stack (new arrays)."""
    rho = U[0]
    u, v = U[1] / rho, U[2] / rho
    p = (gamma - 1.0) * (U[3] - 0.5 * (U[1] * u + U[2] * v))
    return rho, u, v, p


# ---- the right-hand side -----------------------------------------------------------------------
class NavierStokes:
    """dU/dt and the filter for one preset; ``build(selection)`` (re)creates the compact operators."""

    def __init__(self, preset, xp, dtype, phase=None):
        self.preset, self.xp, self.dtype = preset, xp, np.dtype(dtype)
        self.gas = Gas(preset.physics)
        self.phase = phase or (lambda name: nullcontext())
        self.shape = preset.shape
        b = preset.boundaries
        self.sides = {s: getattr(b, s) for s in nscbc.SIDES}
        self.h = {a: preset.spacing(a) for a in ("x", "y")}
        g = preset.grid
        self.length = {"x": g.x1 - g.x0, "y": g.y1 - g.y0}
        self.bound = {a: "periodic" if preset.axis_periodic(a) else "closures" for a in ("x", "y")}
        z = self._zeros
        # (u, v, T), its x / y derivatives, the fluxes and their derivatives; P, GX, F, DF are set by
        # build(): own arrays, or views into the groups' buffers under batching = grouped
        self.P = self.GX = self.F = self.DF = None
        self.GY, self.G, self.DG = z(3), z(4), z(4)
        self.tau = z(3)  # τxx, τyy, τxy
        self.p = xp.zeros(self.shape, dtype=self.dtype)
        self.dx = self.dy = self.dx_plain = self.dy_plain = self.filters = None
        self.grad = self.flux = None  # batching = grouped: the two passes as GroupedDerivative
        self.grouped = False
        self.fused = None  # pointwise = fused: ns_pointwise.FusedPointwise (set by build())
        self.p_hold = None
        ny, nx = self.shape
        line = {s: (4, ny if nscbc.SIDES[s][0] == "x" else nx) for s in self.sides}
        self.held = {s: xp.empty(line[s], dtype=self.dtype) for s, k in self.sides.items() if k == "hold"}
        self.extrapolated = {s: xp.empty(line[s], dtype=self.dtype) for s, k in self.sides.items()
                             if k == "extrapolate"}

    def _zeros(self, n: int):
        return self.xp.zeros((n,) + self.shape, dtype=self.dtype)

    def build(self, selection: dict, backend, stream=None) -> None:
        kw = dict(shape=self.shape, dtype=self.dtype, selection=selection, backend=backend, stream=stream,
                  phase=self.phase)
        grouped = selection.get("batching") == "grouped"
        if grouped:
            reason = grouping_reason(self.preset, selection)
            if reason:  # the registry refuses this first; a direct build() says it the same way
                raise VariantUnavailable(f"variant batching=grouped cannot run here: {reason}")
            gk = dict(n=self.shape[0], h=self.h, boundary=self.bound["x"], dtype=self.dtype, selection=selection,
                      backend=backend, stream=stream, phase=self.phase)
            self.grad = GroupedDerivative(nv=3, **gk) if self.gas.viscous else None
            self.flux = GroupedDerivative(nv=4, **gk)
            self.dx = self.dy = None
            self.P = self.grad.x_in if self.grad else self._zeros(3)
            self.GX = self.grad.x_out if self.grad else self._zeros(3)
            self.F, self.DF = self.flux.x_in, self.flux.x_out
        else:
            self.grad = self.flux = None
            self.dx = StackDerivative(axis="x", h=self.h["x"], boundary=self.bound["x"], nv_max=4, **kw)
            self.dy = StackDerivative(axis="y", h=self.h["y"], boundary=self.bound["y"], nv_max=4, **kw)
            if self.P is None or self.grouped:  # own arrays (again, after grouped)
                self.P, self.GX, self.F, self.DF = self._zeros(3), self._zeros(3), self._zeros(4), self._zeros(4)
        self.grouped = grouped
        ph = self.preset.physics
        # untimed copies for diagnostics and fields (they must not count as step phases)
        plain = dict(kw, phase=None)
        self.dx_plain = StackDerivative(axis="x", h=self.h["x"], boundary=self.bound["x"], nv_max=1, **plain)
        self.dy_plain = StackDerivative(axis="y", h=self.h["y"], boundary=self.bound["y"], nv_max=1, **plain)
        self.filters = [Filter(axis=a, alpha=ph.filter_alpha, alpha_b=ph.filter_alpha_boundary,
                               boundary=self.bound[a], **kw)
                        for a in ("x", "y")] if ph.filter else []
        self.fused = None
        if selection.get("pointwise", "array") == "fused":
            if not backend.is_gpu:  # the registry refuses this first; a direct build() says it the same way
                raise VariantUnavailable("variant pointwise=fused cannot run here: needs a CUDA GPU (CuPy backend)")
            self.fused = FusedPointwise(shape=self.shape, dtype=self.dtype, gas=self.gas, sides=self.sides, h=self.h,
                                        length=self.length, sigma=self.preset.boundaries.sigma)

    def launches_per_rate(self) -> int:
        """Tridiagonal-solver launches (NumPy: solve calls) per evaluation of dU/dt: stacked 4 (GPU with
        strided y-lines and a solver other than scan, or scan on y-lines longer than 2048 points: 1 + 4 +
        1 + 3 = 9), per-variable 14, grouped 2 (Euler: half of each)."""
        viscous = self.gas.viscous
        if self.grouped:
            return self.flux.launches() + (self.grad.launches() if viscous else 0)
        n = self.dx.launches(4) + self.dy.launches(4)
        return n + (self.dx.launches(3) + self.dy.launches(3) if viscous else 0)

    def rhs_sweeps_per_rate(self) -> int:
        """Explicit right-hand-side sweeps per evaluation (the same accounting as the solves)."""
        viscous = self.gas.viscous
        if self.grouped:
            return self.flux.rhs_sweeps() + (self.grad.rhs_sweeps() if viscous else 0)
        n = self.dx.rhs_sweeps(4) + self.dy.rhs_sweeps(4)
        return n + (self.dx.rhs_sweeps(3) + self.dy.rhs_sweeps(3) if viscous else 0)

    def filter_launches(self) -> int:
        """Solver launches of the filter per step (x then y: they cannot share a batch, the y pass
        filters the x pass's output)."""
        return sum(f.solver.launches(4) for f in self.filters)

    def pointwise_launches_per_rate(self) -> int | None:
        """Kernel launches of the pointwise part per evaluation under ``pointwise = fused`` (3; Euler 2);
        None for ``array`` (its count depends on the sides: tests/unit/test_compact_ns_fused.py counts it)."""
        return self.fused.launches() if self.fused is not None else None

    def rate(self, U, out) -> None:
        """out = dU/dt at U (both (4, ny, nx))."""
        fused, viscous = self.fused, self.gas.viscous
        with self.phase("other"):
            if fused is not None:
                fused.euler(U, self.P, self.p, self.F, self.G)
            else:
                self._euler_array(U)
        if viscous:
            if self.grouped:
                self.grad(self.P, self.P, self.GX, self.GY)
            else:
                self.dx(self.P, self.GX)
                self.dy(self.P, self.GY)
            with self.phase("other"):
                if fused is not None:
                    fused.viscous(self.P, self.GX, self.GY, self.tau, self.F, self.G)
                else:
                    self._viscous_array()
        if self.grouped:
            self.flux(self.F, self.G, self.DF, self.DG)
        else:
            self.dx(self.F, self.DF)
            self.dy(self.G, self.DG)
        with self.phase("other"):
            if fused is not None:
                fused.combine(U, self.P, self.p, self.tau, self.DF, self.DG, out)
            else:
                self.xp.add(self.DF, self.DG, out=out)
                self.xp.negative(out, out=out)
                self._boundaries(U, out)

    # ---- pointwise = array (the reference; ns_pointwise.cu repeats these operations in this order) ----
    def _euler_array(self, U) -> None:
        """P = (u, v[, T]), p and the Euler fluxes F, G — all before the gradient pass, which none of them
        needs (the fused path's first kernel does the same)."""
        xp, gas, t = self.xp, self.gas, self.dtype.type
        gm1 = t(gas.gamma - 1.0)
        P, F, G, p = self.P, self.F, self.G, self.p
        inv = 1.0 / U[0]
        u, v = P[0], P[1]
        xp.multiply(U[1], inv, out=u)
        xp.multiply(U[2], inv, out=v)
        xp.multiply(U[1], u, out=F[1])  # ρu² (kept: the flux's first term)
        xp.multiply(U[2], v, out=G[2])  # ρv²
        p[...] = gm1 * (U[3] - t(0.5) * (F[1] + G[2]))
        if gas.viscous:
            xp.multiply(p, inv, out=P[2])
            P[2] *= t(gas.gamma)  # T = γp/ρ
        F[0] = U[1]
        F[1] += p
        xp.multiply(U[1], v, out=F[2])
        G[0] = U[2]
        G[1] = F[2]
        G[2] += p
        hh = U[3] + p
        xp.multiply(hh, u, out=F[3])
        xp.multiply(hh, v, out=G[3])

    def _viscous_array(self) -> None:
        """τ from the gradients GX, GY; F, G -= the viscous terms."""
        gas, t = self.gas, self.dtype.type
        F, G = self.F, self.G
        u, v = self.P[0], self.P[1]
        mu, kap = t(gas.mu), t(gas.kappa)
        ux, vx, tx = self.GX
        uy, vy, ty = self.GY
        txx, tyy, txy = self.tau
        third = t(2.0 / 3.0)
        div = ux + vy
        txx[...] = mu * (t(2.0) * ux - third * div)
        tyy[...] = mu * (t(2.0) * vy - third * div)
        txy[...] = mu * (uy + vx)
        F[1] -= txx
        F[2] -= txy
        F[3] -= u * txx + v * txy + kap * tx
        G[1] -= txy
        G[2] -= tyy
        G[3] -= u * txy + v * tyy + kap * ty

    # ---- boundaries ----
    def _boundaries(self, U, out) -> None:
        for side, kind in self.sides.items():
            if kind == "nscbc":
                self._characteristic(side, U, out)
        for side, kind in self.sides.items():
            if kind == "extrapolate":
                nscbc.line(out, side)[...] = nscbc.line(out, side, 1)
        for side, kind in self.sides.items():  # last: a held inflow owns its corners
            if kind == "hold":
                nscbc.line(out, side)[...] = 0

    def _characteristic(self, side: str, U, out) -> None:
        """Swap the compact ∂F_n/∂n on the boundary line of ``side`` for Poinsot & Lele's (nscbc.py)."""
        gas = self.gas
        axis = SIDE_AXES[side]
        h = self.h[axis]
        u, v = self.P[0], self.P[1]
        rho, p = U[0], self.p
        un, ut = (u, v) if axis == "x" else (v, u)

        def at(a):
            return nscbc.line(a, side)

        def dn(a):
            return nscbc.normal_derivative(a, side, h)

        terms = nscbc.normal_flux_derivative(
            self.xp, side, rho=at(rho), un=at(un), ut=at(ut), p=at(p), drho=dn(rho), dun=dn(un), dut=dn(ut),
            dp=dn(p), gamma=gas.gamma, sigma=self.preset.boundaries.sigma, length=self.length[axis],
            p_inf=gas.p_inf)
        if gas.viscous:
            tnn = self.tau[0] if axis == "x" else self.tau[1]
            vis = nscbc.viscous_normal_flux_derivative(un=at(un), ut=at(ut), tnn=at(tnn), tnt=at(self.tau[2]),
                                                       dtnn=dn(tnn), dun=dn(un), dut=dn(ut))
            terms = [a - b for a, b in zip(terms, vis)]
        # (mass, normal momentum, tangential momentum, energy) -> (ρ, ρu, ρv, ρE)
        order = (0, 1, 2, 3) if axis == "x" else (0, 2, 1, 3)
        compact = self.DF if axis == "x" else self.DG
        for comp, term in zip(order, terms):
            o = nscbc.line(out[comp], side)
            o += nscbc.line(compact[comp], side) - term  # out held -∂F_n/∂n (compact): now -P&L's

    # ---- filter and derived fields ----
    def filter(self, U) -> None:
        if not self.filters:
            return
        # held and extrapolated boundary lines keep their boundary condition exactly (the filter along
        # a held line would change it by round-off, and would smooth an extrapolated one); the held lines
        # wait in buffers made once (a captured step allocates nothing: graph.py)
        with self.phase("filter"):
            for side, buf in self.held.items():
                buf[...] = nscbc.line(U, side)
        for f in self.filters:
            f(U)
        with self.phase("filter"):
            for side, buf in self.extrapolated.items():  # through a buffer: CuPy copies an overlapping source
                buf[...] = nscbc.line(U, side, 1)
                nscbc.line(U, side)[...] = buf
            for side, values in self.held.items():
                nscbc.line(U, side)[...] = values

    def vorticity(self, U):
        """ω = ∂v/∂x - ∂u/∂y (compact derivatives)."""
        xp = self.xp
        _, u, v, _ = primitives(xp, U, self.gas.gamma)
        a = xp.empty((1,) + self.shape, dtype=self.dtype)
        dvx = xp.empty_like(a)
        duy = xp.empty_like(a)
        a[0] = v
        self.dx_plain(a, dvx)
        a[0] = u
        self.dy_plain(a, duy)
        return dvx[0] - duy[0]

"""The compact family's Navier–Stokes problem (``physics.problem = "navier-stokes"``, P4's test 4) as
an engine: the conservative state (4, ny, nx), classical RK4 in the family's stepping style (stage
arithmetic in the phase ``update``), then the optional filter (phase ``filter``). The family's
``engine_class_for`` (compact/__init__.py) picks this class for a navier-stokes preset, so the
family stays one registry entry.

Timing phases: ``rhs`` and ``solve`` (the compact derivatives, 14 per evaluation), ``transpose``
(GPU y-lines; under ``batching = grouped`` on NumPy too), ``other`` (primitive variables, fluxes,
stresses, characteristic boundaries: the ``pointwise`` axis), ``update`` (RK4 stages), ``filter``.
"""
from __future__ import annotations

import numpy as np

from ..contract import Engine
from ..fields import Grid2D
from . import navier_stokes as ns
from . import ns_pointwise, traffic
from .engine import Compact, rk4_accumulate
from .filter import filter_spec


class CompactNavierStokes(Compact):
    time_units = "l/c∞"  # the acoustic time of its reference scales (ρ∞ = c∞ = l = 1)

    # ---- sizes ----
    def estimated_bytes(self):
        ny, nx = self.preset.shape
        item = np.dtype(self.preset.physics.dtype).itemsize
        # U, k, acc, tmp (4 each), P/GX/GY/τ (3 each), F/G/DF/DG (4 each), p, derivative and filter
        # scratch (4 + 4 + 4 + 4), NumPy temporaries (~12); batching = grouped: the groups' buffers
        # (2 × 2·(3 + 4)) hold P/GX/F/DF and replace the derivative scratch (+ 28 − 14 − 8), and NumPy's
        # solve of a whole group (2·4 variables) makes its temporaries that size (~ +18; measured peak
        # at 128²: 96 arrays' worth)
        sel = getattr(self, "selection", {})
        grouped = sel.get("batching") == "grouped"
        graph = 4 if sel.get("graph") == "on" else 0  # graph.StepGraph.warm's copy of U (transient)
        # CuPy's pool grows past the live peak: it keeps freed temporaries of one size while a later one of
        # another size is allocated (measured on the GPU at 2048² and 4096²: +0.5 and +0.75 of an array)
        pool = 2
        return (72 + pool + (24 if grouped else 0) + graph) * nx * ny * item + 4096 * (nx + ny) + (16 << 10)

    # ---- state ----
    def _allocate(self):
        p = self.preset
        xp = self.xp
        self.dtype = np.dtype(p.physics.dtype)
        self.problem = p.physics.problem
        self.two_d = True
        shape = (4,) + p.shape
        self.U = xp.zeros(shape, dtype=self.dtype)
        self.k = xp.zeros(shape, dtype=self.dtype)
        self.acc = xp.zeros(shape, dtype=self.dtype)
        self.tmp = xp.zeros(shape, dtype=self.dtype)
        self.dt = p.physics.dt
        self._x_host = p.coordinates("x")[None, :]
        self._y_host = p.coordinates("y")[:, None]
        self.x, self.y = xp.asarray(self._x_host), xp.asarray(self._y_host)
        self.ns = ns.NavierStokes(p, xp, self.dtype, phase=self._phase)
        self._counted: set = set()

    def _initialise(self):
        p = self.preset
        if p.initial.kind == "random":
            self.random_state(np.random.default_rng(p.initial.seed))
            return
        rho, u, v, pr = ns.initial_primitives(p, self._x_host, self._y_host)
        U = ns.conservative(np, rho, u, v, pr, self.ns.gas.gamma, np.empty((4,) + p.shape))
        self._load_state_arrays({"U": U})
        self._dp0 = float(np.max(np.abs(pr - self.ns.gas.p_inf)))  # the preset's disturbance: restores keep it

    def state_arrays(self):
        return {"U": self.U}

    def _load_state_arrays(self, arrays):
        self.U[...] = self.xp.asarray(np.asarray(arrays["U"], dtype=self.dtype))

    def random_state(self, rng: np.random.Generator):
        """The free stream plus a few per cent of smooth random perturbation (valid: ρ, p > 0)."""
        p = self.preset
        g = self.ns.gas
        shape = p.shape

        def smooth():
            a = rng.random(shape) - 0.5
            for ax in (0, 1):  # a three-point average twice per axis: no grid-scale noise
                for _ in range(2):
                    a = 0.25 * (np.roll(a, 1, ax) + 2 * a + np.roll(a, -1, ax))
            return a

        rho = 1.0 + 0.05 * smooth()
        u = g.u_inf + 0.05 * smooth()
        v = g.v_inf + 0.05 * smooth()
        pr = g.p_inf * (1.0 + 0.05 * smooth())
        self._dp0 = float(np.max(np.abs(pr - g.p_inf)))
        U = ns.conservative(np, rho, u, v, pr, g.gamma, np.empty((4,) + shape))
        self._load_state_arrays({"U": U})

    # no exact solution to log against: the contract's default (the app then never asks)
    logged_quantities = Engine.logged_quantities
    device_quantities = Engine.device_quantities

    def sanity_bounds(self):
        """Density and pressure stay positive; the Mach number stays below 3 × the free stream's (and at
        least 3: a vortex at rest adds its own swirl; the loader allows physics.mach ≤ 10, which a
        fixed bound of 10 reported as a divergence of a plain free stream); the pressure disturbance
        |p − p∞| below 50 × the preset's initial one (2 % of p∞ for a uniform start): a vortex or a
        pulse leaving the domain only sheds weaker waves, and a blow-up grows ×10 every few steps; the
        density below 10 × max(1, M²) × the free stream's ρ∞ = 1: a normal shock at Mach M compresses
        (γ + 1)M² / ((γ − 1)M² + 2) < M² times for any γ > 1, and 10 × that leaves room for shocks
        that meet; more is no flow, only a blow-up or a state that never was one (a resumed state at
        ρ = 9e30 with the free stream's pressure and speed passes every other bound)."""
        top = 3.0 * max(1.0, float(self.preset.physics.mach))
        dp0 = getattr(self, "_dp0", 0.0)
        dp = 50.0 * dp0 if dp0 > 0.0 else 0.02 * float(self.ns.gas.p_inf)
        dense = 10.0 * max(1.0, float(self.preset.physics.mach) ** 2)
        return {"min_density": (0.0, np.inf), "max_density": (-np.inf, dense), "min_pressure": (0.0, np.inf),
                "max_mach": (-1.0, top), "max_dp": (-1.0, dp)}

    # ---- variants ----
    def _apply_selection(self, old, new):
        self._graph = None  # its captured launches belong to the old operators
        self.ns.build(new, self.backend, self.stream)
        self._build_graph(new)

    def kernel_specs(self, selection=None):
        """The solver module, and the pointwise kernels under ``pointwise = fused``."""
        specs = super().kernel_specs(selection)
        sel = selection or self.selection
        if self.backend.is_gpu and sel.get("pointwise") == "fused":
            specs.append(ns_pointwise.spec(self.dtype))
        if self.backend.is_gpu and self.preset.physics.filter:
            specs.append(filter_spec(self.dtype))
        return specs

    # ---- stepping ----
    def _step_once(self) -> None:
        """One RK4 step and the filter on the engine's stream; allocates nothing once warm (graph.py
        captures it)."""
        self._counted = set()
        xp = self.xp
        t = self.dtype.type
        dt = self.dt
        half, whole, sixth, two = t(dt / 2), t(dt), t(dt / 6), t(2)
        U, tmp, acc, k = self.U, self.tmp, self.acc, self.k
        rate = self.ns.rate
        fused = self.ns.fused
        rate(U, k)
        with self._phase("update"):
            if fused is not None:
                fused.rk4_first(U, k, acc, tmp, half)
            else:
                acc[...] = k
                xp.multiply(k, half, out=tmp)
                tmp += U
        for c in (half, whole):
            rate(tmp, k)
            with self._phase("update"):
                if fused is not None:
                    fused.rk4_middle(U, k, acc, tmp, two, c)
                else:
                    rk4_accumulate(xp, acc, k, two, tmp)
                    xp.multiply(k, c, out=tmp)
                    tmp += U
        rate(tmp, k)
        with self._phase("update"):
            if fused is not None:
                fused.rk4_last(U, k, acc, sixth)
            else:
                acc += k
                acc *= sixth
                U += acc
        self.ns.filter(U)

    def timing_extra(self):
        """The batching axis' counts: solver launches (NumPy: solve calls) per evaluation of dU/dt and
        per step (4 evaluations + the filter's x and y passes), and explicit right-hand-side sweeps
        per evaluation — what LineSolver/GroupedDerivative do (tests count the launches); under
        ``pointwise = fused`` the pointwise kernels' launches per evaluation (3; Euler 2)."""
        per_rate = self.ns.launches_per_rate()
        extra = {"solver": self.selection["solver"], "batching": self.selection["batching"],
                 "systems_per_step": self.systems_per_step,
                 "solve_launches_per_rate": per_rate,
                 "solve_launches_per_step": 4 * per_rate + self.ns.filter_launches(),
                 "rhs_sweeps_per_rate": self.ns.rhs_sweeps_per_rate(),
                 "pointwise": self.selection.get("pointwise", "array")}
        fused = self.ns.pointwise_launches_per_rate()
        if fused is not None:
            extra["pointwise_launches_per_rate"] = fused
        extra["graph"] = self.selection.get("graph", "off")
        kernels = traffic.step_kernels(self)
        if kernels is not None:  # the GPU path whose launches are known (traffic.py): count and ideal bytes
            ny, nx = self.ns.shape
            extra.update(traffic.summary(kernels, nx * ny, self.ns.dtype.itemsize))
        return extra

    @property
    def systems_per_step(self) -> int:
        ny, nx = self.preset.shape
        per_rate = (4 + (3 if self.ns.gas.viscous else 0)) * (nx + ny)
        return 4 * per_rate + (4 * (nx + ny) if self.ns.filters else 0)

    # ---- outputs ----
    def _primitives(self):
        return ns.primitives(self.xp, self.U, self.ns.gas.gamma)

    def field_names(self):
        return ["density", "vorticity", "pressure", "u", "v", "mach"]

    def field(self, name):
        if name not in self.field_names():
            raise KeyError(name)
        view = self.preset.grid_view()
        if name == "density":
            return Grid2D(self.U[0] - 1.0, label="(ρ - ρ∞)/ρ∞", symmetric=True, **view)
        if name == "vorticity":
            return Grid2D(self.ns.vorticity(self.U), label="ω = ∂v/∂x - ∂u/∂y", symmetric=True, **view)
        rho, u, v, p = self._primitives()
        # the velocity's departure from the free stream, in its sound speed (as density and pressure:
        # at Mach 1.1 the velocity itself is ~1.1 everywhere and a colour map would not show the vortex)
        g = self.ns.gas
        if name == "u":
            return Grid2D(u - g.u_inf, label="(u - u∞)/c∞", symmetric=True, **view)
        if name == "v":
            return Grid2D(v - g.v_inf, label="(v - v∞)/c∞", symmetric=True, **view)
        if name == "mach":  # local: |u| over the local sound speed √(γp/ρ)
            xp = self.xp
            return Grid2D(xp.sqrt((u * u + v * v) * rho / (self.ns.gas.gamma * p)), label="local Mach number |u|/c",
                          **view)
        return Grid2D(p - self.ns.gas.p_inf, label="(p - p∞)/(ρ∞c∞²)", symmetric=True, **view)

    def fields(self):
        return {name: self.field(name) for name in self.field_names()}

    def vortex_centre(self) -> tuple[float, float]:
        """Where the free stream has carried the initial vortex centre by now."""
        g, t = self.ns.gas, self.time
        xc, yc = self.preset.initial.center
        return xc + g.u_inf * t, yc + g.v_inf * t

    def reflected_pressure(self, p=None):
        """max |p - p∞| farther than 4 r_c from the carried vortex centre, over the vortex's own pressure
        dip ρ∞Γ²/(2r_c²) (the dip itself is below 10⁻⁶ of it there: exp(-16)): the acoustic waves the
        boundaries (and the start) send into the domain. A device scalar."""
        xp = self.xp
        if p is None:
            _, _, _, p = self._primitives()
        xc, yc = self.vortex_centre()
        rc = self.preset.initial.core
        far = ((self.x - xc) ** 2 + (self.y - yc) ** 2) > (4 * rc) ** 2
        dev = xp.where(far, xp.abs(p - self.ns.gas.p_inf), 0.0)
        return xp.max(dev) / ns.vortex_dip(self.preset.initial)

    def device_diagnostics(self):
        xp = self.xp
        rho, u, v, p = self._primitives()
        g = self.ns.gas
        c2 = g.gamma * p / rho
        cell = self.preset.spacing("x") * self.preset.spacing("y")
        out = {
            "mass": xp.sum(rho, dtype=xp.float64) * cell,
            "energy": xp.sum(self.U[3], dtype=xp.float64) * cell,
            "max_vorticity": xp.max(xp.abs(self.ns.vorticity(self.U))),
            "min_density": xp.min(rho),
            "max_density": xp.max(rho),
            "min_pressure": xp.min(p),
            "max_mach": xp.sqrt(xp.max((u * u + v * v) / c2)),
            "max_dp": xp.max(xp.abs(p - g.p_inf)),
        }
        if self.preset.initial.kind == "vortex":
            out["reflected_p"] = self.reflected_pressure(p)
        return out

    @property
    def updates_per_step(self):
        ny, nx = self.preset.shape
        return float(nx * ny)

    def bytes_per_update(self):
        """The ideal traffic of a step per grid point: traffic.step_kernels' sum where the step's kernels are
        known (the bench's roofline column is then the step's ideal time ÷ its measured time), else a model
        of the array path's arrays read + written per RK4 stage: primitives (4 + 3), 14 derivatives ×
        (read f, write r, read r, write f'), fluxes and stresses (10 + 11), combination (8 + 4), stage
        update (~5); plus the filter (2 axes × 4 variables × 4)."""
        kernels = traffic.step_kernels(self)
        if kernels is not None:
            return float(sum(k.words for k in kernels) * self.dtype.itemsize)
        per_stage = 7 + 14 * 4 + 21 + 12 + 5
        return float((4 * per_stage + (32 if self.ns.filters else 0)) * self.dtype.itemsize)

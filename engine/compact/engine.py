"""Compact finite differences (P4): advection with Lele's 6th-order compact scheme or Deng's
dissipative compact scheme, classical RK4, batched tridiagonal solvers as live variants.

The state is one scalar field φ (ny, nx) (ny = 1 for 1D problems). Every derivative is a
:class:`~.operator.Derivative` (explicit side through the stencil framework, then the solver
choice); the time derivative of each problem is assembled from them:

- advection1d: φ_t = -(½(c+λ) D⁺φ + ½(c-λ) D⁻φ), λ = |c| (Lax–Friedrichs split of F = cφ; with
  the central scheme D⁺ = D⁻ = D and this is -c Dφ);
- rotation2d: the same along x with u = -ωy (constant along each x-line, so D(uφ) = u Dφ) and
  along y with v = ωx; λ_x = max|u|, λ_y = max|v| (P4: λ = u_max);
- derivative (benchmark): every step writes dφ = D φ of the same φ (one batched derivative per
  step; the state is φ and dφ).

With ``closures`` the inflow boundary values are held (advection1d: the upstream end; rotation2d:
the whole boundary, P4's φ = 0 on the boundary).

``navier-stokes`` (P4's test 4) has a state of four variables and its own stepping: the family's
``engine_class_for`` (compact/__init__.py) picks :class:`~.ns_engine.CompactNavierStokes` for it
(one family, one registry entry).
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from .. import registry
from ..benchspec import BenchSpec
from ..contract import Engine
from ..errors import NagareError, VariantUnavailable
from ..fields import Grid2D, Profile1D
from . import gpu, reference, schemes, solvers, variants
from .config import CompactPreset
from .graph import StepGraph
from .operator import Derivative
from .rhs import closure_spec

FAMILY = variants.FAMILY
# Grid sizes of the Navier–Stokes presets at scale (presets/compact-vortex-outflow-N.toml): P4's
# vortex on the 512² preset's domain at a finer spacing; the GPU bench times each
NS_SCALE_SIZES = (2048, 4096)
# The phases whose work is compact derivatives (the filter's is tridiagonal solves too): the compact share
COMPACT_PHASES = ("derivative", "rhs", "solve", "transpose", "filter")

variants.register()


def rk4_accumulate(xp, acc, k, two, scratch) -> None:
    """acc += two·k with the product in ``scratch`` (a temporary would be an allocation per stage, which a
    captured step cannot hold; the same two roundings as ``acc += two * k``)."""
    xp.multiply(k, two, out=scratch)
    acc += scratch


class Compact(Engine):
    family = FAMILY
    Preset = CompactPreset
    constant_dt = True
    equivalence_steps = 16

    time_units = "–"  # the scalar problems are dimensionless (the rotation: one turn per unit time)

    # ---- sizes ----
    @property
    def _points(self) -> int:
        ny, nx = self.preset.shape
        return nx * ny

    def estimated_bytes(self):
        p = self.preset
        item = np.dtype(p.physics.dtype).itemsize
        n = self._points * item
        # per operator: factors and reduction schedules (float64, host and device) and the scalar
        # Thomas path's Python lists: ~512 bytes per line point is a safe bound
        lines = 512 * (p.grid.nx + p.grid.ny) * (2 if p.physics.scheme == "dissipative5" else 1)
        if p.physics.problem == "derivative":
            return 16 * n + lines + (16 << 10)
        return 24 * n + lines + (16 << 10)  # φ, RK4 stage arrays, derivative scratch, NumPy solver temporaries

    # ---- state ----
    def _allocate(self):
        p = self.preset
        if p.physics.problem == "navier-stokes":
            raise NagareError("the navier-stokes problem runs on CompactNavierStokes: build the engine with "
                              "families.create_engine (the family's engine_class_for picks it)")
        xp = self.xp
        self.dtype = np.dtype(p.physics.dtype)
        self.problem = p.physics.problem
        self.two_d = self.problem != "advection1d"
        shape = p.shape
        self.phi = xp.zeros(shape, dtype=self.dtype)
        self.k = xp.zeros(shape, dtype=self.dtype)
        self.dt = p.physics.dt
        x = p.coordinates("x")[None, :]
        y = p.coordinates("y")[:, None] if self.two_d else np.zeros((1, 1))
        self._x_host, self._y_host = x, y
        self.x, self.y = xp.asarray(x), xp.asarray(y)
        if self.problem != "derivative":
            self.tmp = xp.zeros(shape, dtype=self.dtype)
            self.acc = xp.zeros(shape, dtype=self.dtype)
            self.dbuf = xp.zeros(shape, dtype=self.dtype)
        self._halves = self._split()
        self._counted: set = set()

    def _split(self) -> list[tuple[str, float, object]]:
        """[(axis, δ, weight)]: the time derivative is -Σ weight ⊙ D_{axis,δ} φ; a weight is a scalar
        (advection1d) or the velocity's column/row (rotation2d: constant along each line)."""
        p = self.preset.physics
        if self.problem == "derivative":
            return [(p.direction, schemes.upwind_delta(+1) if p.scheme == "dissipative5" else 0.0, None)]
        if self.problem == "advection1d":
            vel = {"x": p.speed}
        else:
            vel = {"x": -p.omega * self._y_host, "y": p.omega * self._x_host}
        out = []
        for axis, u in vel.items():
            if p.scheme == "compact6":
                out.append((axis, 0.0, u))
                continue
            lam = float(np.max(np.abs(u)))
            for sign in (+1, -1):
                w = 0.5 * (u + sign * lam)
                if np.any(w != 0):
                    out.append((axis, schemes.upwind_delta(sign), w))
        typed = []
        for axis, delta, w in out:
            w = self.dtype.type(w) if np.isscalar(w) else self.xp.asarray(np.asarray(w, dtype=self.dtype))
            typed.append((axis, delta, w))
        return typed

    def _initialise(self):
        p = self.preset
        if p.initial.kind == "random":
            self.random_state(np.random.default_rng(p.initial.seed))
            return
        phi = reference.profile(np, p.initial, self._x_host, self._y_host, p.grid, self.two_d)
        self._load_state_arrays({"phi": np.broadcast_to(phi, p.shape)})
        self._amp0 = float(np.max(np.abs(phi)))  # the preset's amplitude: restores keep it

    def state_arrays(self):
        if self.problem == "derivative":
            return {"phi": self.phi, "dphi": self.k}
        return {"phi": self.phi}

    def _load_state_arrays(self, arrays):
        self.phi[...] = self.xp.asarray(np.asarray(arrays["phi"], dtype=self.dtype))
        if "dphi" in arrays:
            self.k[...] = self.xp.asarray(np.asarray(arrays["dphi"], dtype=self.dtype))

    def random_state(self, rng: np.random.Generator):
        self._load_state_arrays({"phi": rng.random(self.preset.shape) - 0.5})
        self._amp0 = 0.5

    def sanity_bounds(self):
        """Linear advection does not amplify: |φ| stays below 2 × the *preset's* initial amplitude
        (the central scheme's Gibbs overshoot at a square pulse is 15 %), not the loaded state's —
        a resumed or checkpointed state is held to the same bound (a bound relative to the loaded
        state would let a state that has already grown pass, and resume)."""
        a = 2.0 * getattr(self, "_amp0", 1.0) + 1e-30
        return {"max": (-a, a), "min": (-a, a)}

    # ---- variants ----
    def _apply_selection(self, old, new):
        self._graph = None  # its captured launches belong to the old operators
        p = self.preset
        ops = {}
        for axis, delta, _ in self._halves:
            key = (axis, delta)
            if key in ops:
                continue
            h = p.spacing(axis)
            ops[key] = Derivative(shape=p.shape, axis=axis, h=h, boundary=p.boundaries.kind, delta=delta,
                                  dtype=self.dtype, selection=new, backend=self.backend, stream=self.stream,
                                  phase=self._phase)
        self.ops = ops
        self._build_graph(new)

    def kernel_specs(self, selection=None):
        if not self.backend.is_gpu:
            return []
        sel = selection or self.selection
        specs = [gpu.spec(self.dtype)]
        if str(sel.get("kernel", "")).startswith("cuda"):  # the closure rows' kernel (rhs.DeviceClosure)
            specs.append(closure_spec(self.dtype))
        if sel.get("solver") is not None:  # the solvers' own modules (the fused derivative's too; y-direction =
            for name in solvers.names(sel):  # window: the window solver's for the y-lines)
                specs += solvers.get(name).kernel_specs(self.dtype, sel, self.preset.shape)
        return specs

    # ---- timing: phases recorded many times per step count the step once ----
    @contextmanager
    def _phase(self, name: str):
        if self._phase_hook is not None:  # graph.py cuts a step into its phase regions (capture: untimed)
            self._phase_hook(name)
            try:
                yield
            finally:
                self._phase_hook(None)
            return
        if self._untimed:  # a CUDA graph's capture (an event there times nothing) or its warm-up step
            yield
            return
        first = name not in self._counted
        self._counted.add(name)
        with self.timer.phase(name, steps=1 if first else 0):
            yield

    _untimed = False
    _phase_hook = None

    @contextmanager
    def untimed(self):
        """Phases record no events inside (graph.py: the capture and the warm-up step)."""
        self._untimed = True
        try:
            yield
        finally:
            self._untimed = False

    @contextmanager
    def phase_hook(self, hook):
        """``hook(name)`` on entering a phase, ``hook(None)`` on leaving it, instead of timing it."""
        self._phase_hook = hook
        try:
            yield
        finally:
            self._phase_hook = None

    # ---- graph = on ----
    def _build_graph(self, selection: dict) -> None:
        """A new StepGraph for ``selection`` (or none): whatever was captured belongs to the old operators."""
        self._graph = None
        if selection.get("graph") != "on":
            return
        reason = variants._graph_check(self.backend.name, selection, self.preset)
        if reason:  # reached by switching another axis while graph = on (the registry checks the switched axis)
            raise VariantUnavailable(f"variant graph=on cannot run here: {reason}")
        self._graph = StepGraph(self, self._step_once)

    def _advance(self, n):
        graph = getattr(self, "_graph", None)
        if graph is not None:
            graph.advance(n)
        else:
            for _ in range(n):
                self._step_once()
        return n * self.dt

    # ---- stepping ----
    def _rate(self, f, out) -> None:
        """out = dφ/dt at φ = f."""
        xp = self.xp
        for i, (axis, delta, w) in enumerate(self._halves):
            self.ops[(axis, delta)](f, self.dbuf)
            with self._phase("update"):
                if i == 0:
                    xp.multiply(self.dbuf, w, out=out)
                else:
                    self.dbuf *= w
                    out += self.dbuf
        with self._phase("update"):
            xp.negative(out, out=out)
            if self.preset.boundaries.kind == "closures":
                self._hold(out)

    def _hold(self, k) -> None:
        if self.problem == "advection1d":
            k[..., 0 if self.preset.physics.speed > 0 else -1] = 0
        else:
            k[0, :] = 0
            k[-1, :] = 0
            k[:, 0] = 0
            k[:, -1] = 0

    def _step_once(self) -> None:
        """One step on the engine's stream; allocates nothing once warm (graph.py captures it)."""
        self._counted = set()
        if self.problem == "derivative":
            # the same field differentiated again: a benchmark, not a time evolution
            self.ops[next(iter(self.ops))](self.phi, self.k)
            return
        xp = self.xp
        t = self.dtype.type
        dt = self.dt
        half, whole, sixth, two = t(dt / 2), t(dt), t(dt / 6), t(2)
        phi, tmp, acc, k = self.phi, self.tmp, self.acc, self.k
        self._rate(phi, k)
        with self._phase("update"):
            acc[...] = k
            xp.multiply(k, half, out=tmp)
            tmp += phi
        self._rate(tmp, k)
        with self._phase("update"):
            rk4_accumulate(xp, acc, k, two, tmp)
            xp.multiply(k, half, out=tmp)
            tmp += phi
        self._rate(tmp, k)
        with self._phase("update"):
            rk4_accumulate(xp, acc, k, two, tmp)
            xp.multiply(k, whole, out=tmp)
            tmp += phi
        self._rate(tmp, k)
        with self._phase("update"):
            acc += k
            acc *= sixth
            phi += acc

    def timing_extra(self):
        ops = getattr(self, "ops", {})
        extra = {"solver": self.selection["solver"], "systems_per_step": self.systems_per_step}
        for (axis, delta), op in ops.items():
            tag = f"{axis}{'' if not delta else f' δ={delta:+g}'}"
            e = op.rhs.timing_extra() if op.rhs is not None else None  # (kernel = fused: no separate sweep)
            if e:
                extra[f"rhs {tag}"] = e
            stats = op.solver_stats()
            if stats is not None:  # CGS / Bi-CGSTAB: P4's iteration counts, live
                extra[f"iterations {tag}"] = stats
        return extra

    @property
    def systems_per_step(self) -> int:
        """Tridiagonal systems solved per step."""
        ny, nx = self.preset.shape
        per = {"x": ny, "y": nx}
        total = sum(per[a] for a, _, _ in self._halves)
        return total if self.problem == "derivative" else 4 * total

    # ---- outputs ----
    def _exact(self):
        if not reference.has_exact(self.preset):
            return None
        e = reference.exact(self.xp, self.preset, self.x, self.y, self.time)
        return self.xp.broadcast_to(e, self.preset.shape).astype(self.dtype)

    def field_names(self):
        if self.problem == "derivative":
            return ["f", "df"]
        return ["phi", "error"] if reference.has_exact(self.preset) else ["phi"]

    def field(self, name):
        if name not in self.field_names():
            raise KeyError(name)
        if self.problem == "derivative":
            data, label = (self.phi, "f") if name == "f" else (self.k, f"∂f/∂{self.preset.physics.direction}")
            return Grid2D(data, label=label, symmetric=True, **self.preset.grid_view())
        ex = self._exact()
        data = self.phi if name == "phi" else self.phi - ex
        label = "φ" if name == "phi" else "φ - exact"
        if not self.two_d:
            return Profile1D(self.x[0], data[0], exact=ex[0] if (ex is not None and name == "phi") else None,
                             label=label, length_units=self.preset.length_units)
        return Grid2D(data, label=label, symmetric=name == "error", **self.preset.grid_view())

    def fields(self):
        return {name: self.field(name) for name in self.field_names()}

    def device_diagnostics(self):
        xp = self.xp
        out = {"max": xp.max(self.phi), "min": xp.min(self.phi), "mean": xp.mean(self.phi, dtype=xp.float64)}
        ex = self._exact()
        if ex is not None:
            diff = (self.phi - ex).astype(xp.float64)
            out["l2_error"] = xp.sqrt(xp.mean(diff * diff))
        return out

    def logged_quantities(self):
        """The RMS error against the exact solution (advected profiles), in the timing log and the
        HUD: P4's figure of merit (compact-advection1d: 1.8e-5 at t = 0.4). None without one."""
        ex = self._exact()
        if ex is None:
            return {}
        return {"l2_error": float(self._l2_error(ex))}

    def device_quantities(self):
        ex = self._exact() if self.backend.is_gpu else None
        if ex is None:
            return None
        return {"l2_error": self._l2_error(ex)}, lambda host: {"l2_error": float(host["l2_error"])}

    def _l2_error(self, ex):
        diff = (self.phi - ex).astype(self.xp.float64)
        return self.xp.sqrt(self.xp.mean(diff * diff))

    @property
    def updates_per_step(self):
        if self.problem == "derivative":
            return float(self.systems_per_step)  # an "update" is one line derivative (RHS + solve)
        return float(self._points)

    def bytes_per_update(self):
        item = self.dtype.itemsize
        if self.problem == "derivative":
            ny, nx = self.preset.shape
            n = nx if self.preset.physics.direction == "x" else ny
            return 2.0 * n * item  # read the line, write its derivative (ideal)
        # per RK4 stage and direction half: read the stage input, write the derivative, and the
        # stage update (read derivative, read/write the accumulator, write the stage input)
        return 4.0 * (2 * len(self._halves) + 3) * item

    # ---- tests and benchmarks ----
    @classmethod
    def equivalence_presets(cls):
        base = {"engine": FAMILY, "description": "equivalence test", "initial": {"kind": "random"}}
        rot = {"problem": "rotation2d", "dt": 0.002}
        grid2 = {"nx": 24, "ny": 20, "x0": -1.0, "x1": 1.0, "y0": -1.0, "y1": 1.0}
        cases = {
            "rotation2d-compact6": {"grid": grid2, "physics": rot, "boundaries": {"kind": "closures"}},
            "rotation2d-dissipative5": {"grid": grid2, "physics": dict(rot, scheme="dissipative5"),
                                        "boundaries": {"kind": "closures"}},
            "advection1d-periodic-dissipative5": {"grid": {"nx": 40}, "physics": {"scheme": "dissipative5",
                                                                                   "dt": 0.002}},
            "derivative-y-periodic": {"grid": {"nx": 24, "ny": 33}, "physics": {"problem": "derivative",
                                                                                 "direction": "y"}},
            # Navier–Stokes: a bounded x axis (held inflow, characteristic outflow) and a periodic y
            # axis, so both closures and cyclic systems, the 14 derivatives and the filter are compared
            "navier-stokes": {"grid": {"nx": 24, "ny": 20, "x0": -1.0, "x1": 1.0, "y0": -1.0, "y1": 1.0},
                              "physics": {"problem": "navier-stokes", "dt": 0.01, "reynolds": 100.0},
                              "boundaries": {"west": "hold", "east": "nscbc", "south": "periodic",
                                             "north": "periodic"}},
            # ... and P4's square layout (closures on both axes: x and y share one matrix), where
            # batching = grouped can put x- and y-lines in one batch
            "navier-stokes-square": {"grid": {"nx": 20, "ny": 20, "x0": -1.0, "x1": 1.0, "y0": -1.0, "y1": 1.0},
                                     "physics": {"problem": "navier-stokes", "dt": 0.01, "reynolds": 100.0},
                                     "boundaries": {"west": "hold", "east": "nscbc", "south": "nscbc",
                                                    "north": "nscbc"}},
        }
        return {k: CompactPreset.model_validate({**base, **v}) for k, v in cases.items()}

    @classmethod
    def equivalence_companions(cls, axis, choice):
        """batching = grouped batches transposed y-lines: it needs y-direction = transpose (both backends'
        default is strided). kernel = fused is the scan solver's launch: it needs solver = scan (the GPU
        default), and every other solver runs under the GPU default kernel = fused only with a separate
        right-hand side: kernel = array, which both backends run (the bench takes the stencil
        framework's cuda instead: :meth:`bench_selections`)."""
        if (axis, choice) == ("batching", "grouped"):
            return {"y-direction": "transpose"}
        if (axis, choice) == ("kernel", "fused"):
            return {"solver": solvers.fusing()}
        if axis == "solver" and not solvers.get(choice).fuses_rhs:  # the GPU default kernel = fused needs one
            return {"kernel": "array"}
        return {}

    @classmethod
    def bench_spec(cls):
        return BenchSpec(preset="compact-derivative", cases=cls.bench_cases, selections=cls.bench_selections,
                         batch=20, update_unit="one tridiagonal system in the derivative cases (an n-point line "
                                           "differentiated: GB/s counts 2·n·itemsize a line, read f and write f') "
                                           "and one grid point in the ns-vortex cases (GB/s: a model of a step's "
                                           "ideal traffic)")

    @classmethod
    def bench_report(cls, results: list) -> str:
        """The Navier–Stokes cells against their ideal: kernels a step launches, the step's time, the sum of
        its kernels' ideal times (traffic.py's bytes ÷ the copy bandwidth the bench measured: the roofline
        column's denominator) and the ratio; the compact share of the step (derivatives, solves, transposes
        and the filter, whose work is tridiagonal solves too) from the phases (under graph = on its profiled
        steps' phase regions)."""
        rows = [r for r in results if r.ok and r.case.startswith("ns-") and "kernels_per_step" in r.extra]
        if not rows:
            return ""
        out = ["", "### Navier–Stokes step against its kernels' ideal traffic", "",
               "| case | variant | kernels/step | ms/step | ideal ms | step ÷ ideal | compact share |",
               "|---|---|---:|---:|---:|---:|---:|"]
        for r in rows:
            ideal = r.ms_per_step * r.roofline_pct / 100.0
            ratio = f"{100.0 / r.roofline_pct:.2f}×" if r.roofline_pct > 0 else "–"
            phases = {k: v for k, v in r.phases.items() if k != "step"}
            total = sum(phases.values())
            share = sum(v for k, v in phases.items() if k in COMPACT_PHASES) / total if total > 0 else None
            out.append(f"| {r.case} | {r.label} | {r.extra['kernels_per_step']} | {r.ms_per_step:.3f} | "
                       f"{ideal:.3f} | {ratio} | {'–' if share is None else f'{100 * share:.0f} %'} |")
        return "\n".join(out) + "\n"

    @classmethod
    def bench_selections(cls, backend: str = "cupy"):
        """The default selection, then each registered choice changed alone — with the companions it
        needs to run (batching = grouped: y-direction = transpose), so the
        cell measures the choice instead of reporting it unavailable. A choice this backend cannot run
        (kernel = cuda on NumPy) stays a cell, listed unavailable with the reason."""
        base = registry.default_selection(FAMILY, backend)
        kernels = registry.axes(FAMILY)["kernel"].choices
        out = [("default", {})]
        for axis, ax in registry.axes(FAMILY).items():
            for name in ax.choices:
                if name == base[axis]:
                    continue
                comp = cls.equivalence_companions(axis, name)
                if comp.get("kernel") == "array" and "cuda" in kernels and backend in kernels["cuda"].backends:
                    # a solver's own cell: the GPU's separate right-hand side (NumPy keeps its array one, so
                    # a solver that runs there is measured, not refused for a kernel it was never asked for)
                    comp["kernel"] = "cuda"
                sel = {axis: name, **{a: c for a, c in comp.items() if base[a] != c}}
                out.append((",".join(f"{a}={c}" for a, c in sel.items()), sel))
        return out

    @classmethod
    def bench_cases(cls, backend: str = "cupy"):
        """One batched derivative (compact-derivative: periodic lines) at two sizes × direction × precision
        (and 4096² x fp64 on the GPU, periodic and with P4's boundary closures), then P4's
        test 4 (compact-vortex-outflow, fp64, square: every batching choice runs — the 14 derivatives
        as 14, 4 or 2 solves per evaluation) and, on the GPU, the same flow at 2048² and 4096²
        (the presets compact-vortex-outflow-2048/-4096)."""
        sizes = (512, 2048) if backend == "cupy" else (128, 256)
        out = []
        for n in sizes:
            for prec in ("fp64", "fp32"):
                for d in ("x", "y"):
                    out.append((f"{n}x{n}-{d}-{prec}", [f"grid.nx={n}", f"grid.ny={n}", f"physics.direction=\"{d}\"",
                                                       f"physics.precision=\"{prec}\""]))
        if backend == "cupy":  # the largest lines the default chunk serves (team 512): the kernel's best case
            big = ["grid.nx=4096", "grid.ny=4096", 'physics.direction="x"', 'physics.precision="fp64"']
            out.append(("4096x4096-x-fp64", big))
            # P4's own matrix (one-sided closure rows, no Sherman–Morrison pass): the cases above are
            # the preset's periodic lines
            out.append(("4096x4096-x-fp64-closures", big + ['boundaries.kind="closures"']))
        # Δt ≈ 0.38 h as the preset's (h = 2/(n - 1))
        for n in ((256, 512) if backend == "cupy" else (64,)):
            out.append((f"ns-vortex-{n}-fp64", ["@compact-vortex-outflow", f"grid.nx={n}", f"grid.ny={n}",
                                                f"physics.dt={0.76 / (n - 1):.3g}"]))
        # The step at scale: the app's presets as they run there, Δt and all. fp64 only: P4's vortex
        # (a pressure dip of 5.6e-6 ρ∞c∞²) is below fp32's round-off in the conservative variables, whose
        # noise passes the run's sanity bound (50 × the dip) within ~100 steps (128² on NumPy)
        if backend == "cupy":
            for n in NS_SCALE_SIZES:
                out.append((f"ns-vortex-{n}-fp64", [f"@compact-vortex-outflow-{n}"]))
        return out

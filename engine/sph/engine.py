"""SPH engine (P3): DualSPHysics-style WCSPH with cell-linked and Verlet neighbour searches.

State (canonical, particle order never changes): positions, velocities, densities, and the
previous step's velocities/densities that the Verlet scheme needs (v^{n−1}, ρ^{n−1}), plus the
Verlet step counter. Particles are sorted by cell only inside the search (a permutation), so
``state_arrays()`` is identical in meaning for every search variant.

Variant axis ``search`` ∈ {cell-full, cell-half, verlet}. Precision is a preset setting
(physics.precision), not a variant: it changes the dtype of the physical state.
"""
from __future__ import annotations

import math

import numpy as np

from ..benchspec import BenchSpec
from ..contract import Engine
from ..errors import CheckpointError
from ..fields import Particles
from . import geometry, memory, reference, variants
from .config import SPHPreset
from .gpu import GpuSPH
from .neighbours import CELL_FRACTION, Domain, VerletList, build_cells, cell_pairs

FAMILY = variants.FAMILY

variants.register()


class SPH(Engine):
    time_units = "s"
    family = FAMILY
    Preset = SPHPreset
    equivalence_steps = 100

    def estimated_bytes(self):
        """Peak memory for this preset, neighbour lists and search work arrays included, on this
        backend (engine/sph/memory.py); checked before the particles are laid out."""
        return memory.estimate(self.preset, self.backend.name, self.selection)

    # ---- state ----
    def _allocate(self):
        p, xp = self.preset, self.xp
        self.dtype = np.dtype(p.physics.dtype)
        lay = geometry.build(p)
        self.layout = lay
        self.dim = p.dim
        self.n = len(lay.pos)
        self.kind = xp.asarray(lay.kind)
        self.fluid = self.kind == geometry.FLUID
        self.moving = self.kind == geometry.PISTON
        self.n_fluid = int((lay.kind == geometry.FLUID).sum())
        g = p.physics.gravity
        c0 = p.physics.coefsound * math.sqrt(max(g, 1e-12) * lay.fluid_height)
        self.k = reference.Constants(
            dim=self.dim, h=p.h, rho0=p.physics.rho0, gamma=p.physics.gamma, c0=c0, alpha=p.physics.alpha,
            delta=p.physics.delta, gravity=g, mass=p.physics.rho0 * p.particles.dp ** self.dim,
            kernel=p.physics.kernel, diffusion=p.physics.diffusion)
        self.rc = 2.0 * p.h
        self.domain = Domain(lay.lo, lay.hi, (False,) * self.dim)
        self.pos0 = xp.asarray(lay.pos.astype(self.dtype))
        self.pos = self.pos0.copy()
        self.vel = xp.zeros((self.n, self.dim), self.dtype)
        self.rho = xp.zeros(self.n, self.dtype)
        self.vel_m1 = self.vel.copy()
        self.rho_m1 = self.rho.copy()
        self.verlet_step = 0
        self.dt = 0.0
        self.stats = {"rebuilds": 0}

    def _initialise(self):
        xp = self.xp
        up = self.backend.asnumpy(self.pos[:, -1]).astype(np.float64)
        # hydrostatic start (DualSPHysics): fluid and walls get ρ of the depth below the fluid top.
        # Computed on the host so every backend starts from bit-identical densities (a device pow
        # differs from NumPy's in the last ulp).
        rho0 = reference.hydrostatic_density(np, self.layout.fluid_height - up, self.k)
        self.rho[...] = xp.asarray(rho0.astype(self.dtype))
        self.vel[...] = 0
        self.vel_m1[...] = 0
        self.rho_m1[...] = self.rho
        self.verlet_step = 0
        self._time = 0.0
        self._set_piston(0.0)

    def _set_piston(self, t):
        if not bool(self.moving.any()):
            return
        g = self.preset.geometry
        s, v = geometry.piston_motion(t, g.piston_amplitude, g.piston_period)
        self.pos[self.moving, 0] = self.pos0[self.moving, 0] + self.dtype.type(s)
        self.vel[self.moving, 0] = self.dtype.type(v)

    def check_consistent(self, meta, arrays):
        """The contract's checks, and the clock's: with a fixed Δt (time.dt_fixed) meta.time is
        meta.step × Δt (summed step by step: within 1e-8 relative, far above the sum's rounding drift of
        ~2e-10 after 10⁷ steps); with the adaptive Δt, zero
        exactly at step 0 and positive after it (each Δt is positive)."""
        super().check_consistent(meta, arrays)
        step, t = int(meta["step"]), float(meta["time"])
        dt = self.preset.time.dt_fixed
        if dt > 0 and not math.isclose(t, step * dt, rel_tol=1e-8, abs_tol=1e-12 * dt):
            raise CheckpointError(f"meta.time = {t:.6g} does not match meta.step × time.dt_fixed = {step} × {dt:.6g} "
                                  f"= {step * dt:.6g}: not a state to resume from")
        if (step == 0) != (t == 0.0):
            raise CheckpointError(f"meta.time = {t:.6g} at meta.step = {step}: the clock starts at 0 and every "
                                  "step advances it by a positive Δt")

    def state_arrays(self):
        return {"pos": self.pos, "vel": self.vel, "rho": self.rho, "vel_m1": self.vel_m1,
                "rho_m1": self.rho_m1, "verlet_step": self._verlet_step_array()}

    def _verlet_step_array(self):
        """[verlet_step] as a backend array, filled on the device (no host → device copy to wait for)."""
        a = self.xp.empty(1, dtype=self.xp.int64)
        a[0] = self.verlet_step
        return a

    def _load_state_arrays(self, arrays):
        xp = self.xp
        for name in ("pos", "vel", "rho", "vel_m1", "rho_m1"):
            getattr(self, name)[...] = xp.asarray(np.asarray(arrays[name]).astype(self.dtype))
        self.verlet_step = int(np.asarray(arrays["verlet_step"]).ravel()[0])
        self._invalidate_lists()

    def random_state(self, rng: np.random.Generator):
        """The initial layout with fluid particles jittered by up to 5% of dp and small random
        velocities (σ = 2% of √(gH)) and density perturbations of 0.1%: physically valid
        (no overlaps, density near ρ0), and it sets the fluid moving so every term is exercised."""
        self._initialise()
        fl = np.asarray(self.backend.asnumpy(self.fluid))
        pos = self.backend.asnumpy(self.pos).astype(np.float64)
        dp = self.preset.particles.dp
        nf = int(fl.sum())
        pos[fl] += rng.uniform(-0.05 * dp, 0.05 * dp, (nf, self.dim))
        vel = np.zeros((self.n, self.dim))
        vel[fl] = rng.normal(0.0, 0.02 * math.sqrt(self.k.gravity * self.layout.fluid_height + 1e-12), (nf, self.dim))
        rho = self.backend.asnumpy(self.rho).astype(np.float64)
        rho[fl] *= 1.0 + rng.uniform(-1e-3, 1e-3, nf)
        self._load_state_arrays({"pos": pos, "vel": vel, "rho": rho, "vel_m1": vel, "rho_m1": rho,
                                 "verlet_step": np.array([0])})

    # ---- time and Δt: on the GPU they live in device memory, read only when asked ----
    @property
    def _time(self) -> float:
        gpu = self.__dict__.get("gpu")
        return gpu.read_time() if gpu is not None else self.__dict__.get("_t_host", 0.0)

    @_time.setter
    def _time(self, value: float) -> None:
        self.__dict__["_t_host"] = float(value)
        gpu = self.__dict__.get("gpu")
        if gpu is not None:
            gpu.set_time(float(value))

    @property
    def dt(self) -> float:
        gpu = self.__dict__.get("gpu")
        return gpu.read_dt() if gpu is not None else self.__dict__.get("_dt_host", 0.0)

    def device_time(self):
        gpu = self.__dict__.get("gpu")
        return gpu.st[gpu.par].copy() if gpu is not None else self._time

    @dt.setter
    def dt(self, value: float) -> None:
        self.__dict__["_dt_host"] = float(value)

    def step(self, n: int = 1) -> None:
        """As Engine.step, but ``_advance`` keeps the time itself, step by step (on the GPU on the
        device, no host read per call): t + Δt₁ + … + Δtₙ is then the same sum however the steps
        are batched (Engine.step's t + (Δt₁ + … + Δtₙ) may round differently, and the piston moves
        with t), so step(N) equals N × step(1) bit for bit."""
        if n < 1:
            return
        # A blow-up overflows on NumPy: the diagnostics say so in one line (Diverged), not warnings.
        with self.on_stream(), np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            self._advance(n)
        self.step_count += n
        self._absorb(self.timer.collect())

    # ---- variants ----
    def _apply_selection(self, old, new):
        self._invalidate_lists()
        old_gpu = self.__dict__.get("gpu")
        t, dt = self._time, self.dt  # from the device of the selection being replaced, if any
        self.gpu = None
        if self.backend.is_gpu:
            gpu = GpuSPH(self, new)
            if old_gpu is not None:
                gpu.st[2] = dt
            self.gpu = gpu
            self._time = t

    def _invalidate_lists(self):
        self.vlist = VerletList(self.rc)

    # ---- neighbour search ----
    def _pairs(self, steps):
        """Pairs within r_c for the current positions, by the selected search.

        Phases follow P3's tables: ``sort`` (cell keys, sort, cell start/end), ``list`` (Verlet
        list build; zero for the cell searches), ``interaction`` (candidate pairs and forces),
        ``other`` (integration, Δt). ``steps`` is 1 on a step's first force evaluation and 0 on
        the symplectic corrector's, so per-step times count each step once.
        """
        xp, method = self.xp, self.selection["search"]
        if method == "verlet":
            vl = self.vlist
            with self.timer.phase("sort", steps=steps):
                rebuild = vl.needs_rebuild(xp)
                if rebuild:
                    grid = vl.sort(xp, self.pos, self.domain, self.verlet_skin())
            with self.timer.phase("list", steps=steps):
                if rebuild:
                    vl.build(xp, self.pos, self.domain, grid)
                    self.stats["rebuilds"] += 1
            with self.timer.phase("interaction", steps=steps):
                return vl.pairs(xp, self.pos, self.domain)
        with self.timer.phase("sort", steps=steps):
            grid = build_cells(xp, self.pos, self.domain, self.rc * CELL_FRACTION[method])
        with self.timer.phase("interaction", steps=steps):
            return cell_pairs(xp, self.pos, self.domain, self.rc, grid)

    def verlet_skin(self) -> float:
        """Δh = 2·V_max·C·Δt (P3); the floor of 1% of r_c keeps a fluid at rest from rebuilding
        every step (any Δh is correct: the Δh/2 travelled-distance rule guarantees no missed pair)."""
        xp = self.xp
        vmax = float(xp.max(xp.sqrt(xp.sum(self.vel * self.vel, axis=1))))
        dt = self.dt if self.dt > 0 else self._dt_guess()
        return max(2.0 * vmax * self.preset.search.verlet_steps * dt, 0.01 * self.rc)

    def _dt_guess(self):
        return self.preset.time.cfl * self.k.h / self.k.c0

    def _forces(self, steps=1):
        pairs = self._pairs(steps)
        with self.timer.phase("interaction", steps=0):
            ace, arho, mu_max = reference.interaction(self.xp, pairs, self.vel, self.rho, self.fluid, self.k)
        self._npairs = int(pairs[0].size)
        return ace, arho, mu_max

    def _choose_dt(self, ace, mu_max):
        t = self.preset.time
        if t.dt_fixed > 0:
            return t.dt_fixed
        return reference.cfl_dt(self.xp, ace, self.rho, self.fluid, mu_max, self.k, t.cfl)

    # ---- stepping ----
    def _advance(self, n):
        if self.gpu is not None:
            one = self._step_gpu_symplectic if self.preset.time.scheme == "symplectic" else self._step_gpu_verlet
            for _ in range(n):
                one()
            return 0.0  # SPH.step: the time is kept on the device
        one = self._step_symplectic if self.preset.time.scheme == "symplectic" else self._step_verlet
        t0 = self._time
        for _ in range(n):
            self._time += one()
        return self._time - t0  # SPH.step: the time is already advanced

    def _clamp_boundary_density(self, rho):
        wall = ~self.fluid
        rho[wall] = self.xp.maximum(rho[wall], self.dtype.type(self.k.rho0))

    def _step_verlet(self):
        xp = self.xp
        ace, arho, mu_max = self._forces()
        with self.timer.phase("other"):
            dt = self._choose_dt(ace, mu_max)
            self.dt = dt
            d = self.dtype.type(dt)
            self.verlet_step += 1
            if self.verlet_step < self.preset.time.verlet_euler_every:
                vel_new = self.vel_m1 + 2 * d * ace
                rho_new = self.rho_m1 + 2 * d * arho
            else:  # the periodic Euler step decouples the odd and even Verlet sequences
                self.verlet_step = 0
                vel_new = self.vel + d * ace
                rho_new = self.rho + d * arho
            self._clamp_boundary_density(rho_new)
            new_pos = self.pos.copy()
            fl = self.fluid
            new_pos[fl] = self.pos[fl] + d * self.vel[fl] + (0.5 * d * d) * ace[fl]
            vel_new[~fl] = self.vel[~fl]
            self.vel_m1, self.rho_m1 = self.vel, self.rho
            self.vel, self.rho = vel_new, rho_new
            old = self.pos.copy()
            self.pos = new_pos
            self._set_piston(self._time + dt)
            if self.selection["search"] == "verlet" and self.vlist.built:
                self.vlist.advance(xp, self.pos - old)
        return dt

    def _step_gpu_verlet(self):
        """The Verlet step on the GPU: forces, then one fused kernel (CFL Δt from the interaction's
        block maxima, Verlet update, wall density clamp, piston, travelled distances). No host read."""
        g = self.gpu
        g.forces(steps=1, slot=g.par)
        with self.timer.phase("other"):
            self.verlet_step += 1
            euler = self.verlet_step >= self.preset.time.verlet_euler_every
            if euler:
                self.verlet_step = 0
            g.integrate_verlet(euler)
            self.vel, self.vel_m1 = self.vel_m1, self.vel
            self.rho, self.rho_m1 = self.rho_m1, self.rho

    def _step_gpu_symplectic(self):
        g = self.gpu
        g.forces(steps=1, slot=g.par)
        with self.timer.phase("other"):
            g.predict()
        g.forces(steps=0, slot=2)  # the corrector's forces: Δt is already fixed, slot 2 is scratch
        with self.timer.phase("other", steps=0):
            g.correct()

    def _step_symplectic(self):
        ace, arho, mu_max = self._forces()
        fl = self.fluid
        with self.timer.phase("other"):
            dt = self._choose_dt(ace, mu_max)
            self.dt = dt
            half = self.dtype.type(0.5 * dt)
            pos0, vel0, rho0 = self.pos.copy(), self.vel.copy(), self.rho.copy()
            rho_h = rho0 + half * arho
            self._clamp_boundary_density(rho_h)
            self.rho = rho_h
            self.vel = vel0.copy()
            self.vel[fl] = vel0[fl] + half * ace[fl]
            self._shift(pos0, fl, half * vel0[fl])
            self._set_piston(self._time + 0.5 * dt)
        ace, arho, _ = self._forces(steps=0)
        with self.timer.phase("other", steps=0):
            d = self.dtype.type(dt)
            eps = -(arho / rho_h) * d
            rho_new = rho0 * (2 - eps) / (2 + eps)
            self._clamp_boundary_density(rho_new)
            vel_new = vel0.copy()
            vel_new[fl] = vel0[fl] + d * ace[fl]
            self._shift(pos0, fl, d * 0.5 * (vel0[fl] + vel_new[fl]))
            self.vel, self.rho = vel_new, rho_new
            self._set_piston(self._time + dt)
            self.vel_m1, self.rho_m1 = self.vel.copy(), self.rho.copy()
        return dt

    def _shift(self, base, fl, delta):
        new_pos = self.pos.copy()
        new_pos[fl] = base[fl] + delta
        old = self.pos
        self.pos = new_pos
        if self.selection["search"] == "verlet" and self.vlist.built:
            self.vlist.advance(self.xp, self.pos - old)

    # ---- outputs ----
    def pressure(self):
        return reference.pressure(self.xp, self.rho, self.k)

    def fields(self):
        xp = self.xp
        speed = xp.sqrt(xp.sum(self.vel * self.vel, axis=1))
        attrs = {"speed": speed, "density": self.rho, "pressure": self.pressure(), "kind": self.kind}
        for a, name in enumerate("xyz"[: self.dim]):
            attrs[f"v{name}"] = self.vel[:, a]
        return {"particles": Particles(self.pos, attrs, label="SPH particles",
                                       bounds=(tuple(self.domain.lo), tuple(self.domain.hi)))}

    def device_diagnostics(self):
        """Device scalars, no host sync: masks by ``where`` (boolean indexing would read the count
        back to size its result) and Δt as the device value the stepper keeps. The app launches
        these a few times a second while the simulation runs; every sync here drained the queue
        (the 1M-particle display benchmark lost ~12 % of the steps to the frames; docs/decisions.md D22)."""
        xp = self.xp
        if not self.n_fluid:
            return {"fluid_mass": 0.0, "kinetic_energy": 0.0, "max_speed": 0.0, "rho_min": 0.0, "rho_max": 0.0,
                    "max_distance": 0.0, "dt": self.dt}
        fl = self.fluid
        v2 = xp.where(fl, xp.sum(self.vel * self.vel, axis=1), 0)
        gpu = self.__dict__.get("gpu")
        return {"fluid_mass": self.n_fluid * self.k.mass,
                "kinetic_energy": 0.5 * self.k.mass * xp.sum(v2, dtype=xp.float64),
                "max_speed": xp.sqrt(xp.max(v2)),
                "rho_min": xp.min(xp.where(fl, self.rho, xp.inf)), "rho_max": xp.max(xp.where(fl, self.rho, -xp.inf)),
                "max_distance": xp.max(xp.where(fl[:, None], xp.abs(self.pos), 0)),
                "dt": gpu.st[2].copy() if gpu is not None else self.dt}  # a copy: st is live

    def sanity_bounds(self):
        """Density positive; fluid particles within a few tank sizes of the tank (coordinates from
        its corner), speed below ten times the numerical sound speed c0 (a weakly compressible
        flow stays far below c0); density below ten times ρ0 (weakly compressible: a flow keeps it within
        a few per cent of ρ0, and Tait's pressure at 10 ρ0 is (10^γ − 1) times the stiffness B: only a
        blow-up, or a state that never was a flow, gets there)."""
        g = self.preset.geometry
        size = max(g.tank_length, g.tank_height, g.tank_width if self.preset.dim == 3 else 0.0)
        return {"rho_min": (0.0, math.inf), "rho_max": (-math.inf, 10.0 * self.preset.physics.rho0),
                "max_distance": (-math.inf, 4.0 * size), "max_speed": (-math.inf, 10.0 * self.k.c0)}

    def timing_extra(self) -> dict:
        return self.search_stats()

    def search_stats(self) -> dict:
        vl = self.vlist
        out = {"particles": self.n, "fluid_particles": self.n_fluid, "rebuilds": self.stats["rebuilds"],
               "pairs_within_rc": getattr(self, "_npairs", 0),
               "mean_neighbours": getattr(self, "_npairs", 0) / max(self.n, 1)}
        if self.selection["search"] == "verlet" and vl.built:
            out["mean_list_length"] = vl.mean_length
            out["steps_between_rebuilds"] = (float(np.mean(vl.steps_per_build)) if vl.steps_per_build
                                             else float(vl.steps_since_build))
            if self.gpu is None:
                out["list_bytes"] = int(vl.i.nbytes + vl.j.nbytes)
        for key in ("mean_list_length", "list_bytes", "idle_thread_share", "verlet_oom_fallbacks"):
            if key in self.stats and self.selection["search"] == "verlet":
                out[key] = self.stats[key]
        if self.gpu is not None and self.selection["search"] == "verlet":
            # interactions that found the lists stale (rebuild decided late) and searched cells instead
            out["verlet_late_interactions"] = self.gpu.stale_launches()
        if self.gpu is not None:
            state = sum(int(a.nbytes) for a in (self.pos, self.vel, self.rho, self.vel_m1, self.rho_m1))
            out["device_bytes"] = state + self.gpu.memory_bytes()
        return out

    @property
    def updates_per_step(self):
        return float(self.n)

    def bytes_per_update(self):
        # one read of each neighbour's position, velocity and density, one write of the rates
        it = self.dtype.itemsize
        return (2 * self.dim + 1) * it * max(getattr(self, "_npairs", 0) / max(self.n, 1), 1.0) + (self.dim + 1) * it

    # ---- tests and benchmarks ----
    @classmethod
    def equivalence_presets(cls):
        # A small settling tank (hydrostatic, jittered by random_state): no splashing, so the
        # round-off from summing neighbours in another order stays near machine precision over
        # 100 steps instead of being amplified by a chaotic free surface.
        base = {"engine": FAMILY, "description": "equivalence test",
                "geometry": {"kind": "hydrostatic2d", "column_width": 0.3, "column_height": 0.2,
                             "tank_length": 0.3, "tank_height": 0.25},
                "particles": {"dp": 0.02}}
        return {"hydrostatic2d-fp64": SPHPreset.model_validate(base)}

    # P3's DamBreak (3D) geometry as overrides of the bench preset (sph-dambreak2d)
    _DAM3D = ["geometry.kind=dambreak3d", "geometry.column_width=0.4", "geometry.column_height=0.3",
              "geometry.tank_length=1.6", "geometry.tank_width=0.67", "geometry.tank_height=0.4",
              "particles.boundary_layers=2"]

    @classmethod
    def bench_spec(cls):
        return BenchSpec(preset="sph-dambreak2d", cases=cls.bench_cases, selections=cls.bench_selections)

    @classmethod
    def bench_cases(cls, backend: str = "cupy"):
        """P3 Tables 3–5 shape: 2D and 3D dam breaks at P3's sizes (21k, 172k), fp32 and fp64,
        plus the 1M-particle 3D target of issue 6 (fp32). Precision is a preset setting, so it is a
        case, not a variant. NumPy: small sizes of the same cases."""
        if backend == "numpy":
            sizes2d, sizes3d, big = [("2d-1k", 0.02)], [("3d-3k", 0.04)], []
        else:
            sizes2d, sizes3d, big = [("2d-21k", 0.005)], [("3d-172k", 0.0094)], [("3d-1M", 0.0048)]
        out = []
        for prec in ("fp32", "fp64"):
            for label, dp in sizes2d:
                out.append((f"dambreak{label}-{prec}", [f"particles.dp={dp}", f"physics.precision={prec}"]))
            for label, dp in sizes3d:
                out.append((f"dambreak{label}-{prec}", [*cls._DAM3D, f"particles.dp={dp}",
                                                        f"physics.precision={prec}"]))
        for label, dp in big:
            out.append((f"dambreak{label}-fp32", [*cls._DAM3D, f"particles.dp={dp}", "physics.precision=fp32"]))
        return out

    @classmethod
    def bench_selections(cls, backend: str = "cupy"):
        """cell-full vs verlet first (P3's CL vs VL), then the other choices one at a time."""
        if backend == "numpy":
            return [("CL cell-full", {"search": "cell-full"}), ("CL cell-half", {"search": "cell-half"}),
                    ("VL per-particle", {"search": "verlet"})]
        out = [("CL cell-full", {"search": "cell-full"}), ("VL warp-interleaved", {"search": "verlet"}),
               ("CL cell-half", {"search": "cell-half"}),
               ("VL per-particle", {"search": "verlet", "verlet_layout": "per-particle"})]
        for layout in ("aos", "float4"):
            out.append((f"CL cell-full {layout}", {"search": "cell-full", "layout": layout}))
        # Verlet with the float4 layout and the default choices is "VL float4 fast-u2 one-pass" below
        out.append(("VL aos", {"search": "verlet", "layout": "aos"}))
        # The pair math (variants.py, axis pair) and the list build (axis verlet_build) on the fastest
        # search and layout; the cells above run the CuPy defaults (fast-u2, one-pass). Every cell here
        # names both axes, so `exact` stays the old kernel (exact pair, two-pass lists) whatever the
        # defaults, and the one-pass build's gain is each one-pass cell against its two-pass twin.
        # Likeliest gains first (a bench cut short by a timeout keeps the cells measured). The labels
        # share the prefix "VL float4 " (with the space), which no other label contains: `--only "VL float4 "`.
        two, one = {"verlet_build": "two-pass"}, {"verlet_build": "one-pass"}
        for label, extra in (("exact", {"pair": "exact", **two}), ("fast", {"pair": "fast", **two}),
                             ("fast-u2", {"pair": "fast-u2", **two}), ("fast-u4", {"pair": "fast-u4", **two}),
                             ("fast-u2 one-pass", {"pair": "fast-u2", **one}),
                             ("fast one-pass", {"pair": "fast", **one}),
                             ("fast-lb12", {"pair": "fast-lb12", **two})):
            out.append((f"VL float4 {label}", {"search": "verlet", "layout": "float4", **extra}))
        out.append(("VL soa exact", {"search": "verlet", "pair": "exact", **two}))
        return out

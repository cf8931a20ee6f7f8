"""Physics configuration of the SPH engine (the preset model).

The physics follows DualSPHysics (Crespo et al. 2015), the code P3 built on. ``physics.precision``
is a *preset setting*, not a live variant: it changes the dtype of the physical state, so two
precisions are two (slightly) different simulations, not one answer computed two ways.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..presets import PresetBase, Strict


class Particles(Strict):
    dp: float = Field(0.02, gt=0, description="initial inter-particle distance (m)")
    coefh: float = Field(1.0, gt=0.5, le=2.0,
                         description="h = coefh·√(dim)·dp (DualSPHysics' CoefH convention)")
    boundary_layers: int = Field(3, ge=1, le=6, description="layers of DBC boundary particles in walls")


class Physics(Strict):
    rho0: float = Field(1000.0, gt=0, description="reference density ρ0 (kg/m³)")
    gravity: float = Field(9.81, ge=0, description="|g| (m/s²), pointing along −y (2D) / −z (3D)")
    gamma: float = Field(7.0, gt=1, description="Tait exponent γ")
    coefsound: float = Field(10.0, gt=0, description="c0 = coefsound·√(g·H), H = fluid height")
    alpha: float = Field(0.1, ge=0, description="artificial viscosity coefficient α")
    delta: float = Field(0.1, ge=0, description="δ-SPH density diffusion coefficient (0 = off)")
    diffusion: Literal["fourtakas", "molteni"] = Field(
        "fourtakas", description="δ-SPH form: fourtakas (hydrostatic part removed, DualSPHysics DDT2) | molteni")
    kernel: Literal["wendland", "cubic"] = Field(
        "wendland", description="smoothing kernel: Wendland C2 (quintic) or the cubic spline")
    precision: Literal["fp32", "fp64"] = Field("fp64", description="dtype of the physical state")

    @property
    def dtype(self):
        return np.float32 if self.precision == "fp32" else np.float64


class Time(Strict):
    scheme: Literal["verlet", "symplectic"] = Field(
        "verlet", description="time integration: Verlet (with an Euler step every verlet_euler_every steps) or "
                              "the symplectic predictor–corrector (half steps)")
    verlet_euler_every: int = Field(40, ge=2,
                                    description="Verlet: every N-th step is an Euler step (VerletSteps)")
    cfl: float = Field(0.2, gt=0, le=0.5, description="Δt = cfl·min(√(h/|a|), h/(c + max μ))")
    dt_fixed: float = Field(0.0, ge=0, description="> 0: use this Δt instead of the CFL one")


class Search(Strict):
    verlet_steps: float = Field(8.0, gt=0, description="C in Δh = 2·V_max·C·Δt (steps a Verlet list should last)")


class Geometry(Strict):
    kind: Literal["dambreak2d", "hydrostatic2d", "dambreak3d", "piston2d"] = Field(
        "dambreak2d", description="dambreak2d / dambreak3d: a water column released in a tank; hydrostatic2d: "
                                  "water at rest in a tank; piston2d: a piston oscillating at one end of the "
                                  "tank (a wave maker)")
    column_width: float = Field(0.5, gt=0, description="water column width a (dam break) / tank length")
    column_height: float = Field(1.0, gt=0, description="water column height (2a for Martin & Moyce)")
    tank_length: float = Field(2.0, gt=0, description="inner tank length (x)")
    tank_height: float = Field(1.2, gt=0, description="inner tank height (walls)")
    tank_width: float = Field(0.67, gt=0, description="inner tank width (3D only, y)")
    obstacle: tuple[float, float, float, float] = Field(
        (0.9, 0.24, 0.12, 0.12), description="3D: obstacle x0, y0, size x, size y (full height)")
    piston_amplitude: float = Field(0.05, ge=0, description="piston stroke amplitude (m)")
    piston_period: float = Field(1.0, gt=0, description="piston period (s)")


class SPHPreset(PresetBase):
    engine: Literal["sph"]
    particles: Particles = Field(default_factory=Particles)
    physics: Physics = Field(default_factory=Physics)
    time: Time = Field(default_factory=Time)
    search: Search = Field(default_factory=Search)
    geometry: Geometry = Field(default_factory=Geometry)

    @model_validator(mode="after")
    def _fits(self):
        g = self.geometry
        if g.kind in ("dambreak2d", "dambreak3d") and g.column_width > g.tank_length:
            raise ValueError(f"geometry.column_width ({g.column_width}) exceeds geometry.tank_length ({g.tank_length})")
        if g.column_height > g.tank_height:
            raise ValueError(f"geometry.column_height ({g.column_height}) exceeds "
                             f"geometry.tank_height ({g.tank_height})")
        if g.column_width < 2 * self.particles.dp or g.column_height < 2 * self.particles.dp:
            raise ValueError("the water column must be at least 2 particles (particles.dp) wide and high")
        if self.physics.gravity == 0:
            # the weakly compressible fluid's stiffness comes from gravity: without it c0 = 0, no
            # pressure ever builds and the CFL step grows to hundreds of seconds
            raise ValueError("physics.gravity = 0 gives the sound speed c0 = coefsound·√(g·H) = 0 (a fluid with no "
                             "pressure); give gravity > 0")
        if g.kind == "piston2d" and g.piston_amplitude >= g.tank_length:
            raise ValueError(f"geometry.piston_amplitude = {g.piston_amplitude:g} reaches the far wall of the "
                             f"{g.tank_length:g} m tank (geometry.tank_length); give a stroke shorter than the tank")
        dt = self.time.dt_fixed
        if dt > 0:  # the explicit scheme's limits with the largest CFL number allowed (0.5)
            c0 = self.physics.coefsound * (self.physics.gravity * g.column_height) ** 0.5
            acoustic = 0.5 * self.h / c0 if c0 > 0 else float("inf")
            force = 0.5 * (self.h / self.physics.gravity) ** 0.5 if self.physics.gravity > 0 else float("inf")
            limit, name = min((acoustic, "acoustic limit 0.5·h/c0"), (force, "force limit 0.5·√(h/g)"))
            if dt > limit:
                raise ValueError(f"time.dt_fixed = {dt:g} s exceeds the {name} = {limit:.3g} s (h = {self.h:.3g} m, "
                                 f"c0 = {c0:.3g} m/s); use a smaller Δt or 0 for the CFL time step")
        if g.kind == "dambreak3d":
            x0, y0, sx, sy = g.obstacle
            if sx <= 0 or sy <= 0 or x0 < 0 or y0 < 0 or x0 + sx > g.tank_length or y0 + sy > g.tank_width:
                raise ValueError(f"geometry.obstacle {list(g.obstacle)} (x0, y0, size x, size y) does not lie inside "
                                 f"the {g.tank_length} × {g.tank_width} tank floor; sizes must be > 0")
        return self

    @property
    def dim(self) -> int:
        return 3 if self.geometry.kind == "dambreak3d" else 2

    @property
    def h(self) -> float:
        return self.particles.coefh * (self.dim ** 0.5) * self.particles.dp

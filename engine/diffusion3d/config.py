"""Physics configuration of the 3D diffusion engine (the preset model)."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..decomp.config import DecomposablePreset, SplitAxis
from ..presets import Strict


class Grid(Strict):
    nx: int = Field(64, ge=3, le=4096, description="points along x (fastest axis)")
    ny: int = Field(64, ge=3, le=4096, description="points along y")
    nz: int = Field(64, ge=3, le=4096, description="points along z")
    dx: float = Field(1.0, ge=1e-12, le=1e12, description="grid spacing (cubic cells), 1e-12 … 1e12")


class Physics(Strict):
    kappa: float = Field(1.0, ge=1e-12, le=1e12, description="diffusivity κ, 1e-12 … 1e12")
    r: float = Field(0.1, gt=0, le=1 / 6, description="κ·Δt/Δx²; explicit Euler is stable for r ≤ 1/6 in 3D")
    precision: Literal["fp32", "fp64"] = Field("fp32",
                                                 description="floating-point type of the state")

    @property
    def dtype(self):
        return np.float32 if self.precision == "fp32" else np.float64


class Boundaries(Strict):
    kind: Literal["periodic", "fixed"] = Field("periodic", description="periodic, or fixed (Dirichlet) outer points")


class Initial(Strict):
    kind: Literal["sine", "gaussian", "random"] = Field(
        "sine", description="sine: sin modes (mode); gaussian: a Gaussian bump of width `width` at the box "
                                    "centre; random: uniform noise (seed)")
    mode: tuple[int, int, int] = Field((1, 1, 1), description="sine mode numbers (mx, my, mz); 0 = uniform")
    amplitude: float = Field(1.0, description="height of the initial field")
    width: float = Field(0.1, gt=0, description="gaussian width as a fraction of the box")
    seed: int = Field(0, description="random: seed of the noise (the same seed, the same run)")

    @model_validator(mode="after")
    def _modes(self):
        if any(m < 0 for m in self.mode):
            raise ValueError("mode numbers must be ≥ 0")
        return self


class Diffusion3DPreset(DecomposablePreset):
    decomp_split = SplitAxis("nz", "z plane", halo=1)  # engine/decomp: the 7-point stencil's reach along z
    engine: Literal["diffusion3d"]
    grid: Grid = Field(default_factory=Grid)
    physics: Physics = Field(default_factory=Physics)
    boundaries: Boundaries = Field(default_factory=Boundaries)
    initial: Initial = Field(default_factory=Initial)
    @model_validator(mode="after")
    def _fixed_modes(self):
        if self.boundaries.kind == "fixed" and self.initial.kind == "sine" and 0 in self.initial.mode:
            raise ValueError("with fixed boundaries every sine mode number must be ≥ 1 "
                             f"(initial.mode = {list(self.initial.mode)})")
        return self

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.grid.nz, self.grid.ny, self.grid.nx)

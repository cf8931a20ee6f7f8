"""Physics configuration of the 2D wave engine (the preset model)."""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..decomp.config import DecomposablePreset, SplitAxis
from ..presets import Strict


class Grid(Strict):
    nx: int = Field(256, ge=3, le=16384, description="points along x (fastest axis)")
    ny: int = Field(256, ge=3, le=16384, description="points along y")
    dx: float = Field(1.0, ge=1e-12, le=1e12, description="grid spacing (square cells), 1e-12 … 1e12")


class Physics(Strict):
    c: float = Field(1.0, ge=1e-12, le=1e12, description="wave speed, 1e-12 … 1e12")
    courant: float = Field(0.5, gt=0, le=1 / math.sqrt(2),
                           description="c·Δt/Δx; leapfrog in 2D is stable for ≤ 1/√2")
    precision: Literal["fp32", "fp64"] = Field("fp32",
                                                 description="floating-point type of the state")

    @property
    def dtype(self):
        return np.float32 if self.precision == "fp32" else np.float64


class Boundaries(Strict):
    kind: Literal["periodic", "fixed"] = Field("periodic", description="periodic, or fixed (u = 0 held) outer points")


class Initial(Strict):
    kind: Literal["standing", "gaussian", "random"] = Field(
        "standing", description="standing: a standing wave of modes (mode); gaussian: a Gaussian bump of width "
                                        "`width` at the box centre; random: uniform noise (seed)")
    mode: tuple[int, int] = Field((2, 1), description="standing-wave mode numbers (mx, my)")
    amplitude: float = Field(1.0, description="height of the initial field")
    width: float = Field(0.05, gt=0, description="gaussian width as a fraction of the box")
    seed: int = Field(0, description="random: seed of the noise (the same seed, the same run)")

    @model_validator(mode="after")
    def _modes(self):
        if any(m < 0 for m in self.mode):
            raise ValueError("mode numbers must be ≥ 0")
        return self


class Wave2DPreset(DecomposablePreset):
    decomp_split = SplitAxis("ny", "y row", halo=1)  # engine/decomp: the 5-point stencil's reach along y
    engine: Literal["wave2d"]
    grid: Grid = Field(default_factory=Grid)
    physics: Physics = Field(default_factory=Physics)
    boundaries: Boundaries = Field(default_factory=Boundaries)
    initial: Initial = Field(default_factory=Initial)
    @model_validator(mode="after")
    def _fixed_modes(self):
        if self.boundaries.kind == "fixed" and self.initial.kind == "standing" and 0 in self.initial.mode:
            raise ValueError("with fixed boundaries every mode number must be ≥ 1 "
                             f"(initial.mode = {list(self.initial.mode)})")
        return self

    @property
    def shape(self) -> tuple[int, int]:
        return (self.grid.ny, self.grid.nx)

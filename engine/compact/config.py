"""Physics configuration of the compact family (the preset model).

Problems (``physics.problem``):
- ``advection1d``: φ_t + c φ_x = 0 on [x0, x1] (P4's tests 1 and 2), grid.ny = 1;
- ``rotation2d``: φ_t + u φ_x + v φ_y = 0 with u = -ω y, v = ω x (P4's rotating cone, test 3);
- ``derivative``: the benchmark problem — each step writes df = ∂f/∂(direction) of the same f
  (one batched compact derivative per step: right-hand side + tridiagonal solve).
"""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from ..presets import PresetBase, Strict


class Grid(Strict):
    nx: int = Field(256, ge=8, le=32768, description="points along x (the differentiated axis of 1D problems)")
    ny: int = Field(1, ge=1, le=32768, description="points along y (1 for 1D problems)")
    x0: float = Field(0.0, ge=-1e6, le=1e6, description="domain start in x")
    x1: float = Field(1.0, ge=-1e6, le=1e6, description="domain end in x")
    y0: float = Field(0.0, ge=-1e6, le=1e6, description="domain start in y")
    y1: float = Field(1.0, ge=-1e6, le=1e6, description="domain end in y")

    @model_validator(mode="after")
    def _order(self):
        if not self.x1 > self.x0:
            raise ValueError(f"x1 ({self.x1}) must be greater than x0 ({self.x0})")
        if not self.y1 > self.y0:
            raise ValueError(f"y1 ({self.y1}) must be greater than y0 ({self.y0})")
        return self


class Physics(Strict):
    problem: Literal["advection1d", "rotation2d", "derivative"] = "advection1d"
    scheme: Literal["compact6", "dissipative5"] = Field(
        "compact6", description="compact6: Lele's 6th-order central scheme; dissipative5: Deng's 5th-order "
                                "dissipative compact scheme on a Lax–Friedrichs split flux")
    speed: float = Field(1.0, ge=-1e6, le=1e6, description="advection1d: the advection speed c")
    omega: float = Field(2 * math.pi, ge=-1e6, le=1e6, description="rotation2d: angular velocity ω (u = -ωy, v = ωx)")
    dt: float = Field(0.001, gt=0, le=1e6, description="time step (classical RK4)")
    direction: Literal["x", "y"] = Field("x", description="derivative: the differentiated axis")
    precision: Literal["fp32", "fp64"] = "fp64"

    @property
    def dtype(self):
        import numpy as np

        return np.float32 if self.precision == "fp32" else np.float64


class Boundaries(Strict):
    kind: Literal["periodic", "closures"] = Field(
        "periodic", description="periodic (cyclic systems, Sherman–Morrison) or closures (P4's boundary rows: "
                                "one-sided α=3 at the boundary point, 4th-order Padé next to it; inflow values held)")


class Initial(Strict):
    kind: Literal["cosine-power", "square", "box", "sine", "random"] = Field(
        "cosine-power", description="cosine-power: [(1 - cos 2π(x-x0)/L)/2]^power; square: 1 on [lo, hi]; "
                                    "box: 1 on box = [x0, x1, y0, y1] (P4's cone); sine: sin(2π mode x/L); random")
    power: float = Field(200.0, ge=1, le=1e4, description="cosine-power exponent")
    lo: float = Field(0.15, ge=-1e6, le=1e6, description="square: start of the pulse")
    hi: float = Field(0.25, ge=-1e6, le=1e6, description="square: end of the pulse")
    box: tuple[float, float, float, float] = Field((-0.1, 0.1, 0.4, 0.6), description="box: x0, x1, y0, y1")
    mode: int = Field(1, ge=0, le=100000, description="sine: wave number (periods across the domain)")
    amplitude: float = Field(1.0, ge=-1e6, le=1e6)
    seed: int = 0


class CompactPreset(PresetBase):
    engine: Literal["compact"]
    grid: Grid = Field(default_factory=Grid)
    physics: Physics = Field(default_factory=Physics)
    boundaries: Boundaries = Field(default_factory=Boundaries)
    initial: Initial = Field(default_factory=Initial)

    @model_validator(mode="after")
    def _consistent(self):
        p, g = self.physics.problem, self.grid
        if p == "advection1d" and g.ny != 1:
            raise ValueError(f"advection1d is one-dimensional: grid.ny must be 1 (got {g.ny})")
        if p in ("rotation2d", "derivative") and g.ny < 8:
            raise ValueError(f"{p} is two-dimensional: grid.ny must be ≥ 8 (got {g.ny})")
        if p == "rotation2d" and self.boundaries.kind != "closures":
            raise ValueError("rotation2d needs boundaries.kind = \"closures\" (the velocity u = -ωy, v = ωx is not "
                             "periodic)")
        if p == "derivative" and self.initial.kind in ("square", "box"):
            raise ValueError("derivative: use a smooth initial field (sine, cosine-power or random)")
        if self.initial.kind == "square" and not self.initial.hi > self.initial.lo:
            raise ValueError("initial.hi must be greater than initial.lo")
        if min(g.nx, g.ny if g.ny > 1 else 8) < (8 if self.boundaries.kind == "closures" else 5):
            raise ValueError("closures need at least 8 points per differentiated axis, periodic 5")
        return self

    @property
    def shape(self) -> tuple[int, int]:
        return (self.grid.ny, self.grid.nx)

    @property
    def periodic(self) -> bool:
        return self.boundaries.kind == "periodic"

    def spacing(self, axis: str) -> float:
        g = self.grid
        length, n = (g.x1 - g.x0, g.nx) if axis == "x" else (g.y1 - g.y0, g.ny)
        return length / n if self.periodic else length / (n - 1)

    def coordinates(self, axis: str):
        import numpy as np

        g = self.grid
        start, n = (g.x0, g.nx) if axis == "x" else (g.y0, g.ny)
        return start + self.spacing(axis) * np.arange(n, dtype=np.float64)

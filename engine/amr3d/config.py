"""Physics configuration of the amr3d family (the preset model): a periodic arrangement of
same-level leaves of m³ node-centred points (P0's benchmark box). Multi-level trees arrive with
the octree reference (docs/amr3d.md)."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..presets import PresetBase, Strict


class Grid(Strict):
    leaves: tuple[int, int, int] = Field((8, 8, 8), description="leaves along x, y, z (periodic box), 1 … 64 each")
    m: Literal[9, 17, 33] = Field(17, description="points per leaf edge, 2ⁿ+1 (P0: 17)")

    @model_validator(mode="after")
    def _sizes(self):
        if any(not 1 <= n <= 64 for n in self.leaves):
            raise ValueError(f"grid.leaves must be 1 … 64 per axis, not {list(self.leaves)}")
        return self


class Physics(Strict):
    tau: float = Field(0.6, gt=0.5, le=10.0, description="BGK relaxation time τ = 1/2 + 3ν (lattice units), > 1/2")
    force: tuple[float, float, float] = Field((0.0, 0.0, 0.0), description="body acceleration (lattice units)")
    precision: Literal["fp32", "fp64"] = Field("fp32", description="fp64 on the NumPy reference only")

    @property
    def dtype(self):
        return np.float32 if self.precision == "fp32" else np.float64

    @model_validator(mode="after")
    def _force(self):
        if any(abs(a) > 1e-2 for a in self.force):
            raise ValueError(f"physics.force components must be at most 1e-2 in lattice units, not {list(self.force)}")
        return self


class Initial(Strict):
    kind: Literal["taylor-green", "shear-wave", "random", "rest"] = "taylor-green"
    u0: float = Field(0.05, ge=0.0, le=0.2, description="velocity amplitude (lattice units, Mach ≈ u0·√3)")
    seed: int = 0


class AMR3DPreset(PresetBase):
    engine: Literal["amr3d"]
    grid: Grid = Field(default_factory=Grid)
    physics: Physics = Field(default_factory=Physics)
    initial: Initial = Field(default_factory=Initial)

    @property
    def nleaf(self) -> int:
        lx, ly, lz = self.grid.leaves
        return lx * ly * lz

    @property
    def shape(self) -> tuple[int, int, int]:
        """The uniform lattice the leaves tile (nz, ny, nx): shared faces counted once."""
        s = self.grid.m - 1
        lx, ly, lz = self.grid.leaves
        return (lz * s, ly * s, lx * s)

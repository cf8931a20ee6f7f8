"""Physics configuration of the amr3d family (the preset model): a forest of root blocks
(``grid.leaves`` along x, y, z, the level-0 leaves of m³ node-centred points: P0's benchmark box
when nothing is refined), periodic or walled per axis, refined to finer levels inside boxes given
as fractions of the domain (``[[refine]]``), then 2:1 balanced (docs/amr3d.md)."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..presets import PresetBase, Strict


class Grid(Strict):
    leaves: tuple[int, int, int] = Field((8, 8, 8),
                                         description="root blocks (level-0 leaves) along x, y, z, 1 … 64 each")
    m: Literal[9, 17, 33] = Field(17, description="points per leaf edge, 2ⁿ+1 (P0: 17)")
    periodic: tuple[bool, bool, bool] = Field((True, True, True),
                                              description="per axis: periodic, or half-way bounce-back walls")

    @model_validator(mode="after")
    def _sizes(self):
        if any(not 1 <= n <= 64 for n in self.leaves):
            raise ValueError(f"grid.leaves must be 1 … 64 per axis, not {list(self.leaves)}")
        return self


class Refine(Strict):
    """Leaves whose box overlaps [lo, hi) (fractions of the domain per axis) are refined to ``level``."""
    lo: tuple[float, float, float] = Field(description="low corner, fractions of the domain (x, y, z)")
    hi: tuple[float, float, float] = Field(description="high corner, fractions of the domain (x, y, z)")
    level: int = Field(ge=1, le=4, description="level of the leaves inside (level l: spacing 2^−l of level 0)")

    @model_validator(mode="after")
    def _box(self):
        if any(not (0.0 <= a < b <= 1.0) for a, b in zip(self.lo, self.hi)):
            raise ValueError(f"refine box needs 0 ≤ lo < hi ≤ 1 per axis, not lo={list(self.lo)} hi={list(self.hi)}")
        return self


class Physics(Strict):
    tau: float = Field(0.6, gt=0.5, le=10.0,
                       description="BGK relaxation time τ = 1/2 + 3ν on level 0 (lattice units), > 1/2; "
                                   "finer levels derive theirs (same physical viscosity)")
    interp: Literal["quadratic", "linear"] = Field(
        "quadratic", description="coarse → fine interpolation at 2:1 interfaces: quadratic (default, docs/amr3d.md "
                                 "says why) or P0's trilinear")
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
    refine: list[Refine] = Field(default_factory=list, description="boxes refined to a finer level")

    @model_validator(mode="after")
    def _levels(self):
        from .levels import TAU_ONE_GAP, tau_at

        if self.refine:
            top = max(r.level for r in self.refine)
            for lv in range(top + 1):
                if abs(tau_at(self.physics.tau, lv) - 1.0) < TAU_ONE_GAP:
                    raise ValueError(
                        f"physics.tau = {self.physics.tau} gives τ = {tau_at(self.physics.tau, lv):.4f} on level {lv}, "
                        f"within {TAU_ONE_GAP} of 1 where the rescaling between levels is singular (docs/amr3d.md)")
        return self

    @property
    def max_level(self) -> int:
        return max((r.level for r in self.refine), default=0)

    @property
    def is_box(self) -> bool:
        """One level of periodic leaves: P0's benchmark box, where every rung of the ladder runs."""
        return not self.refine and all(self.grid.periodic)

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

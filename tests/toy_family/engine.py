"""1-D diffusion on a periodic line, u_t = ν u_xx (explicit Euler), with a field type of its own."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from nagare.engine import registry
from nagare.engine.benchspec import BenchSpec
from nagare.engine.contract import Engine
from nagare.engine.decomp import DecomposablePreset, SplitAxis
from nagare.engine.presets import Strict
from pydantic import Field

FAMILY = "toy1d"


@dataclass
class Profile:
    """The toy family's own field type: values along a line."""

    values: Any
    label: str = ""


class Grid(Strict):
    n: int = Field(64, ge=8, le=4096)


class Physics(Strict):
    r: float = Field(0.25, gt=0, le=0.5, description="ν Δt / Δx² (stable ≤ 1/2)")


class ToyPreset(DecomposablePreset):
    decomp_split = SplitAxis("n", "point", halo=1)  # engine/decomp: the update reads both neighbours
    engine: Literal["toy1d"]
    grid: Grid = Field(default_factory=Grid)
    physics: Physics = Field(default_factory=Physics)


if FAMILY not in registry.families():
    registry.register_axis(FAMILY, "kernel", default="roll", doc="one way to write the update")
    registry.register_choice(FAMILY, "kernel", "roll", reference={"kernel": "roll"}, rtol=1e-12)


class ToyEngine(Engine):
    family = FAMILY
    Preset = ToyPreset
    constant_dt = True

    def _allocate(self):
        self.u = self.xp.zeros(self.preset.grid.n)
        self.dt = 1.0

    def _initialise(self):
        n = self.preset.grid.n
        self.u[...] = self.xp.asarray(np.sin(2 * np.pi * np.arange(n) / n))

    def _advance(self, n):
        r = self.preset.physics.r
        with self.timer.phase("step", steps=n):
            for _ in range(n):
                self.u = self.u + r * (self.xp.roll(self.u, 1) - 2 * self.u + self.xp.roll(self.u, -1))
        return n * self.dt

    def state_arrays(self):
        return {"u": self.u}

    def _load_state_arrays(self, arrays):
        self.u = self.xp.asarray(arrays["u"]).copy()

    def fields(self):
        return {"profile": Profile(self.u, label="u along x")}

    def device_diagnostics(self):
        return {"total": self.xp.sum(self.u), "max": self.xp.max(self.u)}

    def random_state(self, rng):
        self._load_state_arrays({"u": rng.random(self.preset.grid.n)})

    @property
    def updates_per_step(self):
        return float(self.preset.grid.n)

    def bytes_per_update(self):
        return 16.0

    @classmethod
    def equivalence_presets(cls):
        return {"line": ToyPreset.model_validate({"engine": FAMILY, "description": "toy"})}

    @classmethod
    def bench_spec(cls):
        return BenchSpec(preset="", cases=lambda backend: [("n64", [])])

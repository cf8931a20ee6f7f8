"""A tiny engine for the app tests that emits every field kind the canvas draws.

Grid2D scalar (with an obstacle mask) and vector, Particles (2D tracers with an attribute) and
Boxes (a fixed quadtree), plus a variant axis whose two choices compute the same update in two
ways (so a live switch must continue without a jump) and one GPU-only choice (greyed out on
NumPy). ``physics.blowup_at`` poisons the state with NaN at that step (divergence test).
"""
from __future__ import annotations

import time
from typing import Literal

import numpy as np
from nagare.engine import registry
from nagare.engine.contract import Engine
from nagare.engine.fields import Boxes, Grid2D, Particles
from nagare.engine.presets import PresetBase, Strict
from pydantic import Field

FAMILY = "fake2d"


class Grid(Strict):
    nx: int = Field(64, ge=8, le=1024)
    ny: int = Field(48, ge=8, le=1024)


class Physics(Strict):
    nu: float = Field(0.2, gt=0, le=0.25, description="diffusion number (stable ≤ 1/4)")
    blowup_at: int = Field(0, ge=0, description="step at which the state turns NaN (0 = never)")
    damping: float | None = Field(None, gt=0, description="optional key left unset (form round-trip)")
    step_seconds: float = Field(0.0, ge=0, le=1, description="sleep per step: a slow run (the video test)")


class FakePreset(PresetBase):
    engine: Literal["fake2d"]
    grid: Grid = Field(default_factory=Grid)
    physics: Physics = Field(default_factory=Physics)


registry.register_axis(FAMILY, "kernel", default="roll", doc="two equivalent ways to write one stencil")
registry.register_choice(FAMILY, "kernel", "roll", doc="np.roll stencil", reference={"kernel": "roll"}, rtol=1e-12)
registry.register_choice(FAMILY, "kernel", "slices", doc="padded slices", reference={"kernel": "roll"}, rtol=1e-6)
registry.register_choice(FAMILY, "kernel", "gpu-only", backends=("cupy",), doc="stands for a CUDA kernel",
                         reference={"kernel": "roll"}, rtol=1e-6)
registry.register_axis(FAMILY, "layout", default="a", live=False,
                       doc="stands for an axis that cannot switch between steps (e.g. a precision change)")
registry.register_choice(FAMILY, "layout", "a", reference={"layout": "a"}, rtol=1e-12)
registry.register_choice(FAMILY, "layout", "b", reference={"layout": "a"}, rtol=1e-12)


class FakeEngine(Engine):
    family = FAMILY
    Preset = FakePreset

    def _allocate(self):
        p = self.preset.grid
        xp = self.xp
        self.rho = xp.zeros((p.ny, p.nx), xp.float64)
        y, x = np.mgrid[0:p.ny, 0:p.nx]
        self.mask_host = (x - p.nx / 4) ** 2 + (y - p.ny / 2) ** 2 < (p.ny / 8) ** 2
        self.mask = xp.asarray(self.mask_host)
        self.pos = xp.zeros((32, 2), xp.float64)

    def _initialise(self):
        p = self.preset.grid
        y, x = np.mgrid[0:p.ny, 0:p.nx]
        rho = np.sin(2 * np.pi * x / p.nx) * np.cos(2 * np.pi * y / p.ny) + 0.3 * (x / p.nx)
        self.rho[...] = self.xp.asarray(np.where(self.mask_host, 0.0, rho))
        t = np.linspace(0, 2 * np.pi, 32, endpoint=False)
        self.pos[...] = self.xp.asarray(np.stack([p.nx / 2 + p.nx / 4 * np.cos(t), p.ny / 2 + p.ny / 4 * np.sin(t)], 1))

    def _laplacian(self, f):
        xp = self.xp
        if self.selection["kernel"] == "roll":
            return (xp.roll(f, 1, 0) + xp.roll(f, -1, 0) + xp.roll(f, 1, 1) + xp.roll(f, -1, 1) - 4 * f)
        g = xp.pad(f, 1, mode="wrap")
        return g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:] - 4 * f

    def _advance(self, n):
        nu = self.preset.physics.nu
        p = self.preset.grid
        with self.timer.phase("stencil", steps=n):
            for _ in range(n):
                if self.preset.physics.step_seconds:
                    time.sleep(self.preset.physics.step_seconds)
                self.rho += nu * self._laplacian(self.rho)
                self.rho[self.mask] = 0.0
        with self.timer.phase("tracers", steps=n):
            c = self.xp.asarray([p.nx / 2, p.ny / 2])
            d = self.pos - c
            a = 0.01 * n
            rot = self.xp.asarray([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
            self.pos[...] = c + d @ rot.T
        b = self.preset.physics.blowup_at
        if b and self.step_count + n >= b:
            self.rho[...] = np.nan
        return float(n)

    def state_arrays(self):
        return {"rho": self.rho, "pos": self.pos}

    def _load_state_arrays(self, arrays):
        self.rho[...] = self.xp.asarray(arrays["rho"])
        self.pos[...] = self.xp.asarray(arrays["pos"])

    def random_state(self, rng):
        self._load_state_arrays({"rho": np.where(self.mask_host, 0, rng.random(self.rho.shape)),
                                 "pos": rng.random(self.pos.shape) * 8})

    def fields(self):
        xp = self.xp
        gy, gx = xp.gradient(self.rho)
        speed = xp.sqrt(xp.sum((self.pos - xp.asarray([self.preset.grid.nx / 2, self.preset.grid.ny / 2])) ** 2, 1))
        p = self.preset.grid
        lo = xp.asarray([[0, 0], [p.nx / 2, 0], [0, p.ny / 2], [p.nx / 2, p.ny / 2]], xp.float64)
        hi = lo + xp.asarray([p.nx / 2, p.ny / 2])
        return {
            "rho": Grid2D(self.rho, label="rho", mask=self.mask),
            "u": Grid2D(xp.stack([gx, gy]), kind="vector", label="grad rho", mask=self.mask),
            "tracers": Particles(self.pos, {"radius": speed, "x": self.pos[:, 0]},
                                 bounds=((0.0, 0.0), (float(p.nx), float(p.ny)))),
            "tree": Boxes(lo, hi, xp.asarray([1, 1, 1, 1])),
        }

    def device_diagnostics(self):
        return {"sum": self.xp.sum(self.rho), "max": self.xp.max(self.rho)}

    @property
    def updates_per_step(self):
        return float(self.rho.size)

    def bytes_per_update(self):
        return 16.0

    @classmethod
    def equivalence_presets(cls):
        return {}


Engine = FakeEngine
Preset = FakePreset

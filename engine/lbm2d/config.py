"""Physics configuration of the D2Q9 lattice Boltzmann engine (the preset model).

Everything is in lattice units (Δx = Δt = 1). The relaxation time is given either directly
(``physics.tau``) or through a Reynolds number (``physics.reynolds``) with the characteristic
velocity (lid velocity of a cavity, inlet velocity of a channel) and length (cavity side,
obstacle diameter): ν = U·L/Re, τ = 3ν + ½.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image
from pydantic import Field, field_validator, model_validator

from ..decomp.config import DecomposablePreset, SplitAxis
from ..presets import Strict, applies_when
from . import d2q9


class Grid(Strict):
    # a form shows only the knobs a preset reads (PresetBase.inapplicable_keys): grid.n replaces nx and ny
    nx: int = Field(320, ge=4, le=32768, description="lattice nodes along x (fastest axis)",
                    json_schema_extra=applies_when({"grid.n": [None]}))
    ny: int = Field(320, ge=4, le=32768, description="lattice nodes along y",
                    json_schema_extra=applies_when({"grid.n": [None]}))
    n: int | None = Field(None, ge=4, le=32768, description="square grid: sets nx = ny = n (cavity)")

    @model_validator(mode="after")
    def _square(self):
        if self.n is not None:
            # nx/ny equal to n are accepted: a resumed checkpoint's stored preset holds all three.
            for k in ("nx", "ny"):
                if k in self.model_fields_set and getattr(self, k) != self.n:
                    raise ValueError(f"grid.n = {self.n} and grid.{k} = {getattr(self, k)} both given; grid.n sets "
                                     "a square grid: change grid.n, or give both grid.nx and grid.ny (they replace "
                                     "it)")
            self.nx = self.ny = self.n
        return self


class Physics(Strict):
    tau: float | None = Field(None, gt=0.5, le=10.0, description="BGK relaxation time τ (ν = (τ−½)/3)")
    reynolds: float | None = Field(None, gt=0, le=1e5, description="Reynolds number U·L/ν (instead of tau)")
    lid_velocity: float = Field(0.1, ge=-0.3, le=0.3, description="moving-lid velocity (x), lattice units",
                                json_schema_extra=applies_when({"boundaries.y": ["lid"]}))
    inlet_velocity: float = Field(0.05, ge=-0.3, le=0.3, description="velocity inlet u_x, lattice units",
                                  json_schema_extra=applies_when({"boundaries.x": ["inlet-outlet"]}))
    force: tuple[float, float] = Field((0.0, 0.0), description="body-force density (Fx, Fy), Guo forcing")
    precision: Literal["fp32", "fp64"] = Field("fp32",
                                                 description="floating-point type of the state")
    collision: Literal["bgk", "trt"] = Field("bgk", description="BGK, or TRT with magic parameter Λ = 3/16")

    @model_validator(mode="after")
    def _one_of(self):
        if (self.tau is None) == (self.reynolds is None):
            raise ValueError("give exactly one of physics.tau and physics.reynolds")
        return self

    @property
    def dtype(self):
        return np.dtype(np.float32 if self.precision == "fp32" else np.float64)


class Boundaries(Strict):
    x: Literal["periodic", "walls", "inlet-outlet"] = Field(
        "periodic",
        description="left/right: periodic, bounce-back walls, or velocity inlet (left) + pressure outlet (right)")
    y: Literal["periodic", "walls", "lid"] = Field(
        "periodic", description="bottom/top: periodic, bounce-back walls, or walls with the top one moving (lid)")


def _for_kinds(*kinds: str) -> dict:
    return applies_when({"obstacle.kind": kinds})


class Obstacle(Strict):
    kind: Literal["none", "circle", "rectangle", "image"] = Field(
        "none", description="none; circle (center, diameter); rectangle (center, width, height); image (a mask "
                            "from the picture at path)")
    # (the wake kick of initial.kick is placed from the centre of any kind of obstacle)
    center: tuple[float, float] = Field((0.25, 0.5), description="centre (x, y) as fractions of (nx, ny)",
                                        json_schema_extra=_for_kinds("circle", "rectangle", "image"))
    diameter: float = Field(20.0, gt=0, description="circle diameter in lattice nodes",
                            json_schema_extra=_for_kinds("circle"))
    width: float = Field(20.0, gt=0, description="rectangle width (x) in lattice nodes",
                         json_schema_extra=_for_kinds("rectangle"))
    height: float = Field(20.0, gt=0, description="rectangle height (y) in lattice nodes",
                          json_schema_extra=_for_kinds("rectangle"))
    path: str | None = Field(None, description="image mask: dark pixels (luminance < threshold) are solid; "
                                               "scaled to the grid, top row of the image = top of the domain",
                             json_schema_extra=_for_kinds("image"))
    threshold: float = Field(0.5, gt=0, lt=1, description="image mask: pixels darker than this luminance "
                                                           "(0 … 1) are solid", json_schema_extra=_for_kinds("image"))

    @field_validator("path")
    @classmethod
    def _readable(cls, v):
        if v is not None:
            load_image(v)  # fail now, in one line naming obstacle.path, not after allocation
        return v

    @field_validator("center")
    @classmethod
    def _inside(cls, v):
        if not all(0.0 <= c <= 1.0 for c in v):
            raise ValueError(f"the centre {list(v)} lies outside the domain; give (x, y) as fractions of (nx, ny), "
                             "each from 0 to 1")
        return v

    @model_validator(mode="after")
    def _image(self):
        if self.kind == "image" and not self.path:
            raise ValueError("obstacle.kind = 'image' needs obstacle.path (a PNG file)")
        return self


class Initial(Strict):
    kind: Literal["rest", "uniform", "taylor-green"] = Field(
        "rest", description="rest: fluid at rest; uniform: velocity u0 along x everywhere; taylor-green: the "
                            "decaying Taylor–Green vortex array of amplitude u0")
    u0: float = Field(0.05, ge=-0.3, le=0.3, description="velocity amplitude (uniform flow or Taylor–Green)")
    kick: float = Field(0.0, ge=0, le=1, description="transverse velocity kick behind the obstacle, as a fraction "
                                                     "of u0: starts vortex shedding at once instead of from round-off")


class Tracers(Strict):
    count: int = Field(0, ge=0, le=50_000_000, description="number of passive tracers (0 = none)")
    release: Literal["line", "points"] = Field(
        "line", description="line: tracers released along `line`; points: from the `points` listed")
    line: tuple[float, float, float, float] = Field((0.05, 0.1, 0.05, 0.9),
                                                    description="release line x0, y0, x1, y1 (fractions of the box)")
    points: list[tuple[float, float]] = Field(default_factory=lambda: [(0.05, 0.5)], min_length=1,
                                              description="release points (x, y) as fractions of the box")
    rate: int = Field(64, ge=1, description="tracers (re)released per step")
    every: int = Field(2, ge=1, le=64, description="advect tracers every this many LBM steps (Δt = every)")

    @field_validator("line", "points")
    @classmethod
    def _inside(cls, v, info):
        flat = [c for item in v for c in (item if isinstance(item, tuple) else (item,))]
        if not all(0.0 <= c <= 1.0 for c in flat):
            raise ValueError(f"tracers.{info.field_name} lies outside the domain; give fractions of the box "
                             "from 0 to 1")
        return v


class LBM2DPreset(DecomposablePreset):
    decomp_split = SplitAxis("ny", "y row", halo=1)  # engine/decomp: one ghost row of pull streaming
    exclusive_keys = ((("grid.n",), ("grid.nx", "grid.ny")), (("physics.tau",), ("physics.reynolds",)))

    engine: Literal["lbm2d"]
    grid: Grid = Field(default_factory=Grid)
    physics: Physics = Field(default_factory=lambda: Physics(tau=0.8))
    boundaries: Boundaries = Field(default_factory=Boundaries)
    obstacle: Obstacle = Field(default_factory=Obstacle)
    initial: Initial = Field(default_factory=Initial)
    tracers: Tracers = Field(default_factory=Tracers)
    @model_validator(mode="after")
    def _consistent(self):
        nx, ny, ob = self.grid.nx, self.grid.ny, self.obstacle
        if ob.kind == "circle" and not 1 <= ob.diameter < min(nx, ny):
            raise ValueError(f"obstacle.diameter = {ob.diameter:g} does not fit the {nx}×{ny} grid; "
                             f"allowed: at least 1 node and less than {min(nx, ny)} (the shorter side)")
        if ob.kind == "rectangle":
            for key, size, side, axis in (("width", ob.width, nx, "nx"), ("height", ob.height, ny, "ny")):
                if not 1 <= size < side:
                    raise ValueError(f"obstacle.{key} = {size:g} does not fit the {nx}×{ny} grid; "
                                     f"allowed: at least 1 node and less than grid.{axis} = {side}")
        if self.physics.reynolds is not None:
            if self.characteristic_velocity() == 0:
                raise ValueError("physics.reynolds needs a moving lid (boundaries.y = 'lid') or an inlet "
                                 "(boundaries.x = 'inlet-outlet') with a non-zero velocity")
            tau = self.tau
            if tau <= 0.5 + 1e-3:
                raise ValueError(f"physics.reynolds = {self.physics.reynolds} gives τ = {tau:.5f}, too close to ½ "
                                 "(unstable); lower the Reynolds number or raise the resolution")
        if self.boundaries.x == "inlet-outlet" and self.physics.force != (0.0, 0.0):
            raise ValueError("a body force with an inlet/outlet channel is not supported; use one or the other")
        return self

    # ---- derived quantities ----
    @property
    def shape(self) -> tuple[int, int]:
        return (self.grid.ny, self.grid.nx)

    def characteristic_velocity(self) -> float:
        if self.boundaries.y == "lid":
            return abs(self.physics.lid_velocity)
        if self.boundaries.x == "inlet-outlet":
            return abs(self.physics.inlet_velocity)
        return 0.0

    def characteristic_length(self) -> float:
        if self.obstacle.kind == "circle":
            return self.obstacle.diameter
        if self.obstacle.kind == "rectangle":
            return self.obstacle.height
        return float(self.grid.nx - 2 if self.boundaries.y == "lid" else self.grid.ny)

    @property
    def tau(self) -> float:
        p = self.physics
        if p.tau is not None:
            return p.tau
        return d2q9.tau_for(self.characteristic_velocity() * self.characteristic_length() / p.reynolds)

    @property
    def nu(self) -> float:
        return d2q9.viscosity(self.tau)

    @property
    def wall_velocity(self) -> tuple[float, float]:
        return (self.physics.lid_velocity, 0.0) if self.boundaries.y == "lid" else (0.0, 0.0)

    @property
    def open_boundaries(self) -> bool:
        return self.boundaries.x == "inlet-outlet"


def load_image(path: str) -> np.ndarray:
    """Luminance in [0, 1], shape (rows, cols); a bad file raises ValueError with one line."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_file():  # a FIFO would block the reader forever
        raise ValueError(f"obstacle image {str(p)!r} is not a regular file")
    try:
        with Image.open(p) as im:
            return np.asarray(im.convert("L"), dtype=np.float64) / 255.0
    except FileNotFoundError:
        raise ValueError(f"obstacle image {str(p)!r} does not exist") from None
    except Exception as exc:
        raise ValueError(f"obstacle image {str(p)!r} cannot be read as an image "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None

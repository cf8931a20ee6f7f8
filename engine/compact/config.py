"""Physics configuration of the compact family (the preset model).

Problems (``physics.problem``):
- ``advection1d``: φ_t + c φ_x = 0 on [x0, x1] (P4's tests 1 and 2), grid.ny = 1;
- ``rotation2d``: φ_t + u φ_x + v φ_y = 0 with u = -ω y, v = ω x (P4's rotating cone, test 3);
- ``derivative``: the benchmark problem — each step writes df = ∂f/∂(direction) of the same f
  (one batched compact derivative per step: right-hand side + tridiagonal solve);
- ``navier-stokes``: 2D compressible Navier–Stokes (P4's test 4), conservative variables, compact6
  derivatives, RK4, Navier–Stokes characteristic boundary conditions per side (``boundaries.west``
  …), optional Gaitonde–Visbal filter (engine/compact/navier_stokes.py, nscbc.py, filter.py).
  Units: ρ∞ = c∞ = l = 1 (so p∞ = 1/γ, T∞ = 1 with T = γp/ρ = c²); Re = ρ∞ c∞ l/μ.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..presets import PresetBase, Strict, applies_when
from .stability import describe_refusal


# Which knobs a problem (or an initial state) reads: the parameter form shows only those (a 1D
# advection preset has no Mach number). Declared per field with applies_when().
def _problem(*problems: str) -> dict:
    return applies_when({"physics.problem": problems})


def _initial(*kinds: str) -> dict:
    return applies_when({"initial.kind": kinds})


NS = _problem("navier-stokes")
SCALAR = _problem("advection1d", "rotation2d", "derivative")
TWO_D = _problem("rotation2d", "derivative", "navier-stokes")
ADVECTION, ROTATION, DERIVATIVE = _problem("advection1d"), _problem("rotation2d"), _problem("derivative")
NS_INITIAL = _initial("vortex", "isentropic-vortex", "acoustic-pulse")


class Grid(Strict):
    nx: int = Field(256, ge=8, le=32768, description="points along x (the differentiated axis of 1D problems)")
    ny: int = Field(1, ge=1, le=32768, description="points along y (1 for 1D problems)")
    x0: float = Field(0.0, ge=-1e6, le=1e6, description="domain start in x")
    x1: float = Field(1.0, ge=-1e6, le=1e6, description="domain end in x")
    y0: float = Field(0.0, ge=-1e6, le=1e6, description="domain start in y", json_schema_extra=TWO_D)
    y1: float = Field(1.0, ge=-1e6, le=1e6, description="domain end in y", json_schema_extra=TWO_D)

    @model_validator(mode="after")
    def _order(self):
        if not self.x1 > self.x0:
            raise ValueError(f"x1 ({self.x1}) must be greater than x0 ({self.x0})")
        if not self.y1 > self.y0:
            raise ValueError(f"y1 ({self.y1}) must be greater than y0 ({self.y0})")
        return self


class Physics(Strict):
    problem: Literal["advection1d", "rotation2d", "derivative", "navier-stokes"] = Field(
        "advection1d", description="advection1d: φ_t + c φ_x = 0; rotation2d: φ carried by the solid-body rotation "
                                   "u = -ωy, v = ωx; derivative: one compact derivative a step (the solver "
                                   "benchmark); navier-stokes: 2D compressible flow")
    scheme: Literal["compact6", "dissipative5"] = Field(
        "compact6", description="compact6: Lele's 6th-order central scheme; dissipative5: Deng's 5th-order "
                                "dissipative compact scheme on a Lax–Friedrichs split flux")
    speed: float = Field(1.0, ge=-1e6, le=1e6, description="advection1d: the advection speed c",
                         json_schema_extra=ADVECTION)
    omega: float = Field(2 * math.pi, ge=-1e6, le=1e6, description="rotation2d: angular velocity ω (u = -ωy, v = ωx)",
                         json_schema_extra=ROTATION)
    dt: float = Field(0.001, gt=0, le=1e6, description="time step (classical RK4)")
    direction: Literal["x", "y"] = Field("x", description="derivative: the differentiated axis",
                                         json_schema_extra=DERIVATIVE)
    precision: Literal["fp32", "fp64"] = Field("fp64",
                                                 description="floating-point type of the state")
    # navier-stokes (units ρ∞ = c∞ = l = 1)
    mach: float = Field(1.1, ge=0, le=10, description="navier-stokes: free-stream Mach number |U∞|/c∞",
                        json_schema_extra=NS)
    flow_angle: float = Field(0.0, ge=-360, le=360, description="navier-stokes: free-stream direction, degrees from +x",
                              json_schema_extra=NS)
    reynolds: float = Field(10000.0, gt=0, le=1e12, description="navier-stokes: Re = ρ∞ c∞ l/μ (acoustic Reynolds "
                                                                 "number, l = 1), constant μ", json_schema_extra=NS)
    viscous: bool = Field(True, description="navier-stokes: false drops the viscous and heat fluxes (Euler)",
                          json_schema_extra=NS)
    prandtl: float = Field(0.72, gt=0, le=100, description="navier-stokes: Prandtl number", json_schema_extra=NS)
    gamma: float = Field(1.4, gt=1, le=3, description="navier-stokes: ratio of specific heats", json_schema_extra=NS)
    filter: bool = Field(True, description="navier-stokes: Gaitonde–Visbal 10th-order compact filter after every step",
                         json_schema_extra=NS)
    filter_alpha: float = Field(0.49, gt=-0.5, lt=0.5, description="navier-stokes: filter parameter α_f",
                                json_schema_extra=NS)
    filter_alpha_boundary: float = Field(0.4999, gt=-0.5, lt=0.5,
                                         description="navier-stokes: α of the reduced-order filter rows 1-4 from a "
                                                     "bounded end (near ½: they remove only the odd-even mode)",
                                         json_schema_extra=NS)

    @property
    def dtype(self):
        return np.float32 if self.precision == "fp32" else np.float64


SIDE_KINDS = ("periodic", "nscbc", "hold", "extrapolate")
SideKind = Literal["periodic", "nscbc", "hold", "extrapolate"]
_SIDE_DOC = ("navier-stokes: periodic; nscbc (Poinsot & Lele's characteristic outflow: outgoing waves from the "
             "interior, incoming acoustic wave relaxing p to p∞, other incoming waves 0 — supersonic outflow has "
             "none); hold (every variable held at its initial value: P4's supersonic inflow, or a reflecting "
             "Dirichlet outflow); extrapolate (zeroth-order extrapolation from the neighbour line)")


class Boundaries(Strict):
    kind: Literal["periodic", "closures"] = Field(
        "periodic", description="periodic (cyclic systems, Sherman–Morrison) or closures (P4's boundary rows: "
                                "one-sided α=3 at the boundary point, 4th-order Padé next to it; inflow values held)",
        json_schema_extra=SCALAR)
    west: SideKind = Field("periodic", description=_SIDE_DOC + " (x = x0)", json_schema_extra=NS)
    east: SideKind = Field("periodic", description=_SIDE_DOC + " (x = x1)", json_schema_extra=NS)
    south: SideKind = Field("periodic", description=_SIDE_DOC + " (y = y0)", json_schema_extra=NS)
    north: SideKind = Field("periodic", description=_SIDE_DOC + " (y = y1)", json_schema_extra=NS)
    sigma: float = Field(0.25, ge=0, le=10, description="nscbc: pressure relaxation K = σ(1 - M_n²)c/L_n "
                                                        "(Poinsot & Lele; Rudy & Strikwerda)", json_schema_extra=NS)


class Initial(Strict):
    kind: Literal["cosine-power", "square", "box", "cone", "sine", "random", "vortex", "isentropic-vortex",
                  "acoustic-pulse", "uniform"] = Field(
        "cosine-power", description="cosine-power: [(1 - cos 2π(x-x0)/L)/2]^power; square: 1 on [lo, hi]; "
                                    "box: 1 on box = [x0, x1, y0, y1] (P4's rotating \"cone\"); cone: "
                                    "max(0, 1 - r/cone_radius) around cone_center (the classic solid-body "
                                    "rotation test); sine: sin(2π mode x/L); random; "
                                    "navier-stokes: vortex (P4's ψ = Γ exp(-r²/2r_c²)), isentropic-vortex (exact "
                                    "Euler vortex, strength = amplitude), acoustic-pulse (right-running simple wave, "
                                    "δp = amplitude·exp(-(x-xc)²/core²)), uniform (free stream)")
    power: float = Field(200.0, ge=1, le=1e4, description="cosine-power exponent",
                         json_schema_extra=_initial("cosine-power"))
    lo: float = Field(0.15, ge=-1e6, le=1e6, description="square: start of the pulse",
                      json_schema_extra=_initial("square"))
    hi: float = Field(0.25, ge=-1e6, le=1e6, description="square: end of the pulse",
                      json_schema_extra=_initial("square"))
    box: tuple[float, float, float, float] = Field((-0.1, 0.1, 0.4, 0.6), description="box: x0, x1, y0, y1",
                                                   json_schema_extra=_initial("box"))
    cone_center: tuple[float, float] = Field((0.0, 0.5), description="cone: x, y of its apex",
                                             json_schema_extra=_initial("cone"))
    cone_radius: float = Field(0.25, gt=0, le=1e6, description="cone: radius of its base (its height is amplitude)",
                               json_schema_extra=_initial("cone"))
    mode: int = Field(1, ge=0, le=100000, description="sine: wave number (periods across the domain)",
                      json_schema_extra=_initial("sine"))
    amplitude: float = Field(1.0, ge=-1e6, le=1e6, description="height of the initial profile (navier-stokes: "
                                                                "see the kind)")
    seed: int = Field(0, description="random: seed of the random field", json_schema_extra=_initial("random"))
    circulation: float = Field(-0.0005, ge=-10, le=10, description="vortex: Γ/(c∞ l)",
                               json_schema_extra=_initial("vortex"))
    core: float = Field(0.15, gt=0, le=1e6, description="vortex: r_c/l; isentropic-vortex: radius of max speed; "
                                                        "acoustic-pulse: Gaussian width", json_schema_extra=NS_INITIAL)
    center: tuple[float, float] = Field((0.0, 0.0), description="navier-stokes: centre of the vortex / pulse",
                                        json_schema_extra=NS_INITIAL)


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
        if p in ("rotation2d", "derivative", "navier-stokes") and g.ny < 8:
            raise ValueError(f"{p} is two-dimensional: grid.ny must be ≥ 8 (got {g.ny})")
        if p == "rotation2d" and self.boundaries.kind != "closures":
            raise ValueError("rotation2d needs boundaries.kind = \"closures\" (the velocity u = -ωy, v = ωx is not "
                             "periodic)")
        if p == "derivative" and self.initial.kind in ("square", "box", "cone"):
            raise ValueError("derivative: use a smooth initial field (sine, cosine-power or random)")
        if self.initial.kind == "square" and not self.initial.hi > self.initial.lo:
            raise ValueError("initial.hi must be greater than initial.lo")
        if min(g.nx, g.ny if g.ny > 1 else 8) < (8 if self.boundaries.kind == "closures" else 5):
            raise ValueError("closures need at least 8 points per differentiated axis, periodic 5")
        if p == "navier-stokes":
            self._ns_consistent()
        elif self.initial.kind in ("vortex", "isentropic-vortex", "acoustic-pulse", "uniform"):
            raise ValueError(f"initial.kind = {self.initial.kind!r} is a navier-stokes initial state")
        else:
            self._profile_on_grid()
        refusal = describe_refusal(self)
        if refusal:
            raise ValueError(refusal)
        return self

    def _profile_on_grid(self):
        """The scalar problems' initial profile must exist on this grid: a box with its corners in
        order that covers a grid point, a square pulse that covers one, a sine below the Nyquist
        limit (otherwise φ₀ ≡ 0, or aliased to another wave, and the run shows nothing meant)."""
        init, g = self.initial, self.grid
        two_d = self.physics.problem != "advection1d"
        axes = ("x", "y") if two_d else ("x",)
        if init.kind == "cone" and not two_d:
            raise ValueError("initial.kind = \"cone\" is two-dimensional: use it with rotation2d")
        if init.kind == "box":
            bx0, bx1, by0, by1 = init.box
            if not (bx1 > bx0 and by1 > by0):
                raise ValueError(f"initial.box = {list(init.box)} is [x0, x1, y0, y1] with x1 > x0 and y1 > y0; "
                                 "its corners are in the wrong order")
        (cx, cy), r = init.cone_center, init.cone_radius
        spans = {"box": {"x": init.box[:2], "y": init.box[2:]}, "square": {"x": (init.lo, init.hi)},
                 "cone": {"x": (cx - r, cx + r), "y": (cy - r, cy + r)}}.get(init.kind)
        for axis, (lo, hi) in (spans or {}).items():
            if axis not in axes:
                continue
            c = self.coordinates(axis)
            if not np.any((c >= lo) & (c <= hi)):
                key = {"box": "initial.box", "cone": "initial.cone_center/cone_radius"}.get(init.kind, "initial.lo/hi")
                raise ValueError(f"{key}: [{lo:g}, {hi:g}] along {axis} covers no grid point (the grid runs "
                                 f"from {c[0]:g} to {c[-1]:g} in steps of {self.spacing(axis):g}): φ₀ would be 0")
        if init.kind == "sine":
            for axis in axes:
                n = g.nx if axis == "x" else g.ny
                intervals = n if self.axis_periodic(axis) else n - 1
                top = (intervals - 1) // 2  # below the Nyquist limit of intervals/2 periods
                if not 1 <= init.mode <= top:
                    raise ValueError(f"initial.mode = {init.mode} is not a wave this grid resolves: {n} points "
                                     f"along {axis} hold 1 … {top} periods (below the Nyquist limit "
                                     f"{intervals / 2:g}); mode 0 is a zero field")

    def _ns_consistent(self):
        b, g = self.boundaries, self.grid
        if self.physics.scheme != "compact6":
            raise ValueError("navier-stokes uses the compact6 scheme (physics.scheme = \"compact6\")")
        if self.initial.kind not in ("vortex", "isentropic-vortex", "acoustic-pulse", "uniform", "random"):
            raise ValueError(f"navier-stokes: initial.kind must be vortex, isentropic-vortex, acoustic-pulse, "
                             f"uniform or random (got {self.initial.kind!r})")
        for lo, hi, axis, n in (("west", "east", "x", g.nx), ("south", "north", "y", g.ny)):
            a, c = getattr(b, lo), getattr(b, hi)
            if (a == "periodic") != (c == "periodic"):
                raise ValueError(f"boundaries.{lo} and boundaries.{hi} must both be periodic or both not "
                                 f"(got {a!r}, {c!r})")
            if a != "periodic" and n < 11:
                raise ValueError(f"navier-stokes: a bounded axis needs at least 11 points ({axis}: {n})")
        if self.initial.kind in ("vortex", "isentropic-vortex", "acoustic-pulse"):
            xc, yc = self.initial.center
            if not (g.x0 <= xc <= g.x1 and g.y0 <= yc <= g.y1):
                raise ValueError(f"initial.center = {list(self.initial.center)} lies outside the domain "
                                 f"[{g.x0:g}, {g.x1:g}] × [{g.y0:g}, {g.y1:g}]: the {self.initial.kind} would not "
                                 "be in the flow")
            h = min(self.spacing("x"), self.spacing("y"))
            if self.initial.core < 0.5 * h:
                raise ValueError(f"initial.core = {self.initial.core:g} is below half the grid spacing "
                                 f"({h:g}): the {self.initial.kind} would not be resolved by a single point")

    @property
    def shape(self) -> tuple[int, int]:
        return (self.grid.ny, self.grid.nx)

    @property
    def periodic(self) -> bool:
        return self.boundaries.kind == "periodic"

    def axis_periodic(self, axis: str) -> bool:
        """Whether the grid is periodic along ``axis`` (navier-stokes: per side; others: boundaries.kind)."""
        if self.physics.problem == "navier-stokes":
            return (self.boundaries.west if axis == "x" else self.boundaries.south) == "periodic"
        return self.periodic

    def spacing(self, axis: str) -> float:
        g = self.grid
        length, n = (g.x1 - g.x0, g.nx) if axis == "x" else (g.y1 - g.y0, g.ny)
        return length / n if self.axis_periodic(axis) else length / (n - 1)

    @property
    def length_units(self) -> str:
        """What the coordinates are in: navier-stokes in the reference length l (ρ∞ = c∞ = l = 1);
        the scalar problems' domains are dimensionless ("–")."""
        return "l" if self.physics.problem == "navier-stokes" else "–"

    def grid_view(self) -> dict:
        """Grid2D's spacing, origin and length units for this grid: sample (i, j) is the point
        (x0 + i·h, y0 + j·h), which the view draws as the cell of width h centred on it (the image
        uses the x spacing for both axes, as the square presets have it)."""
        g, h = self.grid, self.spacing("x")
        # the first to the last node (a periodic axis' last node is one spacing short of x1)
        ends = [(lo, hi - self.spacing(axis) if self.axis_periodic(axis) else hi)
                for axis, lo, hi in (("x", g.x0, g.x1), ("y", g.y0, g.y1))]
        return {"spacing": h, "origin": (g.x0 - h / 2, g.y0 - h / 2), "length_units": self.length_units,
                "domain": tuple(ends)}

    def coordinates(self, axis: str):
        g = self.grid
        start, n = (g.x0, g.nx) if axis == "x" else (g.y0, g.ny)
        return start + self.spacing(axis) * np.arange(n, dtype=np.float64)

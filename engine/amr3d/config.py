"""Physics configuration of the amr3d family (the preset model): a forest of root blocks
(``grid.leaves`` along x, y, z, the level-0 leaves of m³ node-centred points: P0's benchmark box
when nothing is refined), periodic or walled per axis, refined to finer levels inside boxes given
as fractions of the domain (``[[refine]]``), then 2:1 balanced (docs/amr3d.md)."""
from __future__ import annotations

import hashlib
import os
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..presets import PresetBase, Strict, applies_when
from .bodies import reference_length
from .levels import TAU_ONE_GAP, tau_at

MAX_TRACERS_PER_SEED = 100_000  # tracers.count and the app's live control

class Grid(Strict):
    leaves: tuple[int, int, int] = Field((8, 8, 8),
                                         description="root blocks (level-0 leaves) along x, y, z, 1 … 64 each")
    m: Literal[9, 17, 33] = Field(17, description="points per leaf edge, 2ⁿ+1 (P0: 17)")
    periodic: tuple[bool, bool, bool] = Field((True, True, True),
                                              description="per axis: periodic, or sides (half-way bounce-back "
                                                          "walls unless free_slip, flow.inlet or flow.outlet "
                                                          "names them)")
    free_slip: list[Literal["x-", "x+", "y-", "y+", "z-", "z+"]] = Field(
        default_factory=list,
        description="sides of non-periodic axes with free slip (specular reflection at the half-way wall: no flow "
                    "through it, no shear stress) instead of bounce-back walls, e.g. ['y-', 'y+', 'z-', 'z+']; "
                    "where one meets a wall, inlet or outflow side the wall's bounce-back wins at the edge "
                    "(docs/amr3d-flows.md)")

    @model_validator(mode="after")
    def _sizes(self):
        if any(not 1 <= n <= 64 for n in self.leaves):
            raise ValueError(f"grid.leaves must be 1 … 64 per axis, not {list(self.leaves)}")
        for side in self.free_slip:
            axis = "xyz".index(side[0])
            if self.periodic[axis]:
                raise ValueError(f"grid.free_slip names {side!r}, which needs grid.periodic[{axis}] = false "
                                 "(a periodic axis has no sides)")
        if len(set(self.free_slip)) != len(self.free_slip):
            raise ValueError(f"grid.free_slip = {list(self.free_slip)} names a side twice")
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


class Adapt(Strict):
    """Adaptive regridding (docs/amr3d-flows.md "Adaptive regridding"): every ``every`` coarse steps
    each leaf's criterion c = max over its nodes of |ω| · h_leaf / U_ref (the velocity change across
    one node spacing relative to the reference speed) is compared with the thresholds: leaves above
    ``refine_above`` (and below ``max_level``) are split, a family of 8 sibling leaves all below
    ``coarsen_below`` is merged (never below the bodies' refinement, nor the preset tree's coarsest
    level), then 2:1 balance; the state moves with transfer.py. Off by default (every = 0)."""
    every: int = Field(0, ge=0, le=1_000_000,
                       description="coarse steps between two regrids (0: off, the tree is static)")
    criterion: Literal["vorticity"] = Field("vorticity", description="per-leaf indicator: max |ω| · h_leaf / U_ref")
    refine_above: float = Field(0.02, gt=0.0, le=10.0, description="split a leaf whose criterion exceeds this")
    coarsen_below: float = Field(0.005, ge=0.0, le=10.0,
                                 description="merge a family whose 8 leaves all lie below this (≤ refine_above / 2: "
                                             "merging doubles h, so the parent's criterion is about twice its "
                                             "children's)")
    max_level: int = Field(2, ge=0, le=4, description="finest level the criterion may refine to")
    u_ref: float | None = Field(None, gt=0.0, le=0.2, description="reference speed U_ref (lattice units); default "
                                                                 "|flow.velocity|, else initial.u0")
    keep: Literal["bodies", "static"] = Field(
        "bodies", description="refinement never undone: the bodies' (band and its 2:1 grading), or the whole "
                              "preset tree (refine boxes too)")
    initial: bool = Field(True, description="adapt the starting tree to the initial flow too (the flow evaluated "
                                            "anew on each refined tree, up to max_level passes)")
    max_leaves: int | None = Field(None, ge=1, le=10_000_000,
                                   description="a regrid whose refinement would exceed this many leaves refines "
                                               "nothing; default 4 × the preset tree's leaves. The memory estimate "
                                               "reserves this many (or all leaves split to max_level, if fewer)")

    def leaf_cap(self, preset_leaves: int) -> int:
        """The leaves an adaptive tree may grow to: max_leaves, or 4 × the preset tree's."""
        return self.max_leaves if self.max_leaves is not None else 4 * int(preset_leaves)

    @model_validator(mode="after")
    def _hysteresis(self):
        if self.every and not self.coarsen_below <= 0.5 * self.refine_above:
            raise ValueError(f"adapt.coarsen_below = {self.coarsen_below} must be at most adapt.refine_above / 2 = "
                             f"{0.5 * self.refine_above:g} (merging doubles h_leaf, so a merged parent's criterion is "
                             "about twice its children's: a larger value refines and coarsens the same leaves in turn)")
        return self

    @property
    def on(self) -> bool:
        return self.every > 0


class Physics(Strict):
    tau: float = Field(0.6, gt=0.5, le=10.0,
                       description="BGK relaxation time τ = 1/2 + 3ν on level 0 (lattice units), > 1/2; "
                                   "finer levels derive theirs (same physical viscosity)")
    interp: Literal["quadratic", "linear"] = Field(
        "quadratic", description="coarse → fine interpolation at 2:1 interfaces: quadratic (default, docs/amr3d.md "
                                 "says why) or P0's trilinear")
    force: tuple[float, float, float] = Field((0.0, 0.0, 0.0), description="body acceleration (lattice units)")
    precision: Literal["fp32", "fp64"] = Field("fp32", description="fp64 on the NumPy reference only")
    collision: Literal["bgk", "mrt"] = Field(
        "bgk", description="collision operator: BGK (P0's benchmark), or a D3Q27 multiple-relaxation-time operator "
                           "(docs/amr3d-flows.md)")
    les: Literal["none", "smagorinsky", "csm"] = Field(
        "none", description="sub-grid model: none, Smagorinsky's eddy viscosity from the local strain rate of the "
                            "non-equilibrium populations (Hou et al. 1996), or csm: Kobayashi's coherent-structure "
                            "model (2005), the same with C_s² replaced by a coefficient per point from the velocity "
                            "gradient (leaves of m³ only: not the mother-leaf or uniform storages)")
    smagorinsky: float = Field(0.1, ge=0.0, le=0.5, description="Smagorinsky constant C_s (les = smagorinsky)",
                               json_schema_extra=applies_when({"physics.les": ["smagorinsky"]}))

    @property
    def dtype(self):
        return np.float32 if self.precision == "fp32" else np.float64

    @model_validator(mode="after")
    def _force(self):
        if any(abs(a) > 1e-2 for a in self.force):
            raise ValueError(f"physics.force components must be at most 1e-2 in lattice units, not {list(self.force)}")
        return self


SIDES = ("none", "x-", "x+", "y-", "y+", "z-", "z+")
Side = Literal["none", "x-", "x+", "y-", "y+", "z-", "z+"]


class Body(Strict):
    """A solid body in the flow (engine/amr3d/bodies.py). Positions and sizes in level-0 lattice units
    (a root block is m − 1 of them): the fields' world units. Its surface is half-way bounce-back;
    leaves within ``band`` of the surface are refined to ``level``, then 2:1 balance grades outwards."""
    kind: Literal["sphere", "cylinder", "box", "ahmed", "stl"]
    center: tuple[float, float, float] = Field(description="centre (sphere, cylinder, box) or the centre of the "
                                                           "bounding box (ahmed, stl), level-0 lattice units")
    diameter: float = Field(0.0, ge=0.0, description="sphere, cylinder: diameter (the reference length of Re and C_d)")
    length: float = Field(0.0, ge=0.0, description="cylinder: length along its axis; ahmed: body length "
                                                   "(1044 mm at full scale); stl: the mesh's largest extent")
    axis: Literal["x", "y", "z"] = Field("z", description="cylinder: its axis")
    size: tuple[float, float, float] = Field((0.0, 0.0, 0.0), description="box: edge lengths (x, y, z)")
    path: str = Field("", description="stl: the mesh file (absolute, or relative to the preset's folder)")
    level: int = Field(1, ge=0, le=4, description="level of the leaves within `band` of the surface")
    band: float = Field(0.5, ge=0.0, description="refinement band around the surface, level-0 lattice units")
    mesh_sha256: str = Field("", description="stl: the mesh file's SHA-256, filled in when the preset is read "
                                             "(so a checkpoint names the mesh it ran with; a given value must "
                                             "match the file)")

    @model_validator(mode="after")
    def _mesh_identity(self):
        """An STL body's identity is its file's content: the hash joins the preset (and so its hash
        and every checkpoint's stored preset); a stored hash that no longer matches the file is a
        one-line error instead of a run on another mesh."""
        if self.kind != "stl" or not self.path:
            return self
        path = os.path.expanduser(self.path)
        if not os.path.isfile(path):
            return self  # relative to a folder the engine knows, or missing: bodies.make says which
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        if self.mesh_sha256 and self.mesh_sha256 != digest:
            raise ValueError(f"the mesh {self.path} has changed since this preset was stored (SHA-256 "
                             f"{self.mesh_sha256[:12]}… then, {digest[:12]}… now): restore that file, or start anew")
        object.__setattr__(self, "mesh_sha256", digest)
        return self


class Flow(Strict):
    """An open flow: a velocity inlet and an outflow on non-periodic sides (docs/amr3d-flows.md)."""
    inlet: Side = Field("none", description="side with a velocity inlet (the equilibrium at `velocity`, ρ = 1)")
    outlet: Side = Field("none", description="side with a zero-gradient outflow (populations copied from the "
                                             "next node inwards, scaled to ρ = 1: the pressure held)")
    velocity: tuple[float, float, float] = Field((0.0, 0.0, 0.0),
                                                 description="inflow velocity, and the initial flow (lattice units)")
    wall: Literal["halfway", "interpolated"] = Field(
        "halfway", description="bodies' walls: half-way bounce-back (the wall half-way between a fluid and a solid "
                               "node), or interpolated (Bouzidi et al. 2001: the wall where the surface cuts the link)")
    reynolds: float | None = Field(None, gt=0.0, le=1e7,
                                   description="if given, τ₀ follows from Re = |velocity| · L / ν with L the first "
                                               "body's reference length (physics.tau is then derived)")
    lift: Literal["x", "y", "z"] | None = Field(
        None, description="axis of the lift C_l (the side force C_s is on the remaining axis); default: the axis "
                          "after the inflow's (flow along x: lift along y). Cars and the Ahmed body: \"z\" (up)")

    @model_validator(mode="after")
    def _speed(self):
        if sum(v * v for v in self.velocity) ** 0.5 > 0.2:
            raise ValueError(f"flow.velocity {list(self.velocity)}: |u| must stay below 0.2 (Mach ≈ |u|·√3)")
        for name in ("inlet", "outlet"):
            side = getattr(self, name)
            if side != "none" and side == (self.outlet if name == "inlet" else self.inlet):
                raise ValueError(f"flow.inlet and flow.outlet are both {side}")
        if self.lift is not None and any(self.velocity):
            along = max(range(3), key=lambda a: abs(self.velocity[a]))
            if "xyz".index(self.lift) == along:
                raise ValueError(f"flow.lift = {self.lift!r} is the inflow's axis: lift is across the flow")
        return self


class Tracers(Strict):
    """Passive tracers released from fixed seed points (P0 §5), advected with the velocity of each
    coarse step (Heun, engine/amr3d/tracers.py), parked when they leave the domain or enter a body."""
    count: int = Field(0, ge=0, le=MAX_TRACERS_PER_SEED,
                       description="tracers kept per seed (a ring: the oldest is reused; 0 = no tracers)")
    seeds: list[tuple[float, float, float]] = Field(default_factory=list,
                                                    description="release points (x, y, z), level-0 lattice units")
    release_every: int = Field(2, ge=1, le=1000, description="coarse steps between two releases at each seed")
    trail_length: int = Field(8, ge=1, le=64, description="trail samples kept per tracer (for drawing)")
    trail_every: int = Field(4, ge=1, le=1000, description="coarse steps between two trail samples")

    @model_validator(mode="after")
    def _seeds(self):
        if self.count and not self.seeds:
            raise ValueError("tracers.count > 0 needs at least one tracers.seeds point")
        return self


class Initial(Strict):
    kind: Literal["taylor-green", "shear-wave", "random", "rest", "uniform", "vortex"] = Field(
        "taylor-green", description="uniform: the flow's velocity everywhere (outside the bodies); vortex: a "
                                    "Gaussian vortex about z (peak swirl u0 at `radius` from `center`) carried by "
                                    "flow.velocity")
    u0: float = Field(0.05, ge=0.0, le=0.2, description="velocity amplitude (lattice units, Mach ≈ u0·√3)")
    seed: int = Field(0, description="random: seed of the random velocity field (the same seed, the same run)")
    center: tuple[float, float, float] | None = Field(None, description="vortex: its axis passes here (level-0 "
                                                                        "units; default the domain's centre)")
    radius: float = Field(4.0, gt=0.0, le=1000.0, description="vortex: radius R of the peak swirl (level-0 units)")


class AMR3DPreset(PresetBase):
    engine: Literal["amr3d"]
    grid: Grid = Field(default_factory=Grid)
    physics: Physics = Field(default_factory=Physics)
    initial: Initial = Field(default_factory=Initial)
    refine: list[Refine] = Field(default_factory=list, description="boxes refined to a finer level")
    body: list[Body] = Field(default_factory=list, description="solid bodies (bounce-back walls, force reported)")
    flow: Flow = Field(default_factory=Flow)
    tracers: Tracers = Field(default_factory=Tracers)
    adapt: Adapt = Field(default_factory=Adapt, description="adaptive regridding by vorticity (off by default)")

    @model_validator(mode="after")
    def _open_flow(self):
        axis = {"x": 0, "y": 1, "z": 2}
        for name in ("inlet", "outlet"):
            side = getattr(self.flow, name)
            if side != "none" and self.grid.periodic[axis[side[0]]]:
                raise ValueError(f"flow.{name} = {side!r} needs grid.periodic[{axis[side[0]]}] = false "
                                 f"(a periodic axis has no sides)")
            if side in self.grid.free_slip:
                raise ValueError(f"flow.{name} = {side!r} is also in grid.free_slip: a side is one of wall, "
                                 "free slip, inlet or outflow")
        if self.flow.reynolds is not None:
            if not self.body:
                raise ValueError("flow.reynolds needs a [[body]]: its reference length defines Re")
            length = reference_length(self.body[0])
            if not length > 0.0:
                raise ValueError(f"body[0]: its reference length is {length} (a size must be positive): "
                                 "flow.reynolds is defined on it")
            speed = sum(v * v for v in self.flow.velocity) ** 0.5
            if speed == 0.0:
                raise ValueError("flow.reynolds needs a non-zero flow.velocity")
            tau = 0.5 + 3.0 * speed * length / self.flow.reynolds
            tau_max = type(self.physics).model_fields["tau"].metadata
            tau_max = next((getattr(m, "le", None) for m in tau_max if getattr(m, "le", None) is not None), None)
            if tau_max is not None and tau > tau_max:
                raise ValueError(f"flow.reynolds = {self.flow.reynolds} gives τ₀ = {tau:.6g}, above physics.tau's "
                                 f"limit {tau_max} (a flow that viscous is not resolved): raise Re or flow.velocity")
            if "tau" in self.physics.model_fields_set and abs(self.physics.tau - tau) > 1e-9 * tau:
                raise ValueError(f"physics.tau = {self.physics.tau} contradicts flow.reynolds = {self.flow.reynolds} "
                                 f"(which gives τ₀ = {tau:.6g}): give one of them")
            if tau <= 0.5 + 1e-6 and self.physics.les == "none":
                raise ValueError(f"flow.reynolds = {self.flow.reynolds} gives τ₀ = {tau:.8f} on level 0, too close "
                                 "to 1/2 without a sub-grid model: set physics.les, lower Re, or use a larger body "
                                 "in level-0 units")
            object.__setattr__(self.physics, "tau", tau)
        return self

    def derived_fields(self):
        out = {("physics", "tau"): "flow.reynolds"} if self.flow.reynolds is not None else {}
        if any(b.kind == "stl" for b in self.body):
            out[("body", "*", "mesh_sha256")] = "body.path (the mesh file)"
        return out

    @classmethod
    def absolute_paths(cls, raw, folder):
        """[[body]] path (STL meshes), also under [cpu_overrides]: relative to the file that names it."""
        for section in (raw, raw.get("cpu_overrides") if isinstance(raw.get("cpu_overrides"), dict) else {}):
            bodies = section.get("body")
            for b in bodies if isinstance(bodies, list) else ():
                if isinstance(b, dict) and isinstance(b.get("path"), str) and b["path"] \
                        and not os.path.isabs(os.path.expanduser(b["path"])):
                    b["path"] = os.path.normpath(os.path.join(os.path.abspath(folder), b["path"]))

    @model_validator(mode="after")
    def _seeds_inside(self):
        """Tracer seeds inside the domain (level-0 units: leaves × (m − 1) per axis)."""
        size = [n * (self.grid.m - 1) for n in self.grid.leaves]
        for i, s in enumerate(self.tracers.seeds if self.tracers.count else ()):
            if not all(0.0 <= c <= d for c, d in zip(s, size)):
                raise ValueError(f"tracers.seeds[{i}] = {list(s)} lies outside the domain "
                                 f"[0, {size[0]}] × [0, {size[1]}] × [0, {size[2]}] (level-0 units)")
        return self

    @model_validator(mode="after")
    def _levels(self):
        if self.refine or self.body or self.adapt.on:
            top = self.max_level
            for lv in range(top + 1):
                if abs(tau_at(self.physics.tau, lv) - 1.0) < TAU_ONE_GAP:
                    raise ValueError(
                        f"physics.tau = {self.physics.tau} gives τ = {tau_at(self.physics.tau, lv):.4f} on level {lv}, "
                        f"within {TAU_ONE_GAP} of 1 where the rescaling between levels is singular (docs/amr3d.md)")
        return self

    @property
    def static_max_level(self) -> int:
        """The finest level of the preset's own tree (refine boxes and bodies)."""
        return max([r.level for r in self.refine] + [b.level for b in self.body], default=0)

    @property
    def max_level(self) -> int:
        """The finest level any leaf may reach: the preset tree's, or adapt.max_level when regridding."""
        return max(self.static_max_level, self.adapt.max_level if self.adapt.on else 0)

    @property
    def adapt_u_ref(self) -> float:
        a = self.adapt
        if a.u_ref is not None:
            return float(a.u_ref)
        speed = sum(v * v for v in self.flow.velocity) ** 0.5
        return float(speed if speed > 0.0 else self.initial.u0)

    @model_validator(mode="after")
    def _adapt(self):
        if self.adapt.on and not self.adapt_u_ref > 0.0:
            raise ValueError("adapt.every > 0 needs a reference speed: adapt.u_ref, a non-zero flow.velocity or "
                             "initial.u0 (the criterion is |ω| · h / U_ref)")
        return self

    @property
    def is_box(self) -> bool:
        """One level of periodic leaves: P0's benchmark box, where every rung of the ladder runs."""
        return not self.refine and not self.body and all(self.grid.periodic) and not self.adapt.on

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

"""Particles: snapshot, headless PNG (dots coloured by the first attribute), host copy, .npz
arrays and VTK (POLYDATA vertices with one scalar per attribute)."""
from __future__ import annotations

import numpy as np
from nagare.engine.fields import Particles

from .. import colormaps
from ..packets import SnapshotContext
from .registry import register
from .vtkio import be_bytes, safe_name

PNG_SIZE = 512  # the headless image's longer side (as nagare.app.frames.MIN_SIZE)
HIDDEN = -3.0e38  # a particle value the 3D sphere shader does not draw (walls shown as outlines)


@register("snapshot", Particles)
def snapshot_particles(f: Particles, ctx: SnapshotContext):
    xp, view = ctx.xp, ctx.view
    attr_name = view.attribute if view.attribute in f.attributes else next(iter(f.attributes), None)
    attr = None if attr_name is None else xp.asarray(f.attributes[attr_name], dtype=xp.float32).copy()
    three_d = f.positions.ndim == 2 and f.positions.shape[1] == 3
    if attr is not None:
        placed = xp.isfinite(xp.asarray(f.positions)).all(axis=1)  # parked tracers (NaN) stay out of the range
        pk_range = (xp.min(xp.where(placed, attr, xp.float32(np.inf))),
                    xp.max(xp.where(placed, attr, xp.float32(-np.inf))))
        if three_d and view.hide_walls and "kind" in f.attributes:
            # walls and obstacles are drawn as outlines and surfaces: their particles are hidden by
            # the HIDDEN value (the sphere shader drops them), on the device, without a host sync
            fluid = f.attributes["kind"] == 0
            pk_range = (xp.min(xp.where(fluid, attr, xp.float32(np.inf))),
                        xp.max(xp.where(fluid, attr, xp.float32(-np.inf))))
            attr = xp.where(fluid, attr, xp.float32(HIDDEN))
    pk = ctx.packet("particles", positions=xp.asarray(f.positions, dtype=xp.float32).copy(),
                    data=attr, bounds=f.bounds, attributes=tuple(f.attributes), attribute=attr_name,
                    label=attr_name or "",
                    units=f.attribute_units.get(attr_name) or PARTICLE_UNITS.get(attr_name, ""))
    pk.length_units = f.length_units
    if attr is not None:
        lo, hi = pk_range  # ±inf when nothing is placed (every tracer parked): a neutral range
        pk.vmin, pk.vmax = xp.where(xp.isfinite(lo), lo, xp.float32(0)), xp.where(xp.isfinite(hi), hi, xp.float32(1))
    if three_d:
        pk.solids = tuple(f.solids) or preset_solids(ctx.engine)
        spacing = f.spacing or preset_spacing(ctx.engine)
        pk.radius = None if spacing is None else 0.5 * spacing
        if f.trails is not None:  # a copy: the engine writes its ring again while the UI draws
            pk.trails = xp.asarray(f.trails, dtype=xp.float32).copy()
    return pk


PARTICLE_UNITS = {"speed": "m/s", "vx": "m/s", "vy": "m/s", "vz": "m/s", "density": "kg/m³", "pressure": "Pa"}


def _preset(engine, *path):
    node = getattr(engine, "preset", None)
    for p in path:
        node = getattr(node, p, None)
    return node


def preset_spacing(engine) -> float | None:
    """The particle spacing when the field does not state it (SPH presets: particles.dp)."""
    dp = _preset(engine, "particles", "dp")
    return float(dp) if isinstance(dp, (int, float)) else None


def preset_solids(engine) -> tuple:
    """Obstacles a preset describes when the field does not carry them: the SPH 3D dam break's
    column (geometry.obstacle = x0, y0, size x, size y; the full tank height)."""
    g = _preset(engine, "geometry")
    obstacle = getattr(g, "obstacle", None)
    if getattr(g, "kind", None) != "dambreak3d" or obstacle is None:
        return ()
    x0, y0, sx, sy = (float(v) for v in obstacle)
    return (((x0, y0, 0.0), (x0 + sx, y0 + sy, float(g.tank_height))),)


@register("png", Particles)
def png_particles(f: Particles, backend, view, vrange) -> np.ndarray:
    pos = backend.asnumpy(f.positions)
    attrs = {k: backend.asnumpy(v) for k, v in f.attributes.items()}
    return particles_image(pos, attrs, f.bounds, view.colormap, vrange or view.range)


def particles_image(pos, attrs, bounds, cmap, vrange, size=PNG_SIZE) -> np.ndarray:
    """Particles as dots coloured by their first attribute, in an image of the domain's shape (x, y
    of ``bounds``, else of the placed particles): the longer side ``size`` pixels, y up, as the
    window's view frames the domain. Parked particles (non-finite rows) are not drawn."""
    pos = np.asarray(pos, np.float64).reshape(len(pos), -1) if len(pos) else np.zeros((0, 2))
    placed = np.isfinite(pos[:, :2]).all(axis=1)
    xy = pos[placed, :2]
    if bounds:
        lo, hi = np.asarray(bounds[0][:2], np.float64), np.asarray(bounds[1][:2], np.float64)
    elif len(xy):
        lo, hi = xy.min(axis=0).astype(np.float64), xy.max(axis=0).astype(np.float64)
    else:
        return np.full((size, size, 3), 16, np.uint8)
    extent = np.maximum(hi - lo, 0.0)
    span = max(float(extent.max()), 1e-12)
    w, h = (max(1, int(round(size * float(e) / span))) for e in extent)
    img = np.full((h, w, 3), 16, np.uint8)
    if len(xy) == 0:
        return img
    # inside the domain up to float32 round-off (particles on its walls); pixel k covers
    # lo + [k, k + 1)·span/size, the last one up to hi (the pixel count is rounded)
    tol = 4 * np.finfo(np.float32).eps * max(span, float(np.abs(lo).max()), float(np.abs(hi).max()))
    ok = ((xy >= lo - tol) & (xy <= hi + tol)).all(axis=1)
    ij = np.clip(np.floor((xy[ok] - lo) / span * size).astype(np.int64), 0, np.array([w, h]) - 1)
    values = np.asarray(next(iter(attrs.values())))[placed] if attrs else np.zeros(len(xy))
    lo_v, hi_v = vrange or colormaps.auto_range(values)
    lut = colormaps.lut(cmap)
    k = (np.clip((values - lo_v) / (hi_v - lo_v), 0, 1) * 255).astype(np.int64)
    rgb = (lut[k] * 255).astype(np.uint8)
    img[h - 1 - ij[:, 1], ij[:, 0]] = rgb[ok]
    return img


@register("host_copy", Particles)
def host_copy_particles(f: Particles, asnumpy) -> Particles:
    return Particles(asnumpy(f.positions), {k: asnumpy(v) for k, v in f.attributes.items()}, f.label, f.bounds,
                     f.spacing, f.solids, None if f.trails is None else asnumpy(f.trails))


@register("arrays", Particles)
def arrays_particles(out: dict, name: str, f: Particles, asnumpy) -> None:
    out[f"{name}/positions"] = asnumpy(f.positions)
    for k, v in f.attributes.items():
        out[f"{name}/{k}"] = asnumpy(v)


@register("vtk", Particles)
def vtk_particles(name: str, f: Particles) -> tuple[list[bytes], list[bytes]]:
    pos = np.asarray(f.positions, np.float32)
    n = len(pos)
    if pos.shape[1] == 2:
        pos = np.concatenate([pos, np.zeros((n, 1), np.float32)], axis=1)
    head = [b"DATASET POLYDATA", f"POINTS {n} float".encode()]
    body = [be_bytes(pos), f"\nVERTICES {n} {2 * n}\n".encode()
            + be_bytes(np.stack([np.ones(n), np.arange(n)], axis=1), ">i4")]
    if f.attributes:
        body.append(f"\nPOINT_DATA {n}\n".encode())
        for k, v in f.attributes.items():
            body.append(f"SCALARS {safe_name(k)} float 1\nLOOKUP_TABLE default\n".encode() + be_bytes(v) + b"\n")
    return head, body

"""Particles: snapshot, headless PNG (the window's 2D view: its dots over the domain's outline), host copy, .npz
arrays and VTK (POLYDATA vertices with one scalar per attribute)."""
from __future__ import annotations

import numpy as np
from nagare.engine.fields import Particles

from .. import colormaps
from ..frame_markers import draw_particles
from ..gui.overlay_style import CANVAS_RGB, DOMAIN_RGBA, particle_size
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
    pos, values, _name = shown_particles(f, backend, view)
    return particles_image(pos, values, f.bounds, view.colormap, vrange or view.range, solids=f.solids)


def shown_particles(f: Particles, backend, view) -> tuple[np.ndarray, np.ndarray | None, str | None]:
    """(positions, values of the view's attribute, its name) on the host of the particles a headless frame
    draws: in 3D without the walls' and obstacles' particles where the view hides them (the window
    draws those as outlines and surfaces, and in a side view the front wall would cover the fluid)."""
    pos = backend.asnumpy(f.positions)
    name = getattr(view, "attribute", None)  # the window's choice; by default its first attribute, as here
    name = name if name in f.attributes else next(iter(f.attributes), None)
    values = None if name is None else backend.asnumpy(f.attributes[name])
    if np.ndim(pos) == 2 and np.shape(pos)[1] == 3 and getattr(view, "hide_walls", True) and "kind" in f.attributes:
        fluid = np.asarray(backend.asnumpy(f.attributes["kind"])).reshape(-1) == 0
        pos, values = pos[fluid], None if values is None else np.asarray(values).reshape(-1)[fluid]
    return pos, values, name


def view_columns(ndim: int) -> tuple[tuple[int, int], int | None]:
    """The position columns a headless frame puts across and up, and the one it looks along: a 2D
    set as the window's 2D view (x, y); a 3D set from the front, x across and z up (gravity, −z in the
    3D presets, points down the image), looking along +y (nearer particles, smaller y, on top)."""
    return ((0, 1), None) if ndim < 3 else ((0, 2), 1)


def frame_box(pos: np.ndarray, bounds) -> tuple[np.ndarray, np.ndarray] | None:
    """(lo, hi) across and up of what a headless frame frames: the domain's box (``bounds``), else
    the placed particles' extent; None when neither is known."""
    cols, _ = view_columns(pos.shape[1])
    if bounds:
        return (np.asarray(bounds[0], np.float64)[list(cols)], np.asarray(bounds[1], np.float64)[list(cols)])
    xy = pos[:, list(cols)]
    placed = np.isfinite(xy).all(axis=1)
    if not placed.any():
        return None
    return xy[placed].min(axis=0), xy[placed].max(axis=0)


def framed_extent(lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """(origin, size) in world units of the image around the box lo..hi (FRAME_MARGIN each side)."""
    extent = np.maximum(np.asarray(hi, np.float64) - np.asarray(lo, np.float64), 0.0)
    return np.asarray(lo, np.float64) - FRAME_MARGIN * extent, (1.0 + 2.0 * FRAME_MARGIN) * extent


def value_range(values: np.ndarray, placed: np.ndarray, vrange) -> tuple[float, float]:
    """The colour range as the window's colour_range gives it: ``vrange``, else the placed
    particles' finite min to max; a constant field gets the map's low end."""
    if vrange is None:
        finite = values[placed & np.isfinite(values)]
        vrange = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    lo_v, hi_v = (float(v) for v in vrange)
    if not hi_v > lo_v:
        hi_v = lo_v + (abs(lo_v) * 1e-6 or 1.0)
    return lo_v, hi_v


def particles_image(pos, values, bounds, cmap, vrange, size=PNG_SIZE, solids=()) -> np.ndarray:
    """Particles as the window's 2D view draws them: round, shaded dots of the window's size rule
    (overlay_style.particle_size) coloured by ``values`` through ``cmap`` over ``vrange`` (None: the
    placed particles' min to max, the window's auto range), over the outline of the domain.

    A 3D set is seen from the front (:func:`view_columns`: x across, z up, the nearest on top). The
    image frames the domain (``bounds``, else the placed particles) as the window fits it, with
    FRAME_MARGIN of its extent on each side, so it keeps the domain's shape: the longer side ``size``
    pixels, up as up. At ``size`` = PNG_SIZE a pixel is a logical px of the window (as a grid's frame);
    another size scales the dots and the outline with it. Parked particles (non-finite rows) are not
    drawn.

    ``solids`` (a 3D set: the field's or the preset's obstacles, boxes (lo, hi)) are drawn as the window
    draws them from the front: the box's front face, filled in its grey, over the particles behind it
    and under those in front."""
    pos = np.asarray(pos, np.float64)
    pos = pos.reshape(len(pos), -1) if len(pos) else np.zeros((0, pos.shape[1] if pos.ndim == 2 else 2))
    if pos.shape[1] < 2:
        raise ValueError(f"particles_image: positions must have x and y columns; got shape {pos.shape}")
    n = len(pos)
    values = np.zeros(n) if values is None else np.asarray(values, np.float64).reshape(-1)
    if len(values) != n:
        raise ValueError(f"particles_image: {len(values)} values for {n} particles")
    cols, depth = view_columns(pos.shape[1])
    if depth is not None:  # the nearest first: where dots overlap the earlier is on top
        order = np.argsort(np.where(np.isfinite(pos[:, depth]), pos[:, depth], np.inf), kind="stable")
        pos, values = pos[order], values[order]
    xy = pos[:, list(cols)]
    placed = np.isfinite(pos).all(axis=1)
    box = frame_box(pos, bounds)
    if box is None:
        return np.full((size, size, 3), BACKGROUND, np.uint8)
    lo, hi = box
    origin, framed = framed_extent(lo, hi)
    span = max(float(framed.max()), 1e-12)
    w, h = (max(1, int(round(size * float(e) / span))) for e in framed)
    scale = size / span  # pixels per unit of length
    px = size / PNG_SIZE  # pixels per logical px of the window
    img = np.full((h, w, 3), BACKGROUND, np.uint8)
    _outline(img, (lo - origin) * scale, (hi - origin) * scale, max(1, int(round(px))))
    if not placed.any():
        return img
    lo_v, hi_v = value_range(values, placed, vrange)
    xy = np.where(placed[:, None], xy, np.nan)
    rgb, diameter = _colours(values, cmap, lo_v, hi_v), particle_size(n) * px
    if depth is None or not solids:
        return draw_particles(img, xy - origin, scale, diameter, rgb)
    # the painter's order of the window's depth test: the particles behind a body's front face, the
    # body, then those in front of it (bodies taken from the farthest front face to the nearest)
    todo = np.ones(n, bool)
    for s_lo, s_hi in sorted(solids, key=lambda b: -float(b[0][depth])):
        s_lo, s_hi = np.asarray(s_lo, np.float64), np.asarray(s_hi, np.float64)
        behind = todo & ~(pos[:, depth] < s_lo[depth])  # parked rows (NaN) go with the first group
        img = draw_particles(img, np.where(behind[:, None], xy, np.nan) - origin, scale, diameter, rgb)
        _fill(img, (s_lo[list(cols)] - origin) * scale, (s_hi[list(cols)] - origin) * scale, SOLID_FRONT)
        todo &= ~behind
    return draw_particles(img, np.where(todo[:, None], xy, np.nan) - origin, scale, diameter, rgb)


def _fill(img: np.ndarray, lo, hi, colour) -> None:
    """The pixels whose centres lie in the box lo..hi (pixels from the image's lower-left corner)."""
    h, w = img.shape[:2]
    c0, c1 = (int(np.clip(np.ceil(v - 0.5), 0, w)) for v in (lo[0], hi[0]))
    r0, r1 = (int(np.clip(np.ceil(h - v - 0.5), 0, h)) for v in (hi[1], lo[1]))  # rows from the top
    img[r0:r1, c0:c1] = colour


FRAME_MARGIN = 0.05  # the share of the domain's extent the window's view leaves on each side (fit_bounds)
BACKGROUND = tuple(int(round(c * 255)) for c in CANVAS_RGB)
OUTLINE = tuple(int(round(c * 255)) for c in DOMAIN_RGBA[:3])
# a body's face toward the viewer of a front view (y = lo) as the window shades it: view3d.box_faces'
# SOLID_RGB × 0.55 (view3d loads VisPy, which a headless frame does not)
SOLID_FRONT = tuple(int(round(255 * 0.55 * c)) for c in (0.55, 0.56, 0.6))


def _colours(values: np.ndarray, cmap: str, lo: float, hi: float) -> np.ndarray:
    """(n, 3) RGB 0–255 of ``values`` as colormap.glsl gives them: the map's 8-bit table sampled
    linearly between its entries (a value that is not finite takes the low end)."""
    table = (colormaps.lut(cmap) * 255 + 0.5).astype(np.uint8).astype(np.float64)
    t = np.nan_to_num(np.clip((values - lo) / (hi - lo), 0.0, 1.0), nan=0.0) * (len(table) - 1)
    i = np.minimum(np.floor(t).astype(np.int64), len(table) - 2)
    f = (t - i)[:, None]
    return table[i] * (1.0 - f) + table[i + 1] * f


def _outline(img: np.ndarray, lo, hi, width: int) -> None:
    """The domain's box lo..hi (pixels from the image's lower-left corner) as the window's lines:
    each edge in the pixels just left of / below its coordinate (where GL puts a 1 px line that runs
    along a pixel boundary), ``width`` px wide, inward."""
    h, w = img.shape[:2]
    c0, c1 = (int(np.ceil(v)) - 1 for v in (lo[0], hi[0]))  # columns of the left and right edges
    r0, r1 = (h - int(np.ceil(v)) for v in (lo[1], hi[1]))  # rows (from the top) of the bottom and top edges
    colour = np.asarray(OUTLINE, np.uint8)

    def fill(rows, cols):
        rows, cols = slice(max(rows[0], 0), min(rows[1], h)), slice(max(cols[0], 0), min(cols[1], w))
        img[rows, cols] = colour

    fill((r1, r0 + 1), (c0, c0 + width))  # left
    fill((r1, r0 + 1), (c1 - width + 1, c1 + 1))  # right
    fill((r0 - width + 1, r0 + 1), (c0, c1 + 1))  # bottom
    fill((r1, r1 + width), (c0, c1 + 1))  # top


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

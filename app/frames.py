"""Headless frames: the engine's displayed field rendered to an RGB image with no display.

It follows the app's view rules (same colormap tables, y up, obstacles drawn in grey, a 2D grid's
tracers drawn over it as the window's markers unless ``view.particles_overlay`` is off, a 3D grid
shown as its middle slice across ``view.slice_axis``, particles as the window's dots over the
domain's outline in a frame of the domain's shape, a 3D set's obstacles as their front faces, a 1-D
profile as the window's line plot) so a headless run's PNGs look like the window. With ``legend``,
every field type gets the window's axes (titles with units, ticks over the domain, its ends labelled)
and what the window shows beside it: a colour bar, or a profile's legend of its curves.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from nagare.engine.fields import Boxes, Grid2D, Grid3D, Particles, Profile1D
from PIL import Image, ImageDraw, ImageFont

from . import colormaps
from .atomic import output_writer, write_atomic
from .fieldkinds import handler_for
from .fieldkinds.boxes import png_boxes
from .fieldkinds.grids import SLICE_PLANE_AXES, first_field, grid_plane, grid_range, tracers_over
from .fieldkinds.particles import (
    PARTICLE_UNITS,
    frame_box,
    framed_extent,
    particles_image,
    preset_solids,
    shown_particles,
    value_range,
    view_columns,
)
from .fieldkinds.profiles import DATA_RGB, EXACT_ALPHA, EXACT_RGB, profile_image, profile_range
from .frame_markers import draw_markers
from .gui.overlay_style import CANVAS_RGB
from .gui.ticks import axis_title, fmt_any, nice_ticks, with_ends

MIN_SIZE = 512


def default_field(engine) -> str:
    names = engine.field_names()
    wanted = engine.preset.view.field
    return wanted if wanted in names else names[0]


def field_image(engine, name: str | None = None, vrange=None) -> np.ndarray:
    """RGB uint8 image (H, W, 3) of one field, at the field's own resolution (grids).

    The field type's ``png`` handler (nagare.app.fieldkinds) draws it; only that field is asked for."""
    name = name or default_field(engine)
    return _png(engine, engine.field(name), vrange)


def _png(engine, fld, vrange=None) -> np.ndarray:
    return handler_for("png", fld)(with_solids(engine, fld), engine.backend, engine.preset.view, vrange)


def with_solids(engine, fld):
    """A 3D particle field with the obstacles the window draws (the field's, else the preset's:
    the 3D dam break's column); any other field as it is."""
    three_d = np.ndim(fld.positions) == 2 and np.shape(fld.positions)[1] == 3 if isinstance(fld, Particles) else False
    if three_d and not fld.solids:
        solids = preset_solids(engine)
        if solids:
            return dataclasses.replace(fld, solids=solids)
    return fld


def upscale(img: np.ndarray, min_size: int = MIN_SIZE) -> np.ndarray:
    """Nearest-neighbour upscale by an integer factor so small grids stay visible."""
    f = max(1, int(np.ceil(min_size / max(img.shape[:2]))))
    return img.repeat(f, axis=0).repeat(f, axis=1) if f > 1 else img


def with_tracers(img: np.ndarray, engine, fld, name: str, cache: dict | None = None) -> np.ndarray:
    """``img`` (the upscaled frame of the field ``name``) with what the window draws over a 2D grid:
    the engine's tracers (its first 2D Particles field) as the overlay's markers, unless the
    preset's ``view.particles_overlay`` is off. Positions are the view's: cell (i, j) covers
    [i, i+1)·spacing. ``cache`` (one dict per engine) keeps which field holds the tracers."""
    if not isinstance(fld, Grid2D) or not engine.preset.view.particles_overlay:
        return img
    tracers = tracers_over(engine, name, cache)
    if tracers is None:
        return img
    cells = img.shape[1] // fld.data.shape[-1]  # the upscale factor: image pixels per cell
    return draw_markers(img, engine.backend.asnumpy(tracers.positions), cells / fld.spacing)


@output_writer("a PNG frame")
def save_png(img: np.ndarray, path: str | Path) -> Path:
    return write_atomic(path, lambda p: Image.fromarray(img).save(p, format="PNG"))


def save_frame(engine, path: str | Path, name: str | None = None, legend: bool = False,
               cache: dict | None = None) -> Path:
    """One headless frame; with ``legend``, a grid field gets the app's colour bar beside it (the
    field's label and units, its range ends and round ticks between them) and axes with units left
    of and under it, as the window's 2D view (other field types: :func:`framed_with_legend`).
    ``cache``: one dict per engine, kept between frames."""
    if legend:
        img = framed_with_legend(engine, name, cache)
        if img is not None:
            return save_png(img, path)
    name = name or default_field(engine)
    fld = engine.field(name)
    img = upscale(_png(engine, fld))
    return save_png(with_tracers(img, engine, fld, name, cache), path)


# ---- the colour bar of a headless frame --------------------------------------------------------
LEGEND_WIDTH = 120  # px beside the field
LEGEND_BG = tuple(int(round(255 * c)) for c in CANVAS_RGB)  # the window's view background
LEGEND_FG = (225, 225, 225)
LEGEND_PT = 9.0  # label size in points at LEGEND_DPI
LEGEND_DPI = 96.0


def framed_with_legend(engine, name: str | None = None, cache: dict | None = None) -> np.ndarray | None:
    """The upscaled frame of a grid field with axes and a colour-bar column on its right; particles
    with axes and their attribute's bar; a 1-D profile with axes and the legend of its curves; boxes
    (octree leaves, one colour) with axes; None for a field type none of these knows."""
    name = name or default_field(engine)
    fld = engine.field(name)
    if isinstance(fld, Particles):
        return _particles_with_legend(engine, fld)
    if isinstance(fld, Profile1D):
        return _profile_with_legend(engine, fld, name)
    if isinstance(fld, Boxes):
        return _boxes_with_axes(engine, fld, name)
    if not isinstance(fld, (Grid2D, Grid3D)):
        return None
    view = engine.preset.view
    data, mask = grid_plane(fld, engine.backend, view)
    lo, hi = grid_range(fld, data, view)
    img = with_tracers(upscale(colormaps.apply(data, view.colormap, (lo, hi), mask=mask)), engine, fld, name, cache)
    panel = legend_panel(img.shape[0], lo, hi, view.colormap, fld.label or name, fld.units)
    # the window's axes: world coordinates of the cells (a grid's own origin; a slice of a
    # node-centred 3D grid is drawn from −spacing/2, as the view draws it)
    if isinstance(fld, Grid3D):
        names = SLICE_PLANE_AXES[view.slice_axis]
        origin = (-0.5 * fld.spacing,) * 2 if getattr(fld, "centering", "cell") == "node" else (0.0, 0.0)
    else:
        names, origin = ("x", "y"), tuple(float(o) for o in fld.origin)
    units = fld.length_units if fld.length_units else ("cells" if fld.spacing == 1.0 else "")
    ny, nx = data.shape
    x_range = (origin[0], origin[0] + nx * fld.spacing)
    y_range = (origin[1], origin[1] + ny * fld.spacing)
    framed = with_axes(img, x_range, y_range, axis_title(names[0], units), axis_title(names[1], units),
                       *grid_domain(fld, x_range, y_range))
    top = np.full((AXIS_TOP, panel.shape[1], 3), LEGEND_BG, np.uint8)  # the bar beside the field's rows
    pad = np.full((framed.shape[0] - img.shape[0] - AXIS_TOP, panel.shape[1], 3), LEGEND_BG, np.uint8)
    return np.concatenate([framed, np.concatenate([top, panel, pad], axis=0)], axis=1)


def _profile_with_legend(engine, fld: Profile1D, name: str) -> np.ndarray:
    """A 1-D profile as the window's line plot: the curves (profile_image), axes with the window's
    titles (x in the profile's units, the value with its label and units) and, in the colour bar's
    column, the legend naming the curves in their colours."""
    asnumpy = engine.backend.asnumpy
    x = np.asarray(asnumpy(fld.x), np.float64)
    y = np.asarray(asnumpy(fld.data), np.float64)
    exact = None if fld.exact is None else np.asarray(asnumpy(fld.exact), np.float64)
    img = profile_image(x, y, exact)
    if len(x) < 2:
        return img
    lo, hi = profile_range(y, exact)
    x0, x1 = float(np.min(x)), float(np.max(x))
    label = fld.label or name
    framed = with_axes(img, (x0, x1), (lo, hi), axis_title("x", fld.length_units), axis_title(label, fld.units),
                       x_extent=(x0, x1))
    entries = [(f"{label} computed", DATA_RGB, 1.0)]
    if exact is not None:
        entries.append((f"{label} exact", EXACT_RGB, EXACT_ALPHA))
    panel = curves_panel(framed.shape[0], entries)
    return np.concatenate([framed, panel], axis=1)


def _boxes_with_axes(engine, fld: Boxes, name: str) -> np.ndarray:
    """The octree leaves' frame (x across, y up, as boxes_image frames them) with axes over the
    leaves' extent, in the units of the engine's grids (the leaves are in their world units)."""
    lo, hi = (np.asarray(engine.backend.asnumpy(a), np.float64) for a in (fld.lo, fld.hi))
    img = png_boxes(fld, engine.backend, engine.preset.view, None)
    if len(lo) == 0:
        return img
    a, b = lo[:, :2].min(axis=0), hi[:, :2].max(axis=0)
    h, w = img.shape[:2]
    per_px = max(float((b - a).max()), 1e-12) / (w - 1)  # boxes_image: the longer side spans the image
    grid = first_field(engine, name, None, "grid units", lambda f: isinstance(f, (Grid2D, Grid3D)))
    units = (grid.length_units or ("cells" if grid.spacing == 1.0 else "")) if grid is not None else ""
    return with_axes(img, (a[0], a[0] + (w - 1) * per_px), (a[1], a[1] + (h - 1) * per_px),
                     axis_title("x", units), axis_title("y", units), (a[0], b[0]), (a[1], b[1]))


def curves_panel(height: int, entries: list[tuple[str, tuple[int, int, int], float]]) -> np.ndarray:
    """(height, LEGEND_WIDTH, 3) uint8: the legend of a line plot, as the window's: one row per
    curve (its name after a short stroke in its colour, blended at its opacity) at the column's foot."""
    px = max(int(round(LEGEND_PT / 72.0 * LEGEND_DPI)), 8)
    font = _font(px + 1)
    panel = Image.new("RGB", (LEGEND_WIDTH, height), LEGEND_BG)
    draw = ImageDraw.Draw(panel)
    row_h = px + 6
    top = height - AXIS_BOTTOM - row_h * len(entries)  # the last row level with the plot's foot
    for k, (text, rgb, alpha) in enumerate(entries):
        y = top + k * row_h + row_h / 2
        colour = tuple(int(round(alpha * c + (1 - alpha) * g)) for c, g in zip(rgb, LEGEND_BG))
        draw.line([(8, y), (24, y)], fill=colour, width=3)
        draw.text((30, y), text, fill=LEGEND_FG, font=font, anchor="lm")
    return np.asarray(panel)


def grid_domain(fld, x_range, y_range) -> tuple[tuple[float, float], tuple[float, float]]:
    """The domain a grid frame's axes label, as the window's (canvas.GridDrawer.extent): the field's
    own ``domain`` where it gives one, else the cells' extent, a node-centred grid's from its first
    node to its last (half a cell inside the image's edges)."""
    domain = getattr(fld, "domain", None)
    if domain is not None:
        return tuple((float(lo), float(hi)) for lo, hi in domain)
    inset = 0.5 * fld.spacing if getattr(fld, "centering", "cell") == "node" else 0.0
    return tuple((lo + inset, hi - inset) for lo, hi in (x_range, y_range))


def _particles_with_legend(engine, fld: Particles) -> np.ndarray:
    """A particle frame (the window's dots; a 3D set from the front) with axes in the positions'
    units and, where the particles carry the view's attribute, its colour bar."""
    view = engine.preset.view
    pos, values, name = shown_particles(fld, engine.backend, view)
    pos = np.asarray(pos, np.float64)
    pos = pos.reshape(len(pos), -1) if len(pos) else np.zeros((0, pos.shape[1] if pos.ndim == 2 else 2))
    img = particles_image(pos, values, fld.bounds, view.colormap, view.range, solids=with_solids(engine, fld).solids)
    framed = img
    box = frame_box(pos, fld.bounds)
    if box is not None:
        origin, size = framed_extent(*box)
        cols, _ = view_columns(pos.shape[1])
        names = [("x", "y", "z")[c] for c in cols]
        # the window's axes label the domain's box (bounds), not the margin around it
        extents = (tuple(float(v) for v in (box[0][0], box[1][0])), tuple(float(v) for v in (box[0][1], box[1][1]))) \
            if fld.bounds else (None, None)
        framed = with_axes(img, (origin[0], origin[0] + size[0]), (origin[1], origin[1] + size[1]),
                           axis_title(names[0], fld.length_units), axis_title(names[1], fld.length_units), *extents)
    if values is None:
        return framed
    values = np.asarray(values, np.float64).reshape(-1)
    lo, hi = value_range(values, np.isfinite(pos).all(axis=1), view.range)
    units = fld.attribute_units.get(name) or PARTICLE_UNITS.get(name, "")
    top = AXIS_TOP if framed is not img else 0
    panel = legend_panel(img.shape[0], lo, hi, view.colormap, name, units)
    column = [np.full((top, panel.shape[1], 3), LEGEND_BG, np.uint8), panel,
              np.full((framed.shape[0] - img.shape[0] - top, panel.shape[1], 3), LEGEND_BG, np.uint8)]
    return np.concatenate([framed, np.concatenate(column, axis=0)], axis=1)


AXIS_LEFT, AXIS_BOTTOM = 72, 40  # px: the y axis's strip (tick labels + title) and the x axis's
AXIS_RIGHT = 16  # px right of the field: room for half the last x label
AXIS_TOP = 10  # px above the field: room for half the top y label (centred on the top row)
TICK_LEN = 5


def with_axes(img: np.ndarray, x_range: tuple[float, float], y_range: tuple[float, float], x_title: str,
              y_title: str, x_extent: tuple[float, float] | None = None,
              y_extent: tuple[float, float] | None = None) -> np.ndarray:
    """``img`` (a field drawn y up, its columns spanning ``x_range`` and its rows ``y_range`` in
    world units) with a y axis on a strip to its left and an x axis on a strip under it: ticks at
    the round values app/gui/ticks.py chooses for the window's axes, their labels, and the titles.

    ``x_extent``/``y_extent``: the domain along that axis (world units, inside the range), where the
    window's axes put their line, ticks and labels, its ends labelled too (96 on a y axis of 0 … 80,
    ticks.with_ends); None: the whole range, its ends not labelled (they are the image's edges)."""
    h, w = img.shape[:2]
    px = max(int(round(LEGEND_PT / 72.0 * LEGEND_DPI)), 8)
    font = _font(px + 1)
    out = Image.new("RGB", (AXIS_LEFT + w + AXIS_RIGHT, AXIS_TOP + h + AXIS_BOTTOM), LEGEND_BG)
    out.paste(Image.fromarray(img), (AXIS_LEFT, AXIS_TOP))
    draw = ImageDraw.Draw(out)
    t, b = AXIS_TOP, AXIS_TOP + h  # the field's first row and the row under it
    (x0, x1), (y0, y1) = x_range, y_range

    def col(v):  # the image column of world x
        return AXIS_LEFT + (v - x0) / (x1 - x0) * (w - 1)

    def row(v):  # y up: the top row is y1
        return t + (y1 - v) / (y1 - y0) * (h - 1)

    y_label_w = AXIS_LEFT - (px + 8) - TICK_LEN - 8  # the y labels' room, clear of the title
    xa, xb = x_extent if x_extent is not None else x_range
    ya, yb = y_extent if y_extent is not None else y_range
    draw.line([(AXIS_LEFT - 1, row(yb)), (AXIS_LEFT - 1, row(ya))], fill=LEGEND_FG)  # the axis lines
    draw.line([(col(xa), b), (col(xb), b)], fill=LEGEND_FG)
    length = (xb - xa) / (x1 - x0) * (w - 1)
    xs, xt = nice_ticks(xa, xb, length, LEGEND_PT, LEGEND_DPI, along="x")
    xs, xt = with_ends(xs, xt, xa, xb, (x_extent is not None,) * 2, length, LEGEND_PT, LEGEND_DPI, "x", None)
    for v, text in zip(xs, xt):
        c = int(round(col(v)))
        draw.line([(c, b), (c, b + TICK_LEN)], fill=LEGEND_FG)
        draw.text((c, b + TICK_LEN + 2), text, fill=LEGEND_FG, font=font, anchor="mt")
    length = (yb - ya) / (y1 - y0) * (h - 1)
    ys, yt = nice_ticks(ya, yb, length, LEGEND_PT, LEGEND_DPI, along="y", max_width_px=y_label_w)
    ys, yt = with_ends(ys, yt, ya, yb, (y_extent is not None,) * 2, length, LEGEND_PT, LEGEND_DPI, "y", y_label_w)
    for v, text in zip(ys, yt):
        r = int(round(row(v)))
        draw.line([(AXIS_LEFT - 1 - TICK_LEN, r), (AXIS_LEFT - 1, r)], fill=LEGEND_FG)
        draw.text((AXIS_LEFT - TICK_LEN - 4, r), text, fill=LEGEND_FG, font=font, anchor="rm")
    draw.text((AXIS_LEFT + w / 2, b + AXIS_BOTTOM - 3), x_title, fill=LEGEND_FG, font=font, anchor="md")
    title = Image.new("RGB", (max(h, 1), px + 6), LEGEND_BG)  # the y title, turned to run upwards
    ImageDraw.Draw(title).text((h / 2, (px + 6) / 2), y_title, fill=LEGEND_FG, font=font, anchor="mm")
    out.paste(title.rotate(90, expand=True), (2, t))
    return np.asarray(out)


def _font(px: int):
    """DejaVu Sans (matplotlib ships it: Greek letters, ∞, the en dash of "[–]"), else Pillow's own
    font — whose glyphs stop at Latin-1, so φ, ρ and ∞ came out as boxes."""
    try:
        from matplotlib import font_manager  # heavy (≈0.3 s), needed only to find the font file

        return ImageFont.truetype(font_manager.findfont("DejaVu Sans", fallback_to_default=True), px)
    except Exception:  # no matplotlib, or no font file: the plain default
        pass
    try:
        return ImageFont.load_default(size=px)  # Pillow ≥ 10.1: a scalable font
    except TypeError:
        return ImageFont.load_default()


def legend_panel(height: int, lo: float, hi: float, cmap: str, label: str, units: str) -> np.ndarray:
    """(height, LEGEND_WIDTH, 3) uint8: a vertical colour bar of ``cmap`` (hi at the top), its range
    ends and the round ticks app/gui/ticks.py chooses for the on-screen bar, and the label with its
    units above it."""
    px = max(int(round(LEGEND_PT / 72.0 * LEGEND_DPI)), 8)
    font = _font(px + 1)
    panel = Image.new("RGB", (LEGEND_WIDTH, height), LEGEND_BG)
    draw = ImageDraw.Draw(panel)
    lines = [label] + ([f"[{units}]"] if units else [])
    top = 6 + len(lines) * (px + 4) + 6
    bottom = height - (px + 4)  # room for the low end's label, centred on the bar's last row
    x0, x1 = 8, 26
    length = bottom - top
    if length < 2 * px:  # too short a frame for a bar: the label only
        for k, line in enumerate(lines):
            draw.text((6, 6 + k * (px + 4)), line, fill=LEGEND_FG, font=font)
        return np.asarray(panel)
    table = (np.asarray(colormaps.lut(cmap)) * 255 + 0.5).astype(np.uint8)
    rows = table[np.rint(np.linspace(len(table) - 1, 0, length)).astype(int)]  # top row = hi
    panel_px = np.asarray(panel).copy()
    panel_px[top:bottom, x0:x1] = rows[:, None, :]
    panel = Image.fromarray(panel_px)
    draw = ImageDraw.Draw(panel)
    for k, line in enumerate(lines):
        draw.text((6, 6 + k * (px + 4)), line, fill=LEGEND_FG, font=font)

    def y_of(v: float) -> float:
        return top + (hi - v) / (hi - lo) * (length - 1)

    def label_at(v: float, text: str) -> None:
        y = y_of(v)
        draw.line([(x1, y), (x1 + 4, y)], fill=LEGEND_FG)
        draw.text((x1 + 7, y), text, fill=LEGEND_FG, font=font, anchor="lm")

    label_at(hi, fmt_any(hi))
    label_at(lo, fmt_any(lo))
    ticks, texts = nice_ticks(lo, hi, length, LEGEND_PT, LEGEND_DPI, along="y", avoid=(lo, hi),
                              max_width_px=LEGEND_WIDTH - x1 - 10)
    for v, text in zip(ticks, texts):
        label_at(v, text)
    return np.asarray(panel)

"""Headless frames: the engine's displayed field rendered to an RGB image with no display.

It follows the app's view rules (same colormap tables, y up, obstacles drawn in grey, a 3D grid
shown as its middle slice across ``view.slice_axis``, particles as dots coloured by an attribute)
so a headless run's PNGs look like the window.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from .atomic import write_atomic
from .fieldkinds import handler_for

MIN_SIZE = 512


def default_field(engine) -> str:
    names = engine.field_names()
    wanted = engine.preset.view.field
    return wanted if wanted in names else names[0]


def field_image(engine, name: str | None = None, vrange=None) -> np.ndarray:
    """RGB uint8 image (H, W, 3) of one field, at the field's own resolution (grids).

    The field type's ``png`` handler (nagare.app.fieldkinds) draws it; only that field is asked for."""
    name = name or default_field(engine)
    fld = engine.field(name)
    return handler_for("png", fld)(fld, engine.backend, engine.preset.view, vrange)


def upscale(img: np.ndarray, min_size: int = MIN_SIZE) -> np.ndarray:
    """Nearest-neighbour upscale by an integer factor so small grids stay visible."""
    f = max(1, int(np.ceil(min_size / max(img.shape[:2]))))
    return img.repeat(f, axis=0).repeat(f, axis=1) if f > 1 else img


def save_png(img: np.ndarray, path: str | Path) -> Path:
    return write_atomic(path, lambda p: Image.fromarray(img).save(p, format="PNG"))


def save_frame(engine, path: str | Path, name: str | None = None, legend: bool = False) -> Path:
    """One headless frame; with ``legend``, a grid field gets the app's colour bar beside it (the
    field's label and units, its range ends and round ticks between them)."""
    if legend:
        img = framed_with_legend(engine, name)
        if img is not None:
            return save_png(img, path)
    return save_png(upscale(field_image(engine, name)), path)


# ---- the colour bar of a headless frame --------------------------------------------------------
LEGEND_WIDTH = 120  # px beside the field
LEGEND_BG = (30, 30, 34)  # the canvas's dark background
LEGEND_FG = (225, 225, 225)
LEGEND_PT = 9.0  # label size in points at LEGEND_DPI
LEGEND_DPI = 96.0


def framed_with_legend(engine, name: str | None = None) -> np.ndarray | None:
    """The upscaled frame of a grid field with a colour-bar column on its right; None for fields
    that are not grids (particles, profiles, boxes keep their plain frame)."""
    from nagare.engine.fields import Grid2D, Grid3D

    from . import colormaps
    from .fieldkinds.grids import grid_plane, grid_range

    name = name or default_field(engine)
    fld = engine.field(name)
    if not isinstance(fld, (Grid2D, Grid3D)):
        return None
    view = engine.preset.view
    data, mask = grid_plane(fld, engine.backend, view)
    lo, hi = grid_range(fld, data, view)
    img = upscale(colormaps.apply(data, view.colormap, (lo, hi), mask=mask))
    panel = legend_panel(img.shape[0], lo, hi, view.colormap, fld.label or name, fld.units)
    return np.concatenate([img, panel], axis=1)


def _font(px: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=px)  # Pillow ≥ 10.1: a scalable font
    except TypeError:
        return ImageFont.load_default()


def legend_panel(height: int, lo: float, hi: float, cmap: str, label: str, units: str) -> np.ndarray:
    """(height, LEGEND_WIDTH, 3) uint8: a vertical colour bar of ``cmap`` (hi at the top), its range
    ends and the round ticks app/gui/ticks.py chooses for the on-screen bar, and the label with its
    units above it."""
    from PIL import ImageDraw

    from . import colormaps
    from .gui.ticks import fmt_any, nice_ticks

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

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


def save_frame(engine, path: str | Path, name: str | None = None) -> Path:
    return save_png(upscale(field_image(engine, name)), path)

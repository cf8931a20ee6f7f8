"""Headless frames: the engine's displayed field rendered to an RGB image with no display.

It follows the app's view rules (same colormap tables, y up, obstacles drawn in grey, a 3D grid
shown as its middle slice across ``view.slice_axis``, particles as dots coloured by an attribute)
so a headless run's PNGs look like the window.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from nagare.engine.fields import Boxes, Grid2D, Grid3D, Particles
from PIL import Image

from . import colormaps
from .atomic import write_atomic

MIN_SIZE = 512


def default_field(engine) -> str:
    fields = engine.fields()
    wanted = engine.preset.view.field
    return wanted if wanted in fields else next(iter(fields))


def _slice3d(data: np.ndarray, axis: str) -> np.ndarray:
    nz, ny, nx = data.shape[-3:]
    if axis == "z":
        return data[..., nz // 2, :, :]
    if axis == "y":
        return data[..., :, ny // 2, :]
    return data[..., :, :, nx // 2]


def field_image(engine, name: str | None = None, vrange=None) -> np.ndarray:
    """RGB uint8 image (H, W, 3) of one field, at the field's own resolution (grids)."""
    view = engine.preset.view
    name = name or default_field(engine)
    fld = engine.fields()[name]
    be = engine.backend
    if isinstance(fld, (Grid2D, Grid3D)):
        data = be.asnumpy(fld.data)
        mask = None if fld.mask is None else be.asnumpy(fld.mask)
        if isinstance(fld, Grid3D):
            data = _slice3d(data, view.slice_axis)
            mask = None if mask is None else _slice3d(mask, view.slice_axis)
        if fld.kind == "vector":
            data = np.sqrt((data.astype(np.float64) ** 2).sum(axis=0))
        return colormaps.apply(data.astype(np.float64), view.colormap, vrange or view.range,
                               symmetric=fld.symmetric, mask=mask)
    if isinstance(fld, Particles):
        return _particles_image(be.asnumpy(fld.positions), {k: be.asnumpy(v) for k, v in fld.attributes.items()},
                                fld.bounds, view.colormap, vrange or view.range)
    if isinstance(fld, Boxes):
        return _boxes_image(be.asnumpy(fld.lo), be.asnumpy(fld.hi))
    raise TypeError(f"cannot draw field {name!r} of type {type(fld).__name__}")


def _particles_image(pos, attrs, bounds, cmap, vrange, size=MIN_SIZE) -> np.ndarray:
    img = np.full((size, size, 3), 16, np.uint8)
    if len(pos) == 0:
        return img
    xy = pos[:, :2]
    lo = np.asarray(bounds[0][:2]) if bounds else xy.min(axis=0)
    hi = np.asarray(bounds[1][:2]) if bounds else xy.max(axis=0)
    span = np.maximum(hi - lo, 1e-12).max()
    ij = ((xy - lo) / span * (size - 1)).astype(np.int64)
    ok = (ij >= 0).all(axis=1) & (ij < size).all(axis=1)
    values = next(iter(attrs.values())) if attrs else np.zeros(len(pos))
    lo_v, hi_v = vrange or colormaps.auto_range(values)
    lut = colormaps.lut(cmap)
    k = (np.clip((values - lo_v) / (hi_v - lo_v), 0, 1) * 255).astype(np.int64)
    rgb = (lut[k] * 255).astype(np.uint8)
    img[size - 1 - ij[ok, 1], ij[ok, 0]] = rgb[ok]
    return img


def _boxes_image(lo, hi, size=MIN_SIZE) -> np.ndarray:
    img = np.full((size, size, 3), 16, np.uint8)
    if len(lo) == 0:
        return img
    a, b = lo[:, :2].min(axis=0), hi[:, :2].max(axis=0)
    s = (size - 1) / max((b - a).max(), 1e-12)
    for l, h in zip(lo[:, :2], hi[:, :2]):
        (x0, y0), (x1, y1) = ((l - a) * s).astype(int), ((h - a) * s).astype(int)
        img[size - 1 - y0, x0:x1 + 1] = img[size - 1 - y1, x0:x1 + 1] = 220
        img[size - 1 - y1:size - y0, x0] = img[size - 1 - y1:size - y0, x1] = 220
    return img


def upscale(img: np.ndarray, min_size: int = MIN_SIZE) -> np.ndarray:
    """Nearest-neighbour upscale by an integer factor so small grids stay visible."""
    f = max(1, int(np.ceil(min_size / max(img.shape[:2]))))
    return img.repeat(f, axis=0).repeat(f, axis=1) if f > 1 else img


def save_png(img: np.ndarray, path: str | Path) -> Path:
    return write_atomic(path, lambda p: Image.fromarray(img).save(p, format="PNG"))


def save_frame(engine, path: str | Path, name: str | None = None) -> Path:
    return save_png(upscale(field_image(engine, name)), path)

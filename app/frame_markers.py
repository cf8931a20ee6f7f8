"""Particles drawn over a headless frame as the window's overlay draws them over a 2D grid
(OverlayVisual in app/gui/canvas.py, shaders/glsl/overlay.*.glsl): round sprites OVERLAY_SIZE
pixels wide, a light core in a dark ring, blended over the field with the overlay's alpha.

A frame's pixel is one logical pixel of the window, and the markers go on the upscaled frame, so a
tracer is a dot the window's size whatever the grid's resolution, not a block of cells.
"""
from __future__ import annotations

import numpy as np

from .gui.overlay_style import OVERLAY_CORE, OVERLAY_HALO_RGBA, OVERLAY_RGBA, OVERLAY_SIZE

CHUNK = 1 << 16  # points stamped at once: bounds the (points × sprite pixels) temporaries


def draw_markers(img: np.ndarray, positions, scale: float, size: float = OVERLAY_SIZE) -> np.ndarray:
    """A copy of ``img`` ((H, W, 3) uint8, drawn y up) with a marker at each row of ``positions``
    ((n, 2): x, y in the units where the image spans W/scale × H/scale, from its lower-left corner).

    As a GL point sprite: the pixels whose centres lie within size/2 of the point, the core those
    within OVERLAY_CORE of that radius. Where markers overlap, the later one is on top (the window
    draws them in order). Rows with a non-finite coordinate (parked tracers) are not drawn."""
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim != 2 or pos.shape[1] != 2:
        raise ValueError(f"draw_markers: positions must be (n, 2) x, y; got shape {pos.shape}")
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"draw_markers: the image must be (H, W, 3) uint8; got {img.shape} {img.dtype}")
    h, w = img.shape[:2]
    r = 0.5 * size
    pos = pos[np.isfinite(pos).all(axis=1)]
    cx = pos[:, 0] * scale  # pixels from the left edge
    cy = h - pos[:, 1] * scale  # pixels from the top edge (y up)
    near = (cx > -r) & (cx < w + r) & (cy > -r) & (cy < h + r)  # far-off points: no int overflow below
    cx, cy = cx[near], cy[near]
    # the last marker over each pixel (the one on top): the highest point index among those covering it
    top = np.full(h * w, -1, np.int64)
    for start in range(0, len(cx), CHUNK):
        pixel, point = _covered(cx[start:start + CHUNK], cy[start:start + CHUNK], r, h, w)
        np.maximum.at(top, pixel, point + start)
    out = img.copy()
    pixel = np.flatnonzero(top >= 0)
    if pixel.size == 0:
        return out
    k = top[pixel]
    row, col = np.divmod(pixel, w)
    core = (col + 0.5 - cx[k]) ** 2 + (row + 0.5 - cy[k]) ** 2 <= (OVERLAY_CORE * r) ** 2
    flat = out.reshape(-1, 3)
    under = flat[pixel].astype(np.float64)
    for sel, rgba in ((core, OVERLAY_RGBA), (~core, OVERLAY_HALO_RGBA)):
        colour, alpha = np.asarray(rgba[:3]) * 255.0, rgba[3]
        flat[pixel[sel]] = np.rint(alpha * colour + (1.0 - alpha) * under[sel]).astype(np.uint8)
    return out


def _covered(cx: np.ndarray, cy: np.ndarray, r: float, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(flat pixel index, point index) of every image pixel whose centre lies within ``r`` of a point
    at (cx, cy) (pixels from the top-left corner)."""
    side = int(np.floor(2 * r)) + 1  # at most this many pixel centres lie within r along one axis
    d = np.arange(side)
    cols = np.ceil(cx - 0.5 - r).astype(np.int64)[:, None, None] + d[None, None, :]
    rows = np.ceil(cy - 0.5 - r).astype(np.int64)[:, None, None] + d[None, :, None]
    r2 = (cols + 0.5 - cx[:, None, None]) ** 2 + (rows + 0.5 - cy[:, None, None]) ** 2
    cols, rows = np.broadcast_to(cols, r2.shape), np.broadcast_to(rows, r2.shape)
    hit = (r2 <= r * r) & (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
    point = np.broadcast_to(np.arange(len(cx))[:, None, None], r2.shape)
    return (rows * w + cols)[hit], point[hit]

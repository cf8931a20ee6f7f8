"""Points drawn into a headless frame as the window draws them, pixel for pixel:

- ``draw_markers``: tracers over a 2D grid, as the window's overlay (OverlayVisual in
  app/gui/canvas.py, shaders/glsl/overlay.*.glsl): round sprites of the window's size rule, a light
  core in a dark ring, blended over the field with the overlay's alpha. A frame's pixel is one logical
  pixel of the window, and the markers go on the upscaled frame, so a tracer is a dot the window's
  size whatever the grid's resolution, not a block of cells.
- ``draw_particles``: a 2D particle field, as the window's sprites (ParticleVisual,
  shaders/glsl/particles.*.glsl): opaque round dots, each its own colour, lightly shaded.
"""
from __future__ import annotations

import numpy as np

from .gui.overlay_style import OVERLAY_CORE, OVERLAY_HALO_RGBA, OVERLAY_RGBA, overlay_marker

CHUNK = 1 << 16  # points stamped at once: bounds the (points × sprite pixels) temporaries


def draw_markers(img: np.ndarray, positions, scale: float, size: float | None = None) -> np.ndarray:
    """A copy of ``img`` ((H, W, 3) uint8, drawn y up) with a marker at each row of ``positions``
    ((n, 2): x, y in the units where the image spans W/scale × H/scale, from its lower-left corner).

    As a GL point sprite: the pixels whose centres lie within size/2 of the point, the core those
    within the core's radius. The size, core and ring follow the window's rule for the tracers over
    the field (overlay_style.overlay_marker: smaller and lighter-ringed as they crowd the image; a
    sparse set gets OVERLAY_SIZE) unless ``size`` is given. Where markers overlap, the later one is
    on top (the window draws them in order). Rows with a non-finite coordinate (parked tracers) are
    not drawn."""
    _check_image(img, "draw_markers")
    core_frac, halo = OVERLAY_CORE, OVERLAY_HALO_RGBA
    if size is None:
        size, core_frac, ring_alpha = overlay_marker(len(positions), float(img.shape[0] * img.shape[1]))
        halo = (*OVERLAY_HALO_RGBA[:3], ring_alpha)
    pixel, _, d2 = _sprite_pixels(img.shape[:2], positions, scale, size, "draw_markers", first_on_top=False)
    out = img.copy()
    if pixel.size == 0:
        return out
    core = d2 <= (core_frac * 0.5 * size) ** 2
    flat = out.reshape(-1, 3)
    under = flat[pixel].astype(np.float64)
    for sel, rgba in ((core, OVERLAY_RGBA), (~core, halo)):
        colour, alpha = np.asarray(rgba[:3]) * 255.0, rgba[3]
        flat[pixel[sel]] = np.rint(alpha * colour + (1.0 - alpha) * under[sel]).astype(np.uint8)
    return out


PARTICLE_SHADE = (0.75, 0.25)  # particles.frag.glsl: colour × (0.75 + 0.25·√(1 − (d/r)²)), a hint of a sphere


def draw_particles(img: np.ndarray, positions, scale: float, size: float, rgb) -> np.ndarray:
    """A copy of ``img`` ((H, W, 3) uint8, drawn y up) with a dot of colour ``rgb[i]`` ((n, 3), 0–255)
    at each row i of ``positions`` ((n, 2) as for :func:`draw_markers`), ``size`` pixels wide.

    As the window's particle sprite: the pixels whose centres lie within size/2 of the point, opaque,
    shaded toward the rim as particles.frag.glsl shades them. Where dots overlap, the earlier one is on
    top (the window's depth test keeps the first of sprites at the same depth). Rows with a non-finite
    coordinate (parked particles) are not drawn."""
    _check_image(img, "draw_particles")
    rgb = np.asarray(rgb, dtype=np.float64)
    if rgb.shape != (len(positions), 3):
        raise ValueError(f"draw_particles: colours must be (n, 3) for {len(positions)} positions; got {rgb.shape}")
    pixel, point, d2 = _sprite_pixels(img.shape[:2], positions, scale, size, "draw_particles", first_on_top=True)
    out = img.copy()
    shade = PARTICLE_SHADE[0] + PARTICLE_SHADE[1] * np.sqrt(np.clip(1.0 - d2 / (0.5 * size) ** 2, 0.0, 1.0))
    out.reshape(-1, 3)[pixel] = np.clip(np.rint(rgb[point] * shade[:, None]), 0, 255).astype(np.uint8)
    return out


def _check_image(img: np.ndarray, who: str) -> None:
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"{who}: the image must be (H, W, 3) uint8; got {img.shape} {img.dtype}")


def _sprite_pixels(shape: tuple[int, int], positions, scale: float, size: float, who: str,
                   first_on_top: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flat pixel index, row of ``positions``, squared distance in px² from the point) of each
    image pixel a sprite covers, for the sprite on top there: the last row drawn, or with
    ``first_on_top`` the first. A pixel is covered when its centre lies within size/2 of the point."""
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim != 2 or pos.shape[1] != 2:
        raise ValueError(f"{who}: positions must be (n, 2) x, y; got shape {pos.shape}")
    h, w = shape
    r = 0.5 * size
    rows = np.flatnonzero(np.isfinite(pos).all(axis=1))
    cx = pos[rows, 0] * scale  # pixels from the left edge
    cy = h - pos[rows, 1] * scale  # pixels from the top edge (y up)
    near = (cx > -r) & (cx < w + r) & (cy > -r) & (cy < h + r)  # far-off points: no int overflow below
    rows, cx, cy = rows[near], cx[near], cy[near]
    # the sprite on top of each pixel: the highest rank among those covering it
    n = len(cx)
    top = np.full(h * w, -1, np.int64)
    for start in range(0, n, CHUNK):
        pixel, point = _covered(cx[start:start + CHUNK], cy[start:start + CHUNK], r, h, w)
        point = point + start
        np.maximum.at(top, pixel, n - 1 - point if first_on_top else point)
    pixel = np.flatnonzero(top >= 0)
    k = n - 1 - top[pixel] if first_on_top else top[pixel]
    row, col = np.divmod(pixel, w)
    d2 = (col + 0.5 - cx[k]) ** 2 + (row + 0.5 - cy[k]) ** 2
    return pixel, rows[k], d2


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

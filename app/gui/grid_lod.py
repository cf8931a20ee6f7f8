"""A 2D field drawn from a texture no finer than the screen shows it.

A 2048² field in a 900-pixel view puts ~2.3 cells on each pixel. When the view shows k ≥ 2 cells
a pixel (the 2D camera has one scale for both axes), the canvas uploads the k×k block means
instead of every cell (1/k² of the texels); zoomed in to fewer than 2 cells a pixel, every cell
again. What it buys, measured (lbm2d-cylinder 2048², docs/decisions.md D24): a faithful picture
of the minified field, and a quarter of the bytes per frame; the GPU
time saved on the interop path is small (writing the texture costs ~0.8 ms a frame of the
simulation's GPU time whatever its size — it is paid per write, in switches between the CUDA and GL
contexts), ~0.1 ms a frame together with the shared buffers.

Block means, not every k-th cell: the texture then holds what each screen pixel covers (the
nearest-cell sampling of a texture finer than the screen shows one cell of the ~k² under a pixel,
and aliases fine structure). A NaN cell (a solid, in some fields) is left out of its block's mean;
a block of NaN cells stays NaN. Blocks of the last row and column that run past the field average
the cells they hold, and the texture covers the field plus less than one pixel.

Device fields only (CuPy): the reduction runs on the device, on a stream of the canvas'; a NumPy
field is uploaded whole, as before (its upload is host work, and a host reduction costs about as much).
Exports (``FieldCanvas.grab``) draw at the canvas' own size, so they get the same resolution as
the screen.
"""
from __future__ import annotations

import math

import numpy as np


def grid_step(world_w: float, world_h: float, pixels_w: int, pixels_h: int, spacing: float) -> int:
    """Cells per pixel the view shows, rounded down, at least 1: the block size k of the texture.

    ``world_w × world_h`` is the visible rectangle (camera units), ``pixels_w × pixels_h`` the
    view in physical pixels, ``spacing`` the cell size in camera units."""
    world_w, world_h = abs(world_w), abs(world_h)  # a flipped camera rect has a negative extent
    if not (pixels_w > 0 and pixels_h > 0 and spacing > 0 and world_w > 0 and world_h > 0):
        return 1
    # The 2D camera keeps one scale for both axes: it shows at least the asked rect, widened along
    # one axis to the view's aspect, so a pixel spans the larger of the two ratios on both axes.
    per_pixel = max(world_w / pixels_w, world_h / pixels_h) / spacing
    if not math.isfinite(per_pixel):
        return 1
    return max(1, int(math.floor(per_pixel + 1e-9)))


def block_mean(a, k: int):
    """(ny, nx) float array → (⌈ny/k⌉, ⌈nx/k⌉) float32 means of its k×k blocks (NumPy or CuPy,
    as ``a``), NaN cells left out; a last block that runs past the field is the mean of the cells
    it holds. ``k`` is capped at the field's shorter side (a field under a pixel: a few texels)."""
    xp = np
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy as xp  # optional dependency (CuPy): only a CuPy field comes here
    ny, nx = a.shape
    k = max(1, min(int(k), ny, nx))
    if k == 1:
        return a
    pad_y, pad_x = (-ny) % k, (-nx) % k
    if pad_y or pad_x:  # NaN: left out of the mean like a solid cell
        a = xp.pad(a.astype(xp.float32, copy=False), ((0, pad_y), (0, pad_x)), mode="constant",
                   constant_values=np.nan)
    blocks = a.reshape(a.shape[0] // k, k, a.shape[1] // k, k)
    valid = ~xp.isnan(blocks)
    total = xp.where(valid, blocks, 0).sum(axis=(1, 3), dtype=xp.float32)
    count = valid.sum(axis=(1, 3), dtype=xp.float32)
    with np.errstate(invalid="ignore", divide="ignore"):  # an all-NaN block: 0/0 → NaN, as wanted
        return (total / count).astype(xp.float32, copy=False)

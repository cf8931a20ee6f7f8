"""A 2D field drawn from a texture no finer than the screen shows it.

A 2048² field in a 900-pixel view puts ~2.3 cells on each pixel. Writing the whole field into the
display texture every frame cost 0.85 ms of the simulation's GPU time per frame on an H100
(``bench_display --timeline --experiment no-field-copy``, lbm2d-cylinder 2048², 2026-11-27): the
texture write, whichever way (mapped interop or GL's copy from a shared buffer), is done while the
GPU runs the GL context, not the simulation. When the view shows k ≥ 2 cells per pixel along
both axes, the canvas uploads the k×k block means instead (1/k² of the texels); zoomed in to
fewer than 2 cells a pixel, every cell again.

Block means, not every k-th cell: the texture then holds what each screen pixel covers (the
nearest-cell sampling of a texture finer than the screen shows one cell of the ~k² under a pixel,
and aliases fine structure). A NaN cell (a solid, in some fields) is left out of its block's mean;
a block of NaN cells stays NaN. Blocks of the last row and column that run past the field repeat
its edge cells, so the texture covers the field plus less than one pixel.

Device fields only (CuPy): there it saves GPU time of the simulation; a NumPy field is uploaded
whole, as before (its upload is host work, and a host reduction costs about as much).
Exports (``FieldCanvas.grab``) draw at the canvas' own size, so they get the same resolution as
the screen.
"""
from __future__ import annotations

import math


def grid_step(world_w: float, world_h: float, pixels_w: int, pixels_h: int, spacing: float) -> int:
    """Cells per pixel the view shows, rounded down, at least 1: the block size k of the texture.

    ``world_w × world_h`` is the visible rectangle (camera units), ``pixels_w × pixels_h`` the
    view in physical pixels, ``spacing`` the cell size in camera units."""
    if not (pixels_w > 0 and pixels_h > 0 and spacing > 0 and world_w > 0 and world_h > 0):
        return 1
    per_pixel = min(world_w / pixels_w, world_h / pixels_h) / spacing
    if not math.isfinite(per_pixel):
        return 1
    return max(1, int(math.floor(per_pixel + 1e-9)))


def block_mean(a, k: int):
    """(ny, nx) float array → (⌈ny/k⌉, ⌈nx/k⌉) float32 means of its k×k blocks (NumPy or CuPy,
    as ``a``), NaN cells left out; the last blocks are filled up with the field's edge cells."""
    import numpy as np

    xp = np
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy as xp
    if k == 1:
        return a
    ny, nx = a.shape
    pad_y, pad_x = (-ny) % k, (-nx) % k
    if pad_y or pad_x:
        a = xp.pad(a, ((0, pad_y), (0, pad_x)), mode="edge")
    blocks = a.reshape(a.shape[0] // k, k, a.shape[1] // k, k)
    valid = ~xp.isnan(blocks)
    total = xp.where(valid, blocks, 0).sum(axis=(1, 3), dtype=xp.float32)
    count = valid.sum(axis=(1, 3), dtype=xp.float32)
    with np.errstate(invalid="ignore", divide="ignore"):  # an all-NaN block: 0/0 → NaN, as wanted
        return (total / count).astype(xp.float32, copy=False)

"""The display texture's level of detail (app/gui/grid_lod.py): k from the view, k×k block means."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app.gui.grid_lod import block_mean, grid_step


def _block_mean_by_loops(a: np.ndarray, k: int) -> np.ndarray:
    """The definition, cell by cell: edge-padded blocks, NaN cells left out, all-NaN → NaN."""
    ny, nx = a.shape
    out = np.empty((-(-ny // k), -(-nx // k)), np.float64)
    for bi in range(out.shape[0]):
        for bj in range(out.shape[1]):
            vals = [a[min(bi * k + di, ny - 1), min(bj * k + dj, nx - 1)] for di in range(k) for dj in range(k)]
            vals = [v for v in vals if not np.isnan(v)]
            out[bi, bj] = np.mean(vals) if vals else np.nan
    return out


@pytest.mark.parametrize("shape,k", [((8, 12), 2), ((7, 10), 3), ((5, 5), 4), ((9, 4), 1), ((3, 2), 5)])
def test_block_mean_is_the_mean_of_each_block(shape, k):
    a = np.random.default_rng(sum(shape) + k).normal(size=shape).astype(np.float32)
    a[0, 0] = np.nan  # a solid cell: left out of its block
    if shape[0] > 2 and shape[1] > 2 and k > 1:
        a[-1, -1] = a[-2, -1] = a[-1, -2] = a[-2, -2] = np.nan  # a whole last block (k = 2) is solid
    got = block_mean(a, k)
    assert got.dtype == np.float32
    want = _block_mean_by_loops(a, k)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_block_mean_of_a_constant_is_that_constant_and_k1_is_the_field_itself():
    a = np.full((33, 17), 0.25, np.float32)
    np.testing.assert_array_equal(block_mean(a, 4), np.full((9, 5), 0.25, np.float32))
    assert block_mean(a, 1) is a


@pytest.mark.parametrize("world,pixels,spacing,k", [
    ((2048.0, 2048.0), (900, 900), 1.0, 2),      # a 2048² field in a 900-pixel view: 2.27 cells a pixel
    ((2048.0, 2048.0), (1024, 1024), 1.0, 2),    # exactly 2
    ((2047.0, 2047.0), (1024, 1024), 1.0, 1),    # just under 2: every cell
    ((1.0, 1.0), (900, 900), 1.0 / 2048, 2),     # the same in metres
    ((4096.0, 1000.0), (1000, 1000), 1.0, 1),    # the axis with fewer cells a pixel decides
    ((100.0, 100.0), (900, 900), 1.0, 1),        # zoomed in
    ((1e6, 1e6), (10, 10), 1.0, 100000),         # far out
    ((2048.0, 2048.0), (0, 900), 1.0, 1),        # a view with no pixels (collapsed): no reduction
    ((float("nan"), 1.0), (900, 900), 1.0, 1),
    ((2048.0, 2048.0), (900, 900), 0.0, 1),
])
def test_grid_step_is_the_cells_per_pixel_rounded_down(world, pixels, spacing, k):
    assert grid_step(*world, *pixels, spacing) == k

"""The display texture's level of detail (app/gui/grid_lod.py): k from the view, k×k block means."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app.gui.grid_lod import block_mean, grid_step


def _block_mean_by_loops(a: np.ndarray, k: int) -> np.ndarray:
    """The definition, cell by cell: the cells of each block inside the field, NaN cells left out,
    all-NaN → NaN."""
    ny, nx = a.shape
    out = np.empty((-(-ny // k), -(-nx // k)), np.float64)
    for bi in range(out.shape[0]):
        for bj in range(out.shape[1]):
            vals = [a[i, j] for i in range(bi * k, min(bi * k + k, ny)) for j in range(bj * k, min(bj * k + k, nx))]
            vals = [v for v in vals if not np.isnan(v)]
            out[bi, bj] = np.mean(vals) if vals else np.nan
    return out


@pytest.mark.parametrize("shape,k", [((8, 12), 2), ((7, 10), 3), ((6, 5), 4), ((5, 5), 4), ((9, 4), 1), ((6, 9), 5)])
def test_block_mean_is_the_mean_of_each_block(shape, k):
    a = np.random.default_rng(sum(shape) + k).normal(size=shape).astype(np.float32)
    a[0, 0] = np.nan  # a solid cell: left out of its block
    if shape[0] > 2 and shape[1] > 2 and k > 1:
        a[-1, -1] = a[-2, -1] = a[-1, -2] = a[-2, -2] = np.nan  # a whole last block (k = 2) is solid
    got = block_mean(a, k)
    assert got.dtype == np.float32
    want = _block_mean_by_loops(a, k)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_a_last_block_past_the_edge_is_the_mean_of_the_cells_it_holds():
    a = np.arange(6, dtype=np.float32).reshape(6, 1)  # 0..5 in one column, k = 4: blocks {0..3}, {4, 5}
    np.testing.assert_array_equal(block_mean(a.repeat(4, axis=1), 4), np.array([[1.5], [4.5]], np.float32))


def test_k_beyond_the_field_is_capped_at_its_shorter_side():
    a = np.random.default_rng(3).normal(size=(64, 96)).astype(np.float32)
    got = block_mean(a, 4000)  # zoomed out until the field is under a pixel: 64 × 64 blocks, no huge pad
    assert got.shape == (1, 2)
    np.testing.assert_allclose(got, [[a[:, :64].mean(), a[:, 64:].mean()]], rtol=1e-5)


def test_block_mean_of_a_constant_is_that_constant_and_k1_is_the_field_itself():
    a = np.full((33, 17), 0.25, np.float32)
    np.testing.assert_array_equal(block_mean(a, 4), np.full((9, 5), 0.25, np.float32))
    assert block_mean(a, 1) is a


@pytest.mark.parametrize("world,pixels,spacing,k", [
    ((2048.0, 2048.0), (900, 900), 1.0, 2),      # a 2048² field in a 900-pixel view: 2.27 cells a pixel
    ((2048.0, 2048.0), (1024, 1024), 1.0, 2),    # exactly 2
    ((2047.0, 2047.0), (1024, 1024), 1.0, 1),    # just under 2: every cell
    ((1.0, 1.0), (900, 900), 1.0 / 2048, 2),     # the same in metres
    ((4096.0, 1000.0), (1000, 1000), 1.0, 4),    # one scale for both axes: the wider ratio is shown
    ((2048.0, 512.0), (900, 700), 1.0, 2),       # a channel 2048 × 512 framed in 900 × 700: 2.3 a pixel
    ((-2048.0, 2048.0), (900, 900), 1.0, 2),     # a flipped rect
    ((100.0, 100.0), (900, 900), 1.0, 1),        # zoomed in
    ((1e6, 1e6), (10, 10), 1.0, 100000),         # far out
    ((2048.0, 2048.0), (0, 900), 1.0, 1),        # a view with no pixels (collapsed): no reduction
    ((float("nan"), 1.0), (900, 900), 1.0, 1),
    ((2048.0, 2048.0), (900, 900), 0.0, 1),
])
def test_grid_step_is_the_cells_per_pixel_rounded_down(world, pixels, spacing, k):
    assert grid_step(*world, *pixels, spacing) == k

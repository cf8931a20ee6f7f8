"""Headless frames look like the window: a 2D grid's tracers drawn as the overlay's markers (a light
core in a dark ring, after the upscale), none when ``view.particles_overlay`` is off; particles in
a frame of the domain's shape."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app import colormaps
from nagare.app.fieldkinds.particles import PNG_SIZE, particles_image
from nagare.app.frame_markers import draw_markers
from nagare.app.frames import field_image, save_frame, upscale
from nagare.app.gui.overlay_style import OVERLAY_CORE, OVERLAY_HALO_RGBA, OVERLAY_RGBA, OVERLAY_SIZE
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import ViewConfig, load_preset
from PIL import Image

CORE_MIN = int(np.floor(OVERLAY_RGBA[3] * 255))  # a core pixel over black is still this light
HALO_MAX = int(np.ceil((1 - OVERLAY_HALO_RGBA[3]) * 255))  # a ring pixel over white is still this dark


def _blend(rgba, under):
    return np.rint(rgba[3] * np.asarray(rgba[:3]) * 255 + (1 - rgba[3]) * np.asarray(under, float)).astype(np.uint8)


def test_a_marker_is_the_window_s_point_sprite():
    """Every pixel whose centre lies within OVERLAY_SIZE/2 of the point, the core within
    OVERLAY_CORE of that: checked pixel by pixel against the distance of each pixel's centre."""
    under = (40, 90, 160)
    img = np.empty((20, 30, 3), np.uint8)
    img[:] = under
    x, y, scale = 3.3, 1.45, 4.0  # → pixel (13.2, 20 − 5.8 = 14.2) from the top-left corner
    out = draw_markers(img, np.array([[x, y]]), scale)
    cx, cy, r = x * scale, 20 - y * scale, OVERLAY_SIZE / 2
    for row in range(20):
        for col in range(30):
            d2 = ((col + 0.5 - cx) ** 2 + (row + 0.5 - cy) ** 2) / r**2
            want = (_blend(OVERLAY_RGBA, under) if d2 <= OVERLAY_CORE**2
                    else _blend(OVERLAY_HALO_RGBA, under) if d2 <= 1 else np.array(under, np.uint8))
            np.testing.assert_array_equal(out[row, col], want, err_msg=f"pixel ({row}, {col})")
    assert (img == under).all(), "the frame given is not drawn on"


def test_parked_tracers_are_not_drawn_and_a_later_marker_is_on_top():
    img = np.zeros((16, 16, 3), np.uint8)
    parked = np.array([[np.nan, 2.0], [3.0, np.inf]])
    np.testing.assert_array_equal(draw_markers(img, parked, 1.0), img)
    # two markers 2 px apart: the first one's centre lies in the later one's ring (1.8 < 2 ≤ 3 px)
    out = draw_markers(img, np.array([[6.5, 8.5], [8.5, 8.5]]), 1.0)
    np.testing.assert_array_equal(out[7, 8], _blend(OVERLAY_RGBA, (0, 0, 0)))  # the second's centre
    np.testing.assert_array_equal(out[7, 6], _blend(OVERLAY_HALO_RGBA, (0, 0, 0)))  # the first's, under its ring
    out = draw_markers(img, np.array([[8.5, 8.5], [6.5, 8.5]]), 1.0)  # drawn the other way round
    np.testing.assert_array_equal(out[7, 6], _blend(OVERLAY_RGBA, (0, 0, 0)))
    with pytest.raises(ValueError, match=r"positions must be \(n, 2\).*\(4,\)"):
        draw_markers(img, np.zeros(4), 1.0)


@pytest.mark.parametrize("cmap", ViewConfig.model_fields["colormap"].annotation.__args__)
def test_markers_show_on_every_colour_of_every_map(cmap):
    """A light core and a dark ring: on the diverging maps' white middle the ring stands out, on a
    dark end the core does."""
    lut = (np.asarray(colormaps.lut(cmap)) * 255 + 0.5).astype(np.uint8)
    for k in range(0, len(lut), 15):
        img = np.empty((12, 12, 3), np.uint8)
        img[:] = lut[k]
        out = draw_markers(img, np.array([[6.0, 6.0]]), 1.0).astype(int)
        contrast = np.abs(out - lut[k].astype(int)).sum(axis=2).max()
        assert contrast >= 300, f"{cmap}[{k}] = {tuple(lut[k])}: the marker differs by {contrast} at most"


def _cylinder(*extra):
    """A small lbm2d-cylinder whose few tracers have left the inlet."""
    sets = ["grid.nx=64", "grid.ny=32", "obstacle.diameter=6", "tracers.count=12", "tracers.rate=1", *extra]
    e = create_engine(load_preset("lbm2d-cylinder", overrides=sets, backend="numpy"), get_backend("numpy"))
    e.step(200)
    return e


def test_a_grid_frame_shows_its_tracers_as_markers_and_none_when_the_overlay_is_off(tmp_path):
    on, off = _cylinder(), _cylinder("view.particles_overlay=false")
    plain = upscale(field_image(off))
    f = plain.shape[1] // 64  # the frame's pixels per cell
    assert plain.shape == (32 * f, 64 * f, 3) and f > 1
    framed = np.asarray(Image.open(save_frame(off, tmp_path / "off.png")))
    np.testing.assert_array_equal(framed, plain)  # no marker at all
    np.testing.assert_array_equal(upscale(field_image(on)), plain)  # the same field under the markers

    img = np.asarray(Image.open(save_frame(on, tmp_path / "on.png")))
    pos = np.asarray(on.field("tracers").positions, np.float64)
    assert np.isfinite(pos).all() and (pos[:, 0] > 1.5).sum() >= 6, "the tracers should have moved"
    h = img.shape[0]
    centres = np.stack([pos[:, 0] * f, h - pos[:, 1] * f], axis=1)  # pixels from the top-left corner
    for i, (cx, cy) in enumerate(centres):
        later = centres[i + 1:]
        if len(later) and (np.hypot(*(later - (cx, cy)).T) < OVERLAY_SIZE).any():
            continue  # a later marker's ring may cover this one's centre
        px = img[int(cy), int(cx)]
        assert (px >= CORE_MIN).all() and (px != plain[int(cy), int(cx)]).any(), f"tracer {i} at {pos[i]}: {px}"
        ring = img[int(cy), int(np.floor(cx - 2.4))]  # its centre 1.9–2.95 px away: inside the ring
        assert (ring <= HALO_MAX).all(), f"tracer {i}: its ring {ring}"
    # nothing drawn away from the tracers
    rows, cols = np.nonzero((img != plain).any(axis=2))
    assert len(rows) > 12
    d = np.hypot(cols[:, None] + 0.5 - centres[None, :, 0], rows[:, None] + 0.5 - centres[None, :, 1]).min(axis=1)
    assert d.max() <= OVERLAY_SIZE / 2


def test_a_framed_grid_frame_draws_the_markers_too(tmp_path):
    from nagare.app import frames

    on, off = _cylinder(), _cylinder("view.particles_overlay=false")
    a = np.asarray(Image.open(save_frame(on, tmp_path / "on.png", legend=True)))
    b = np.asarray(Image.open(save_frame(off, tmp_path / "off.png", legend=True)))
    assert a.shape == b.shape
    rows, cols = np.nonzero((a != b).any(axis=2))
    field_w = upscale(field_image(off)).shape[1]
    assert len(rows) > 12 and cols.min() >= frames.AXIS_LEFT and cols.max() < frames.AXIS_LEFT + field_w
    assert rows.min() >= frames.AXIS_TOP


@pytest.mark.parametrize("bounds,shape", [(((0.0, 0.0), (4.0, 2.0)), (PNG_SIZE // 2, PNG_SIZE)),
                                          (((-1.0, 0.5), (0.5, 5.0)), (PNG_SIZE, 171))])  # 512 / 3 rounded
def test_particles_fill_a_frame_of_the_domain_s_shape(bounds, shape):
    (x0, y0), (x1, y1) = bounds
    corners = np.array([[x0, y0], [x1, y0], [x0, y1], [x1, y1], [np.nan, 0.0]], np.float32)
    img = particles_image(corners, {"v": np.arange(5.0)}, bounds, "viridis", (0.0, 4.0))
    assert img.shape == (*shape, 3)
    h, w = shape
    lit = {tuple(p) for p in np.argwhere((img != 16).any(axis=2))}
    assert lit == {(h - 1, 0), (h - 1, w - 1), (0, 0), (0, w - 1)}  # y up, walls in the edge pixels


def test_an_sph_2d_frame_keeps_the_tank_s_aspect_ratio():
    e = create_engine(load_preset("sph-dambreak2d", backend="numpy"), get_backend("numpy"))
    f = e.field("particles")
    (x0, y0), (x1, y1) = f.bounds
    img = field_image(e)
    h, w = img.shape[:2]
    assert w == PNG_SIZE and w > h  # the longer side
    assert h == round(PNG_SIZE * (y1 - y0) / (x1 - x0))  # the ratio to the pixel
    assert (img != 16).any(axis=2).sum() > 0.5 * len(f.positions)  # the particles are in it

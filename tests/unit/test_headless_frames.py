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


# ---- particle frames: the window's 2D particle view -------------------------------------------------
BG = np.array([20, 20, 26])  # the canvas' background, (0.08, 0.08, 0.1)
EDGE = np.array([153, 153, 166])  # the domain's outline, (0.6, 0.6, 0.65)
MARGIN = 0.05  # the window's view leaves 5 % of the domain's extent on each side


def _framing(bounds, size=PNG_SIZE):
    """(world point at the image's lower-left corner, px per unit) of a particle frame."""
    lo, hi = (np.asarray(b, np.float64)[:2] for b in bounds)
    return lo - MARGIN * (hi - lo), size / ((1 + 2 * MARGIN) * (hi - lo).max())


def _disc(img, x, y, bounds, diameter, size=PNG_SIZE):
    """(rows, cols, distance in px) of the pixels whose centres lie within diameter/2 of world (x, y)."""
    origin, scale = _framing(bounds, size)
    cx, cy = (x - origin[0]) * scale, img.shape[0] - (y - origin[1]) * scale  # px from the top left
    rows, cols = np.mgrid[0:img.shape[0], 0:img.shape[1]]
    d = np.hypot(cols + 0.5 - cx, rows + 0.5 - cy)
    inside = d <= diameter / 2
    return rows[inside], cols[inside], d[inside]


def _box(img, bounds, width=1, size=PNG_SIZE):
    """The outline's pixels as the window's GL lines put them: each edge in the pixels just left of /
    below its coordinate, ``width`` px inward."""
    origin, scale = _framing(bounds, size)
    (x0, y0), (x1, y1) = ((np.asarray(b, np.float64)[:2] - origin) * scale for b in bounds)
    h = img.shape[0]
    c0, c1 = int(np.ceil(x0)) - 1, int(np.ceil(x1)) - 1
    r0, r1 = h - int(np.ceil(y0)), h - int(np.ceil(y1))  # bottom and top rows, from the top
    box = np.zeros(img.shape[:2], bool)
    box[r1:r0 + 1, c0:c0 + width] = box[r1:r0 + 1, c1 - width + 1:c1 + 1] = True
    box[r0 - width + 1:r0 + 1, c0:c1 + 1] = box[r1:r1 + width, c0:c1 + 1] = True
    return box


def _shaded(rgb, d, diameter):
    """particles.frag.glsl: the colour × (0.75 + 0.25·√(1 − (d/r)²))."""
    return np.asarray(rgb, float)[None] * (0.75 + 0.25 * np.sqrt(np.clip(1 - (2 * d / diameter) ** 2, 0, 1)))[:, None]


def _lut8(cmap, k):
    return (colormaps.lut(cmap)[k] * 255 + 0.5).astype(np.uint8).astype(float)  # the window's 8-bit table


@pytest.mark.parametrize("size,diameter,width", [(PNG_SIZE, 7, 1), (2 * PNG_SIZE, 14, 2)])
def test_a_particle_frame_draws_the_window_s_dots_and_the_domain_outline(size, diameter, width):
    """Round dots the window's diameter (7 logical px under 5000 particles; a frame of PNG_SIZE is a
    logical px a pixel, a larger one scales them) at the particles' positions, shaded as the window's
    sprites, in their colour-map colour; the domain's outline; nothing else, not the parked particle."""
    bounds = ((0.0, 0.0), (4.0, 2.0))
    pos = np.array([[0.5, 0.5], [3.0, 1.5], [2.0, 1.0], [3.5, 0.25], [np.nan, 1.0]], np.float32)
    values = np.array([0.0, 1.0, 2.0, 3.0, 3.0])  # on the table's entries 0, 85, 170, 255
    img = particles_image(pos, values, bounds, "viridis", (0.0, 3.0), size=size)
    assert img.shape == (size // 2, size, 3)  # the domain's shape, with the window's margins
    drawn = np.zeros(img.shape[:2], bool)
    for (x, y), v in zip(pos[:4], values[:4]):
        rows, cols, d = _disc(img, x, y, bounds, diameter, size)
        want = _shaded(_lut8("viridis", int(v * 85)), d, diameter)
        np.testing.assert_allclose(img[rows, cols], want, atol=1)  # every pixel of the dot, its shade
        drawn[rows, cols] = True
    box = _box(img, bounds, width, size)
    assert not (box & drawn).any()  # the dots lie inside the box here
    np.testing.assert_array_equal(img[box], np.broadcast_to(EDGE, img[box].shape))
    rest = ~(box | drawn)
    np.testing.assert_array_equal(img[rest], np.broadcast_to(BG, img[rest].shape))


def test_a_crowd_of_particles_gets_the_window_s_small_dots_the_first_on_top():
    """From 5000 particles on (parked ones counted, as the window counts the rows) the dots are 3 px;
    where dots overlap, the earlier particle's is whole (the window's depth test keeps the first)."""
    bounds = ((0.0, 0.0), (1.0, 1.0))
    pos = np.full((5000, 2), np.nan)
    pos[:2] = [[0.5, 0.5], [0.5 + 2.0 / _framing(bounds)[1], 0.5]]  # 2 px apart
    values = np.zeros(5000)
    values[1] = 1.0
    img = particles_image(pos, values, bounds, "viridis", (0.0, 1.0))
    first_rows, first_cols, d0 = _disc(img, *pos[0], bounds, 3)
    np.testing.assert_allclose(img[first_rows, first_cols], _shaded(_lut8("viridis", 0), d0, 3), atol=1)
    rows, cols, d1 = _disc(img, *pos[1], bounds, 3)
    own = ~np.isin(rows * img.shape[1] + cols, first_rows * img.shape[1] + first_cols)
    assert own.sum() >= 3
    np.testing.assert_allclose(img[rows[own], cols[own]], _shaded(_lut8("viridis", 255), d1[own], 3), atol=1)
    lit = ((img != BG).any(axis=2) & ~_box(img, bounds)).sum()
    assert lit == len(first_rows) + own.sum()  # the two dots and nothing else


def test_an_sph_2d_frame_keeps_the_tank_s_aspect_ratio():
    e = create_engine(load_preset("sph-dambreak2d", backend="numpy"), get_backend("numpy"))
    f = e.field("particles")
    (x0, y0), (x1, y1) = f.bounds
    img = field_image(e)
    h, w = img.shape[:2]
    assert w == PNG_SIZE and w > h  # the longer side
    assert h == round(PNG_SIZE * (y1 - y0) / (x1 - x0))  # the ratio to the pixel
    assert (img != BG).any(axis=2).sum() > 0.5 * len(f.positions)  # the particles are in it


def test_an_sph_frame_shows_the_window_s_dots_at_the_particles_and_the_tank_s_outline():
    """The dam break after a few steps: each particle's dot of the window's diameter shows in its
    colour (speed on the preset's map, over the placed particles' min to max, as the window's auto
    range) wherever no earlier particle's dot lies over it, walls and fluid alike; the tank's outline."""
    e = create_engine(load_preset("sph-dambreak2d", backend="numpy"), get_backend("numpy"))
    e.step(20)
    f = e.field("particles")
    pos = np.asarray(f.positions, np.float64)
    speed, kind = np.asarray(f.attributes["speed"], np.float64), np.asarray(f.attributes["kind"])
    assert len(pos) < 5000  # the CPU size: the window's 7 px dots
    img = field_image(e)
    box = _box(img, f.bounds)
    np.testing.assert_array_equal(img[box], np.broadcast_to(EDGE, img[box].shape))
    origin, scale = _framing(f.bounds)
    centres = np.stack([(pos[:, 0] - origin[0]) * scale, img.shape[0] - (pos[:, 1] - origin[1]) * scale], axis=1)
    t = (speed - speed.min()) / (speed.max() - speed.min()) * 255
    table = _lut8("turbo", np.arange(256))
    checked = {0: 0, 1: 0}
    for i in range(0, len(pos), 5):
        rows, cols, d = _disc(img, *pos[i], f.bounds, 7)
        earlier = centres[:i][np.hypot(*(centres[:i] - centres[i]).T) < 8]
        own = np.ones(len(rows), bool)  # the pixels no earlier particle's dot covers
        for cx, cy in earlier:
            own &= np.hypot(cols + 0.5 - cx, rows + 0.5 - cy) > 3.5
        if own.sum() < 4:
            continue
        k = int(np.floor(t[i]))
        rgb = table[k] + (t[i] - k) * (table[min(k + 1, 255)] - table[k])  # the map's table, sampled linearly
        np.testing.assert_allclose(img[rows[own], cols[own]], _shaded(rgb, d[own], 7), atol=1, err_msg=f"particle {i}")
        checked[int(kind[i] != 0)] += 1
    assert checked[0] >= 20 and checked[1] >= 20, checked  # fluid and wall particles


def test_particle_frames_refuse_mismatched_input_in_one_line():
    from nagare.app.frame_markers import draw_particles

    img = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match=r"draw_particles: colours must be \(n, 3\) for 2 positions; got \(3, 3\)"):
        draw_particles(img, np.zeros((2, 2)), 1.0, 3.0, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="particles_image: 3 values for 2 particles"):
        particles_image(np.zeros((2, 2)), np.zeros(3), ((0, 0), (1, 1)), "viridis", None)


def test_crowded_tracers_get_the_windows_smaller_marker_in_a_frame():
    """The frame sizes its tracer markers by the window's rule (overlay_style.overlay_marker): one
    tracer alone is the full 6 px sprite; the same tracer among 399 others (parked ones count, as in
    the window, which sizes from the packet's rows) shrinks to the rule's size over the frame's area."""
    from nagare.app.frame_markers import draw_markers
    from nagare.app.gui.overlay_style import OVERLAY_MAX, overlay_marker

    img = np.full((64, 64, 3), 128, np.uint8)
    alone = np.array([[32.0, 32.0]])
    crowd = np.full((400, 2), np.nan)
    crowd[0] = alone[0]
    changed_alone = (draw_markers(img, alone, 1.0) != img).any(axis=2).sum()
    changed_crowd = (draw_markers(img, crowd, 1.0) != img).any(axis=2).sum()
    size = overlay_marker(400, 64 * 64)[0]
    assert size < OVERLAY_MAX
    # a GL point sprite covers the pixels whose centres lie within size/2: about π(size/2)²
    assert abs(changed_alone - np.pi * (OVERLAY_MAX / 2) ** 2) <= 0.3 * np.pi * (OVERLAY_MAX / 2) ** 2
    assert abs(changed_crowd - np.pi * (size / 2) ** 2) <= 0.5 * np.pi * (size / 2) ** 2 + 1
    assert changed_crowd < changed_alone / 2


def test_a_3d_particle_frame_is_seen_from_the_front_nearest_on_top():
    """A 3D set: x across, z up (gravity points down the image), looking along +y: of two particles
    at the same (x, z) the nearer (smaller y) is drawn, whatever their order; y does not move a dot."""
    bounds3 = ((0.0, 0.0, 0.0), (4.0, 1.0, 2.0))
    side = ((0.0, 0.0), (4.0, 2.0))  # x and z of the box: the frame's extent
    pos = np.array([[1.0, 0.9, 1.5], [1.0, 0.1, 1.5], [3.0, 0.5, 0.5]])  # the far one first
    values = np.array([0.0, 1.0, 0.5])
    img = particles_image(pos, values, bounds3, "viridis", (0.0, 1.0))
    assert img.shape == (PNG_SIZE // 2, PNG_SIZE, 3)  # x by z, not x by y
    rows, cols, d = _disc(img, 1.0, 1.5, side, 7)
    np.testing.assert_allclose(img[rows, cols], _shaded(_lut8("viridis", 255), d, 7), atol=1)  # the near one
    rows, cols, d = _disc(img, 3.0, 0.5, side, 7)  # low in the box: in the lower half of the image
    assert rows.min() > img.shape[0] // 2
    np.testing.assert_allclose(img[rows, cols], _shaded(_lut8("viridis", 128), d, 7), atol=2)


def test_a_3d_frame_without_particles_keeps_its_front_view():
    """No particle to draw (every one a wall's): the frame of a 3D box is still x by z, as with them."""
    bounds3 = ((0.0, 0.0, 0.0), (4.0, 1.0, 2.0))
    empty = particles_image(np.zeros((0, 3)), np.zeros(0), bounds3, "viridis", None)
    full = particles_image(np.array([[1.0, 0.5, 1.0]]), np.zeros(1), bounds3, "viridis", None)
    assert empty.shape == full.shape == (PNG_SIZE // 2, PNG_SIZE, 3)


def test_a_3d_frame_hides_the_wall_particles_as_the_window_does():
    """The window draws walls as outlines: their particles stay out of a headless 3D frame and of its
    colour range (in a front view the front wall would cover the fluid)."""
    from types import SimpleNamespace

    from nagare.app.fieldkinds.particles import shown_particles
    from nagare.engine.fields import Particles

    pos = np.array([[0.5, 0.5, 0.5], [0.5, 0.0, 0.5], [0.2, 0.5, 0.1]])
    f = Particles(pos, {"speed": np.array([1.0, 9.0, 2.0]), "kind": np.array([0, 1, 0])},
                  bounds=((0, 0, 0), (1, 1, 1)))
    backend = get_backend("numpy")
    shown, values, name = shown_particles(f, backend, ViewConfig())
    np.testing.assert_array_equal(shown, pos[[0, 2]])
    np.testing.assert_array_equal(values, [1.0, 2.0])
    assert name == "speed"
    every, values, _ = shown_particles(f, backend, SimpleNamespace(hide_walls=False, attribute="kind"))
    np.testing.assert_array_equal(every, pos)
    np.testing.assert_array_equal(values, [0, 1, 0])


def test_an_sph_3d_frame_with_legend_has_axes_x_and_z_and_the_speed_bar(tmp_path):
    """`nagare run --frames --legend` of the 3D dam break: the front view with axes in metres (x across,
    z up) and the colour bar of the particles' speed beside it, as the window's 2D frames have."""
    import nagare.app.frames as frames

    e = create_engine(load_preset("sph-dambreak3d", backend="numpy"), get_backend("numpy"))
    plain = field_image(e)
    titles = []
    real_axes, real_panel = frames.with_axes, frames.legend_panel
    try:
        frames.with_axes = lambda img, xr, yr, xt, yt, *a: titles.append((xt, yt)) or real_axes(img, xr, yr, xt, yt, *a)
        frames.legend_panel = lambda h, lo, hi, cmap, label, units: (titles.append((label, units))
                                                                      or real_panel(h, lo, hi, cmap, label, units))
        path = save_frame(e, tmp_path / "f.png", legend=True)
    finally:
        frames.with_axes, frames.legend_panel = real_axes, real_panel
    framed = np.asarray(Image.open(path).convert("RGB"))
    assert titles == [("x [m]", "z [m]"), ("speed", "m/s")]
    assert framed.shape[0] > plain.shape[0] and framed.shape[1] > plain.shape[1] + frames.LEGEND_WIDTH - 1
    (x0, _, z0), (x1, _, z1) = e.field("particles").bounds
    h, w = plain.shape[:2]
    assert w == PNG_SIZE and h == round(PNG_SIZE * (z1 - z0) / (x1 - x0))  # x by z


def _spy(monkeypatch, name):
    """Record the arguments of nagare.app.frames.<name> and call it."""
    import nagare.app.frames as frames

    calls, real = [], getattr(frames, name)
    monkeypatch.setattr(frames, name, lambda *a, **kw: calls.append((a, kw)) or real(*a, **kw))
    return calls


# ---- 1-D profiles: the window's line plot ----------------------------------------------------------
def _colour_mask(img, rgb, tol=0):
    return np.abs(img.astype(int) - np.asarray(rgb)).max(axis=-1) <= tol


def test_a_profile_frame_draws_the_computed_line_over_the_exact_band():
    """Where the computed values equal the exact ones the frame shows both: in every column the
    computed line (amber, DATA_WIDTH px) with the exact band (EXACT_WIDTH px) beside it above and below;
    where they part (an overshoot) the computed line leaves the band."""
    from nagare.app.fieldkinds.profiles import DATA_RGB, DATA_WIDTH, EXACT_ON_BG, EXACT_WIDTH, profile_image

    x = np.linspace(0.0, 1.0, 256)
    exact = 0.5 * (1 - np.cos(2 * np.pi * x))
    img = profile_image(x, exact, exact)
    amber, band = _colour_mask(img, DATA_RGB), _colour_mask(img, EXACT_ON_BG)
    side = (EXACT_WIDTH - DATA_WIDTH) // 2
    for c in range(0, img.shape[1], 7):
        rows = np.flatnonzero(amber[:, c])
        assert len(rows) >= DATA_WIDTH, c
        assert band[rows.min() - side:rows.min(), c].all() and band[rows.max() + 1:rows.max() + 1 + side, c].all(), c
    bumped = exact + np.where(np.abs(x - 0.5) < 0.02, 0.3, 0.0)
    img = profile_image(x, bumped, exact)
    amber, band = _colour_mask(img, DATA_RGB), _colour_mask(img, EXACT_ON_BG)
    c = img.shape[1] // 2
    assert amber[:, c].any() and band[:, c].any()
    assert np.flatnonzero(amber[:, c]).max() < np.flatnonzero(band[:, c]).min() - 5  # above the band


def test_a_plain_profile_frame_shows_the_exact_curve_too(tmp_path):
    """`--frames` without --legend of compact-advection1d: the exact band beside the computed line
    (they agree: the band shows above and below it), not a bare line."""
    from nagare.app.fieldkinds.profiles import DATA_RGB, EXACT_ON_BG

    e = create_engine(load_preset("compact-advection1d", backend="numpy"), get_backend("numpy"))
    e.step(20)
    img = np.asarray(Image.open(save_frame(e, tmp_path / "f.png")).convert("RGB"))
    assert _colour_mask(img, DATA_RGB).sum() > img.shape[1] and _colour_mask(img, EXACT_ON_BG).sum() > img.shape[1]


def test_a_profile_frame_with_legend_has_titled_axes_and_names_its_curves(tmp_path, monkeypatch):
    """`--frames --legend` of compact-square1d: axes titled as the window's ("x [–]", "φ") over the
    plot's extent, and a legend naming the computed and the exact curve in their colours."""
    import nagare.app.frames as frames
    from nagare.app.fieldkinds.profiles import DATA_RGB, EXACT_ON_BG

    e = create_engine(load_preset("compact-square1d", backend="numpy"), get_backend("numpy"))
    e.step(10)
    axes, panels = _spy(monkeypatch, "with_axes"), _spy(monkeypatch, "curves_panel")
    framed = np.asarray(Image.open(save_frame(e, tmp_path / "f.png", legend=True)).convert("RGB"))
    plain = field_image(e)
    (args, kw), = axes
    assert args[3:5] == ("x [–]", "φ")
    x = np.asarray(e.field("phi").x)
    np.testing.assert_allclose(kw["x_extent"], (x.min(), x.max()))
    (args, _), = panels
    assert [(text, rgb) for text, rgb, _ in args[1]][0] == ("φ computed", DATA_RGB)
    assert [text for text, _, _ in args[1]] == ["φ computed", "φ exact"]
    assert framed.shape[1] == frames.AXIS_LEFT + plain.shape[1] + frames.AXIS_RIGHT + frames.LEGEND_WIDTH
    column = framed[:, -frames.LEGEND_WIDTH:]
    assert _colour_mask(column, DATA_RGB).sum() >= 16 and _colour_mask(column, EXACT_ON_BG, 1).sum() >= 16  # swatches
    field = framed[frames.AXIS_TOP:frames.AXIS_TOP + plain.shape[0], frames.AXIS_LEFT:frames.AXIS_LEFT + plain.shape[1]]
    np.testing.assert_array_equal(field, plain)


# ---- grids: the window's axis titles and domain ends ------------------------------------------------
def test_amr3d_frames_title_their_axes_in_level_0_lattice_units(tmp_path, monkeypatch):
    calls = _spy(monkeypatch, "with_axes")
    e = create_engine(load_preset("amr3d-periodic", backend="numpy"), get_backend("numpy"))
    save_frame(e, tmp_path / "f.png", legend=True)
    (args, _), = calls
    assert args[3:5] == ("x [lattice (level 0)]", "y [lattice (level 0)]")


def test_the_lbm2d_frame_labels_the_domain_s_top_as_the_window_does(tmp_path):
    """lbm2d-cylinder is 96 cells high: the round ticks stop at 80 and the y axis labels 96 at the
    field's top row too (a tick mark there and its label left of it), as the window's axes do."""
    import nagare.app.frames as frames
    from nagare.app.gui.ticks import nice_ticks, with_ends

    e = create_engine(load_preset("lbm2d-cylinder", backend="numpy"), get_backend("numpy"))
    assert e.field(e.preset.view.field).data.shape[-2] == 96
    img = np.asarray(Image.open(save_frame(e, tmp_path / "f.png", legend=True)).convert("RGB"))
    h = upscale(field_image(e)).shape[0]
    fg, bg = np.asarray(frames.LEGEND_FG), np.asarray(frames.LEGEND_BG)
    tick = img[frames.AXIS_TOP, frames.AXIS_LEFT - 1 - frames.TICK_LEN:frames.AXIS_LEFT - 1]
    np.testing.assert_array_equal(tick, np.broadcast_to(fg, tick.shape))  # the tick mark at y = 96
    label = img[frames.AXIS_TOP - 3:frames.AXIS_TOP + 4, 20:frames.AXIS_LEFT - frames.TICK_LEN - 2]
    assert (np.abs(label.astype(int) - bg).max(axis=-1) > 60).sum() > 10  # its label's glyphs
    below = img[frames.AXIS_TOP + 2:frames.AXIS_TOP + 8, frames.AXIS_LEFT - 1 - frames.TICK_LEN:frames.AXIS_LEFT - 1]
    assert (np.abs(below.astype(int) - bg).max(axis=-1) == 0).all()  # a mark, not the strip's clutter
    values, texts = nice_ticks(0.0, 96.0, h - 1, frames.LEGEND_PT, frames.LEGEND_DPI, along="y")
    assert 96.0 not in values  # the round ticks alone would leave the top unlabelled
    values, texts = with_ends(values, texts, 0.0, 96.0, (True, True), h - 1, frames.LEGEND_PT, frames.LEGEND_DPI,
                              "y", None)
    assert values[-1] == 96.0 and texts[-1] == "96"


# ---- 3D particles: the obstacle as the window draws it --------------------------------------------
def test_a_3d_particle_frame_draws_an_obstacle_between_the_particles_behind_and_in_front():
    """A box seen from the front is its front face, filled in the window's grey (view3d.box_faces:
    SOLID_RGB × 0.55); a particle behind it is hidden, one in front of it is drawn over it."""
    from nagare.app.fieldkinds.particles import SOLID_FRONT
    from nagare.app.gui.view3d import SOLID_RGB

    np.testing.assert_allclose(SOLID_FRONT, np.rint(255 * 0.55 * SOLID_RGB), atol=0)
    bounds3 = ((0.0, 0.0, 0.0), (4.0, 1.0, 2.0))
    side = ((0.0, 0.0), (4.0, 2.0))
    solid = ((1.5, 0.4, 0.0), (2.5, 0.6, 1.5))  # x 1.5–2.5, z 0–1.5, its front face at y = 0.4
    pos = np.array([[1.8, 0.9, 0.5], [2.2, 0.1, 0.5], [3.5, 0.9, 0.5]])  # behind, in front, clear of it
    values = np.array([0.0, 1.0, 0.5])
    img = particles_image(pos, values, bounds3, "viridis", (0.0, 1.0), solids=(solid,))
    origin, scale = _framing(side)
    c0, c1 = ((np.array([1.5, 2.5]) - origin[0]) * scale).astype(int)
    r_top, r_bottom = (img.shape[0] - (np.array([1.5, 0.0]) - origin[1]) * scale).astype(int)
    face = img[r_top + 1:r_bottom - 1, c0 + 1:c1 - 1]
    behind_rows, behind_cols, _ = _disc(img, 1.8, 0.5, side, 7)
    np.testing.assert_array_equal(img[behind_rows, behind_cols], np.broadcast_to(SOLID_FRONT, (len(behind_rows), 3)))
    rows, cols, d = _disc(img, 2.2, 0.5, side, 7)
    np.testing.assert_allclose(img[rows, cols], _shaded(_lut8("viridis", 255), d, 7), atol=1)
    grey = _colour_mask(face, SOLID_FRONT)
    assert grey.mean() > 0.9  # the rest of the face: the obstacle's grey
    rows, cols, d = _disc(img, 3.5, 0.5, side, 7)
    np.testing.assert_allclose(img[rows, cols], _shaded(_lut8("viridis", 128), d, 7), atol=2)


def test_the_sph_3d_dam_break_frame_shows_the_preset_s_column(tmp_path):
    """sph-dambreak3d's obstacle (geometry.obstacle: x 0.9–1.02, the tank's full height) in the front
    view, with --legend and without, where the window draws it."""
    from nagare.app.fieldkinds.particles import SOLID_FRONT, framed_extent

    e = create_engine(load_preset("sph-dambreak3d", backend="numpy"), get_backend("numpy"))
    x0, _, sx, _ = e.preset.geometry.obstacle
    img = np.asarray(Image.open(save_frame(e, tmp_path / "f.png")).convert("RGB"))
    (lo, hi) = (np.asarray(b, np.float64)[[0, 2]] for b in e.field("particles").bounds)
    origin, size = framed_extent(lo, hi)
    scale = img.shape[1] / size[0]
    mid = int((x0 + sx / 2 - origin[0]) * scale)
    z_mid = img.shape[0] - int((0.5 * e.preset.geometry.tank_height - origin[1]) * scale)
    np.testing.assert_array_equal(img[z_mid - 3:z_mid + 4, mid - 3:mid + 4],
                                  np.broadcast_to(SOLID_FRONT, (7, 7, 3)))
    framed = np.asarray(Image.open(save_frame(e, tmp_path / "g.png", legend=True)).convert("RGB"))
    assert _colour_mask(framed, SOLID_FRONT).sum() == _colour_mask(img, SOLID_FRONT).sum()


def test_an_octree_leaves_frame_with_legend_gets_axes_in_the_grids_units(tmp_path, monkeypatch):
    """`--legend` on the leaves (amr3d's Boxes) is not ignored: the plain frame with axes over the
    leaves' extent, in the units of the engine's grids."""
    import nagare.app.frames as frames

    calls = _spy(monkeypatch, "with_axes")
    e = create_engine(load_preset("amr3d-periodic", overrides=["view.field=leaves"], backend="numpy"),
                      get_backend("numpy"))
    framed = np.asarray(Image.open(save_frame(e, tmp_path / "f.png", legend=True)).convert("RGB"))
    plain = field_image(e)
    (args, _), = calls
    assert args[3:5] == ("x [lattice (level 0)]", "y [lattice (level 0)]")
    leaves = e.field("leaves")
    lo, hi = np.asarray(leaves.lo), np.asarray(leaves.hi)
    np.testing.assert_allclose(args[5:7], [(lo[:, 0].min(), hi[:, 0].max()), (lo[:, 1].min(), hi[:, 1].max())])
    np.testing.assert_allclose((args[1][1] - args[1][0]) / (plain.shape[1] - 1),
                               (hi[:, :2].max(axis=0) - lo[:, :2].min(axis=0)).max() / (plain.shape[1] - 1))
    field = framed[frames.AXIS_TOP:frames.AXIS_TOP + plain.shape[0], frames.AXIS_LEFT:frames.AXIS_LEFT + plain.shape[1]]
    np.testing.assert_array_equal(field, plain)

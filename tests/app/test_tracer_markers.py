"""The tracers' marker over a 2D field (overlay_style.overlay_marker): smaller as tracers crowd the
screen (more of them, or the view zoomed out), never too small for a light core in a dark ring, and
one rule for the tracers the host uploads and those the device writes."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app.gui.overlay_style import OVERLAY_CORE_MIN, OVERLAY_MAX, OVERLAY_MIN, OVERLAY_RING_ALPHA, overlay_marker


def test_a_sparse_set_keeps_the_full_marker():
    size, core, alpha = overlay_marker(2, 64 * 64)
    np.testing.assert_allclose((size, core, alpha), (OVERLAY_MAX, 0.6, OVERLAY_RING_ALPHA[1]))
    assert overlay_marker(0, 0.0)[0] == OVERLAY_MAX  # nothing to crowd


def test_the_marker_shrinks_with_the_tracers_per_screen_area():
    area = 375 * 150  # lbm2d-cylinder's field in the README's window
    sizes = [overlay_marker(n, area)[0] for n in (10, 100, 300, 600, 1000, 3000)]
    assert all(a >= b for a, b in zip(sizes, sizes[1:])), sizes
    assert sizes[0] == OVERLAY_MAX and sizes[-1] == OVERLAY_MIN
    # between the clamps: half the mean distance between tracers
    np.testing.assert_allclose(overlay_marker(600, area)[0], 0.5 * np.sqrt(area / 600))
    # zooming out by 1.5 (the area / 2.25) makes it 1.5 × smaller while neither clamp holds
    np.testing.assert_allclose(overlay_marker(600, area / 2.25)[0], overlay_marker(600, area)[0] / 1.5)


@pytest.mark.parametrize("count", [1, 50, 400, 3000, 10 ** 6])
def test_the_core_and_ring_stay_drawable(count):
    size, core, alpha = overlay_marker(count, 375 * 150)
    assert OVERLAY_MIN <= size <= OVERLAY_MAX
    # the pixel centre nearest the sprite's centre (≤ 0.71 px away) lies in the light core ...
    assert core * size / 2 >= OVERLAY_CORE_MIN > 0.5 * np.sqrt(2)
    # ... and a dark ring at least ~¾ px wide surrounds it
    assert size / 2 * (1 - core) >= 0.74
    assert OVERLAY_RING_ALPHA[0] <= alpha <= OVERLAY_RING_ALPHA[1]


@pytest.mark.parametrize("count, area", [(-1, 100.0), (5, -1.0), (5, float("nan")), (5, float("inf"))])
def test_bad_input_says_what(count, area):
    with pytest.raises(ValueError, match="overlay_marker"):
        overlay_marker(count, area)


def _packet(n, seq=1):
    from nagare.app.packets import FramePacket

    field = np.zeros((96, 240), np.float32)
    pts = np.random.default_rng(seq).uniform((0, 0), (240, 96), (n, 2)).astype(np.float32)
    return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", data=field,
                       vmin=np.float32(-1), vmax=np.float32(1), fields=("f",), overlay=pts)


@pytest.mark.gui
def test_the_canvas_sizes_tracers_by_zoom_and_the_device_path_by_the_same_rule(make_canvas):
    c = make_canvas(480, 192, colorbar=False, axes=False)
    c.show_packet(_packet(3000))
    c.draw_now(finish=True)
    c.view.camera.rect = (0, 0, 240, 96)  # 2 px a cell: 3000 tracers over 480 × 192 px
    c.draw_now(finish=True)
    want = overlay_marker(3000, 480 * 192)
    np.testing.assert_allclose(c.overlay.size, want[0])
    host_size = c.overlay.size
    c.view.camera.rect = (0, 0, 30, 12)  # zoomed in 8×: the tracers spread out, full markers
    c.draw_now(finish=True)
    np.testing.assert_allclose(c.overlay.size, overlay_marker(3000, 480 * 192 * 64)[0])
    assert c.overlay.size > host_size
    c.view.camera.rect = (0, 0, 240, 96)
    # the device path (CUDA writes the positions into the same vertex buffer): the same rule, from
    # the packet's row count, without reading the positions on the host
    c._from_device = lambda pk: True
    written = []
    c._upload_overlay_device = lambda pk: written.append(pk.seq) or True
    c.show_packet(_packet(3000, seq=2))
    c.draw_now(finish=True)
    assert written == [2]
    np.testing.assert_allclose(c.overlay.size, host_size)


@pytest.mark.gui
def test_a_first_packet_grabbed_before_any_frame_has_the_fitted_views_marker(make_canvas):
    """The first packet fits the camera after its tracers are uploaded: an export grabbed before any
    frame was drawn sizes the marker for the fitted view, as the next frame on screen does."""
    c = make_canvas(480, 192, colorbar=False, axes=False)
    c.view.camera.rect = (0, 0, 24, 10)  # a view from before the packet: zoomed far in
    c.show_packet(_packet(3000))
    first = c.grab()
    grabbed = c.overlay.size
    c.draw_now(finish=True)
    np.testing.assert_allclose(grabbed, c.overlay.size)
    np.testing.assert_array_equal(first, c.grab())


def test_a_steady_view_does_not_ask_for_frames_of_its_own(make_canvas):
    """The marker is set in every frame drawn; a frame with the same zoom and tracers must not ask for
    another (an update() per frame would redraw for ever, holding the GIL the simulation needs)."""
    c = make_canvas(480, 192, colorbar=False, axes=False)
    c.show_packet(_packet(3000))
    c.draw_now(finish=True)
    c.draw_now(finish=True)
    asked = []
    c.overlay.events.update.connect(lambda event: asked.append(event))
    c.draw_now(finish=True)
    c.draw_now(finish=True)
    assert asked == []
    c.view.camera.rect = (0, 0, 30, 12)  # a zoom changes the marker: one more frame is asked for
    asked.clear()
    c.draw_now(finish=True)
    assert len(asked) >= 1


@pytest.mark.gui
@pytest.mark.parametrize("value", [-1.0, 0.0, 1.0])  # both ends of each map and the diverging maps' white middle
def test_the_smallest_marker_shows_on_every_colour_map(make_canvas, value):
    """A crowd of tracers gets the smallest marker: a light pixel in a dark ring still stands out
    of every map (the sparse marker's test: test_window_edges.test_tracers_show_on_every_colour_map)."""
    from nagare.app import colormaps
    from nagare.app.packets import FramePacket

    n = 64
    c = make_canvas(n, n, colorbar=False, axes=False)
    c.set_range((-1.0, 1.0))
    cells = np.array([[16, 16], [40, 30]])
    crowd = np.full((400, 2), -1000.0)  # off screen: counted (they crowd the rule), never drawn here
    overlay = np.concatenate([cells + 0.5, crowd]).astype(np.float32)
    for cmap in colormaps.NAMES:
        c.set_colormap(cmap)
        field = np.full((n, n), value, np.float32)
        c.show_packet(FramePacket(seq=1, step=1, time=0.0, field_name="f", kind="grid2d", data=field,
                                  vmin=np.float32(-1), vmax=np.float32(1), fields=("f",), overlay=overlay))
        c.draw_now(finish=True)
        c.view.camera.rect = (0, 0, n, n)
        frame = c.grab().astype(int)
        assert c.overlay.size == OVERLAY_MIN
        under = frame[2, 2]  # the field away from the tracers
        for x, y in cells:
            row = n - 1 - y
            spot = frame[row - 2:row + 3, x - 2:x + 3].reshape(-1, 3)
            light, dark = spot.sum(axis=1).max(), spot.sum(axis=1).min()
            assert light > 600, f"{cmap} at {value}: no light core ({light}) on field {under}"
            # the core on a dark field, the ring on a light one (a diverging map's white middle)
            assert max(light - under.sum(), under.sum() - dark) > 250, f"{cmap} at {value}: {light}/{dark} on {under}"

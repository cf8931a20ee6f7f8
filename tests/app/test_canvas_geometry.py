"""The host-copy display path on Mesa: the frame on screen equals the colour-mapped field pixel
for pixel, border rows and columns included (the same comparison as the GPU interop test)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import RANGE, assert_frame_shows_field, isolated, one_pixel_per_cell, random_field

pytestmark = pytest.mark.gui

N_X, N_Y = 256, 192


def _packet(field, seq, **kw):
    from nagare.app.gui.worker import FramePacket

    return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", data=field,
                       vmin=np.float32(RANGE[0]), vmax=np.float32(RANGE[1]), fields=("f",), **kw)


# Each test draws in a fresh process (frame_check.isolated): in CI a shader of this file's canvas once failed
# to compile (an empty info log) in a worker process that had drawn and closed many canvases before — the
# Mesa instability of long-lived GL processes that tests/app/test_view3d.py describes.
@pytest.fixture
def make_canvas_here(_vispy_on_qt, qtbot):
    from nagare.app.gui.canvas import FieldCanvas

    made = []

    def make():
        c = FieldCanvas(size=(N_X, N_Y), show=False, colorbar=False, axes=False)
        c.show()  # a real window on Xvfb: a hidden Qt canvas has no usable GL surface to draw into
        qtbot.waitExposed(c.native)
        c.set_range(RANGE)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_host_path_frame_equals_colour_mapped_field(make_canvas_here):
    if not isolated(__file__, "test_host_path_frame_equals_colour_mapped_field"):
        return
    c = make_canvas_here()
    c.show_packet(_packet(random_field(N_Y, N_X, 1), 1))
    c.draw_now(finish=True)
    one_pixel_per_cell(c, N_X, N_Y)
    field = random_field(N_Y, N_X, 2)  # a second frame: the texture must show this one, not the first
    c.show_packet(_packet(field, 2))
    frame = c.grab()
    assert c.display_path == "host" and c.shown.seq == 2
    assert_frame_shows_field(frame, field)


def test_frame_check_sees_a_shifted_or_clipped_frame(make_canvas_here):
    """The comparison itself: one cell of shift, or a background ring, must fail it."""
    if not isolated(__file__, "test_frame_check_sees_a_shifted_or_clipped_frame"):
        return
    c = make_canvas_here()
    field = random_field(N_Y, N_X, 3)
    c.show_packet(_packet(field, 1))
    c.draw_now(finish=True)
    one_pixel_per_cell(c, N_X, N_Y)
    frame = c.grab()
    assert_frame_shows_field(frame, field)
    with pytest.raises(AssertionError):
        assert_frame_shows_field(np.roll(frame, 1, axis=1), field)
    ringed = frame.copy()
    ringed[0] = ringed[-1] = ringed[:, 0] = ringed[:, -1] = frame[0, 0] // 2
    with pytest.raises(AssertionError, match="rows"):
        assert_frame_shows_field(ringed, field)


def test_obstacles_and_overlay_points_land_on_their_cells(make_canvas_here, monkeypatch):
    """The mask texture (uint8, uploaded once per mask object) and the tracer overlay's points."""
    if not isolated(__file__, "test_obstacles_and_overlay_points_land_on_their_cells"):
        return
    c = make_canvas_here()
    field = random_field(N_Y, N_X, 4)
    mask = np.zeros((N_Y, N_X), bool)
    mask[40:60, 100:130] = True
    cells = np.array([[10, 150], [200, 20], [128, 96]])  # (x, y) of cells under the points
    c.show_packet(_packet(field, 1, mask=mask))
    c.draw_now(finish=True)
    one_pixel_per_cell(c, N_X, N_Y)
    assert_frame_shows_field(c.grab(), field, mask)
    uploads = []
    set_data = c.mask_image.set_data
    monkeypatch.setattr(c.mask_image, "set_data", lambda d: (uploads.append(d.dtype), set_data(d)))
    c.show_packet(_packet(field, 2, mask=mask, overlay=(cells + 0.5).astype(np.float32)))
    frame = c.grab()
    assert uploads == []  # the same mask object: no second upload
    c.show_packet(_packet(field, 3, mask=mask.copy()))
    c.grab()
    assert uploads == [np.uint8]  # another mask object is uploaded (as uint8 RGBA)
    lit = frame[N_Y - 1 - cells[:, 1], cells[:, 0]]  # row 0 of the frame is the top (y = N_Y - 1)
    assert np.all(lit >= 200), lit  # white at 85 % opacity over any field colour
    bright = np.all(frame >= 200, axis=-1)
    far = np.ones_like(bright)
    for x, y in cells:
        far[max(N_Y - 1 - y - 4, 0):N_Y - y + 4, max(x - 4, 0):x + 5] = False
    assert not bright[far].any()  # nothing lit away from the points

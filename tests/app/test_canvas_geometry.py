"""The host-copy display path on Mesa: the frame on screen equals the colour-mapped field pixel
for pixel, border rows and columns included (the same comparison as the H200 interop test)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import RANGE, assert_frame_shows_field, one_pixel_per_cell, random_field

pytestmark = pytest.mark.gui

N_X, N_Y = 256, 192


def _packet(field, seq):
    from nagare.app.gui.worker import FramePacket

    return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", data=field,
                       vmin=np.float32(RANGE[0]), vmax=np.float32(RANGE[1]), fields=("f",))


@pytest.fixture
def canvas(_vispy_on_qt, qtbot):
    from nagare.app.gui.canvas import FieldCanvas

    c = FieldCanvas(size=(N_X, N_Y), show=False)
    c.show()  # a real window on Xvfb: a hidden Qt canvas has no usable GL surface to draw into
    qtbot.waitExposed(c.native)
    c.set_range(RANGE)
    yield c
    c.close()


def test_host_path_frame_equals_colour_mapped_field(canvas):
    c = canvas
    c.show_packet(_packet(random_field(N_Y, N_X, 1), 1))
    c.draw_now(finish=True)
    one_pixel_per_cell(c, N_X, N_Y)
    field = random_field(N_Y, N_X, 2)  # a second frame: the texture must show this one, not the first
    c.show_packet(_packet(field, 2))
    frame = c.grab()
    assert c.display_path == "host" and c.shown.seq == 2
    assert_frame_shows_field(frame, field)


def test_frame_check_sees_a_shifted_or_clipped_frame(canvas):
    """The comparison itself: one cell of shift, or a background ring, must fail it."""
    c = canvas
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

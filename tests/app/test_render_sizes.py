"""FieldCanvas.render at another size than the canvas' own (frame, video and screenshot exports):
the image shows the scene as framed on screen, scaled, never background where the field is."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import RANGE, assert_frame_shows_field, isolated, random_field

pytestmark = pytest.mark.gui

W, H = 256, 192  # the canvas, logical px
NX, NY = 64, 48  # the field: 4 × 4 px a cell on screen, so every size below keeps whole pixels a cell


def _packet(field, **kw):
    from nagare.app.packets import FramePacket

    return FramePacket(seq=1, step=1, time=0.0, field_name="f", kind="grid2d", data=field,
                       vmin=np.float32(RANGE[0]), vmax=np.float32(RANGE[1]), fields=("f",), **kw)


def _cells(field: np.ndarray, k: int) -> np.ndarray:
    """The field with each cell repeated k × k: what an image of k px a cell shows."""
    return np.repeat(np.repeat(field, k, axis=0), k, axis=1)


@pytest.fixture
def framed_canvas(_vispy_on_qt, qtbot):
    from nagare.app.gui.canvas import FieldCanvas

    c = FieldCanvas(size=(W, H), show=False, colorbar=False, axes=False)
    c.show()  # a real window on Xvfb: a hidden Qt canvas has no usable GL surface to draw into
    qtbot.waitExposed(c.native)
    c.set_range(RANGE)
    yield c
    c.close()


def test_render_at_other_sizes_shows_the_field_as_framed(framed_canvas):
    if not isolated(__file__, "test_render_at_other_sizes_shows_the_field_as_framed"):
        return
    c = framed_canvas
    field = random_field(NY, NX, 5)
    c.show_packet(_packet(field))
    c.draw_now(finish=True)
    assert tuple(c.physical_size) == (W, H), c.physical_size
    c.view.camera.rect = (0, 0, NX, NY)  # the field fills the canvas: 4 px a cell
    assert_frame_shows_field(c.render(alpha=False), _cells(field, 4))
    # smaller and larger than on screen (a larger one was background but for its lower left part)
    assert_frame_shows_field(c.render(alpha=False, size=(W // 2, H // 2)), _cells(field, 2))
    assert_frame_shows_field(c.render(alpha=False, size=(2 * W, 2 * H)), _cells(field, 8))
    # a region (logical px, y down from the top) at another size: the field's top left quarter
    top_left = field[NY // 2:, :NX // 2]  # rows run up (y up): the top half is the upper rows
    assert_frame_shows_field(c.render(region=(0, 0, W // 2, H // 2), size=(W // 4, H // 4), alpha=False),
                             _cells(top_left, 2))
    # and the screen's own render is unchanged afterwards
    assert_frame_shows_field(c.render(alpha=False), _cells(field, 4))



def test_render_at_another_size_scales_the_tracers_with_the_image(framed_canvas):
    """A tracer covers the same share of the image at any export size (its sprite size follows
    the framebuffer's pixels per logical pixel)."""
    if not isolated(__file__, "test_render_at_another_size_scales_the_tracers_with_the_image"):
        return
    c = framed_canvas
    field = np.zeros((NY, NX), np.float32)
    cells = np.array([[16.0, 12.0], [40.0, 30.0]])
    c.show_packet(_packet(field, overlay=(cells + 0.5).astype(np.float32)))
    c.draw_now(finish=True)
    c.view.camera.rect = (0, 0, NX, NY)

    def marked(img):  # pixels a tracer changed
        under = img[2, 2].astype(int)
        return int(np.count_nonzero(np.abs(img.astype(int) - under).sum(axis=-1) > 30))

    screen = marked(c.render(alpha=False))
    big = marked(c.render(alpha=False, size=(2 * W, 2 * H)))
    assert screen > 0
    np.testing.assert_allclose(big / screen, 4.0, rtol=0.25)  # twice the size each way

"""FieldCanvas.render at another size than the canvas' own (frame, video and screenshot exports):
the image shows the scene as framed on screen, scaled, never background where the field is."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import RANGE, assert_frame_shows_field, in_isolated_child, isolated, random_field

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
def framed_canvas(request):
    """The canvas, in the fresh process only: each test hands itself to one (frame_check.isolated)
    first, and the pytest process that does so needs no window of its own (showing one there only
    risked the Mesa/Qt crash the isolation avoids)."""
    if not in_isolated_child():
        yield None
        return
    request.getfixturevalue("_vispy_on_qt")
    qtbot = request.getfixturevalue("qtbot")
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


def _lit(img):
    """Pixels that differ from the background (the image's corner) by more than a faint edge."""
    under = img[1, 1].astype(int)
    return int(np.count_nonzero(np.abs(img.astype(int) - under).max(axis=-1) > 30))


def _disc(size: float, centre: float) -> int:
    """Pixels whose centres lie within size/2 of a point ``centre`` px from a pixel's corner (both ways)."""
    c = np.arange(-16, 16) + 0.5 - centre
    return int(np.count_nonzero(c[:, None] ** 2 + c[None, :] ** 2 <= (size / 2) ** 2))


@pytest.mark.parametrize("count", [4, 6000])  # the window's two sprite sizes: 7 px, and 3 px for a crowd
def test_render_at_another_size_scales_the_particle_sprites(framed_canvas, count):
    """2D particles (ParticleVisual) cover the same share of the image at any export size: at twice
    the size each way, about four times the pixels (they kept their screen size in px: as many)."""
    from nagare.app.packets import FramePacket

    if not isolated(__file__, f"test_render_at_another_size_scales_the_particle_sprites[{count}]"):
        return
    c = framed_canvas
    pos = np.full((count, 2), np.nan, np.float32)  # parked but four: the size rule counts every row
    # 4 px a unit: sprites apart, on pixel centres on screen (on pixel corners at twice the size)
    pos[:4] = np.array([[10.0, 10.0], [30.0, 12.0], [20.0, 30.0], [50.0, 40.0]]) + 0.125
    pk = FramePacket(seq=1, step=1, time=0.0, field_name="p", kind="particles", fields=("p",), positions=pos,
                     data=np.ones(count, np.float32), vmin=np.float32(0), vmax=np.float32(1))
    c.show_packet(pk)
    c.draw_now(finish=True)
    c.view.camera.rect = (0, 0, NX, NY)
    screen = _lit(c.render(alpha=False))
    big = _lit(c.render(alpha=False, size=(2 * W, 2 * H)))
    size = 7 if count < 5000 else 3  # the window's rule
    assert screen == 4 * _disc(size, 0.5), screen
    assert big == 4 * _disc(2 * size, 0.0), big
    np.testing.assert_allclose(big / screen, 4.0, rtol=0.25)


def test_render_at_another_size_scales_the_volume_tracers(make_canvas):
    """Tracers drawn inside a 3D volume (host path: VisPy's Markers, at the framebuffer's px per
    logical px) follow the export's size too: the pixels they change grow four times."""
    from nagare.app.packets import FramePacket

    if not isolated(__file__, "test_render_at_another_size_scales_the_volume_tracers"):
        return
    c = make_canvas(W, H, colorbar=False)
    c.set_view3d(planes={a: [False, 0.5] for a in "xyz"}, outline=False)
    tracers = np.array([[1, 1, 1], [3, 2, 1.5], [4, 3, 2], [2, 3, 0.5]], np.float32)
    renders = {}
    for seq, overlay in ((1, tracers), (2, None)):
        c.show_packet(FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="volume3d", fields=("f",),
                                  data=np.zeros((6, 8, 10), np.float32), vmin=np.float32(0), vmax=np.float32(1),
                                  spacing=0.5, slice_count=6, overlay=overlay))
        c.draw_now(finish=True)
        renders[seq] = c.render(alpha=False).astype(int), c.render(alpha=False, size=(2 * W, 2 * H)).astype(int)
    screen, big = (int(np.count_nonzero(np.abs(a - b).max(axis=-1) > 30)) for a, b in zip(renders[1], renders[2]))
    assert screen > 4 * 8, screen  # four sprites of TRACER_SIZE (4 px) on screen
    np.testing.assert_allclose(big / screen, 4.0, rtol=0.25)


def test_render_at_another_size_scales_the_3d_particle_spheres(make_canvas):
    """3D particles (sphere sprites of a world diameter, their pixel size measured from the camera
    before each screen frame) cover the same share of an export at twice the size: four times the
    pixels (they kept the screen's size in px)."""
    from nagare.app.packets import FramePacket

    if not isolated(__file__, "test_render_at_another_size_scales_the_3d_particle_spheres"):
        return
    c = make_canvas(W, H, colorbar=False)
    pos = np.array([[0.2, 0.2, 0.2], [0.8, 0.3, 0.5], [0.5, 0.8, 0.7], [0.3, 0.6, 0.9]], np.float32)
    c.show_packet(FramePacket(seq=1, step=1, time=0.0, field_name="f", kind="particles", fields=("f",),
                              positions=pos, data=np.ones(4, np.float32), vmin=np.float32(0), vmax=np.float32(1),
                              bounds=((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)), radius=0.05))
    c.draw_now(finish=True)

    def spheres(img):  # the particles' yellow (viridis' top) apart from the white frame and labels
        r, g, b = (img[..., k].astype(int) for k in range(3))
        return int(np.count_nonzero((r > 90) & (g > 90) & (b < r // 2)))

    screen = spheres(c.render(alpha=False))
    big = spheres(c.render(alpha=False, size=(2 * W, 2 * H)))
    assert screen > 4 * 20, screen
    np.testing.assert_allclose(big / screen, 4.0, rtol=0.25)
    assert spheres(c.render(alpha=False)) == screen  # the screen's own size again afterwards

"""buffer_field.py: the field image drawn straight from a GL buffer (a buffer texture) gives the
same pixels as drawn from its own texture — NaN cells, a non-square field, a scaled image
(block means) and colour ranges included — and switching between the two, or to another buffer
(the shared buffers alternate), shows the right field at the next draw. Mesa under Xvfb here; the
GPU test (test_interop_gpu.py) checks the same with CUDA filling the buffer."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("_vispy_on_qt")


def _gl_buffer(data: np.ndarray) -> int:
    from OpenGL import GL

    buf = int(GL.glGenBuffers(1))
    GL.glBindBuffer(GL.GL_TEXTURE_BUFFER, buf)
    GL.glBufferData(GL.GL_TEXTURE_BUFFER, data.nbytes, np.ascontiguousarray(data), GL.GL_STATIC_DRAW)
    GL.glBindBuffer(GL.GL_TEXTURE_BUFFER, 0)
    return buf


@pytest.fixture
def scene_with_image(qtbot):
    from nagare.app.gui.buffer_field import FieldImage, register
    from vispy import scene
    from vispy.visuals.transforms import STTransform

    canvas = scene.SceneCanvas(size=(230, 170), show=False)
    canvas.show()
    qtbot.waitExposed(canvas.native)
    register(canvas)
    view = canvas.central_widget.add_view()
    view.camera = scene.PanZoomCamera(aspect=1)
    img = FieldImage(np.zeros((2, 2), np.float32), texture_format="r32f", cmap="viridis", clim=(0, 1),
                     interpolation="nearest", parent=view.scene)
    img.transform = STTransform(scale=(2.0, 2.0))  # a texel stands for 2 × 2 cells (block means)
    yield canvas, view, img
    canvas.close()


def _fields(rows, cols, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-0.2, 1.2, (rows, cols)).astype(np.float32)  # beyond the range: clamped colours
    a[rng.integers(0, rows, 5), rng.integers(0, cols, 5)] = np.nan
    return a


@pytest.mark.parametrize("rows,cols,clim", [(37, 53, (0.0, 1.0)), (64, 20, (0.3, 0.7))])
def test_buffer_draws_the_same_pixels_as_the_texture(scene_with_image, rows, cols, clim):
    canvas, view, img = scene_with_image
    field = _fields(rows, cols, rows)
    img.clim = clim
    img.set_data(field)
    view.camera.set_range(x=(0, 2 * cols), y=(0, 2 * rows), margin=0.03)
    from_texture = canvas.render()
    canvas.set_current()
    img.set_data(np.zeros_like(field))  # the texture no longer holds the field
    img.sample_buffer(_gl_buffer(field), field.shape)
    from_buffer = canvas.render()
    assert img.samples_buffer
    assert len(np.unique(from_texture.reshape(-1, 4), axis=0)) > 20  # a real picture, not a blank
    np.testing.assert_array_equal(from_buffer, from_texture)


def test_switching_buffers_and_back_to_the_texture_shows_the_right_field(scene_with_image):
    canvas, view, img = scene_with_image
    a, b = _fields(30, 40, 1), _fields(30, 40, 2)
    view.camera.set_range(x=(0, 80), y=(0, 60), margin=0.0)
    img.set_data(a)
    want_a = canvas.render()
    img.set_data(b)
    want_b = canvas.render()
    canvas.set_current()
    buf_a, buf_b = _gl_buffer(a), _gl_buffer(b)
    img.set_data(np.zeros_like(a))
    for buf, want in ((buf_a, want_a), (buf_b, want_b), (buf_a, want_a)):
        img.sample_buffer(buf, a.shape)
        np.testing.assert_array_equal(canvas.render(), want)
    img.sample_buffer(None)  # its own texture again: which now holds b
    img.set_data(b)
    assert not img.samples_buffer
    np.testing.assert_array_equal(canvas.render(), want_b)


def test_a_canvas_whose_buffer_shader_fails_goes_back_to_the_texture_and_says_so(make_canvas, caplog):
    """A GL where the buffer-texture shader does not build (no GL_EXT_gpu_shader4 after all): the
    frame that fails switches the canvas to the texture route once, logged, and drawing goes on."""
    from nagare.app.gui import interop
    from vispy.visuals.shaders import Function

    interop._logged.clear()
    c = make_canvas(200, 150, colorbar=False, axes=False)
    field = _fields(20, 30, 3)
    c.image.set_data(field)
    c.set_current()
    c.image._buffer_lookup = Function("vec4 buffer_lookup(vec2 t) { return no_such_function($field, $shape); }")
    c.image.sample_buffer(_gl_buffer(field), field.shape)
    with caplog.at_level("INFO"):
        c.draw_now(finish=True)  # the failing frame: no exception out of the draw
    assert not c.buffer_sampling and not c.image.samples_buffer
    assert "drawing the field from its buffer failed" in caplog.text
    assert c.visuals["image"] is c.image
    c.image.set_data(field)
    c.image.visible = True
    c.fit_bounds(np.array([0.0, 0.0]), np.array([30.0, 20.0]))
    caplog.clear()
    c.draw_now(finish=True)  # the texture route draws, in a fresh image
    assert "Error drawing" not in caplog.text, caplog.text[-1500:]
    assert len(np.unique(c.render(alpha=False).reshape(-1, 3), axis=0)) > 10

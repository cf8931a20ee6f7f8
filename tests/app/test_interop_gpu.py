"""On a CUDA machine with an NVIDIA OpenGL (EGL) context: the displayed field reaches the texture
through CUDA–GL interop (no host copy), and the frame equals the CuPy field, colour-mapped.

Run alone (VisPy picks one GL backend per process):
    PYOPENGL_PLATFORM=egl python -m pytest tests/app/test_interop_gpu.py -m gpu -v
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import CMAP, RANGE, assert_frame_shows_field, one_pixel_per_cell, random_field

pytestmark = [pytest.mark.gpu, pytest.mark.gui]

N_X, N_Y = 256, 192


@pytest.fixture(scope="module")
def egl_canvas(egl):
    from nagare.app.gui.canvas import FieldCanvas

    c = FieldCanvas(size=(N_X, N_Y), show=False, colorbar=False, axes=False)
    c.set_backend("cupy")
    yield c
    c.close()


def _packet(cp, field, seq):
    from nagare.app.gui.worker import FramePacket

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        data = cp.asarray(field, dtype=cp.float32).copy()
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(stream)
    return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", data=data,
                       vmin=cp.float32(RANGE[0]), vmax=cp.float32(RANGE[1]), event=ev, backend="cupy",
                       fields=("f",))


@pytest.mark.parametrize("shared,sampled", [(True, True), (True, False), (False, False)],
                         ids=["shared-buffer-drawn-directly", "shared-buffers-texture-write", "mapped-texture"])
def test_interop_path_is_taken_and_frame_matches_field(egl_canvas, monkeypatch, caplog, shared, sampled):
    """Every device → screen route: the image drawing the buffer CUDA filled (the default where
    the driver offers GL_EXT_memory_object_fd and GL_EXT_gpu_shader4, as NVIDIA's does), GL
    copying that buffer into the texture, and the texture mapped for each copy."""
    import cupy as cp
    from nagare.app.gui import canvas as canvas_mod
    from nagare.app.gui import interop
    from nagare.app.gui.shared_texture import SharedTexture
    from vispy.gloo import gl

    c = egl_canvas
    c._drop_interop()
    c.shared_uploads, c.buffer_sampling = shared, sampled
    c.set_colormap(CMAP)
    c.set_range(RANGE)
    first = _packet(cp, random_field(N_Y, N_X, 1), 1)
    first.event.synchronize()  # a packet is drawn once its snapshot is complete (else at the next frame)
    c.show_packet(first)
    c.draw_now(finish=True)  # first frame of this shape: VisPy allocates the texture (one host upload)
    vendor = gl.glGetParameter(gl.GL_VENDOR)
    assert c.display_path == "interop", f"GL vendor {vendor!r}: {c.path_reason}"
    one_pixel_per_cell(c, N_X, N_Y)

    def no_host(*a, **k):
        raise AssertionError("a host copy was made on the interop path")

    monkeypatch.setattr(canvas_mod, "host", no_host)
    field = random_field(N_Y, N_X, 2)  # differs from the first frame in every cell
    second = _packet(cp, field, 2)
    second.event.synchronize()
    c.show_packet(second)
    frame = c.grab()  # uploads through interop, renders, reads back
    assert "cannot draw frame" not in caplog.text, caplog.text[-2000:]
    assert c._interop is not None and c._interop.copies >= 1 and c.shown.seq == 2
    assert type(c._interop) is (SharedTexture if shared else interop.TextureInterop), caplog.text[-2000:]
    assert c.image.samples_buffer is sampled and (getattr(c._interop, "image", None) is not None) is sampled
    monkeypatch.undo()
    # the snapshot stays owned by the interop until the event after its copy is done
    cp.cuda.runtime.deviceSynchronize()
    assert c._interop.in_flight.release_done() == 0

    # the same comparison as the host path on Mesa (tests/app/test_canvas_geometry.py)
    assert_frame_shows_field(frame, field)

    # ... and the interop frame equals the frame of the same field sent through the host path.
    c._drop_interop()
    assert not c.image.samples_buffer  # the image is back on its own texture
    c.image.set_data(field)
    host_frame = c.render(alpha=False)
    np.testing.assert_array_equal(frame, host_frame)
    c.buffer_sampling = True


@pytest.mark.parametrize("sampled", [True, False], ids=["drawn-directly", "texture-write"])
def test_shared_buffers_alternate_and_every_frame_shows_its_own_field(egl_canvas, caplog, sampled):
    """Frames in a row through the two shared buffers, alternating: every frame shows its own
    field, none the one before it (a wrong slot, pitch or texture would show). Each frame is read
    back, which finishes GL's work, so the fences are signalled by the time they are waited for:
    this does not provoke the race the fences guard against."""
    import cupy as cp
    from nagare.app.gui.shared_texture import SharedTexture

    c = egl_canvas
    c._drop_interop()
    c.shared_uploads, c.buffer_sampling = True, sampled
    c.set_colormap(CMAP)
    c.set_range(RANGE)
    for seq in range(10, 16):
        field = random_field(N_Y, N_X, seq)
        pk = _packet(cp, field, seq)
        pk.event.synchronize()
        c.show_packet(pk)
        frame = c.grab()
        assert type(c._interop) is SharedTexture, caplog.text[-2000:]
        assert c.shown.seq == seq
        assert_frame_shows_field(frame, field)
    assert c._interop.copies >= 5  # the first frame of the test may have been the host's
    assert c.image.samples_buffer is sampled
    c._drop_interop()
    c.buffer_sampling = True


def test_a_field_finer_than_the_screen_is_drawn_from_its_block_means(egl_canvas, monkeypatch, caplog):
    """A 2N × 2N field in an N-pixel view (2 cells a pixel): the texture holds the 2×2 block
    means (computed on the device, uploaded through interop, no host copy) and the frame shows
    them one texel a pixel. Zoomed in to one cell a pixel, with no new packet, every cell again."""
    import cupy as cp
    from nagare.app.gui import canvas as canvas_mod
    from nagare.app.gui.grid_lod import block_mean

    c = egl_canvas
    c._drop_interop()
    c.shared_uploads = True
    c.set_colormap(CMAP)
    c.set_range(RANGE)
    fields = [random_field(2 * N_Y, 2 * N_X, 30 + i) for i in range(3)]
    for i, field in enumerate(fields[:2]):  # first: full resolution, framed; second: a new texture of means
        pk = _packet(cp, field, 30 + i)
        pk.event.synchronize()
        c.show_packet(pk)
        c.draw_now(finish=True)
        c.view.camera.rect = (0, 0, 2 * N_X, 2 * N_Y)  # two cells a pixel, cell edges on pixel edges
    assert c._grid_k == 2 and c._image_shape == (N_Y, N_X)

    def no_host(*a, **k):
        raise AssertionError("a host copy was made on the interop path")

    monkeypatch.setattr(canvas_mod, "host", no_host)
    pk = _packet(cp, fields[2], 32)
    pk.event.synchronize()
    c.show_packet(pk)
    frame = c.grab()
    assert "cannot draw frame" not in caplog.text, caplog.text[-2000:]
    assert c._interop is not None and c._interop.copies >= 1 and c.shown.seq == 32
    monkeypatch.undo()
    assert_frame_shows_field(frame, block_mean(fields[2], 2))

    # zoomed in to one cell a pixel: the same packet again, every cell (no new packet needed)
    c.view.camera.rect = (0, 0, N_X, N_Y)
    frame = c.grab()
    assert c._grid_k == 1
    assert_frame_shows_field(frame, fields[2][:N_Y, :N_X])
    c._drop_interop()


def test_tracers_are_drawn_from_vertex_memory_cuda_shares(egl_canvas, caplog, monkeypatch):
    """The tracers over a field reach GL through a vertex buffer whose memory CUDA writes (no map
    or unmap a frame): three frames in a row, each with the tracers moved, equal the same frames
    drawn through the host; each write after the first waits for the fence of the frame drawn
    before it; VisPy's own buffer is back in place once the shared one is closed."""
    import cupy as cp
    from nagare.app.gui.shared_vertices import FrameFence, SharedVertexBuffer

    waited = []
    plain_wait = FrameFence.wait
    monkeypatch.setattr(FrameFence, "wait", lambda self, poll_s: (waited.append(self.fence), plain_wait(self, poll_s)))
    c = egl_canvas
    c._drop_interop()
    c.device_geometry.close()
    c.shared_uploads, c.buffer_sampling = True, True
    c.set_colormap(CMAP)
    c.set_range(RANGE)
    rng = np.random.default_rng(7)
    field = random_field(N_Y, N_X, 3)
    frames = []
    for seq in range(3):
        pk = _packet(cp, field, 10 + seq)
        pts = rng.uniform((2, 2), (N_X - 2, N_Y - 2), size=(400, 2)).astype(np.float32)
        pts[::37] = np.nan  # parked tracers: hidden on both paths
        pk.overlay = cp.asarray(pts)
        pk.event.synchronize()
        c.show_packet(pk)
        frames.append((c.grab(), pts))
        assert "cannot draw frame" not in caplog.text, caplog.text[-2000:]
        shared = c.device_geometry.buffers["tracers"].interop
        assert isinstance(shared, SharedVertexBuffer) and shared.copies == seq + 1
        c.draw_now()  # a frame on screen (on_draw): its fence is what the next write waits for
        assert c.frame_fence.fence is not None
    assert len(waited) == 3 and all(f is not None for f in waited[1:]), waited
    vbo = c.overlay._pos
    parser = c.context.shared.parser
    assert int(parser._objects[vbo.id].handle) == shared.buffer
    vispy_handle = shared.original
    c.device_geometry.close()
    assert shared.buffer is None and int(parser._objects[vbo.id].handle) == vispy_handle
    c.device_geometry.failed = True  # the host path from here on
    try:
        for seq, (frame, pts) in enumerate(frames):
            pk = _packet(cp, field, 20 + seq)
            pk.overlay = cp.asarray(pts)
            pk.event.synchronize()
            c.show_packet(pk)
            np.testing.assert_array_equal(frame, c.grab(), err_msg=f"frame {seq}")
    finally:
        c.device_geometry.failed = False

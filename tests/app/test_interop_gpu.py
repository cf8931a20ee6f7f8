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


def test_interop_path_is_taken_and_frame_matches_field(egl_canvas, monkeypatch, caplog):
    import cupy as cp
    from nagare.app.gui import canvas as canvas_mod
    from vispy.gloo import gl

    c = egl_canvas
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
    monkeypatch.undo()
    # the snapshot stays owned by the interop until the event after its copy is done
    cp.cuda.runtime.deviceSynchronize()
    assert c._interop.in_flight.release_done() == 0

    # the same comparison as the host path on Mesa (tests/app/test_canvas_geometry.py)
    assert_frame_shows_field(frame, field)

    # ... and the interop frame equals the frame of the same field sent through the host path.
    c._drop_interop()
    c.image.set_data(field)
    host_frame = c.render(alpha=False)
    np.testing.assert_array_equal(frame, host_frame)

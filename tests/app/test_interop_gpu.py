"""On a CUDA machine with an NVIDIA OpenGL (EGL) context: the displayed field reaches the texture
through CUDA–GL interop (no host copy), and the frame equals the CuPy field, colour-mapped.

Run alone (VisPy picks one GL backend per process):
    PYOPENGL_PLATFORM=egl python -m pytest tests/app/test_interop_gpu.py -m gpu -v
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.gui]

N_X, N_Y = 256, 192


@pytest.fixture(scope="module")
def egl_canvas():
    import os

    vispy = pytest.importorskip("vispy")
    if os.environ.get("PYOPENGL_PLATFORM") != "egl":
        pytest.skip("set PYOPENGL_PLATFORM=egl and run this file alone (VisPy needs its EGL backend)")
    try:
        vispy.use(app="egl")
    except Exception as exc:
        pytest.skip(f"VisPy's EGL backend is not usable here ({exc}); run this file alone")
    from nagare.app.gui.canvas import FieldCanvas

    c = FieldCanvas(size=(N_X, N_Y), show=False)
    c.set_backend("cupy")
    yield c
    c.close()


def _packet(cp, field, seq):
    from nagare.app.gui.worker import FramePacket

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        data = cp.ascontiguousarray(field, dtype=cp.float32).copy()
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(stream)
    return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="grid2d", data=data,
                       vmin=cp.float32(-1.0), vmax=cp.float32(1.0), event=ev, backend="cupy", fields=("f",))


def _field(cp, phase):
    y, x = cp.mgrid[0:N_Y, 0:N_X].astype(cp.float32)
    return cp.sin(2 * np.pi * x / N_X + phase) * cp.cos(2 * np.pi * y / N_Y)


def test_interop_path_is_taken_and_frame_matches_field(egl_canvas, monkeypatch):
    import cupy as cp
    from nagare.app import colormaps
    from nagare.app.gui import canvas as canvas_mod
    from vispy.gloo import gl

    c = egl_canvas
    c.set_colormap("viridis")
    c.set_range((-1.0, 1.0))
    c.show_packet(_packet(cp, _field(cp, 0.0), 1))
    c.draw_now(finish=True)  # first frame of this shape: VisPy allocates the texture (one host upload)
    vendor = gl.glGetParameter(gl.GL_VENDOR)
    assert c.display_path == "interop", f"GL vendor {vendor!r}: {c.path_reason}"
    c.view.camera.set_range(x=(0, N_X), y=(0, N_Y), margin=0)  # one pixel per cell

    def no_host(*a, **k):
        raise AssertionError("a host copy was made on the interop path")

    monkeypatch.setattr(canvas_mod, "host", no_host)
    field = _field(cp, 1.0)
    c.show_packet(_packet(cp, field, 2))
    frame = c.grab()  # uploads through interop, renders, reads back
    assert c._interop is not None and c._interop.copies >= 1
    monkeypatch.undo()

    expected = colormaps.apply(cp.asnumpy(field), "viridis", (-1.0, 1.0))
    assert frame.shape == expected.shape
    # VisPy samples a 1D LUT texture linearly where colormaps.apply picks the nearest of the same
    # 256 entries: the two can differ by one LUT step (≤ 4 levels per channel for viridis).
    diff = np.abs(frame.astype(int) - expected.astype(int))
    np.testing.assert_array_less(diff, 5)
    assert np.median(diff) <= 1

    # ... and the interop frame equals the frame of the same field sent through the host path.
    c._drop_interop()
    c.image.set_data(cp.asnumpy(field))
    host_frame = c.render(alpha=False)
    np.testing.assert_array_equal(frame, host_frame)

"""On a CUDA machine with an NVIDIA OpenGL (EGL) context: after its first frames, the display copies
no byte from the device to the host — for a preset of every family, with everything it can show
on (lbm2d's tracers; SPH in 2D and 3D; a 3D stencil grid; wave2d; compact; amr3d's volume on two
planes with its tracers, their trails and the octree leaves). The canvas counts every host copy
(FieldCanvas.host_bytes, app/gui/drawer.py); the time label the status line shows is read too.
The measured frames are drawn under ``cupyx.allow_synchronize(False)``, so that an implicit device
read that bypasses ``host()`` (a ``float()`` of a CuPy scalar, a ``.get()``) fails the test too.
What CUDA wrote into GL's buffers (amr3d's leaves, tracers and trails) is read back through GL and
compared with the geometry built on the host, and the packets' colour range and time (copied into
pinned memory by the worker) with the engine's values.

The presets run at their CPU sizes (``[cpu_overrides]``) on CuPy: quick to build, the same code paths.

Run alone (VisPy picks one GL backend per process):
    PYOPENGL_PLATFORM=egl python -m pytest tests/app/test_host_bytes_gpu.py -m gpu -v
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from tests.app.frame_check import gl_buffer_rows

pytestmark = [pytest.mark.gpu, pytest.mark.gui]

WARM_FRAMES = 3  # a shape's first frame allocates its texture through the host
MEASURED_FRAMES = 5
# (preset, the field shown: None for the preset's own); amr3d also with its leaves and its tracers
# as the shown field (the ``boxes`` kind; 3D particles with trails)
CASES = [("lbm2d-cylinder", None), ("sph-dambreak2d", None), ("sph-dambreak3d", None), ("diffusion3d", None),
         ("wave2d", None), ("compact-rotating-cone", None), ("amr3d-sphere-re100", None),
         ("amr3d-sphere-re100", "leaves"), ("amr3d-sphere-re100", "tracers")]


def _frames(name, shown_field=None):
    """(canvas, engine, packets drawn, host bytes after each frame) of WARM + MEASURED frames; the
    measured ones drawn with implicit device synchronisation forbidden."""
    import cupyx  # optional dependency (CuPy): a gpu-marked test
    from nagare.app.gui.canvas import FieldCanvas
    from nagare.app.gui.worker import snapshot
    from nagare.app.packets import ViewRequest
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    preset = load_preset(name, [], backend="numpy")  # the CPU sizes, run on CuPy below
    eng = create_engine(preset, get_backend("cupy"))
    c = FieldCanvas(size=(640, 480), show=False)
    c.set_backend("cupy")
    # amr3d: two planes, the leaves on (the preset shows one plane and no leaves)
    c.set_view3d(planes={"x": [True, 0.5], "y": [False, 0.5], "z": [True, 0.5]}, boxes=True)
    view = ViewRequest(field=shown_field or preset.view.field, slice_axis=preset.view.slice_axis)
    cache, packets, totals = {}, [], []
    for seq in range(1, WARM_FRAMES + MEASURED_FRAMES + 1):
        eng.step(preset.run.steps_per_frame)
        with eng.on_stream():
            pk = snapshot(eng, view, seq, cache)
        t0 = time.perf_counter()
        while not pk.ready():  # as the window: a packet is drawn once its snapshot is complete
            assert time.perf_counter() - t0 < 60
            time.sleep(1e-3)
        _assert_pinned_scalars(pk, eng)
        with cupyx.allow_synchronize(seq <= WARM_FRAMES):  # a shape's first frames copy through the host
            c.show_packet(pk)
            c.draw_now(finish=True)
            assert c.shown_time()  # the status line's time label
        assert c.shown is pk, f"frame {seq} was not drawn"
        packets.append(pk)
        totals.append(c.host_bytes.total)
    return c, eng, packets, totals


def _assert_pinned_scalars(pk, eng):
    """The packet's colour range and time, host values once its snapshot is complete: the device
    values they were copied from (the engine's, stacked by the worker), and the engine's time
    (no step has run since the snapshot)."""
    from nagare.app.gui.worker import PACKET_SCALARS

    if pk.device_scalars is None:
        return
    copied = [n for n in PACKET_SCALARS if isinstance(getattr(pk, n), np.ndarray)]  # 0-d views of the pinned block
    np.testing.assert_array_equal([float(getattr(pk, n)) for n in copied], pk.device_scalars.get())
    np.testing.assert_array_equal(float(pk.time), float(eng.device_time()))


def _assert_gl_holds_the_host_geometry(c, pk):
    """amr3d's leaves, tracers and trails as GL holds them after the last frame (CUDA wrote them)
    against the same geometry built with NumPy from host copies of the packet's arrays; the rows
    past the count hold the hidden value."""
    import cupy  # optional dependency (CuPy): a gpu-marked test
    from nagare.app.gui import device_draw
    from nagare.app.gui.view3d import VolumeDrawer

    d = c.own_drawer(VolumeDrawer)
    lo, hi, level = (None if a is None else cupy.asnumpy(a) for a in pk.boxes)
    seg, rgba = device_draw.leaf_lines(np, lo, hi, level)
    half = 0.5 * np.array(d._shape[::-1], np.float64) * pk.spacing
    ends, colours = device_draw.trail_lines(np, cupy.asnumpy(pk.trails), half)
    points = device_draw.point_positions(np, cupy.asnumpy(pk.overlay))
    for role, vbo, expected in (("leaf ends", d.dev_leaves.positions, seg), ("leaf colours", d.dev_leaves.colors, rgba),
                                ("trail ends", d.dev_trails.positions, ends),
                                ("trail colours", d.dev_trails.colors, colours),
                                ("tracers", d.dev_tracers.positions, points)):
        buf = d.device.buffers[role]
        got = gl_buffer_rows(c, vbo, buf.capacity, buf.row)
        n = len(expected)
        # the same float32 operations on both sides, one CuPy kernel each (no fused multiply-add)
        np.testing.assert_allclose(got[:n], expected, rtol=1e-6, atol=0, err_msg=role)
        rest = np.broadcast_to(buf.fill, got[n:].shape)
        np.testing.assert_array_equal(got[n:], rest, err_msg=f"{role}: the rows past the count")


@pytest.mark.parametrize("name,shown_field", CASES, ids=[f"{n}-{f}" if f else n for n, f in CASES])
def test_no_host_bytes_per_frame_on_the_interop_path(egl, caplog, name, shown_field):
    from nagare.app.gui.view3d import Particles3DDrawer, VolumeDrawer

    c, eng, packets, totals = _frames(name, shown_field)
    try:
        for failure in ("cannot draw frame", "DeviceSynchronized", "drawing geometry from the device failed",
                        "the CUDA splat failed"):
            assert failure not in caplog.text, caplog.text[-3000:]
        assert c.display_path == "interop", c.path_reason
        pk = packets[-1]
        if name.startswith("lbm2d"):
            assert pk.overlay is not None and c.overlay.visible  # the tracers are drawn
        if shown_field == "leaves":
            assert pk.kind == "boxes" and c.lines_device.visible and c.legend_levels
        if shown_field == "tracers":
            assert pk.kind == "particles" and pk.trails is not None
            assert c.own_drawer(Particles3DDrawer).dev_trails.visible
        if name == "amr3d-sphere-re100" and shown_field is None:
            assert pk.kind == "volume3d" and pk.overlay is not None and pk.trails is not None and pk.boxes is not None
            d = c.own_drawer(VolumeDrawer)
            assert d.dev_tracers.visible and d.dev_trails.visible and d.dev_leaves.visible
            assert c.legend_levels and len(c.view3d.active_planes()) == 2
            assert d.leaf_uploads <= 2  # once, and again only if the engine regridded
            _assert_gl_holds_the_host_geometry(c, pk)
        if name == "sph-dambreak3d":
            assert c.own_drawer(Particles3DDrawer).uploads["interop"] >= MEASURED_FRAMES
        measured = totals[-1] - totals[WARM_FRAMES - 1]
        assert measured == 0, (f"{measured / MEASURED_FRAMES:.0f} host bytes a frame; by what: {c.host_bytes.by}")
    finally:
        c.close()

"""On a CUDA machine with an NVIDIA OpenGL (EGL) context: the 3D views' data go device → GL
without the host — a volume into the 3D texture the slice planes and the volume rendering sample
(cudaGraphicsGLRegisterImage on GL_TEXTURE_3D), 3D particles into their vertex buffers
(cudaGraphicsGLRegisterBuffer) — and each frame equals the frame of the same data sent through
the host path.

Run alone (VisPy picks one GL backend per process):
    PYOPENGL_PLATFORM=egl python -m pytest tests/app/test_view3d_gpu.py -m gpu -v
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import CMAP

pytestmark = [pytest.mark.gpu, pytest.mark.gui]


def _canvas(size):
    from nagare.app.gui.canvas import FieldCanvas

    c = FieldCanvas(size=size, show=False, colorbar=False)
    c.set_backend("cupy")
    c.set_colormap(CMAP)
    return c


def _packet(cp, kind, seq, spacing=1.0, **arrays):
    from nagare.app.packets import FramePacket

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        dev = {k: cp.asarray(v).copy() for k, v in arrays.items()}
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(stream)
    ev.synchronize()
    return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind=kind, event=ev, backend="cupy",
                       fields=("f",), vmin=cp.float32(-1), vmax=cp.float32(1), spacing=spacing, **dev)


def _no_host(monkeypatch):
    from nagare.app.gui import canvas as canvas_mod
    from nagare.app.gui import view3d as view3d_mod

    def no_host(*a, **k):
        raise AssertionError("a host copy was made on the interop path")

    for drawers in (canvas_mod, view3d_mod):  # the volume's drawer is view3d's
        monkeypatch.setattr(drawers, "host", no_host)


def test_volume_goes_into_the_3d_texture_through_interop(egl, monkeypatch, caplog):
    import cupy as cp
    from nagare.app.gui.view3d import VolumeDrawer

    c = _canvas((400, 360))
    c.set_range((-1.0, 1.0))
    c.set_view3d(volume="mip", planes={"x": [True, 0.3], "y": [True, 0.6], "z": [True, 0.5]})
    rng = np.random.default_rng(2)
    shape = (24, 32, 40)
    first = rng.uniform(-1, 1, shape).astype(np.float32)
    c.show_packet(_packet(cp, "volume3d", 1, data=first, spacing=0.5))
    c.draw_now(finish=True)  # first frame of this shape: textures allocated through the host
    assert c.display_path == "interop", c.path_reason
    vol = rng.uniform(-1, 1, shape).astype(np.float32)
    _no_host(monkeypatch)
    c.show_packet(_packet(cp, "volume3d", 2, data=vol, spacing=0.5))
    frame = c.grab()
    monkeypatch.undo()
    assert "cannot draw frame" not in caplog.text, caplog.text[-2000:]
    d = c.own_drawer(VolumeDrawer)
    assert d.uploads["interop"] >= 1 and {"planes", "volume"} <= set(d._interops)
    cp.cuda.runtime.deviceSynchronize()
    # the same volume through the host path gives the same frame
    d._drop_interops()
    d.planes.set_volume(vol)
    d.volume.set_data(vol)
    np.testing.assert_array_equal(frame, c.render(alpha=False))
    c.close()


def test_particles_go_into_their_vertex_buffers_through_interop(egl, monkeypatch, caplog):
    import cupy as cp
    from nagare.app.gui.view3d import Particles3DDrawer

    monkeypatch.setattr(Particles3DDrawer, "renderer", "sprites")  # GL sprites (the default splats: test_splat_gpu)
    c = _canvas((400, 320))
    rng = np.random.default_rng(3)
    n = 20000
    lo, hi = np.zeros(3), np.array([1.6, 0.6, 0.4])
    pos0 = (rng.random((n, 3)) * hi).astype(np.float32)
    kw = dict(bounds=(tuple(lo), tuple(hi)), radius=0.005)
    first = _packet(cp, "particles", 1, positions=pos0, data=rng.random(n).astype(np.float32))
    first.bounds, first.radius = kw["bounds"], kw["radius"]
    c.show_packet(first)
    c.draw_now(finish=True)
    assert c.display_path == "interop", c.path_reason
    pos = (rng.random((n, 3)) * hi).astype(np.float32)
    val = rng.uniform(-1, 1, n).astype(np.float32)
    pk = _packet(cp, "particles", 2, positions=pos, data=val)
    pk.bounds, pk.radius = kw["bounds"], kw["radius"]
    _no_host(monkeypatch)
    c.show_packet(pk)
    frame = c.grab()
    monkeypatch.undo()
    monkeypatch.setattr(Particles3DDrawer, "renderer", "sprites")
    assert "cannot draw frame" not in caplog.text, caplog.text[-2000:]
    d = c.own_drawer(Particles3DDrawer)
    assert d.uploads["interop"] >= 1 and {"positions", "values"} <= set(d._interops)
    cp.cuda.runtime.deviceSynchronize()
    d._drop_interops()
    d.spheres.set_data(pos, val, c.current_range)
    np.testing.assert_array_equal(frame, c.render(alpha=False))
    c.close()


@pytest.mark.parametrize("kind", ["volume3d", "particles"])
def test_steady_interop_frames_rebuild_no_shader_and_leave_repeated_gl_state_out(egl, monkeypatch, caplog, kind):
    """The targets' views on the interop path (an amr3d-like volume with leaves, tracers and trails,
    two planes; splatted 3D particles), the colour bar on and an automatic range that moves every
    frame: after the first frames no program is rebuilt and the GL state filter leaves commands out."""
    import cupy as cp
    from nagare.app.gui.canvas import FieldCanvas
    from vispy.visuals.shaders.program import ModularProgram

    c = FieldCanvas(size=(480, 360), show=False)
    c.set_backend("cupy")
    c.set_view3d(planes={"x": [True, 0.5], "y": [False, 0.5], "z": [True, 0.5]}, boxes=True)
    rng = np.random.default_rng(6)
    boxes = (cp.asarray(np.array([[0, 0, 0], [2, 0, 0]], np.float32)),  # one tuple: the leaves are built once
             cp.asarray(np.array([[2, 4, 3], [4, 2, 1.5]], np.float32)), cp.asarray(np.array([0, 1])))

    def packet(seq):
        if kind == "volume3d":
            trails = (1.0 + np.cumsum(rng.random((5, 40, 3)), axis=0) * 0.4).astype(np.float32)
            pk = _packet(cp, "volume3d", seq, spacing=0.5, data=rng.random((8, 10, 12)).astype(np.float32),
                         overlay=trails[-1], trails=trails)
            pk.boxes, pk.boxes_levels, pk.centering = boxes, (0, 1), "node"
        else:
            n = 5000
            pk = _packet(cp, "particles", seq, positions=(rng.random((n, 3)) * 0.5).astype(np.float32),
                         data=rng.random(n).astype(np.float32))
            pk.bounds, pk.radius = ((0.0, 0.0, 0.0), (0.5, 0.5, 0.5)), 0.005
        pk.vmin, pk.vmax = np.float32(0.1 * rng.random()), np.float32(1 + rng.random())  # host floats, as the worker's
        return pk

    for seq in range(4):
        c.show_packet(packet(seq))
        c.draw_now(finish=True)
    assert c.display_path == "interop", c.path_reason
    builds = []
    inner_build = ModularProgram._build
    monkeypatch.setattr(ModularProgram, "_build", lambda self: (builds.append(self), inner_build(self))[1])
    dropped = c.gl_state().dropped
    for seq in range(4, 14):
        c.show_packet(packet(seq))
        c.draw_now(finish=True)
    assert "cannot draw frame" not in caplog.text, caplog.text[-2000:]
    assert builds == []
    assert c.gl_state().dropped - dropped > 10 * 20
    c.close()


"""On a CUDA machine: the sphere splatting kernel (shaders/cuda/view/splat_spheres.cu) equals its
float32 mirror bit for bit, and with an NVIDIA OpenGL (EGL) context the app's 3D particles go
device → splat → GL texture without the host, the frame showing the mirror's pixels exactly.

Run alone (VisPy picks one GL backend per process):
    PYOPENGL_PLATFORM=egl python -m pytest tests/app/test_splat_gpu.py -m gpu -v
"""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app.gui import splat

from tests.app.frame_check import CMAP

pytestmark = pytest.mark.gpu


def _perspective(eye, centre, fov=45.0, aspect=1.3, near=0.05, far=40.0) -> np.ndarray:
    """A look-at · perspective matrix as GL's (clip = P · V · (x, y, z, 1))."""
    f = np.asarray(centre, float) - eye
    f /= np.linalg.norm(f)
    r = np.cross(f, [0, 1, 0])
    r /= np.linalg.norm(r)
    u = np.cross(r, f)
    view = np.eye(4)
    view[0, :3], view[1, :3], view[2, :3] = r, u, -f
    view[:3, 3] = -view[:3, :3] @ eye
    t = 1 / np.tan(np.radians(fov) / 2)
    proj = np.zeros((4, 4))
    proj[0, 0], proj[1, 1] = t / aspect, t
    proj[2, 2], proj[2, 3] = (far + near) / (near - far), 2 * far * near / (near - far)
    proj[3, 2] = -1
    return proj @ view


@pytest.mark.parametrize("n, size, spread", [(30000, 9.0, 1.0), (2000, 60.0, 1.0), (0, 5.0, 1.0),
                                             (20000, 14.0, 4.0)])
def test_cuda_splat_equals_the_mirror_bit_for_bit(n, size, spread):
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(n)
    # spread 4: a box four times the view, so that sprites straddle every edge of the framebuffer
    # and many lie outside it (the kernel's bounds clamps)
    centre = np.array([0.8, 0.3, 0.2])
    pos = (centre + (rng.random((n, 3)) - 0.5) * spread * np.array([1.6, 0.6, 0.4])).astype(np.float32)
    val = rng.uniform(-0.2, 1.2, n).astype(np.float32)  # beyond the range too: clamped
    eye = np.array([0.8, 0.9, 3.0])
    ahead = (centre - eye) / np.linalg.norm(centre - eye)
    if n:
        val[::97] = -3e38  # hidden
        val[5] = np.nan
        pos[7] = eye + 50.0 * ahead  # beyond the far plane (40)
        pos[8] = eye - 0.5 * ahead  # behind the eye
        right = np.cross(ahead, [0.0, 1.0, 0.0])
        right /= np.linalg.norm(right)
        pos[9] = eye + 0.06 * ahead + 0.03 * right  # past the near plane: a sprite at MAX_SPRITE_PX, cut by the edge
        val[7:10] = 0.5
    m = _perspective(eye, centre)
    W, H = 331, 257  # odd sizes: no row happens to align
    params = splat.view_params(m, W, H, size, 2.5, (0.0, 1.0))
    lut = splat.lut_table(CMAP)
    want = splat.splat_numpy(pos, val, params, lut)
    s = splat.CudaSplatter()
    s.set_colormap(CMAP)
    stream = cp.cuda.Stream(non_blocking=True)
    for _ in range(2):  # the second frame starts from the buffer the first one's resolve cleared
        got, _used = s.render(cp.asarray(pos), cp.asarray(val), params, stream)
        stream.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(got), want)
    assert n == 0 or (want[..., 3] < 1.5).mean() > 0.05  # the test sees sprites
    if n:  # the near particle's sprite is the clamped one, cut by the framebuffer's right edge
        lone = splat.splat_numpy(pos[9:10], val[9:10], params, lut)[..., 3] < 1.5
        assert 5000 < lone.sum() < 0.6 * np.pi * (splat.MAX_SPRITE_PX / 2) ** 2 and lone[:, -1].any()
        for k in (7, 8):  # beyond the far plane, behind the eye: not drawn
            assert (splat.splat_numpy(pos[k:k + 1], val[k:k + 1], params, lut)[..., 3] == 2).all()
        edge = want[[0, -1], :, 3].ravel().tolist() + want[:, [0, -1], 3].ravel().tolist()
        assert spread == 1.0 or min(edge) < 1.5  # sprites cut by the framebuffer's edges


@pytest.mark.gui
def test_particles_are_splatted_into_the_frame_without_the_host(egl, monkeypatch, caplog):
    import cupy as cp
    from nagare.app.gui import canvas as canvas_mod
    from nagare.app.gui import view3d as view3d_mod
    from nagare.app.gui.canvas import FieldCanvas
    from nagare.app.gui.view3d import Particles3DDrawer, point_scale
    from nagare.app.packets import FramePacket

    c = FieldCanvas(size=(420, 300), show=False, colorbar=False, axes=False)
    c.set_backend("cupy")
    c.set_colormap(CMAP)
    c.set_view3d(outline=False)
    rng = np.random.default_rng(5)
    n, radius = 40000, 0.006
    lo, hi = np.zeros(3), np.array([1.6, 0.6, 0.4])

    def packet(seq, pos, val):
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            p, v = cp.asarray(pos), cp.asarray(val)
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(stream)
        return FramePacket(seq=seq, step=seq, time=0.0, field_name="f", kind="particles", fields=("f",), event=ev,
                           backend="cupy", positions=p, data=v, vmin=cp.float32(0), vmax=cp.float32(1),
                           bounds=(tuple(lo), tuple(hi)), radius=radius)

    c.show_packet(packet(1, (rng.random((n, 3)) * hi).astype(np.float32), rng.random(n).astype(np.float32)))
    c.draw_now(finish=True)
    assert c.display_path == "interop", c.path_reason
    pos = (rng.random((n, 3)) * hi).astype(np.float32)
    val = rng.random(n).astype(np.float32)

    def no_host(*a, **k):
        raise AssertionError("a host copy was made on the interop path")

    for drawers in (canvas_mod, view3d_mod):  # the 3D particles' drawer is view3d's
        monkeypatch.setattr(drawers, "host", no_host)
    c.show_packet(packet(2, pos, val))
    frame = c.grab()[::-1]  # row 0 at the bottom, as the mirror's
    monkeypatch.undo()
    assert "cannot draw frame" not in caplog.text, caplog.text[-2000:]
    d = c.own_drawer(Particles3DDrawer)
    assert d.quad.visible and not d.spheres.visible and "(CUDA splat)" in c.display_label
    assert set(d._interops) == {"splat"} and d.splatter.launches >= 2
    cp.cuda.runtime.deviceSynchronize()
    H, W = frame.shape[:2]
    tr = d.quad.get_transform("visual", "render")
    size, w = point_scale(c.view, d.quad, (lo + hi) / 2, 2 * radius)
    want = splat.splat_numpy(pos, val, splat.view_params(splat.view_matrix(tr), W, H, size, w, (0.0, 1.0)),
                             splat.lut_table(CMAP))
    cover = want[..., 3] < 1.5
    assert cover.mean() > 0.1
    np.testing.assert_array_equal(frame[cover], np.rint(want[cover, :3] * 255).astype(np.uint8))
    assert not cover[0, 0]
    bg = frame[0, 0]
    np.testing.assert_allclose(bg, np.asarray(c.bgcolor.rgb) * 255, atol=0.51)
    np.testing.assert_array_equal(frame[~cover], np.broadcast_to(bg, frame[~cover].shape))
    c.close()

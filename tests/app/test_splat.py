"""The CUDA sphere splatter's float32 mirror (app/gui/splat.py): its geometry and shading, the
camera matrix it is given, and — on Mesa under Xvfb — the GL point sprites it replaces, pixel for
pixel. The CUDA kernel itself is checked against the mirror in tests/app/test_splat_gpu.py."""
from __future__ import annotations

import numpy as np
from nagare.app.gui import splat

from tests.app.frame_check import CMAP, isolated


def _ortho_params(width, height, size, clim=(0.0, 1.0)):
    """A view whose clip coordinates are the positions themselves (w = 1): x, y in −1..1 across
    the framebuffer, z in −1..1 the depth."""
    return splat.view_params(np.eye(4), width, height, size, 1.0, clim)


def test_one_sprite_covers_the_pixels_whose_centres_lie_in_its_disc():
    W, H, size = 40, 30, 11.0
    pos = np.array([[0.1, -0.2, 0.3]], np.float32)
    img = splat.splat_numpy(pos, np.array([0.25], np.float32), _ortho_params(W, H, size), splat.lut_table(CMAP))
    cx, cy = (0.1 * 0.5 + 0.5) * W, (-0.2 * 0.5 + 0.5) * H  # window coordinates, y up (row 0 at the bottom)
    yy, xx = np.mgrid[0:H, 0:W] + 0.5
    inside = (xx - cx) ** 2 + (yy - cy) ** 2 <= (size / 2) ** 2
    covered = img[..., 3] < 1.5
    np.testing.assert_array_equal(covered, inside)
    np.testing.assert_allclose(img[covered, 3], 0.3 * 0.5 + 0.5, rtol=1e-6)  # one depth: the centre's
    # shading: the pixel nearest the centre is lit as the sphere's front (normal towards the viewer)
    lut = splat.lut_table(CMAP)
    t = 0.25 * 255
    base = lut[int(t)] + (t - int(t)) * (lut[int(t) + 1] - lut[int(t)])
    light = np.array([-0.4, 0.5, 0.8]) / np.linalg.norm([-0.4, 0.5, 0.8])
    j, i = int(cy), int(cx)
    n = np.array([2 * (i + 0.5 - cx) / size, 2 * (j + 0.5 - cy) / size, 0.0])
    n[2] = np.sqrt(1 - n[0] ** 2 - n[1] ** 2)
    spec = max(2 * n @ light * n[2] - light[2], 0) ** 24
    want = np.clip(base * (0.35 + 0.65 * max(n @ light, 0)) + 0.25 * spec, 0, 1)
    np.testing.assert_allclose(img[j, i, :3], want, atol=0.6 / 255)
    # lit from the upper left: the upper-left quarter of the disc is brighter than the lower right
    upper_left = covered & (xx < cx) & (yy > cy)
    lower_right = covered & (xx > cx) & (yy < cy)
    assert img[upper_left, :3].sum(axis=-1).mean() > img[lower_right, :3].sum(axis=-1).mean() + 0.2


def test_the_nearest_sprite_wins_whatever_the_order():
    W, H = 32, 32
    rng = np.random.default_rng(4)
    pos = rng.uniform(-0.6, 0.6, (400, 3)).astype(np.float32)
    val = rng.random(400).astype(np.float32)
    p = _ortho_params(W, H, 6.0)
    lut = splat.lut_table(CMAP)
    a = splat.splat_numpy(pos, val, p, lut)
    order = rng.permutation(400)
    b = splat.splat_numpy(pos[order], val[order], p, lut)
    np.testing.assert_array_equal(a, b)
    # each covered pixel shows the depth of the nearest sprite that covers it
    one = [splat.splat_numpy(pos[k:k + 1], val[k:k + 1], p, lut)[..., 3] for k in range(400)]
    np.testing.assert_array_equal(a[..., 3], np.min(one, axis=0))


def test_hidden_and_clipped_particles_are_not_drawn():
    W, H = 24, 24
    pos = np.array([[0, 0, 0], [0.5, 0.5, 1.5], [-0.5, -0.5, 0]], np.float32)  # 2nd beyond the far plane
    val = np.array([-2e38, 0.5, np.nan], np.float32)  # 1st hidden (walls), 3rd NaN
    img = splat.splat_numpy(pos, val, _ortho_params(W, H, 5.0), splat.lut_table(CMAP))
    assert (img[..., 3] == 2).all()


def test_view_params_lay_out_the_kernels_struct():
    p = splat.view_params(np.arange(16).reshape(4, 4), 640, 480, 7.5, 2.0, (1.0, 3.0))
    assert p.dtype == np.float32 and len(p) == len(splat.VIEW_FIELDS) == 24
    np.testing.assert_array_equal(p[:16], np.arange(16))  # row-major: clip = M · (x, y, z, 1)
    np.testing.assert_array_equal(p[16:], [640, 480, 7.5, 2.0, splat.MIN_SPRITE_PX, splat.MAX_SPRITE_PX, 1.0, 0.5])
    assert splat.view_params(np.eye(4), 2, 2, 1, 1, (1.0, 1.0))[-1] == 1.0  # an empty range: no division by 0


def _particles_packet(pos, val, lo, hi, radius):
    from nagare.app.packets import FramePacket

    return FramePacket(seq=1, step=1, time=0.0, field_name="f", kind="particles", fields=("f",), positions=pos,
                       data=val, vmin=np.float32(0), vmax=np.float32(1), bounds=(tuple(lo), tuple(hi)),
                       radius=radius)


def test_view_matrix_and_gl_sprites_equal_the_mirror(make_canvas):
    """Mesa's point sprites (the host path) against the mirror with the same camera: the splat
    path draws what the GL path drew."""
    if not isolated(__file__, "test_view_matrix_and_gl_sprites_equal_the_mirror"):
        return
    from nagare.app.gui.view3d import Particles3DDrawer, point_scale

    c = make_canvas(360, 280, colorbar=False, axes=False)
    c.set_colormap(CMAP)
    c.set_view3d(outline=False)
    rng = np.random.default_rng(7)
    n = 600
    lo, hi = np.zeros(3), np.array([1.6, 0.6, 0.4])
    pos = (rng.random((n, 3)) * hi).astype(np.float32)
    val = rng.random(n).astype(np.float32)
    c.show_packet(_particles_packet(pos, val, lo, hi, radius=0.02))
    c.draw_now(finish=True)  # the camera frames the box
    d = c.own_drawer(Particles3DDrawer)
    node = d.spheres
    tr = node.get_transform("visual", "render")
    m = splat.view_matrix(tr)
    pts = np.c_[pos, np.ones(n)]
    np.testing.assert_allclose(pts @ m.T, tr.map(pts), rtol=1e-9, atol=1e-12)
    W, H = c.physical_size
    size, w = point_scale(c.view, node, (lo + hi) / 2, 0.04)
    # GL's depth buffer keeps 24 bits (FieldCanvas.render; VisPy's own has 16) and, on a tie, the
    # sprite drawn first; the mirror keeps the nearer float. Drop particles whose sprite overlaps
    # another's at a depth closer than 2⁻²².
    clip = pts @ m.T
    win = (clip[:, :3] / clip[:, 3:]) * 0.5 + 0.5
    px, py, depth, s = win[:, 0] * W, win[:, 1] * H, win[:, 2], size * w / clip[:, 3]
    near = ((np.abs(px[:, None] - px) < (s[:, None] + s) / 2) & (np.abs(py[:, None] - py) < (s[:, None] + s) / 2)
            & (np.abs(depth[:, None] - depth) < 2.0 ** -22))
    keep = ~np.triu(near, 1).any(axis=0)
    assert keep.mean() > 0.9  # the camera's depth range leaves a 16-bit buffer room (canvas._set_kind)
    pos, val = pos[keep], val[keep]
    c.show_packet(_particles_packet(pos, val, lo, hi, radius=0.02))
    c.draw_now(finish=True)
    frame = c.grab()[::-1]  # row 0 at the bottom, as the mirror's
    assert frame.shape[:2] == (H, W)
    img = splat.splat_numpy(pos, val, splat.view_params(m, W, H, size, w, (0.0, 1.0)), splat.lut_table(CMAP))
    bg = frame[1, 1].astype(int)
    gl_cover = np.abs(frame.astype(int) - bg).max(axis=-1) > 0
    mirror_cover = img[..., 3] < 1.5
    assert mirror_cover.sum() > 0.05 * W * H
    # coverage: the same pixels but for sprite edges rounded the other way (GL's rule is inclusive
    # where the mirror's is half-open; a dark edge pixel can equal the background)
    assert (gl_cover != mirror_cover).sum() < 0.005 * mirror_cover.sum(), (gl_cover != mirror_cover).sum()
    both = gl_cover & mirror_cover
    got, want = frame[both].astype(int), np.rint(img[both, :3] * 255).astype(int)
    close = np.abs(got - want).max(axis=-1) <= 3  # GL filters the LUT with 8-bit weights
    assert close.mean() > 0.999, close.mean()


def test_a_failing_splat_falls_back_to_gl_sprites_once(make_canvas, monkeypatch, caplog):
    """The splat runs inside VisPy's draw: an exception there must not break the frame (nor every
    later one). The canvas logs it once and draws GL sprites from then on."""
    if not isolated(__file__, "test_a_failing_splat_falls_back_to_gl_sprites_once"):
        return
    from nagare.app.gui.view3d import Particles3DDrawer

    c = make_canvas(320, 240, colorbar=False, axes=False)
    c.set_view3d(outline=False)
    rng = np.random.default_rng(2)
    pos = (rng.random((200, 3)) * [1.6, 0.6, 0.4]).astype(np.float32)
    val = rng.random(200).astype(np.float32)
    lo, hi = np.zeros(3), np.array([1.6, 0.6, 0.4])
    c.show_packet(_particles_packet(pos, val, lo, hi, radius=0.02))
    c.draw_now(finish=True)
    d = c.own_drawer(Particles3DDrawer)
    sprites = c.grab()
    calls = []

    def broken(quad, view):
        calls.append(1)
        raise RuntimeError("cudaGraphicsGLRegisterImage failed: out of memory")

    # as if the packet had come on the interop path
    monkeypatch.setattr(d, "_splat_now", broken)
    d._splat_src = (pos, val, None, (0.0, 1.0), 0.04, (lo + hi) / 2)
    d.quad.visible, d.spheres.visible = True, False
    frame = c.grab()  # the failing draw: the rest of the frame is still drawn
    assert calls == [1] and d.renderer == "sprites" and not d.quad.visible and d.spheres.visible
    assert "fall back to GL sprites" in caplog.text and "out of memory" in caplog.text
    assert Particles3DDrawer.renderer == "splat"  # other canvases keep splatting
    c.draw_now(finish=True)
    np.testing.assert_array_equal(c.grab(), sprites)  # the sprites again, the splat not retried
    assert calls == [1]
    assert frame.shape == sprites.shape


def test_the_splat_maps_its_view_again_only_when_a_transform_changed(make_canvas, monkeypatch):
    """The interop path's splat (its CUDA half stubbed: the parameters it is handed are recorded)
    gets the view matrix and point scale it got when they were mapped for every draw; they are
    mapped again after the camera turned, not for a new packet under the same camera."""
    if not isolated(__file__, "test_the_splat_maps_its_view_again_only_when_a_transform_changed"):
        return
    import sys
    import types

    from nagare.app.gui import interop, view3d

    class FakeTexture:
        stream, rt = 0, None

        def __init__(self, handle, shape):
            self.in_flight = interop.InFlight()

        def _record_event(self):
            return None

        def upload(self, image, event=None):
            pass

        def close(self):
            pass

    def run(cached: bool):
        params, scales = [], []

        class Recorder:
            def set_colormap(self, name):
                pass

            def render(self, positions, values, p, stream):
                params.append(np.array(p))
                return None, ()

        monkeypatch.setattr(interop, "TextureInterop", FakeTexture)
        monkeypatch.setattr(splat, "CudaSplatter", Recorder)
        monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(
            ExternalStream=lambda p: None)))
        inner = view3d.point_scale
        monkeypatch.setattr(view3d, "point_scale", lambda *a: (scales.append(1), inner(*a))[1])
        if not cached:
            monkeypatch.setattr(view3d, "transform_key", lambda *t: None)
        c = make_canvas(320, 240, colorbar=False, axes=False)
        c.display_path = "interop"
        rng = np.random.default_rng(3)
        lo, hi = np.zeros(3), np.array([1.6, 0.6, 0.4])
        for frame in range(6):
            if frame == 4:
                c.view.camera.azimuth += 25.0
            pos = (rng.random((50, 3)) * hi).astype(np.float32)
            c.show_packet(_particles_packet(pos, rng.random(50).astype(np.float32), lo, hi, radius=0.02))
            c.draw_now(finish=True)
        c.close()
        monkeypatch.undo()
        return params, len(scales)

    cached, mapped = run(True)
    every_draw, mapped_every_draw = run(False)
    assert len(cached) == len(every_draw) == 6 and mapped_every_draw == 6
    assert mapped == 2  # the first frame (the camera framed before it) and the one after the turn
    assert not np.array_equal(cached[3], cached[4])  # the camera turned
    for a, b in zip(cached, every_draw):
        np.testing.assert_array_equal(a, b)

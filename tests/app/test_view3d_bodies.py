"""The 3D views on Mesa under Xvfb (host path): solid bodies of a grid (``pk.surfaces``) as lit
grey meshes among the slice planes, toggled by the obstacles switch, and 3D particle trails
(``pk.trails``) as line segments — checked on the pixels of real frames. Canvas tests run in fresh
processes (``_isolated``), as in test_view3d.py."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app import colormaps

from tests.app.frame_check import CMAP, isolated
from tests.app.test_view3d import _colour_close, _packet, make_canvas  # noqa: F401  (fixture: CMAP canvases)

pytestmark = pytest.mark.gui




def _isolated(name: str) -> bool:
    """Run test ``name`` of this file in a fresh process (see test_view3d._isolated); True in it."""
    return isolated(__file__, name)

N, H = 16, 0.5  # a 16³ grid, spacing 0.5
CENTRE, RADIUS = np.array([8.0, 7.0, 8.0]) * H, 3.0 * H  # the sphere, in the grid's world units


def uv_sphere(centre, radius, n_lat=18, n_lon=36) -> tuple[np.ndarray, np.ndarray]:
    """(V, 3) float32 vertices and (F, 3) int32 faces of a closed UV sphere (outward winding)."""
    theta = np.linspace(0, np.pi, n_lat + 1)[1:-1]  # the rings between the poles
    phi = np.linspace(0, 2 * np.pi, n_lon, endpoint=False)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    ring = np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], -1).reshape(-1, 3)
    verts = np.concatenate([[[0, 0, 1]], ring, [[0, 0, -1]]]) * radius + centre
    faces = []
    south = len(verts) - 1
    for j in range(n_lon):
        k = (j + 1) % n_lon
        faces.append((0, 1 + j, 1 + k))
        for i in range(n_lat - 2):
            a, b = 1 + i * n_lon + j, 1 + i * n_lon + k
            c, d = a + n_lon, b + n_lon
            faces += [(a, c, d), (a, d, b)]
        last = 1 + (n_lat - 2) * n_lon
        faces.append((last + j, south, last + k))
    return verts.astype(np.float32), np.array(faces, np.int32)


def _volume(value=0.25, seq=1, surfaces=()):
    vol = np.full((N, N, N), value, np.float32)
    pk = _packet("volume3d", seq, data=vol, spacing=H, slice_count=N, vmin=np.float32(-1), vmax=np.float32(1))
    pk.surfaces = surfaces  # set after construction: works whether or not FramePacket declares it
    return pk


def _px(c, pts):
    from nagare.app.gui.view3d import project

    return project(c.view, np.atleast_2d(pts)) + np.asarray(c.view.pos)


def _lit(frame, bg, thresh=30):
    return np.abs(frame.astype(int) - np.asarray(bg, int)).max(axis=-1) > thresh


# ---- solid bodies ------------------------------------------------------------------------------------------
def test_sphere_surface_is_a_lit_grey_body_inside_its_silhouette_and_the_switch_hides_it(make_canvas):  # noqa: F811
    if not _isolated("test_sphere_surface_is_a_lit_grey_body_inside_its_silhouette_and_the_switch_hides_it"):
        return
    from nagare.app.gui.view3d import VolumeDrawer

    c = make_canvas(360, 340, colorbar=False)
    sphere = uv_sphere(CENTRE, RADIUS)
    c.set_view3d(outline=False, planes={a: [False, 0.5] for a in "xyz"})
    c.show_packet(_volume(surfaces=(sphere,)))
    c.draw_now(finish=True)
    frame = c.grab()
    bg = frame[2, 2]
    drawn = CENTRE + 0.5 * H  # a vertex at i·h lies on sample i, drawn at the centre of cell i
    centre = _px(c, drawn)[0]
    # grey (r ≈ g ≈ b), well above the background, at the projected centre
    px = frame[int(centre[1]), int(centre[0])].astype(int)
    assert px.min() > 90 and px.max() - px.min() < 30, px
    # nothing outside the silhouette: every lit pixel lies within the sphere's projected outline
    outline = _px(c, sphere[0] + 0.5 * H)
    r_screen = np.linalg.norm(outline - centre, axis=1).max()
    lit = _lit(frame, bg, 12)
    yy, xx = np.nonzero(lit)
    dist = np.hypot(xx + 0.5 - centre[0], yy + 0.5 - centre[1])
    assert dist.max() <= r_screen + 1.5, (dist.max(), r_screen)
    assert lit.sum() > 0.8 * np.pi * r_screen ** 2  # and it is filled (opaque)
    # shaded: the shape reads (brightness varies across the disc)
    assert frame[lit].astype(int).sum(axis=1).std() > 20
    d = c.own_drawer(VolumeDrawer)
    mesh = d.bodies._meshdata
    # the same arrays next frame: no new upload; new arrays: uploaded
    c.show_packet(_volume(seq=2, surfaces=(sphere,)))
    c.draw_now(finish=True)
    assert d.bodies._meshdata is mesh
    c.show_packet(_volume(seq=3, surfaces=(uv_sphere(CENTRE, RADIUS),)))
    c.draw_now(finish=True)
    assert d.bodies._meshdata is not mesh

    # a slice plane through the body: the plane shows the field around it, the body stays in front
    c.set_view3d(planes={"z": [True, 0.5]})
    f2 = c.grab()
    px = f2[int(centre[1]), int(centre[0])].astype(int)
    assert px.min() > 90 and px.max() - px.min() < 30, px
    field = (colormaps.apply(np.array([[0.25]]), CMAP, (-1, 1))[0, 0]).astype(int)
    corner = _px(c, [[1.0 * H, 1.0 * H, 8.5 * H]])[0]  # on the plane, far from the sphere
    assert _colour_close(f2[int(corner[1]), int(corner[0])], field, 6)

    # the obstacles switch removes the body
    c.set_show_obstacles(False)
    f3 = c.grab()
    assert not d.bodies.visible
    assert _colour_close(f3[int(centre[1]), int(centre[0])], field, 6)  # the plane, no longer covered
    c.set_view3d(planes={"z": [False, 0.5]})
    assert not _lit(c.grab(), bg, 12).any()
    c.set_show_obstacles(True)
    assert _lit(c.grab(), bg, 12).sum() == lit.sum()


# ---- trails ----------------------------------------------------------------------------------------------------
LO, HI = (0.0, 0.0, 0.0), (1.6, 0.6, 0.4)
T = 9
TRAIL_X = np.linspace(0.2, 1.0, T)  # particle 0 moves along x at y = 0.3, z = 0.2


def _particles(trails="absent", seq=1):
    pos = np.array([[1.4, 0.5, 0.3], [1.2, 0.1, 0.1], [0.3, 0.1, 0.1]], np.float32)
    pk = _packet("particles", seq, positions=pos, data=np.array([0.0, 1.0, 0.5], np.float32), vmin=np.float32(0),
                 vmax=np.float32(1), bounds=(LO, HI), radius=0.01)
    if not isinstance(trails, str):
        pk.trails = trails
    return pk


def _trail_ring():
    """Time order (oldest first). Particle 0 moves along x at y = 0.3, z = 0.2 and has no samples
    3 and 4 (re-seeded, say): segments 2–3, 3–4, 4–5 dropped; particle 1 moves along x at y = 0.1,
    z = 0.1 (its trail keeps every slot in use); particle 2 is parked: NaN throughout."""
    tr = np.full((T, 3, 3), np.nan, np.float32)
    tr[:, 0, 0], tr[:, 0, 1], tr[:, 0, 2] = TRAIL_X, 0.3, 0.2
    tr[3:5, 0] = np.nan
    tr[:, 1, 0], tr[:, 1, 1], tr[:, 1, 2] = np.linspace(0.4, 1.2, T), 0.1, 0.1
    return tr


def test_trails_are_segments_along_the_path_and_none_where_nan(make_canvas):  # noqa: F811
    if not _isolated("test_trails_are_segments_along_the_path_and_none_where_nan"):
        return
    from nagare.app.gui.view3d import Particles3DDrawer

    c = make_canvas(400, 320, colorbar=False)
    c.set_view3d(outline=False)
    c.show_packet(_particles(_trail_ring()))
    c.draw_now(finish=True)
    frame = c.grab()
    bg = frame[2, 2]
    d = c.own_drawer(Particles3DDrawer)
    assert d.trails.visible

    def near(t, r):
        """The (2r+1)² patch around the trail point at parameter t (in samples) lit?"""
        x = np.interp(t, np.arange(T), TRAIL_X)
        p = _px(c, [[x, 0.3, 0.2]])[0].astype(int)
        return _lit(frame[p[1] - r:p[1] + r + 1, p[0] - r:p[0] + r + 1], bg, 30)

    for t in (5.5, 6.5, 7.5):  # the newest segments (brightest): drawn
        assert near(t, 1).any(), t
    for t in (3.0, 3.5, 4.0):  # the unwritten samples: nothing
        assert not near(t, 3).any(), t


def test_no_trails_draw_exactly_as_before(make_canvas):  # noqa: F811
    if not _isolated("test_no_trails_draw_exactly_as_before"):
        return
    c = make_canvas(400, 320, colorbar=False)
    c.show_packet(_particles())  # no trails attribute at all
    before = c.grab()
    c.show_packet(_particles(None, seq=2))  # trails=None set explicitly
    np.testing.assert_array_equal(c.grab(), before)
    c.show_packet(_particles(_trail_ring(), seq=3))
    assert not np.array_equal(c.grab(), before)
    c.show_packet(_particles(None, seq=4))  # trails gone again: the line is hidden
    np.testing.assert_array_equal(c.grab(), before)


# ---- trail segments (NumPy only) --------------------------------------------------------------------------------
def test_trail_segments_join_consecutive_samples_of_one_particle_and_drop_nan():
    from nagare.app.gui.view3d import TRAIL_ALPHA, trail_segments

    tr = _trail_ring()
    pts, col = trail_segments(tr)
    seg = pts.reshape(-1, 2, 3)
    # segments 0–1, 1–2, 5–6, 6–7, 7–8 of particle 0, all 8 of particle 1, none of the parked one
    p0 = seg[:, 0, 1] == np.float32(0.3)
    np.testing.assert_allclose(seg[p0, 0, 0], TRAIL_X[[0, 1, 5, 6, 7]])
    np.testing.assert_allclose(seg[p0, 1, 0], TRAIL_X[[1, 2, 6, 7, 8]])
    assert (~p0).sum() == T - 1 and (seg[~p0, :, 1] == np.float32(0.1)).all()
    assert np.isfinite(pts).all() and col.shape == (len(pts), 4)
    a = col[:, 3].reshape(-1, 2)[p0]
    assert a[0, 0] == pytest.approx(TRAIL_ALPHA[0]) and a[-1, 1] == pytest.approx(TRAIL_ALPHA[1])
    assert (np.diff(a.ravel()) >= 0).all()  # fading toward the oldest sample


def test_trail_segments_of_a_ring_never_join_the_newest_sample_to_the_oldest():
    from nagare.app.gui.view3d import trail_segments

    # a ring of 6 slots after 8 samples s0..s7: slot k holds s_k or s_{k+6}; the slot after the
    # newest (s7 in slot 1) is NaN for every particle (the gap)
    x = np.arange(8, dtype=np.float32)
    ring = np.full((6, 1, 3), np.nan, np.float32)
    for s in range(8):
        ring[s % 6, 0] = (x[s], 0, 0)
    ring[(7 + 1) % 6] = np.nan
    pts, col = trail_segments(ring)
    seg = pts.reshape(-1, 2, 3)[:, :, 0]
    np.testing.assert_array_equal(seg, [[3, 4], [4, 5], [5, 6], [6, 7]])  # oldest first, no 7 → 3
    assert (np.diff(col[:, 3]) >= 0).all()
    # a particle wrapped around a periodic domain: the jump is no segment
    wrap = np.array([[[0.8, 0, 0]], [[0.9, 0, 0]], [[0.05, 0, 0]], [[0.15, 0, 0]]], np.float32)
    pts, col = trail_segments(wrap, max_step=(0.5, 0.5, 0.5))
    np.testing.assert_allclose(pts[:, 0], [0.8, 0.9, 0.05, 0.15])
    np.testing.assert_allclose(col[:, 3].reshape(-1, 2)[1], trail_segments(wrap)[1][:, 3].reshape(-1, 2)[2])
    # nothing written yet, or fewer than two samples: no segments
    assert len(trail_segments(np.full((4, 3, 3), np.nan))[0]) == 0
    assert len(trail_segments(np.zeros((1, 3, 3)))[0]) == 0

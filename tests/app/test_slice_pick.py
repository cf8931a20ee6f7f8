"""The slice planes' pick and drag geometry (nagare.app.gui.slice_pick) and the probes' cell
lookup, without GL: a camera built here from its eye, target and field of view, cursors computed
by hand, planes and points known in closed form."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app.gui import slice_pick as sp
from nagare.app.gui.probe import world_to_cells

W = H = 200  # pixels


def camera(eye, target, up=(0, 1, 0), fov=90.0, w=W, h=H) -> np.ndarray:
    """Row-vector 4×4 world → pixel (y down) of a perspective camera, as OpenGL builds it
    (look-at, frustum, viewport), written out here independently of the code under test."""
    eye, target, up = (np.asarray(v, np.float64) for v in (eye, target, up))
    f = (target - eye) / np.linalg.norm(target - eye)
    r = np.cross(f, up)
    r /= np.linalg.norm(r)
    u = np.cross(r, f)
    view = np.eye(4)
    view[:3, 0], view[:3, 1], view[:3, 2] = r, u, -f  # eye coordinates: x right, y up, z back
    view[3, :3] = -eye @ view[:3, :3]
    g = 1 / np.tan(np.radians(fov) / 2)
    near, far = 0.1, 100.0
    proj = np.zeros((4, 4))
    proj[0, 0], proj[1, 1] = g * h / w, g
    proj[2, 2], proj[3, 2] = -(far + near) / (far - near), -2 * far * near / (far - near)
    proj[2, 3] = -1.0  # w_clip = -z_eye: the depth in front of the eye
    viewport = np.array([[w / 2, 0, 0, 0], [0, -h / 2, 0, 0], [0, 0, 1, 0], [w / 2, h / 2, 0, 1]])
    return view @ proj @ viewport


# a 4 × 4 × 4 box of cells 0.5 wide: (nz, ny, nx) = (8, 8, 8)
SHAPE, SP = (8, 8, 8), 0.5


def test_plane_rects_sit_at_the_cell_centre_the_visual_draws():
    rects = sp.plane_rects({"x": 3 / 7, "z": 1.0}, (4, 6, 8), 0.5)
    x, z = rects
    assert (x.name, x.axis, x.coord) == ("x", 0, 1.75)  # cell 3 of 8: centre (3 + 0.5) · 0.5
    assert x.lo == (1.75, 0.0, 0.0) and x.hi == (1.75, 3.0, 2.0)
    assert (z.axis, z.coord) == (2, 1.75)  # the last of 4 cells
    assert z.lo == (0.0, 0.0, 1.75) and z.hi == (4.0, 3.0, 1.75)
    assert sp.slice_index(0.5, 1) == 0 and sp.plane_coord(0.0, 5, 2.0) == 1.0


def test_a_known_cursor_hits_a_known_plane_at_a_known_point():
    """Eye straight above the box looking down −z: the pixel of (x, y) at depth d from the eye is
    (100 + 100 (x − 2)/d, 100 − 100 (y − 2)/d) for a 90° field of view."""
    M = camera(eye=(2, 2, 10), target=(2, 2, 0))
    rects = sp.plane_rects({"x": 4 / 7, "y": 4 / 7, "z": 4 / 7}, SHAPE, SP)  # all at 2.25
    p = np.array([1.2, 3.1, 2.25])  # on the z plane
    d = 10 - p[2]
    cursor = (100 + 100 * (p[0] - 2) / d, 100 - 100 * (p[1] - 2) / d)
    np.testing.assert_allclose(sp.project(M, p)[0], cursor, atol=1e-9)  # the test's camera is what it says
    origin, direction = sp.pixel_ray(M, cursor)
    np.testing.assert_allclose(origin, (2, 2, 10), atol=1e-9)  # the eye
    assert direction[2] < 0  # into the scene
    rect, t, point = sp.pick_plane(origin, direction, rects)
    assert rect.name == "z"
    np.testing.assert_allclose(point, p, atol=1e-9)
    np.testing.assert_allclose(t, np.linalg.norm(p - (2, 2, 10)), rtol=1e-12)
    # the same cursor with the z plane off: the y plane (y = 2.25) lies on the way, at depth
    # where y reaches 2.25 — but there z = 10 − 7.75·0.25/1.1 = 8.24, above the box: a miss
    assert sp.pick_plane(origin, direction, [r for r in rects if r.name != "z"]) is None
    # beside the box: nothing
    assert sp.pick_plane(*sp.pixel_ray(M, (2, 2)), rects) is None


def test_the_nearest_plane_wins_and_planes_behind_the_eye_do_not_count():
    """From the side, low: the ray to a point of the z plane crosses the x plane first, inside
    the box, at eye + s (P − eye) with s = (10 − 2.25)/(10 − 1)."""
    eye = np.array([10.0, 2.0, 3.0])
    M = camera(eye=eye, target=(2, 2, 2), up=(0, 0, 1))
    rects = sp.plane_rects({"x": 4 / 7, "z": 4 / 7}, SHAPE, SP)
    P = np.array([1.0, 2.0, 2.25])
    s = (10 - 2.25) / 9
    want = eye + s * (P - eye)
    assert 0 < want[2] < 4  # inside the box: the x plane covers it
    rect, t, point = sp.pick_plane(*sp.pixel_ray(M, sp.project(M, P)[0]), rects)
    assert rect.name == "x"
    np.testing.assert_allclose(point, want, atol=1e-9)
    rect, t, point = sp.pick_plane(*sp.pixel_ray(M, sp.project(M, P)[0]), rects[1:])
    assert rect.name == "z"  # without the x plane: the z plane behind it
    np.testing.assert_allclose(point, P, atol=1e-9)
    # a plane behind the eye is not hit
    back = sp.PlaneRect(0, 12.0, (12.0, -50, -50), (12.0, 50, 50))
    o, d = sp.pixel_ray(M, (100, 100))
    assert sp.hit_rect(o, d, back) is None and sp.hit_rect(o, d, back, front_only=False) is not None


def test_a_drag_of_known_pixels_moves_the_plane_a_known_distance():
    """Looking down −z from 7.75 above the plane's points: one world unit along x is 100/7.75 px
    to the right; (+31, +7) px is 31·7.75/100 = 2.4025 units along x (the vertical part is
    across the normal and does nothing) — 4.8 cells of 0.5: the plane moves from cell 4 to 9 → 7
    (clamped at the last of 8) and a smaller drag by exactly 3 cells."""
    M = camera(eye=(2, 2, 10), target=(2, 2, 0))
    (x,) = sp.plane_rects({"x": 4 / 7}, SHAPE, SP)
    point = np.array([x.coord, 3.0, 2.25])
    s = sp.normal_screen_dir(M, point, 0)
    np.testing.assert_allclose(s, (100 / 7.75, 0), atol=1e-9)
    np.testing.assert_allclose(sp.drag_distance(s, (31, 7)), 2.4025, rtol=1e-12)
    assert sp.drag_fraction(4 / 7, 2.4025, 8, SP) == 1.0  # clamped to the box
    dist = sp.drag_distance(s, (3 * SP * 100 / 7.75, -20))  # three cells' worth of pixels
    np.testing.assert_allclose(dist, 1.5, rtol=1e-12)
    frac = sp.drag_fraction(4 / 7, dist, 8, SP)
    np.testing.assert_allclose(frac, 1.0)  # 4/7 + 1.5/(0.5·7) = 1
    assert sp.slice_index(sp.drag_fraction(4 / 7, -dist, 8, SP), 8) == 1  # back three cells: 4 → 1
    # a drag across the normal's screen direction moves nothing; a normal pointing at the eye neither
    assert sp.drag_distance(s, (0, 40)) == 0.0
    assert sp.drag_distance(sp.normal_screen_dir(M, (2, 2, 2.25), 2), (30, 30)) == 0.0
    assert sp.drag_fraction(0.3, 5.0, 1, SP) == 0.0


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_following_the_pointer_an_oblique_plane_moves_by_the_displacement_drawn(axis):
    """An oblique camera: moving the mouse by the image of a small displacement δ along the
    normal moves the plane by δ (to first order)."""
    M = camera(eye=(9, -6, 7), target=(2, 2, 2), up=(0, 0, 1))
    point = np.array([2.25, 1.5, 2.75])
    delta = 1e-4
    moved = point.copy()
    moved[axis] += delta
    dpx = sp.project(M, moved)[0] - sp.project(M, point)[0]
    np.testing.assert_allclose(sp.drag_distance(sp.normal_screen_dir(M, point, axis), dpx), delta, rtol=1e-3)


def test_orthographic_rays_point_into_the_scene():
    """An orthographic camera (constant w): the ray is the view direction through the pixel."""
    M = np.diag([20.0, -20.0, 0.1, 1.0])  # x, y scaled to pixels, depth = 0.1 z
    M[3, :2] = (100, 100)
    o, d = sp.pixel_ray(M, (120, 60))
    np.testing.assert_allclose(d, (0, 0, 1), atol=1e-12)
    np.testing.assert_allclose(o[:2], (1, 2), atol=1e-12)


def test_world_points_index_cells_in_2d_and_3d():
    ij, inside = world_to_cells([[0.1, 0.9], [3.9, 2.0], [-0.1, 1.0]], (4, 8), 0.5)  # (ny, nx)
    np.testing.assert_array_equal(ij, [[0, 1], [7, 3], [0, 2]])
    np.testing.assert_array_equal(inside, [True, False, False])  # y 2.0 is past the 4 rows
    ij, inside = world_to_cells([[1.75, 0.25, 3.99]], SHAPE, SP)
    np.testing.assert_array_equal(ij, [[3, 0, 7]])
    assert inside.all()

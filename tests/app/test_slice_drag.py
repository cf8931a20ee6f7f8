"""Dragging the 3D view's slice planes in the real window (issue 18), on Mesa under Xvfb: a real
mouse drag on a plane moves it along its normal by the cells dragged, the dock's slider follows,
the frame shows the new slice; beside the planes (or with Ctrl) the drag orbits the camera; a
click and a Shift+drag on a plane give the point and line probes (the HUD plots the profile).

Runs in a fresh process (see test_view3d.py: the slice program on Mesa after many canvases, and
imgui's renderer in a window opened after another canvas was closed)."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app import colormaps

from tests.app.frame_check import isolated

pytestmark = pytest.mark.gui

NX, NY, NZ, DX = 20, 16, 12, 0.5
PRESET = f"""engine = "diffusion3d"
description = "a small 3D sine mode for the slice-drag test"
[grid]
nx = {NX}
ny = {NY}
nz = {NZ}
dx = {DX}
[physics]
kappa = 1.0
r = 0.1
[boundaries]
kind = "periodic"
[initial]
kind = "random"
seed = 3
[view]
field = "f"
colormap = "viridis"
[run]
steps_per_frame = 1
"""


def _isolated(name: str) -> bool:
    """Run test ``name`` of this file in a fresh process and assert it passed; True in that process."""
    return isolated(__file__, name, timeout=180)


def _pixel(c, pt):
    from nagare.app.gui.view3d import project

    return project(c.view, np.atleast_2d(pt))[0] + np.asarray(c.view.pos)


def _qp(px):
    from PyQt6 import QtCore

    return QtCore.QPoint(int(round(px[0])), int(round(px[1])))


def _drag(qtbot, widget, a, b, modifier=None, steps=4):
    from PyQt6 import QtCore

    left = QtCore.Qt.MouseButton.LeftButton
    mod = modifier or QtCore.Qt.KeyboardModifier.NoModifier
    qtbot.mousePress(widget, left, mod, _qp(a))
    for s in np.linspace(0, 1, steps + 1)[1:]:
        qtbot.mouseMove(widget, _qp(np.asarray(a) + s * (np.asarray(b) - np.asarray(a))))
        qtbot.wait(20)  # each move handled (Qt would coalesce them)
    qtbot.mouseRelease(widget, left, mod, _qp(b))
    qtbot.wait(50)


def _shows_plane(c, frame, i) -> float:
    """Fraction of the interior cells of the x plane at column i whose centre pixel shows their
    value through the colour map (the other planes are off)."""
    from nagare.app.gui.view3d import project

    k, j = np.meshgrid(np.arange(1, NZ - 1), np.arange(1, NY - 1), indexing="ij")
    k, j = k.ravel(), j.ravel()
    pts = (np.stack([np.full_like(j, i), j, k], 1) + 0.5) * DX
    px = np.floor(project(c.view, pts) + np.asarray(c.view.pos)).astype(int)
    got = frame[px[:, 1], px[:, 0]].astype(int)
    vals = np.asarray(c.shown.data)[k, j, i]
    want = colormaps.apply(vals[None], c.colormap_name, c.current_range)[0].astype(int)
    return float((np.abs(got - want).max(axis=-1) <= 6).mean())


def test_dragging_a_slice_plane_moves_it_and_the_slider_follows(make_window, qtbot, tmp_path):
    if not _isolated("test_dragging_a_slice_plane_moves_it_and_the_slider_follows"):
        return
    from nagare.app.gui import slice_pick as sp
    from PyQt6 import QtCore

    path = tmp_path / "small3d.toml"
    path.write_text(PRESET)
    w = make_window(path, start_running=False)  # paused: random cells, not yet smoothed out
    c = w.canvas
    qtbot.waitUntil(lambda: c.shown is not None and c.shown.kind == "volume3d", timeout=15000)
    for d in (w.preset_dock, w.params_dock, w.variants_dock, w.view_dock, w.view3d_dock, w.export_dock):
        d.hide()  # room for the field beside the HUD (the sliders work hidden as shown)
    qtbot.waitUntil(lambda: c.view.size[0] > 500, timeout=5000)
    c.reset_camera()
    w.plane_boxes["y"].setChecked(False)
    w.plane_boxes["z"].setChecked(False)
    c.draw_now(finish=True)
    cam = c.view.camera
    view = (cam.azimuth, cam.elevation, tuple(cam.center), cam.scale_factor)
    i0 = sp.slice_index(0.5, NX)
    assert _shows_plane(c, c.grab(), i0) > 0.9

    # drag the x plane by the screen image of three cells along +x
    P = (np.array([i0, NY / 2, NZ / 2]) + 0.5) * DX
    a, b = _pixel(c, P), _pixel(c, P + (3 * DX, 0, 0))
    assert np.linalg.norm(b - a) > 20  # a real drag, far beyond the click radius
    _drag(qtbot, c.native, a, b)
    frac = c.view3d.planes["x"][1]
    assert sp.slice_index(frac, NX) == i0 + 3, frac
    assert w.plane_sliders["x"].value() == round(frac * 1000)  # the slider followed
    assert not c.view3d.planes["y"][0] and not c.view3d.planes["z"][0]  # the others stay off
    assert (cam.azimuth, cam.elevation, tuple(cam.center), cam.scale_factor) == view  # no orbit
    frame = c.grab()
    assert _shows_plane(c, frame, i0 + 3) > 0.9  # drawn where it went
    assert _shows_plane(c, frame, i0) < 0.5
    # the slider still drives the plane: the two stay one
    w.plane_sliders["x"].setValue(0)
    assert c.view3d.planes["x"][1] == 0.0

    # beside every plane, a drag orbits the camera and leaves the plane where it is
    w.plane_sliders["x"].setValue(500)
    x0, y0 = c.view.pos
    corner = np.array([x0 + 6, y0 + 6])
    _drag(qtbot, c.native, corner, corner + (40, 0))
    assert c.view3d.planes["x"][1] == 0.5
    assert cam.azimuth != view[0]
    # Ctrl+drag on the plane orbits too (by VisPy's half a degree per pixel)
    az = cam.azimuth
    on_plane = _pixel(c, P)
    _drag(qtbot, c.native, on_plane, on_plane + (-30, 0), QtCore.Qt.KeyboardModifier.ControlModifier)
    np.testing.assert_allclose(cam.azimuth, az + 15.0, atol=0.51)
    assert c.view3d.planes["x"][1] == 0.5

    # a click on the plane reads the value there; Shift+drag on it draws a line probe in the HUD
    c.draw_now(finish=True)
    P = (np.array([i0, 5, 4]) + 0.5) * DX
    qtbot.mouseClick(c.native, QtCore.Qt.MouseButton.LeftButton, pos=_qp(_pixel(c, P)))
    qtbot.waitUntil(lambda: w.probes.value is not None, timeout=3000)
    assert w.probes.cell == (i0, 5, 4)
    np.testing.assert_allclose(w.probes.value, np.asarray(c.shown.data)[4, 5, i0])
    assert any(m.startswith("probe at (") and f"= {w.probes.value:.6g}" in m for m in w.messages[-3:]), \
        w.messages[-3:]
    Q = (np.array([i0, NY - 3, NZ - 3]) + 0.5) * DX
    _drag(qtbot, c.native, _pixel(c, P), _pixel(c, Q), QtCore.Qt.KeyboardModifier.ShiftModifier)
    a, b = w.probes.line
    assert a[0] == b[0] == P[0]  # along the plane
    assert np.isfinite(w.probes.profile).all()
    frames = w.hud.frames
    for _ in range(3):
        c.draw_now(finish=True)  # the HUD draws the profile plot (paused: no new packet redraws)
    assert w.hud.frames >= frames + 3 and w.hud.error is None, w.hud.error

"""Probes on the 3D view's slice planes (issue 18), on Mesa under Xvfb: real clicks and a real
Shift+drag on a canvas showing a known analytic field; the values read equal the field there.

Each test runs in a fresh process (as the slice-plane tests of test_view3d.py do): after many
canvases in one process, Mesa (llvmpipe) refuses the slice program at draw time."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import CMAP, RANGE, in_isolated_child, isolated

pytestmark = pytest.mark.gui

NZ, NY, NX, H = 6, 8, 10, 0.5


def _isolated(name: str) -> bool:
    """Run test ``name`` of this file in a fresh process and assert it passed; True in that process."""
    return isolated(__file__, name)


def f(x, y, z, a=1.0):
    """The analytic field (world coordinates)."""
    return a * (np.sin(1.3 * x) + 0.5 * y - 0.2 * z ** 2)


def centres(idx) -> np.ndarray:
    """World centres of cells (i, j, k) (x index first), (m, 3)."""
    return (np.atleast_2d(np.asarray(idx, np.float64)) + 0.5) * H


def volume(a=1.0) -> np.ndarray:
    k, j, i = np.meshgrid(np.arange(NZ), np.arange(NY), np.arange(NX), indexing="ij")
    x, y, z = ((i + 0.5) * H, (j + 0.5) * H, (k + 0.5) * H)
    return f(x, y, z, a).astype(np.float32)


def _packet(vol, seq=1):
    from nagare.app.packets import FramePacket

    return FramePacket(seq=seq, step=seq, time=0.0, field_name="T", kind="volume3d", fields=("T",),
                       data=vol, spacing=H, slice_count=NZ, vmin=np.float32(RANGE[0]), vmax=np.float32(RANGE[1]),
                       label="temperature", units="K")


@pytest.fixture
def canvas(request):
    """The canvas and its probes, in the fresh process only (frame_check.in_isolated_child)."""
    if not in_isolated_child():
        yield None
        return
    request.getfixturevalue("_vispy_on_qt")
    qtbot = request.getfixturevalue("qtbot")
    from nagare.app.gui.canvas import FieldCanvas
    from nagare.app.gui.probe import Probes

    c = FieldCanvas(size=(420, 380), show=False, colorbar=False)
    c.show()
    qtbot.waitExposed(c.native)
    c.set_colormap(CMAP)
    c.set_range(RANGE)
    probes = Probes(c)
    yield c, probes
    c.close()


def _pixel(c, pt):
    from nagare.app.gui.view3d import project

    return project(c.view, np.atleast_2d(pt))[0] + np.asarray(c.view.pos)


def _qpoint(px):
    from PyQt6 import QtCore

    return QtCore.QPoint(int(round(px[0])), int(round(px[1])))


def test_a_click_on_a_slice_plane_reads_the_field_at_that_point(canvas, qtbot):
    if not _isolated("test_a_click_on_a_slice_plane_reads_the_field_at_that_point"):
        return
    from nagare.app.gui import slice_pick as sp
    from nagare.app.gui.slice_drag import scene_matrix
    from PyQt6 import QtCore

    c, probes = canvas
    c.set_view3d(outline=False, planes={"x": [True, 0.3], "y": [False, 0.5], "z": [False, 0.5]})
    vol = volume()
    c.show_packet(_packet(vol))
    c.draw_now(finish=True)
    i = sp.slice_index(0.3, NX)  # the x plane shows cell column 3
    assert i == 3
    P = centres([i, 5, 2])[0]
    click = _qpoint(_pixel(c, P))
    qtbot.mouseClick(c.native, QtCore.Qt.MouseButton.LeftButton, pos=click)
    qtbot.waitUntil(lambda: probes.value is not None, timeout=3000)
    point = np.asarray(probes.point)
    assert point[0] == P[0]  # on the plane
    np.testing.assert_allclose(sp.project(scene_matrix(c), point)[0], (click.x(), click.y()), atol=1e-3)
    np.testing.assert_allclose(point, P, atol=0.1 * H)  # within a pixel of the point aimed at
    assert probes.cell == (3, 5, 2)
    np.testing.assert_allclose(probes.value, f(*P), rtol=1e-6)  # the cell's value: f at its centre
    text = probes.readout()
    assert text.startswith("probe at (1.75, ") and text.endswith(f"temperature = {probes.value:.6g} K"), text
    # live: the next frame's values at the same point
    c.show_packet(_packet(volume(a=-2.0), seq=2))
    c.draw_now(finish=True)
    np.testing.assert_allclose(probes.value, f(*P, a=-2.0), rtol=1e-6)
    # beside every plane: a click reads nothing new
    qtbot.mouseClick(c.native, QtCore.Qt.MouseButton.LeftButton, pos=QtCore.QPoint(3, 3))
    assert probes.cell == (3, 5, 2)
    # all three planes on: whichever plane is nearest under the pixel, the value is the field's there
    c.set_view3d(planes={a: [True, 0.5] for a in "xyz"})
    c.draw_now(finish=True)
    for q in ([2.25, 1.1, 0.4], [0.3, 2.25, 2.6], [4.6, 0.2, 1.25]):  # each on a plane
        click = _qpoint(_pixel(c, q))
        qtbot.mouseClick(c.native, QtCore.Qt.MouseButton.LeftButton, pos=click)
        point = np.asarray(probes.point)
        on = [a for a, n in enumerate((NX, NY, NZ)) if point[a] == sp.plane_coord(0.5, n, H)]
        assert len(on) == 1, point
        np.testing.assert_allclose(sp.project(scene_matrix(c), point)[0], (click.x(), click.y()), atol=1e-3)
        cell = np.floor(point / H).astype(int)
        assert probes.cell == tuple(cell)
        np.testing.assert_allclose(probes.value, f(*centres(cell)[0], a=-2.0), rtol=1e-6)


def test_a_line_probe_on_a_slice_plane_profiles_the_field_along_it(canvas, qtbot):
    if not _isolated("test_a_line_probe_on_a_slice_plane_profiles_the_field_along_it"):
        return
    from nagare.app.gui.probe import SAMPLES
    from PyQt6 import QtCore

    c, probes = canvas
    c.set_view3d(outline=False, planes={"x": [False, 0.5], "y": [False, 0.5], "z": [True, 0.5]})
    c.show_packet(_packet(volume()))
    c.draw_now(finish=True)
    zc = (2 + 0.5) * H  # slice_index(0.5, 6) = 2
    A, B = np.array([0.6, 0.7, zc]), np.array([4.3, 3.4, zc])
    pa, pb = _qpoint(_pixel(c, A)), _qpoint(_pixel(c, B))
    centre = tuple(c.view.camera.center)
    shift = QtCore.Qt.KeyboardModifier.ShiftModifier
    qtbot.mousePress(c.native, QtCore.Qt.MouseButton.LeftButton, shift, pa)
    qtbot.mouseMove(c.native, (pa + pb) / 2)
    qtbot.mouseMove(c.native, pb)
    qtbot.mouseRelease(c.native, QtCore.Qt.MouseButton.LeftButton, shift, pb)
    qtbot.waitUntil(lambda: probes.profile is not None, timeout=3000)
    assert tuple(c.view.camera.center) == centre  # the camera did not pan
    a, b = probes.line
    assert a[2] == zc and b[2] == zc  # the line lies on the plane it started on
    np.testing.assert_allclose(a, A, atol=0.1 * H)
    np.testing.assert_allclose(b, B, atol=0.1 * H)
    t = np.linspace(0.0, 1.0, SAMPLES)
    pts = a[None] + t[:, None] * (b - a)[None]
    cells = np.floor(pts / H)
    want = f(*((cells + 0.5) * H).T)
    assert len(np.unique(cells[:, :2], axis=0)) > 8  # the line crosses many cells
    np.testing.assert_allclose(probes.profile, want, rtol=1e-6)
    np.testing.assert_allclose(probes.distance[-1], np.linalg.norm(b - a))
    c.show_packet(_packet(volume(a=3.0), seq=2))  # live
    c.draw_now(finish=True)
    np.testing.assert_allclose(probes.profile, 3.0 * want, rtol=1e-6)

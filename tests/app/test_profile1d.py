"""1-D profiles (the compact presets' fields): every handler role exists, the headless PNG draws the
computed line over the exact one, the npz/VTK/VTKHDF exports carry the values."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app import fieldkinds
from nagare.engine.backend import get_backend
from nagare.engine.fields import Profile1D


def profile():
    x = np.linspace(0.0, 1.0, 200)
    return Profile1D(x, np.sin(2 * np.pi * x), np.sin(2 * np.pi * x) * 0.5, label="phi")


def test_every_role_has_a_handler():
    import nagare.app.vtkhdf  # noqa: F401  (registers the VTKHDF writers)

    for role in ("snapshot", "png", "host_copy", "arrays", "vtk", "vtkhdf"):
        fieldkinds.lookup(role, Profile1D)


def test_png_draws_both_lines_where_they_are():
    from nagare.app.fieldkinds.profiles import DATA_RGB, EXACT_ON_BG

    img = fieldkinds.lookup("png", Profile1D)(profile(), get_backend("numpy"), None, None)
    h, w, _ = img.shape
    amber = np.all(img == DATA_RGB, axis=-1)
    blue = np.all(img == EXACT_ON_BG, axis=-1)
    assert amber.sum() > w and blue.sum() > w // 2
    # the sine peaks at x = 1/4: the amber line's highest pixel is in the left half, near the top
    rows, cols = np.nonzero(amber)
    top = cols[rows == rows.min()]
    np.testing.assert_allclose(top.mean() / (w - 1), 0.25, atol=0.03)
    assert rows.min() < 0.1 * h


def test_arrays_and_vtk(tmp_path):
    out = {}
    fieldkinds.lookup("arrays", Profile1D)(out, "phi", profile(), np.asarray)
    np.testing.assert_array_equal(out["phi"], profile().data)
    np.testing.assert_array_equal(out["phi/exact"], profile().exact)
    head, body = fieldkinds.lookup("vtk", Profile1D)("phi", profile())
    assert head[0] == b"DATASET POLYDATA" and b"POINTS 200 float" in head


def test_vtkhdf_round_trip(tmp_path):
    vtk = pytest.importorskip("vtk")
    from nagare.app.vtkhdf import write_vtkhdf
    from vtk.util.numpy_support import vtk_to_numpy

    (path,) = write_vtkhdf({"phi": profile()}, tmp_path / "p.vtkhdf")
    r = vtk.vtkHDFReader()
    r.SetFileName(str(path))
    r.Update()
    out = r.GetOutput()
    assert out.GetNumberOfPoints() == 200 and out.GetNumberOfCells() == 1
    np.testing.assert_allclose(vtk_to_numpy(out.GetPointData().GetArray("phi")), profile().data, rtol=1e-6, atol=1e-7)


# ---- the window: the computed curve is never hidden by the exact one ---------------------------------
def _square_with_ringing():
    """A square pulse (the compact-square1d case) and a computed profile equal to it except for
    ringing at its left jump: where the two agree the exact band lies right under the computed line."""
    x = np.linspace(0.0, 1.0, 256)
    exact = np.where((x > 0.55) & (x < 0.65), 1.0, 0.0)
    data = exact + 0.08 * np.sin(200 * x) * np.exp(-((x - 0.55) / 0.03) ** 2)
    return x, data, exact


@pytest.mark.gui
def test_the_window_draws_the_computed_line_all_along_over_the_exact_band(make_canvas):
    """Every point along the computed polyline (its jumps and its flat parts, where it lies on the
    exact one) has a pixel of the computed line's colour within a pixel of it: the exact band, wider,
    is under it; and the band itself shows beside the computed line."""
    from tests.app.frame_check import isolated

    if not isolated(__file__, "test_the_window_draws_the_computed_line_all_along_over_the_exact_band"):
        return
    import nagare.app.gui.profile1d  # noqa: F401  (registers the drawer)
    from nagare.app.gui.profile1d import DATA_COLOUR, EXACT_COLOUR
    from nagare.app.packets import FramePacket

    c = make_canvas(900, 600)
    x, data, exact = _square_with_ringing()
    c.show_packet(FramePacket(seq=1, step=1, time=0.0, field_name="phi", kind="profile1d", fields=("phi",),
                              positions=x, data=data, payload=exact, label="φ", length_units="–"))
    c.draw_now(finish=True)
    frame = c.grab()[..., :3].astype(int)
    assert frame.shape[:2] == (c.size[1], c.size[0])
    tr = c.view.scene.node_transform(c.view)
    vx, vy = c.view.pos
    t = np.linspace(0.0, 1.0, 40)[None, :]
    pts = np.stack([(x[:-1, None] + (x[1:] - x[:-1])[:, None] * t).ravel(),
                    (data[:-1, None] + (data[1:] - data[:-1])[:, None] * t).ravel()], axis=1)
    px = tr.map(pts)[:, :2] + (vx, vy)  # canvas px, y down
    amber = np.abs(frame - (np.asarray(DATA_COLOUR[:3]) * 255).round()).max(axis=-1) <= 40
    near = np.zeros(len(px), bool)
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            r = np.clip(np.floor(px[:, 1]).astype(int) + dr, 0, frame.shape[0] - 1)
            col = np.clip(np.floor(px[:, 0]).astype(int) + dc, 0, frame.shape[1] - 1)
            near |= amber[r, col]
    assert near.mean() > 0.999, f"{(~near).sum()} of {len(near)} points along the computed line not drawn"
    band = np.abs(frame - (np.asarray(EXACT_COLOUR[:3]) * 255).round()).max(axis=-1) <= 12
    assert band.sum() > 2 * 600  # two px either side of the computed line's run along the flat parts

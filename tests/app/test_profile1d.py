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
    img = fieldkinds.lookup("png", Profile1D)(profile(), get_backend("numpy"), None, None)
    h, w, _ = img.shape
    amber = np.all(img == (240, 200, 80), axis=-1)
    blue = np.all(img == (120, 170, 255), axis=-1)
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

"""ParaView export (issue 18): VTKHDF files written with h5py, read back with VTK's own reader
(vtkHDFReader), values compared for every kind: grids (ImageData, cell data, vectors, solid mask),
particles (PolyData vertices + point data) and octree leaves (PolyData lines + level)."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.fields import Boxes, Grid2D, Grid3D, Particles

pytest.importorskip("h5py")


def _read(path):
    # only the reader's modules, imported when the test runs: the full ``vtk`` package loads VTK's
    # OpenGL rendering libraries, which break PyOpenGL's context lookup for later GUI tests
    pytest.importorskip("vtkmodules.vtkIOHDF")
    from vtkmodules.util.numpy_support import vtk_to_numpy
    from vtkmodules.vtkIOHDF import vtkHDFReader

    r = vtkHDFReader()
    assert r.CanReadFile(str(path)), path
    r.SetFileName(str(path))
    r.Update()
    return r.GetOutput(), vtk_to_numpy


def test_node_centred_grids_are_written_as_cells_centred_on_their_points(tmp_path):
    """amr3d's samples are values at the points i·h: the ImageData's origin is −h/2, so sample i's
    cell is centred on i·h (aligned with the leaves and the octree files)."""
    from nagare.app.vtkhdf import write_vtkhdf

    data = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    write_vtkhdf({"speed": Grid3D(data, spacing=0.5, centering="node", extent=(2.0, 1.0, 0.5))}, tmp_path / "n.vtkhdf")
    img, to_np = _read(tmp_path / "n.vtkhdf")
    np.testing.assert_allclose(img.GetOrigin(), (-0.25, -0.25, -0.25))
    cell = img.ComputeCellId([4, 2, 1])
    lo = img.GetCell(cell).GetBounds()[::2]
    hi = img.GetCell(cell).GetBounds()[1::2]
    np.testing.assert_allclose(0.5 * (np.array(lo) + np.array(hi)), (2.0, 1.0, 0.5))  # = (i, j, k)·h
    assert to_np(img.GetCellData().GetArray("speed"))[cell] == data[1, 2, 4]


def test_a_2d_grid_keeps_its_domain_and_its_precision(tmp_path):
    """A grid on [-1, 1]² whose samples are the nodes -1 + i·h (compact's Grid2D: origin -1 - h/2) is
    where the view draws it, and double-precision fields stay double (float32 for the rest)."""
    from nagare.app.vtkhdf import write_vtkhdf

    n = 9
    h = 2.0 / (n - 1)
    phi = np.random.default_rng(2).standard_normal((n, n))
    grids = {"phi": Grid2D(phi, spacing=h, origin=(-1 - h / 2, -1 - h / 2)),
             "single": Grid2D(phi.astype(np.float32), spacing=h, origin=(-1 - h / 2, -1 - h / 2))}
    write_vtkhdf(grids, tmp_path / "g.vtkhdf")
    img, to_np = _read(tmp_path / "g.vtkhdf")
    np.testing.assert_allclose(img.GetOrigin()[:2], (-1 - h / 2, -1 - h / 2))
    centre = 0.5 * (np.array(img.GetCell(0).GetBounds()[0:4:2]) + np.array(img.GetCell(0).GetBounds()[1:4:2]))
    np.testing.assert_allclose(centre, (-1.0, -1.0), atol=1e-12)  # cell (0, 0) is centred on the node (-1, -1)
    got = to_np(img.GetCellData().GetArray("phi"))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, phi.ravel())
    assert to_np(img.GetCellData().GetArray("single")).dtype == np.float32


def test_particles_without_a_position_are_left_out(tmp_path):
    """Parked tracers (NaN positions) are not written: NaN points break ParaView's bounds."""
    from nagare.app.vtkhdf import write_vtkhdf

    pos = np.array([[0.0, 1.0, 2.0], [np.nan, np.nan, np.nan], [3.0, 4.0, 5.0]], np.float32)
    age = np.array([1.0, 0.0, 7.0], np.float32)
    write_vtkhdf({"tracers": Particles(pos, {"age": age})}, tmp_path / "t.vtkhdf")
    out, to_np = _read(tmp_path / "t.vtkhdf")
    np.testing.assert_array_equal(to_np(out.GetPoints().GetData()), pos[[0, 2]])
    np.testing.assert_array_equal(to_np(out.GetPointData().GetArray("age")), age[[0, 2]])


def test_the_line_on_what_a_file_holds_counts_the_particles_written(tmp_path):
    """An amr3d dump said "tracers: 6000 points" for a file of 282: the parked tracers (NaN), left
    out of the file, were counted."""
    from nagare.app.vtkhdf import write_vtkhdf_described

    pos = np.array([[0.0, 1.0, 2.0], [np.nan, np.nan, np.nan], [3.0, 4.0, 5.0]], np.float32)
    [(path, said)] = write_vtkhdf_described({"tracers": Particles(pos, {"age": np.zeros(3, np.float32)})},
                                            tmp_path / "t.vtkhdf")
    assert said == "PolyData vertices, tracers: 2 points with age"
    out, _ = _read(path)
    assert out.GetNumberOfPoints() == 2


def test_grids_particles_and_boxes_read_back_with_vtk(tmp_path):
    from nagare.app.vtkhdf import write_vtkhdf

    rng = np.random.default_rng(1)
    nz, ny, nx = 4, 5, 6
    scalar = rng.standard_normal((nz, ny, nx)).astype(np.float32)
    vector = rng.standard_normal((3, nz, ny, nx)).astype(np.float32)
    mask = rng.random((nz, ny, nx)) > 0.7
    pos = rng.random((50, 3)).astype(np.float32)
    speed = rng.random(50).astype(np.float32)
    lo = rng.random((7, 3)).astype(np.float32)
    hi = lo + 0.25
    level = np.array([0, 1, 1, 2, 2, 2, 1])
    fields = {"rho": Grid3D(scalar, spacing=0.5, mask=mask), "u": Grid3D(vector, kind="vector", spacing=0.5),
              "flat": Grid2D(scalar[0], spacing=2.0),
              "particles": Particles(pos, {"speed": speed, "kind": np.zeros(50, np.int8)}),
              "leaves": Boxes(lo, hi, level)}
    out = write_vtkhdf(fields, tmp_path / "dump.vtkhdf")
    names = sorted(p.name for p in out)
    assert names == ["dump.vtkhdf", "dump_flat.vtkhdf", "dump_leaves.vtkhdf", "dump_particles.vtkhdf"]

    img, to_np = _read(tmp_path / "dump.vtkhdf")
    assert img.GetDimensions() == (nx + 1, ny + 1, nz + 1)  # points; the values are per cell
    np.testing.assert_allclose(img.GetSpacing(), (0.5, 0.5, 0.5))
    cd = img.GetCellData()
    np.testing.assert_array_equal(to_np(cd.GetArray("rho")), scalar.ravel())  # x fastest, as VTK orders cells
    np.testing.assert_array_equal(to_np(cd.GetArray("u")), np.stack([vector[i].ravel() for i in range(3)], 1))
    np.testing.assert_array_equal(to_np(cd.GetArray("solid")), mask.ravel().astype(np.uint8))
    # the cell at (i, j, k) = (5, 1, 2) holds rho[2, 1, 5] and lies at [5, 6)·h × [1, 2)·h × [2, 3)·h
    cell = img.ComputeCellId([5, 1, 2])
    assert to_np(cd.GetArray("rho"))[cell] == scalar[2, 1, 5]
    np.testing.assert_allclose(img.GetCell(cell).GetBounds(), (2.5, 3.0, 0.5, 1.0, 1.0, 1.5))

    flat, _ = _read(tmp_path / "dump_flat.vtkhdf")
    assert flat.GetDimensions() == (nx + 1, ny + 1, 1)
    np.testing.assert_array_equal(to_np(flat.GetCellData().GetArray("flat")), scalar[0].ravel())

    pd, _ = _read(tmp_path / "dump_particles.vtkhdf")
    assert pd.GetNumberOfPoints() == 50 and pd.GetNumberOfVerts() == 50
    np.testing.assert_array_equal(to_np(pd.GetPoints().GetData()), pos)
    np.testing.assert_array_equal(to_np(pd.GetPointData().GetArray("speed")), speed)

    bx, _ = _read(tmp_path / "dump_leaves.vtkhdf")
    assert bx.GetNumberOfLines() == 7 * 12
    np.testing.assert_array_equal(to_np(bx.GetCellData().GetArray("level")), np.repeat(level, 12))
    pts = to_np(bx.GetPoints().GetData()).reshape(7, 24, 3)
    np.testing.assert_allclose(pts.min(axis=1), lo)
    np.testing.assert_allclose(pts.max(axis=1), hi)


def test_every_kind_carries_time_and_step_and_names_arrays_as_the_npz(tmp_path):
    """An .npz dump has ``time`` and ``step``; so does every VTKHDF file of the same dump (FieldData,
    read back by VTK's reader), and a 1-D profile's arrays are named as the field, as in the .npz."""
    from nagare.app.vtkhdf import write_vtkhdf
    from nagare.engine.fields import Profile1D

    rng = np.random.default_rng(3)
    x = np.linspace(0, 1, 9)
    fields = {"rho": Grid2D(rng.standard_normal((4, 5)), spacing=1.0),
              "particles": Particles(rng.random((6, 3)).astype(np.float32), {"speed": rng.random(6)}),
              "leaves": Boxes(rng.random((2, 3)), rng.random((2, 3)) + 1, np.array([0, 1])),
              "phi": Profile1D(x, np.sin(x), exact=np.cos(x), label="φ")}
    out = write_vtkhdf(fields, tmp_path / "d.vtkhdf", time=0.375, step=150)
    assert len(out) == 4
    for path in out:
        data, to_np = _read(path)
        fd = data.GetFieldData()
        assert to_np(fd.GetArray("time")).tolist() == [0.375], path.name
        assert to_np(fd.GetArray("step")).tolist() == [150], path.name
    prof, to_np = _read(tmp_path / "d_phi.vtkhdf")
    pd = prof.GetPointData()
    np.testing.assert_allclose(to_np(pd.GetArray("phi")), np.sin(x).astype(np.float32))
    np.testing.assert_allclose(to_np(pd.GetArray("phi_exact")), np.cos(x).astype(np.float32))
    write_vtkhdf({"rho": fields["rho"]}, tmp_path / "n.vtkhdf")  # no time given: no FieldData arrays
    assert _read(tmp_path / "n.vtkhdf")[0].GetFieldData().GetNumberOfArrays() == 0


def test_grid_arrays_carry_their_label_and_units(tmp_path):
    """Each grid's array says what it is as the app's colour bar does (HDF5 attributes ``label`` and
    ``units``, as an .npz dump's ``field_labels``), and VTK still reads the file."""
    import h5py
    from nagare.app.vtkhdf import write_vtkhdf

    data = np.ones((4, 6), np.float32)
    grids = {"u": Grid2D(data, spacing=1.0, label="(u - u∞)/c∞", units="1"), "plain": Grid2D(data, spacing=1.0)}
    write_vtkhdf(grids, tmp_path / "l.vtkhdf")
    with h5py.File(tmp_path / "l.vtkhdf", "r") as f:
        cd = f["VTKHDF/CellData"]
        assert cd["u"].attrs["label"] == "(u - u∞)/c∞"
        assert cd["u"].attrs["units"] == "1"
        assert "label" not in cd["plain"].attrs
    img, to_np = _read(tmp_path / "l.vtkhdf")
    np.testing.assert_array_equal(to_np(img.GetCellData().GetArray("u")), data.ravel())

"""ParaView export of the octree (issue 18): amr3d's leaves as a VTKHDF OverlappingAMR, read back
with VTK's own reader. Every leaf is one box on its level with the leaf's bounds, and every point of
every box holds the engine's value at that node (density, speed, velocity), compared with the
engine's own fields (its Grid3D samples, which are exact at the nodes of the leaves) and with the
leaves' stored moments."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.amr3d.config import AMR3DPreset
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.backend import get_backend

pytest.importorskip("h5py")

# (root leaves, refine box, level): two levels (levels 0 and 1), and three levels whose 2:1
# balance refines every root (level 0 holds no leaf and is written with no boxes)
TREES = {"two-levels": ([4, 2, 2], [0.0, 0.0, 0.0], [0.25, 0.5, 0.5], 1),
         "three-levels-empty-level0": ([2, 2, 2], [0.0, 0.0, 0.0], [0.2, 0.2, 0.2], 2)}


def tree_engine(case: str) -> AMR3D:
    leaves, lo, hi, level = TREES[case]
    raw = {"engine": "amr3d", "description": "test", "grid": {"leaves": leaves, "m": 9},
           "refine": [{"lo": lo, "hi": hi, "level": level}],
           "physics": {"tau": 0.6}, "initial": {"kind": "taylor-green", "u0": 0.03}}
    return AMR3D(AMR3DPreset.model_validate(raw), get_backend("numpy"))


def read(path, step: int | None = None):
    """VTK's reader (only its modules: the full ``vtk`` package loads OpenGL, see test_vtkhdf)."""
    pytest.importorskip("vtkmodules.vtkIOHDF")
    from vtkmodules.vtkIOHDF import vtkHDFReader

    r = vtkHDFReader()
    assert r.CanReadFile(str(path)), path
    r.SetFileName(str(path))
    if step is not None:
        r.SetStep(step)
    r.Update()
    return r


def amr_blocks(amr) -> list[list]:
    """The uniform grids of every level, in order (VTK ≥ 9.6 names, older ones as a fallback)."""
    out = []
    for lv in range(amr.GetNumberOfLevels()):
        try:
            n = amr.GetNumberOfBlocks(lv)
            get = amr.GetDataSetAsImageData
        except TypeError:  # VTK < 9.6: GetNumberOfBlocks() counts every level
            n = amr.GetNumberOfDataSets(lv)
            get = amr.GetDataSet
        out.append([get(lv, i) for i in range(n)])
    return out


def block_points(ds) -> tuple[np.ndarray, dict]:
    """(points (n, 3) x fastest, name → point array) of one uniform grid."""
    from vtkmodules.util.numpy_support import vtk_to_numpy

    nx, ny, nz = ds.GetDimensions()
    o, h = np.array(ds.GetOrigin()), np.array(ds.GetSpacing())
    k, j, i = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    pts = o + np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1) * h
    pd = ds.GetPointData()
    return pts, {pd.GetArrayName(a): vtk_to_numpy(pd.GetArray(a)) for a in range(pd.GetNumberOfArrays())}


def check_against_engine(amr, e: AMR3D, blocks: dict | None = None) -> None:
    """Levels, boxes, bounds, spacing and every point value of ``amr`` against engine ``e`` now."""
    g = e.fields()
    leaves = g["leaves"]  # the engine's Boxes: bounds and level of every leaf, in leaf order
    level = np.asarray(leaves.level)
    stored = e.leaf_blocks() if blocks is None else blocks
    levels = amr_blocks(amr)
    assert len(levels) == level.max() + 1
    assert [len(b) for b in levels] == [int(np.sum(level == lv)) for lv in range(len(levels))]
    h0 = stored["spacing"][0] * 2.0 ** stored["level"][0]
    n = 0
    samples = g["rho"].spacing
    shape = np.array(g["rho"].data.shape[::-1])  # x, y, z samples (periodic: the far face wraps)
    u_max = float(np.max(g["speed"].data))
    for lv, blocks_of_level in enumerate(levels):
        for ds in blocks_of_level:
            # this block is leaf n (levels in order, leaves of a level in leaf order)
            assert level[n] == lv
            bounds = np.array(ds.GetBounds()).reshape(3, 2)
            np.testing.assert_allclose(bounds[:, 0], leaves.lo[n])
            np.testing.assert_allclose(bounds[:, 1], leaves.hi[n])
            np.testing.assert_allclose(ds.GetSpacing(), [h0 / 2**lv] * 3)
            assert ds.GetDimensions() == (e.m,) * 3  # m³ points: the leaf's nodes, (m − 1)³ cells
            pts, arrays = block_points(ds)
            # the leaf's stored moments, node for node ([z, y, x]: x fastest, as VTK's points)
            np.testing.assert_allclose(arrays["density"], stored["rho"][n].ravel(), rtol=1e-6)
            u = np.stack([stored["u"][c][n].ravel() for c in range(3)], axis=1)
            np.testing.assert_allclose(arrays["velocity"], u, rtol=1e-5, atol=1e-9)
            np.testing.assert_allclose(arrays["speed"], np.linalg.norm(u, axis=1), rtol=1e-5, atol=1e-9)
            if blocks is None:  # the engine's own fields at the same points (exact at the nodes)
                idx = np.rint(pts / samples).astype(np.int64)
                np.testing.assert_allclose(idx * samples, pts, atol=1e-9)  # every node is a sample
                x, y, z = (idx % shape).T
                # a sample takes the finest leaf that holds it: on a face shared across levels that
                # is the fine leaf's copy of the node, which the coarse copy follows to ~1e-5 of the
                # flow's scale (the coupling; the leaves' own values are checked exactly above)
                for name, want, scale in (("density", g["rho"].data, 1.0), ("speed", g["speed"].data, u_max),
                                          *((("velocity", c), g[f].data, u_max)
                                            for c, f in enumerate(("ux", "uy", "uz")))):
                    got = arrays[name[0]][:, name[1]] if isinstance(name, tuple) else arrays[name]
                    np.testing.assert_allclose(got, np.asarray(want)[z, y, x], rtol=1e-6, atol=2e-5 * scale,
                                               err_msg=f"{name} of leaf {n} (level {lv})")
            n += 1
    assert n == len(level)


@pytest.mark.parametrize("case", sorted(TREES))
def test_octree_leaves_read_back_as_overlapping_amr(tmp_path, case):
    from nagare.app.headless import dump_vtkhdf

    e = tree_engine(case)
    e.step(2)
    paths = dump_vtkhdf(e, tmp_path / "fields.vtkhdf")  # what `nagare run … --dump FILE.vtkhdf` writes
    assert tmp_path / "fields_octree.vtkhdf" in paths
    amr = read(tmp_path / "fields_octree.vtkhdf").GetOutput()
    assert amr.GetClassName() == "vtkOverlappingAMR"
    check_against_engine(amr, e)


def test_octree_writer_is_the_registered_vtkhdf_handler_and_box_indices_are_cells():
    import h5py
    from nagare.app.fieldkinds import lookup
    from nagare.app.vtkhdf_amr import OctreeLeaves, write_overlapping_amr

    assert lookup("vtkhdf", OctreeLeaves) is write_overlapping_amr
    # one level-1 leaf of m = 3 at (1, 0, 0.5) with h_1 = 0.5: cells 2…3, 0…1, 1…2 on level 1
    t = OctreeLeaves(np.array([1]), np.array([[1.0, 0.0, 0.5]]), np.array([0.5]), 3,
                     {"density": np.arange(27.0).reshape(1, 3, 3, 3)})
    np.testing.assert_array_equal(t.boxes(1), [[2, 3, 0, 1, 1, 2]])
    assert t.boxes(0).shape == (0, 6)
    import io

    buf = io.BytesIO()
    write_overlapping_amr(t, buf)
    with h5py.File(buf, "r") as f:
        assert list(f["VTKHDF"]) == ["Level0", "Level1"]
        np.testing.assert_allclose(f["VTKHDF/Level0"].attrs["Spacing"], [1.0] * 3)
        np.testing.assert_allclose(f["VTKHDF/Level1"].attrs["Spacing"], [0.5] * 3)
        np.testing.assert_array_equal(f["VTKHDF/Level1/PointData/density"][:], np.arange(27.0))


def test_the_apps_vtkhdf_export_writes_the_octree_too(make_window, qtbot, tmp_path):
    """Export → VTKHDF in the window writes what `nagare run --dump FILE.vtkhdf` writes: the sampled
    grids and, for a tree, the leaves as OverlappingAMR beside them."""
    w = make_window("amr3d-periodic")
    qtbot.waitUntil(lambda: w.worker.engine is not None and w.worker.engine.step_count >= 2, timeout=60000)
    w.export_vtkhdf(tmp_path / "x.vtkhdf")
    qtbot.waitUntil(lambda: (tmp_path / "x_octree.vtkhdf").is_file() and (tmp_path / "x.vtkhdf").is_file(),
                    timeout=30000)

"""Time series for ParaView (issue 18): ``nagare run … --series FILE.vtkhdf --dump-every K`` writes
one temporal VTKHDF file (the ``Steps`` group) appended a step at a time. Read back with VTK's
reader at every time step, the values are the engine's fields at those steps: grids as ImageData
(diffusion3d from the command line; lbm2d with its solid mask), the octree as OverlappingAMR. A
crash while a step is written loses that step only; a full disk is said once, before anything is
written, and the run goes on."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("h5py")

from tests.app.test_vtkhdf_amr import check_against_engine, read, tree_engine  # noqa: E402

DIFFUSION = ["--set", "grid.nx=12", "--set", "grid.ny=10", "--set", "grid.nz=8"]
LBM = ["--set", "grid.nx=48", "--set", "grid.ny=24", "--set", "obstacle.diameter=6"]


def time_steps(reader) -> list[float]:
    from vtkmodules.vtkCommonExecutionModel import vtkStreamingDemandDrivenPipeline as sddp

    info = reader.GetOutputInformation(0)
    return list(info.Get(sddp.TIME_STEPS())) if info.Has(sddp.TIME_STEPS()) else []


def cell_array(reader, name: str) -> np.ndarray:
    from vtkmodules.util.numpy_support import vtk_to_numpy

    return vtk_to_numpy(reader.GetOutput().GetCellData().GetArray(name))


def engine_for(preset: str, overrides: list[str]):
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    backend = get_backend("numpy")
    sets = [overrides[i + 1] for i in range(0, len(overrides), 2)]
    return create_engine(load_preset(preset, sets, backend="numpy"), backend)


def test_diffusion3d_series_from_the_cli_plays_every_kth_step(tmp_path):
    from nagare.app.cli import main

    path = tmp_path / "out" / "diffusion.vtkhdf"
    rc = main(["run", "diffusion3d", "--backend", "numpy", "--steps", "6", "--dump-every", "3",
               "--series", str(path), "--quiet", *DIFFUSION])
    assert rc == 0
    # the same run by hand: the states at steps 0, 3 and 6
    e = engine_for("diffusion3d", DIFFUSION)
    want, times = [], []
    for n in (0, 3, 3):
        e.step(n)
        want.append(np.array(e.fields()["f"].data))
        times.append(e.time)
    assert not np.allclose(want[0], want[2], rtol=1e-3)  # the steps differ: reading one for another fails
    r = read(path)
    assert r.GetNumberOfSteps() == 3
    np.testing.assert_allclose(time_steps(r), times)
    for step in range(3):
        r = read(path, step)
        img = r.GetOutput()
        nz, ny, nx = want[step].shape
        assert img.GetDimensions() == (nx + 1, ny + 1, nz + 1)
        np.testing.assert_allclose(r.GetTimeValue(), times[step])
        np.testing.assert_allclose(cell_array(r, "f"), want[step].ravel(), rtol=1e-6,
                                   err_msg=f"step {step}")


def test_lbm2d_series_keeps_the_mask_and_leaves_particles_out(tmp_path):
    from nagare.app.vtkhdf_series import FieldSeries

    e = engine_for("lbm2d-cylinder", LBM)
    s = FieldSeries(tmp_path / "cyl.vtkhdf", capacity=4)
    want = []
    for _ in range(3):
        s.append(e)
        f = e.fields()
        want.append({k: np.array(f[k].data) for k in ("speed", "ux", "rho")} | {"solid": np.array(f["rho"].mask)})
        e.step(5)
    assert s.paths == [tmp_path / "cyl.vtkhdf"]  # grids of one shape: one file (the tracers are no grid)
    r = read(tmp_path / "cyl.vtkhdf")
    assert r.GetNumberOfSteps() == 3  # NSteps, not the 4 steps of reserved space
    for step in range(3):
        r = read(tmp_path / "cyl.vtkhdf", step)
        for name, a in want[step].items():
            np.testing.assert_allclose(cell_array(r, name), a.ravel().astype(np.float32), rtol=1e-6,
                                       err_msg=f"{name} at step {step}")
    assert want[0]["solid"].any()


def test_octree_series_plays_as_overlapping_amr(tmp_path):
    from nagare.app.vtkhdf_series import FieldSeries

    e = tree_engine("two-levels")
    s = FieldSeries(tmp_path / "tree.vtkhdf", capacity=5)  # more than it writes
    blocks = []
    for _ in range(3):
        s.append(e)
        blocks.append(e.leaf_blocks())
        e.step(1)
    assert sorted(p.name for p in s.paths) == ["tree.vtkhdf", "tree_octree.vtkhdf"]
    assert not np.allclose(blocks[0]["u"], blocks[2]["u"], rtol=1e-4)
    r = read(tmp_path / "tree_octree.vtkhdf")
    assert r.GetNumberOfSteps() == 3
    np.testing.assert_allclose(time_steps(r), [0.0, 1.0, 2.0])
    for step in range(3):
        r = read(tmp_path / "tree_octree.vtkhdf", step)
        check_against_engine(r.GetOutput(), e, blocks=blocks[step])


CRASH = textwrap.dedent("""
    import os, sys
    import h5py, numpy as np
    from nagare.engine.fields import Grid3D
    from nagare.app import vtkhdf_series as vs

    where = sys.argv[2]
    if where == "values-written":  # dies after writing the step's values, before anything else
        write = vs.ImageSeries._write_values
        def dying(self, root, n, item):
            write(self, root, n, item)
            if n == 2:
                os._exit(9)
        vs.ImageSeries._write_values = dying
    elif where == "before-nsteps":  # values and offsets flushed, NSteps not yet raised
        modify = h5py.AttributeManager.modify
        def dying(self, name, value):
            if name == "NSteps" and int(value) == 3:
                os._exit(9)
            modify(self, name, value)
        h5py.AttributeManager.modify = dying
    else:  # NSteps raised and flushed, the step's time not yet written: the step is kept
        resize = h5py.Dataset.resize
        def dying(self, size, axis=None):
            if self.name.endswith("/Values") and tuple(size) == (3,):
                os._exit(9)
            resize(self, size, axis)
        h5py.Dataset.resize = dying
    s = vs.ImageSeries(sys.argv[1], capacity=5)
    for n in range(4):
        s.append({"a": Grid3D(np.full((3, 4, 5), n, np.float32))}, 0.5 * n)
""")


@pytest.mark.parametrize("where", ["values-written", "before-nsteps", "before-time"])
def test_a_crash_while_a_step_is_written_loses_that_step_only(tmp_path, where):
    path = tmp_path / "crash.vtkhdf"
    proc = subprocess.run([sys.executable, "-c", CRASH, str(path), where], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 9, proc.stderr
    kept = 3 if where == "before-time" else 2  # the step had been committed: all its values are there
    r = read(path)
    assert r.GetNumberOfSteps() == kept
    np.testing.assert_allclose(time_steps(r)[:2], [0.0, 0.5])
    for step in range(kept):
        np.testing.assert_allclose(cell_array(read(path, step), "a"), np.full(60, step, np.float32))


def test_a_full_disk_is_said_once_before_anything_is_written(tmp_path, monkeypatch, capsys):
    from nagare.app import vtkhdf_series
    from nagare.app.cli import main
    from nagare.app.headless import EXIT_NOT_WRITTEN

    monkeypatch.setattr(vtkhdf_series, "free_bytes", lambda folder: (200_000, "the disk is full"))
    path = tmp_path / "series.vtkhdf"
    rc = main(["run", "lbm2d-cylinder", "--backend", "numpy", "--steps", "6", "--dump-every", "2",
               "--series", str(path), "--dump", str(tmp_path / "end.npz"), "--quiet", *LBM])
    err = capsys.readouterr().err
    assert rc == EXIT_NOT_WRITTEN
    said = [line for line in err.splitlines() if "series not written" in line]
    assert len(said) == 1, err
    assert "the disk is full" in said[0] and "MB are free" in said[0] and "no step was written" in said[0]
    assert "NOT WRITTEN: series at step 0" in err
    assert not path.exists() and list(tmp_path.glob(".*.tmp")) == []
    assert (tmp_path / "end.npz").exists()  # the run went on and wrote the rest


def test_a_write_failing_mid_run_stops_the_series_and_says_what_the_file_keeps(tmp_path):
    from nagare.app.atomic import ExportError
    from nagare.app.vtkhdf_series import FieldSeries

    e = engine_for("diffusion3d", DIFFUSION)
    s = FieldSeries(tmp_path / "gone" / "d.vtkhdf", capacity=4)
    s.append(e)
    e.step(1)
    s.append(e)
    (tmp_path / "gone" / "d.vtkhdf").unlink()  # the file vanishes (a folder removed, a disk unmounted)
    with pytest.raises(ExportError, match=r"cannot write step 2 of .*d\.vtkhdf.*keeps the 2 steps.*stops here"):
        s.append(e)
    assert s.append(e) is None  # said once: later steps are not attempted

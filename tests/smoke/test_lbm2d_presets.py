"""Every lbm2d preset runs a few steps headless on NumPy and produces sane fields."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.fields import Grid2D, Particles
from nagare.engine.presets import load_preset, preset_names

LBM_PRESETS = [n for n in preset_names() if n.startswith("lbm2d")]


def test_the_four_presets_exist():
    assert {"lbm2d-poiseuille", "lbm2d-taylor-green", "lbm2d-cavity", "lbm2d-cylinder"} <= set(LBM_PRESETS)


@pytest.mark.parametrize("name", LBM_PRESETS)
def test_preset_runs_on_numpy(name):
    preset = load_preset(name, backend="numpy")
    e = create_engine(preset, get_backend("numpy"))
    e.step(5)
    d = e.diagnostics()
    assert d["max_speed"] < 0.3
    fields = e.fields()
    ny, nx = preset.shape
    for key in ("rho", "ux", "uy", "speed", "vorticity", "mask"):
        assert isinstance(fields[key], Grid2D) and fields[key].data.shape == (ny, nx)
        assert np.isfinite(np.asarray(fields[key].data)).all()
    if preset.tracers.count:
        tr = fields["tracers"]
        assert isinstance(tr, Particles) and tr.positions.shape == (preset.tracers.count, 2)


def test_cylinder_cpu_override_is_numpy_sized():
    """The default showcase must animate at several frames/s on NumPy."""
    cpu = load_preset("lbm2d-cylinder", backend="numpy")
    gpu = load_preset("lbm2d-cylinder", backend="cupy")
    assert cpu.grid.nx * cpu.grid.ny <= 40_000 < gpu.grid.nx * gpu.grid.ny
    assert cpu.tracers.count < gpu.tracers.count


@pytest.mark.gpu
@pytest.mark.parametrize("name", LBM_PRESETS)
def test_preset_runs_on_cupy_with_its_default_variants(name):
    preset = load_preset(name, backend="cupy")
    e = create_engine(preset, get_backend("cupy"))
    e.step(50)
    e.synchronize()
    d = e.diagnostics()
    assert d["max_speed"] < 0.3
    for key in ("speed", "vorticity"):
        assert np.isfinite(e.backend.asnumpy(e.fields()[key].data)).all()
    rep = e.batch_report(wait=True)
    assert rep.steps > 0, "no timing samples on CuPy"

"""Every SPH preset builds and runs headless on NumPy (its cpu_overrides size), each search."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.fields import Particles
from nagare.engine.presets import load_preset

PRESETS = ["sph-dambreak2d", "sph-hydrostatic", "sph-dambreak3d", "sph-piston2d"]


@pytest.mark.parametrize("name", PRESETS)
def test_preset_runs_and_exposes_particles(name):
    preset = load_preset(name, backend="numpy")
    e = create_engine(preset, get_backend("numpy"))
    assert e.selection["search"] == "cell-full"
    e.step(3)
    d = e.diagnostics()
    assert d["dt"] > 0 and np.isfinite(d["kinetic_energy"])
    f = e.fields()["particles"]
    assert isinstance(f, Particles) and f.positions.shape == (e.n, preset.dim)
    for key in ("density", "pressure", "kind", "speed"):
        assert f.attributes[key].shape == (e.n,)
    assert set(np.unique(f.attributes["kind"]).tolist()) <= {0, 1, 2}
    e.set_variant(search="verlet")  # live switch keeps the state
    e.step(2)
    assert e.timings.extra["rebuilds"] >= 1


def test_piston_moves_and_drives_the_water():
    e = create_engine(load_preset("sph-piston2d", backend="numpy"), get_backend("numpy"))
    piston = e.kind == 2
    x0 = e.pos[piston, 0].copy()
    e.step(100)
    s = e.preset.geometry.piston_amplitude * np.sin(2 * np.pi * e.time / e.preset.geometry.piston_period)
    np.testing.assert_allclose(e.pos[piston, 0] - x0, s, rtol=1e-9, atol=1e-12)
    assert e.diagnostics()["max_speed"] > 0.05  # the fluid in front of the piston moves


def test_dambreak3d_gpu_size_is_about_p3s():
    preset = load_preset("sph-dambreak3d", backend="cupy")
    from nagare.engine.sph import geometry

    n = len(geometry.build(preset).pos)
    assert 150_000 < n < 200_000, n  # P3's DamBreak: 171,496 particles


def test_per_phase_timings_follow_p3_tables():
    preset = load_preset("sph-dambreak2d", ["particles.dp=0.05"], backend="numpy")
    e = create_engine(preset, get_backend("numpy"), {"search": "verlet"})
    e.step(30)
    t = e.timings
    assert set(t.phase_ms_per_step) == {"sort", "list", "interaction", "other"}
    for key in ("mean_list_length", "steps_between_rebuilds", "list_bytes", "rebuilds"):
        assert key in t.extra
    assert t.steps == 30

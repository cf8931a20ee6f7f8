"""A tank at rest: after settling, the bottom pressure is ρ0·g·(H − y) within 5%; mass is exact.

Each particle carries a fixed mass ρ0·dp^d, so "total fluid mass exactly conserved" means no fluid
particle is created, lost or leaves the tank: that is what the mass checks assert.
"""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

TANK = ["particles.dp=0.02", "geometry.column_height=0.4", "geometry.tank_length=0.4",
        "geometry.column_width=0.4", "geometry.tank_height=0.5", "physics.precision=fp64"]


def _bottom_pressure_ratio(e):
    y = e.pos[:, 1]
    bottom = e.fluid & (y < e.preset.particles.dp)
    expected = e.k.rho0 * e.k.gravity * (e.layout.fluid_height - y[bottom])
    return float(e.pressure()[bottom].mean() / expected.mean())


@pytest.mark.parametrize("search", ["cell-full", pytest.param("verlet", marks=pytest.mark.slow)])
def test_hydrostatic_bottom_pressure_after_settling(search):
    preset = load_preset("sph-hydrostatic", TANK, backend="numpy")
    e = create_engine(preset, get_backend("numpy"), {"search": search})
    mass0 = float(np.sum(e.fluid) * e.k.mass)
    e.step(1500)  # t ≈ 0.42 s ≈ 2 sloshing periods of the tank (√(4πL/g)/... ≈ 0.2–0.3 s)
    ratios = []
    for _ in range(6):  # average out the residual acoustic oscillation over ~0.1 s
        e.step(60)
        ratios.append(_bottom_pressure_ratio(e))
    np.testing.assert_allclose(np.mean(ratios), 1.0, rtol=0.05)
    d = e.diagnostics()
    assert d["max_speed"] < 0.02 * np.sqrt(e.k.gravity * e.layout.fluid_height), "the tank did not settle"
    np.testing.assert_allclose(d["fluid_mass"], mass0, rtol=0, atol=0)
    assert int(np.sum(e.fluid)) == e.n_fluid
    # no fluid particle left the tank
    assert float(e.pos[e.fluid, 1].min()) > 0 and float(e.pos[e.fluid, 0].min()) > 0

"""3D diffusion against the analytic decay of sine modes (P2's test problem)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.diffusion3d import Engine, Preset
from nagare.engine.diffusion3d import reference as ref

from tests.conftest import backends_param


def make(grid, mode, bc="periodic", precision="fp64", r=0.1, kernel=None, backend="numpy"):
    preset = Preset.model_validate({
        "engine": "diffusion3d", "description": "validation",
        "grid": dict(zip(("nx", "ny", "nz"), grid)), "physics": {"precision": precision, "r": r},
        "boundaries": {"kind": bc}, "initial": {"kind": "sine", "mode": list(mode)}})
    return Engine(preset, get_backend(backend), variants={"kernel": kernel} if kernel else None)


def steps_for(e, kappa_k2_t):
    p = e.preset
    k2 = sum(k * k for k in ref.wavenumbers(p.shape, p.grid.dx, p.initial.mode, e.periodic))
    return round(kappa_k2_t / (k2 * p.physics.kappa * e.dt))


def rel_error(e, exact_factor):
    p = e.preset
    f0 = ref.sine_mode(np, p.shape, p.grid.dx, p.initial.mode, e.periodic)
    f = e.backend.asnumpy(e.f).astype(np.float64)
    return np.linalg.norm(f - exact_factor * f0) / np.linalg.norm(exact_factor * f0)


@pytest.mark.parametrize("bc,grid,mode", [("periodic", (32, 16, 8), (1, 1, 1)), ("fixed", (20, 18, 16), (1, 2, 1))])
@pytest.mark.parametrize("backend", backends_param())
def test_scheme_reproduces_its_exact_discrete_decay(bc, grid, mode, backend):
    """The implementation is exactly the 7-point explicit scheme: amplification (1−4rΣsin²)ⁿ."""
    e = make(grid, mode, bc, backend=backend)
    n = steps_for(e, 0.7)  # decay to about half: the error is measured against a mode still present
    e.step(n)
    p = e.preset
    factor = ref.discrete_decay(p.shape, p.grid.dx, mode, e.periodic, p.physics.r, n)
    assert factor < 0.9  # the mode has really decayed
    assert rel_error(e, factor) < 1e-12


@pytest.mark.parametrize("backend", backends_param())
def test_periodic_sine_decay_matches_analytic(backend):
    """Relative L2 error against exp(−κ|k|²t) below 1e-4 (fp64), 96 points per wavelength."""
    e = make((96, 8, 8), (1, 0, 0), backend=backend)
    n = steps_for(e, 0.5)
    e.step(n)
    p = e.preset
    exact = ref.analytic_decay(p.shape, p.grid.dx, p.initial.mode, True, p.physics.kappa, e.time)
    assert exact == pytest.approx(math.exp(-0.5), rel=1e-3)
    err = rel_error(e, exact)
    assert err < 1e-4, err


@pytest.mark.parametrize("backend", backends_param())
def test_fixed_boundary_3d_mode_matches_analytic(backend):
    e = make((64, 64, 64), (1, 1, 1), bc="fixed", backend=backend)
    e.step(steps_for(e, 0.5))
    p = e.preset
    exact = ref.analytic_decay(p.shape, p.grid.dx, p.initial.mode, False, p.physics.kappa, e.time)
    assert rel_error(e, exact) < 1e-4


def test_second_order_convergence():
    """Halving Δx (r fixed) divides the error at a fixed κ|k|²t by 4."""
    errors = []
    for n in (24, 48, 96):
        e = make((n, 4, 4), (1, 0, 0))
        e.step(steps_for(e, 0.5))
        p = e.preset
        errors.append(rel_error(e, ref.analytic_decay(p.shape, p.grid.dx, p.initial.mode, True,
                                                      p.physics.kappa, e.time)))
    orders = [math.log2(errors[i] / errors[i + 1]) for i in range(2)]
    np.testing.assert_allclose(orders, 2.0, atol=0.1)


@pytest.mark.parametrize("backend", backends_param())
def test_periodic_diffusion_conserves_the_integral(backend, rng):
    e = make((24, 20, 16), (1, 1, 1), backend=backend)
    e.random_state(rng)
    before = e.diagnostics()["integral"]
    e.step(100)
    after = e.diagnostics()["integral"]
    np.testing.assert_allclose(after, before, rtol=1e-12)

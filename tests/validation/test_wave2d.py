"""2D wave equation (stencil framework family) against exact discrete and continuous standing waves."""
from __future__ import annotations

import math

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.wave2d import Engine, Preset
from nagare.engine.wave2d import reference as ref

from tests.conftest import backends_param


def make(grid, mode, bc="periodic", precision="fp64", courant=0.5, kernel=None, backend="numpy"):
    preset = Preset.model_validate({
        "engine": "wave2d", "description": "validation", "grid": dict(zip(("nx", "ny"), grid)),
        "physics": {"precision": precision, "courant": courant}, "boundaries": {"kind": bc},
        "initial": {"kind": "standing", "mode": list(mode)}})
    return Engine(preset, get_backend(backend), variants={"kernel": kernel} if kernel else None)


def rel_error(e, factor):
    p = e.preset
    u0 = ref.standing_mode(np, p.shape, p.grid.dx, p.initial.mode, e.periodic)
    u = e.backend.asnumpy(e.u).astype(np.float64)
    return np.linalg.norm(u - factor * u0) / np.linalg.norm(u0)


@pytest.mark.parametrize("kernel", ["stencil-host", "array", "cuda", "cuda-autotune"])
@pytest.mark.parametrize("bc,grid,mode", [("periodic", (32, 24), (1, 2)), ("fixed", (33, 20), (2, 1))])
@pytest.mark.parametrize("backend", backends_param())
def test_leapfrog_reproduces_its_exact_discrete_standing_wave(kernel, bc, grid, mode, backend):
    """u^n = u⁰·cos(nθ), cos θ = 1 − 2C²Σsin²(kΔx/2): exact for the discrete scheme."""
    if kernel.startswith("cuda") and backend == "numpy":
        pytest.skip("CUDA kernels run on the cupy backend")
    e = make(grid, mode, bc, kernel=kernel, backend=backend)
    p = e.preset
    theta = ref.discrete_theta(p.shape, p.grid.dx, mode, e.periodic, p.physics.courant)
    n = int(round(2.3 * math.pi / theta))  # more than a full period, ending off a node
    e.step(n)
    assert abs(math.cos(n * theta)) > 0.2  # the comparison is not against a near-zero field
    assert rel_error(e, math.cos(n * theta)) < 1e-11


def test_standing_wave_matches_the_continuous_solution_with_second_order_convergence():
    """Error against cos(c|k|t) at a fixed time falls 4× per halving of Δx (Courant fixed)."""
    errors = []
    for n in (32, 64, 128):
        e = make((n, 8), (1, 0), courant=0.5)
        p = e.preset
        omega = ref.analytic_omega(p.shape, p.grid.dx, p.initial.mode, True, p.physics.c)
        # 0.3 period: cos has a steep slope there, so the phase error shows at first order
        steps = int(round(0.3 * 2 * math.pi / omega / e.dt))
        e.step(steps)
        errors.append(rel_error(e, math.cos(omega * e.time)))
    assert errors[-1] < 2e-3
    orders = [math.log2(errors[i] / errors[i + 1]) for i in range(2)]
    np.testing.assert_allclose(orders, 2.0, atol=0.1)


def test_fixed_boundary_is_held():
    e = make((20, 16), (1, 1), bc="fixed", precision="fp32")
    e.step(50)
    u = e.backend.asnumpy(e.u)
    assert np.abs(u[0]).max() < 1e-6 and np.abs(u[-1]).max() < 1e-6
    assert np.abs(u[:, 0]).max() < 1e-6 and np.abs(u[:, -1]).max() < 1e-6

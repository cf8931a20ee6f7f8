"""Every diffusion3d kernel choice (stencil framework loop engines, hand-written CUDA) reproduces
the exact discrete decay of a sine mode (P2's test problem)."""
from __future__ import annotations

import pytest
from nagare.engine.diffusion3d import reference as ref

from tests.conftest import backends_param
from tests.validation.test_diffusion3d import make, rel_error, steps_for


@pytest.mark.parametrize("kernel", ["stencil-host", "cuda", "cuda-autotune", "cuda-vec", "cuda-handwritten"])
@pytest.mark.parametrize("bc,grid,mode", [("periodic", (32, 16, 8), (1, 1, 1)), ("fixed", (20, 18, 16), (1, 2, 1))])
@pytest.mark.parametrize("backend", backends_param())
def test_kernel_reproduces_exact_discrete_decay(kernel, bc, grid, mode, backend):
    if kernel.startswith("cuda") and backend == "numpy":
        pytest.skip("CUDA kernels run on the cupy backend")
    e = make(grid, mode, bc, kernel=kernel, backend=backend)
    n = steps_for(e, 0.7)
    e.step(n)
    p = e.preset
    factor = ref.discrete_decay(p.shape, p.grid.dx, mode, e.periodic, p.physics.r, n)
    assert factor < 0.9
    assert rel_error(e, factor) < 1e-12

"""amr3d tracers on the GPU (CuPy): stepped by the engine with the CUDA ladder, batch-independent
bit for bit, and the same paths as the NumPy reference to the fluid's fp32 agreement."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.backend import get_backend
from nagare.engine.presets import load_preset

pytestmark = pytest.mark.gpu

# the NumPy-sized sphere (the preset's cpu_overrides) with its tracers, on both backends
SMALL = ["grid.m=9", "refine=[]", "body=[{kind='sphere', center=[8.0, 8.0, 8.0], diameter=2.0, level=2, band=0.5}]",
         "tracers.count=40", "tracers.seeds=[[6.0, 7.5, 7.5], [6.0, 8.0, 8.0], [6.0, 8.5, 8.5]]"]


def _engine(backend, kernels):
    p = load_preset("amr3d-sphere-re20", SMALL + [f"variants.kernels={kernels}"], backend=backend)
    return AMR3D(p, get_backend(backend))


def test_tracer_batches_are_bit_identical_on_the_gpu():
    a, b = _engine("cupy", "naive"), _engine("cupy", "naive")
    a.step(24)
    for _ in range(6):
        b.step(4)
    for k, v in a.state_arrays().items():
        np.testing.assert_array_equal(a.backend.asnumpy(v), b.backend.asnumpy(b.state_arrays()[k]), err_msg=k)
    assert a._tracers.count > 0


def test_gpu_tracers_follow_the_numpy_reference():
    g, r = _engine("cupy", "naive"), _engine("numpy", "reference")
    g.step(40)
    r.step(40)
    pg = g.backend.asnumpy(g.state_arrays()["tracers/positions"])
    pr = r.state_arrays()["tracers/positions"]
    alive = g.backend.asnumpy(g.state_arrays()["tracers/alive"])
    np.testing.assert_array_equal(alive, r.state_arrays()["tracers/alive"])
    np.testing.assert_allclose(pg, pr, rtol=0, atol=1e-4)  # level-0 units; the fluids agree to fp32 round-off


@pytest.mark.parametrize("kernels", ["naive", "sorted"])
def test_gpu_tracer_step_gathers_stencil_populations_only(kernels, monkeypatch):
    """The CUDA tree stepper's populations(ids) is its assembled state at the ids, bit for bit, and
    the tracer step runs with the whole-field velocity and the state assembly forbidden."""
    from nagare.engine.amr3d import d3q27
    from nagare.engine.amr3d.tree_stepper import TreeStepper

    e = _engine("cupy", kernels)
    e.step(3)
    xp, st = e.xp, e._tree
    assert len(st.levels) == 3
    ids = xp.asarray(np.random.default_rng(0).integers(0, e.forest.n_leaves * e.m**3, (8, 300)))
    want = st.state().reshape(d3q27.Q, -1)[:, ids]
    np.testing.assert_array_equal(xp.asnumpy(st.populations(ids)), xp.asnumpy(want))

    def forbidden(*a, **k):
        raise AssertionError("a whole-field computation in a tracer step")

    with monkeypatch.context() as mp:
        mp.setattr(d3q27, "fluid_velocity", forbidden)
        mp.setattr(TreeStepper, "state", forbidden)
        e.step(4)
    assert e._tracers.count > 0

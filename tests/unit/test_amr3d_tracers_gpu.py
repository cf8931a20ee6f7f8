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
    xp, st = e.xp, e.shape.stepper
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


@pytest.mark.parametrize("kernels", ["naive", "mother-leaf"])
def test_fused_tracers_follow_the_array_code_on_the_gpu(kernels):
    """The fused tracer kernels (the default on CuPy with the ladder rungs: tracer_kernels.py)
    against the array code on CuPy, over the same fluid bits (the tracers do not feed back).

    Not bit for bit, unlike the CPU emulation (test_amr3d_tracers_fused.py), which compares the
    kernels with the array code on NumPy: the kernels sum in NumPy's order, CuPy's reductions in
    their own (ρ over 27, the momentum over 13 pairs, the trilinear sum over 8: strided partial sums
    then a shared-memory tree), so a velocity differs by a few fp32 ulps (~1e-9 at |u| ~ 0.05) and a
    position (< 24 level-0 units: ulp ≤ 1.9e-6) by at most 1 ulp per rounding: one step from the same
    state within 2 ulps; 40 steps within 1e-4 (the fp32 tracer-vs-reference bound above, which the
    differences compound to at most, |∇u| dt being small), with the same tracers alive."""
    g, r = _engine("cupy", kernels), _engine("cupy", kernels)
    r._tracers.use_kernels = False
    g.step(12)
    r.step(12)
    assert g.shape.stepper.mapped is (kernels == "mother-leaf")  # (the fused kernels read mother leaves through a map)
    r._tracers.load_state_arrays(g._tracers.state_arrays())  # the same tracers, the same fluid
    g.step(1)
    r.step(1)
    assert g._tracers._fused is not None and r._tracers._fused is None
    a, b = g.state_arrays(), r.state_arrays()
    np.testing.assert_array_equal(g.backend.asnumpy(a["tracers/alive"]), r.backend.asnumpy(b["tracers/alive"]))
    np.testing.assert_array_equal(g.backend.asnumpy(a["f"]), r.backend.asnumpy(b["f"]))
    np.testing.assert_allclose(g.backend.asnumpy(a["tracers/positions"]), r.backend.asnumpy(b["tracers/positions"]),
                               rtol=0, atol=2 * float(np.spacing(np.float32(24.0))))
    g, r = _engine("cupy", kernels), _engine("cupy", kernels)
    r._tracers.use_kernels = False
    g.step(40)
    r.step(40)
    a, b = g.state_arrays(), r.state_arrays()
    for k in ("tracers/alive", "tracers/step", "tracers/cursor"):
        np.testing.assert_array_equal(g.backend.asnumpy(a[k]), r.backend.asnumpy(b[k]), err_msg=k)
    for k in ("tracers/positions", "tracers/trail"):
        np.testing.assert_allclose(g.backend.asnumpy(a[k]), r.backend.asnumpy(b[k]), rtol=0, atol=1e-4, err_msg=k)
    np.testing.assert_array_equal(g.backend.asnumpy(a["tracers/age"]), r.backend.asnumpy(b["tracers/age"]))
    assert g._tracers.count > 0

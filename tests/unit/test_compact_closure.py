"""P4's closure rows of the explicit right-hand side on the GPU (rhs.DeviceClosure,
shaders/cuda/compact/closure.cu) on the CPU: CuPy replaced by tests/unit/fake_cupy.py, whose RawModule
kernels are the .cu source compiled with g++ (no FMA, as --fmad=false). One launch per call over every
line of a view must equal schemes.closure_rows bit for bit, for every layout the engine hands it, and
the Navier–Stokes evaluation with the generated stencil (kernel = cuda) must keep NumPy's bits while
its right-hand sides take one closure launch per derivative stack."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import Backend, get_backend
from nagare.engine.compact import Engine, rhs, schemes
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

from tests.unit import cuda_emulator
from tests.unit.compact_fake_gpu import fake_gpu

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ to emulate the kernels")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("closure")


@pytest.fixture
def fcp(workdir, monkeypatch):
    """The fake CuPy (tests/unit/compact_fake_gpu.py) and the solver / transpose stand-ins."""
    yield from fake_gpu(workdir, monkeypatch)


def _closure_launches(cp) -> int:
    return sum(len(k.launches) for k in cp.kernels if k.name.startswith("compact_closure"))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_one_launch_equals_the_array_closure_rows_for_every_layout(fcp, dtype):
    rng = np.random.default_rng(4)
    stack = rng.standard_normal((3, 11, 9)).astype(dtype)
    inv_h = dtype(7.3)
    views = {"x-lines of a stack": lambda a: a, "y-lines of a stack": lambda a: a.swapaxes(-1, -2),
             "x-lines of one variable": lambda a: a[1], "y-lines of one variable": lambda a: a[2].T,
             "x-lines of a sub-stack": lambda a: a[:2], "one line": lambda a: a[0, 3]}
    closure = rhs.DeviceClosure(dtype)
    for label, view in views.items():
        got = np.full_like(stack, np.nan)
        want = np.full_like(stack, np.nan)
        before = _closure_launches(fcp)
        closure(np, view(stack), view(got), inv_h)
        assert _closure_launches(fcp) - before == 1, label
        schemes.closure_rows(np, view(stack), view(want), inv_h)
        np.testing.assert_array_equal(got, want, err_msg=label)  # the rows, and NaN everywhere else
        assert np.isfinite(got).sum() == 4 * view(stack)[..., 0].size, label


def test_a_layout_that_does_not_fold_falls_back_to_the_array_rows(fcp):
    a = np.random.default_rng(1).standard_normal((2, 3, 4, 6))
    v = a.transpose(1, 0, 2, 3)[:, :, ::2]  # three leading axes that do not fold into two
    assert rhs.line_layout(v) is None
    got, want = np.zeros_like(a), np.zeros_like(a)
    rhs.DeviceClosure(np.float64)(np, v, got.transpose(1, 0, 2, 3)[:, :, ::2], 2.0)
    schemes.closure_rows(np, v, want.transpose(1, 0, 2, 3)[:, :, ::2], 2.0)
    np.testing.assert_array_equal(got, want)
    assert _closure_launches(fcp) == 0


@pytest.mark.parametrize("batching", ["stacked", "grouped"])
def test_navier_stokes_with_the_generated_stencil_keeps_numpys_bits(fcp, batching):
    """compact-vortex-outflow at 20², kernel = cuda (the stencil framework's generated CUDA for the
    interiors, the closure kernel for the ends) against the NumPy engine: the same state after 2 RK4
    steps; closure launches: one per derivative stack (stacked: 4 a rate evaluation, viscous; grouped:
    one per group sweep), not one per variable and row."""
    n = 20
    over = [f"grid.nx={n}", f"grid.ny={n}", f"physics.dt={0.76 / (n - 1):.3g}", 'initial.kind="random"']
    pre = load_preset("compact-vortex-outflow", over, backend=None)
    ref = create_engine(pre, get_backend("numpy"))
    cand = create_engine(pre, Backend("cupy", fcp, _cupy=fcp), variants={
        "kernel": "cuda", "solver": "thomas", "batching": batching,
        **Engine.equivalence_companions("batching", batching)})  # grouped: y-direction = transpose
    cand._roofline = 1e12
    before = _closure_launches(fcp)
    ref.step(2)
    cand.step(2)
    np.testing.assert_array_equal(cand.U, ref.U)
    launches = _closure_launches(fcp) - before
    per_rate = 4 if batching == "stacked" else cand.ns.rhs_sweeps_per_rate()
    assert launches == 2 * 4 * per_rate, launches


# ---- the filter's explicit side (filter.DeviceFilterRhs, shaders/cuda/compact/filter.cu) ----------------
def _filter_launches(cp) -> int:
    return sum(len(k.launches) for k in cp.kernels if k.name.startswith("compact_filter_rhs"))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("boundary,shape", [("closures", (3, 13, 17)), ("closures", (2, 11, 11)),
                                            ("periodic", (3, 13, 17)), ("periodic", (2, 6, 7))])
def test_filter_rhs_is_one_launch_equal_to_the_array_rhs(fcp, dtype, boundary, shape):
    """Every point of a stack, both axes, in one launch each: the array filter.rhs bit for bit (the
    tenth-order centred sum inside, order 2i at distance i from a bounded end, the ends copied, or the
    wrapped sum on periodic lines), with a boundary α of its own — down to the bounded minimum of 11
    points and periodic lines barely longer than the stencil's half-width."""
    from nagare.engine.compact import filter as filt

    rng = np.random.default_rng(6)
    f = rng.standard_normal(shape).astype(dtype)
    dev = filt.DeviceFilterRhs(np, 0.49, 0.4999, boundary, dtype)
    for axis in (-1, -2):
        got, want = np.full_like(f, np.nan), np.full_like(f, np.nan)
        before = _filter_launches(fcp)
        assert dev(np, f, got, axis)
        assert _filter_launches(fcp) - before == 1
        filt.rhs(np, f, 0.49, boundary, axis=axis, out=want, alpha_b=0.4999)
        np.testing.assert_array_equal(got, want, err_msg=f"axis {axis}")


def test_the_filtered_navier_stokes_step_keeps_numpys_bits_with_one_filter_launch_per_axis(fcp):
    """compact-vortex-outflow (filter on, bounded sides) at 20² on the fake GPU, 2 steps: NumPy's state
    bit for bit, and the filter's explicit side two launches a step (x and y)."""
    n = 20
    over = [f"grid.nx={n}", f"grid.ny={n}", f"physics.dt={0.76 / (n - 1):.3g}", 'initial.kind="random"']
    pre = load_preset("compact-vortex-outflow", over, backend=None)
    assert pre.physics.filter
    ref = create_engine(pre, get_backend("numpy"))
    cand = create_engine(pre, Backend("cupy", fcp, _cupy=fcp), variants={"kernel": "array", "solver": "thomas"})
    before = _filter_launches(fcp)
    ref.step(2)
    cand.step(2)
    np.testing.assert_array_equal(cand.U, ref.U)
    assert _filter_launches(fcp) - before == 2 * 2


@pytest.mark.parametrize("boundary", ["closures", "periodic"])
def test_filter_rhs_of_one_field_along_y_walks_lines_fastest_and_keeps_the_bits(fcp, boundary):
    """A single (ny, nx) field's y-lines (their neighbours one element apart, the points nx apart) are
    walked a line a thread, lines fastest, so a warp reads consecutive addresses; the stack's y-lines
    too; x-lines walk their own points. The result is the array rhs's bit for bit either way."""
    from nagare.engine.compact import filter as filt
    from nagare.engine.compact.rhs import line_layout

    rng = np.random.default_rng(7)
    f2 = rng.standard_normal((13, 17))
    stack = rng.standard_normal((3, 13, 17))
    assert filt.lines_fastest(line_layout(f2.swapaxes(-2, -1)))
    assert filt.lines_fastest(line_layout(stack.swapaxes(-2, -1)))
    assert not filt.lines_fastest(line_layout(f2))
    assert not filt.lines_fastest(line_layout(stack))
    dev = filt.DeviceFilterRhs(np, 0.49, 0.4999, boundary, np.float64)
    got, want = np.full_like(f2, np.nan), np.full_like(f2, np.nan)
    assert dev(np, f2, got, -2)
    filt.rhs(np, f2, 0.49, boundary, axis=-2, out=want, alpha_b=0.4999)
    np.testing.assert_array_equal(got, want)

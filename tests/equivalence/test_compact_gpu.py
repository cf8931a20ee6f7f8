"""CUDA compact derivatives against dense solves and the NumPy engine: every solver (Thomas, CR,
PCR, CR–PCR, scan, cuSPARSE gtsv2) and the fused derivative (kernel = fused on scan) × direction
(x; y strided / transposed) × boundary (cyclic, closures)
× scheme half (central, dissipative δ = ±1/4) × precision, at sizes that exercise several blocks,
non-powers of two and the >48 KiB shared-memory opt-in; the stencil right-hand sides through every
device loop engine; whole presets on CuPy vs NumPy."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.compact import Engine, schemes
from nagare.engine.compact.operator import Derivative
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

pytestmark = pytest.mark.gpu

SOLVERS = ("thomas", "cr", "pcr", "cr-pcr", "scan", "window", "stream", "gtsv2")
TOL = {np.float64: 1e-11, np.float32: 2e-4}  # relative to the derivative's max


def _derivative(shape, axis, boundary, delta, dtype, selection, f):
    be = get_backend("cupy")
    cp = be.xp
    h = 0.37
    op = Derivative(shape=shape, axis=axis, h=h, boundary=boundary, delta=delta, dtype=dtype,
                    selection=selection, backend=be, stream=None)
    out = cp.full(shape, cp.nan, dtype=dtype)
    op(cp.asarray(f.astype(dtype)), out)
    cp.cuda.get_current_stream().synchronize()
    want = schemes.derivative_dense(f, h, boundary, delta, axis=-1 if axis == "x" else 0)
    return cp.asnumpy(out), want


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("axis,ydir", [("x", "strided"), ("y", "strided"), ("y", "transpose")])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_solver_against_dense(solver, axis, ydir, boundary, dtype):
    rng = np.random.default_rng(3)
    for shape, delta in (((37, 100), 0.0), ((130, 64), -0.25), ((9, 257), 0.25), ((3, 4096), 0.0)):
        if axis == "y":
            shape = shape[::-1]
        f = rng.standard_normal(shape)
        got, want = _derivative(shape, axis, boundary, delta, dtype,
                                {"solver": solver, "y-direction": ydir, "kernel": "cuda"}, f)
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * np.max(np.abs(want)),
                                   err_msg=f"{solver} {axis}/{ydir} {boundary} δ={delta} {shape}")


@pytest.mark.parametrize("axis,ydir", [("x", "strided"), ("y", "strided"), ("y", "transpose")])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_derivative_against_dense(axis, ydir, boundary, dtype):
    """kernel = fused: the right-hand side and the scan solve in one launch — every chunk size (lines of
    100 to 16384 points: 4 to 32 rows a thread, the >48 KiB shared-memory opt-in at 16384), both schemes."""
    rng = np.random.default_rng(4)
    cases = (((37, 100), 0.0), ((130, 64), -0.25), ((9, 257), 0.25), ((3, 4096), 0.0), ((2, 9000), 0.25),
             ((2, 16384), 0.0))
    for shape, delta in cases:
        if axis == "y":
            shape = shape[::-1]
        f = rng.standard_normal(shape)
        got, want = _derivative(shape, axis, boundary, delta, dtype,
                                {"solver": "scan", "y-direction": ydir, "kernel": "fused"}, f)
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * np.max(np.abs(want)),
                                   err_msg=f"fused {axis}/{ydir} {boundary} δ={delta} {shape}")


def test_scan_kernel_equals_its_numpy_mirror():
    """The device's scan kernels against scan.py's NumPy mirror of their operations (no FMA: --fmad=false):
    bit for bit, solve and fused, fp64 and fp32, a 2048-point line (16 warps) and a 9000-point one."""
    from nagare.engine.compact import tridiag
    from nagare.engine.compact.solvers import scan

    cp = get_backend("cupy").xp
    rng = np.random.default_rng(8)
    for n, boundary in ((2048, "closures"), (2048, "periodic"), (9000, "closures")):
        fac = tridiag.factorise(*schemes.bands(n, boundary), boundary == "periodic")
        for dtype in (np.float64, np.float32):
            dev = scan.DeviceScan(scan.plan(fac), dtype)
            a = rng.standard_normal((5, n)).astype(dtype)
            out = cp.empty((5, n), dtype=dtype)
            dev.solve(cp.asarray(a), out, 5, n, 1)
            np.testing.assert_array_equal(cp.asnumpy(out), scan.solve(dev.plan, a, dtype))
            dev.derivative(cp.asarray(a), out, 5, n, 1, 0.01)
            np.testing.assert_array_equal(cp.asnumpy(out), scan.derivative(dev.plan, a, 0.01, boundary, 0.0, dtype))


@pytest.mark.parametrize("kernel", ["array", "stencil-host", "cuda", "cuda-autotune"])
@pytest.mark.parametrize("axis", ["x", "y"])
def test_rhs_kernels_on_device(kernel, axis):
    rng = np.random.default_rng(5)
    for boundary, delta in itertools.product(schemes.BOUNDARIES, (0.0, 0.25)):
        f = rng.standard_normal((48, 72))
        for _ in range(3 if kernel == "cuda-autotune" else 1):  # the tuner tries several launches
            got, want = _derivative(f.shape, axis, boundary, delta, np.float64,
                                    {"solver": "thomas", "y-direction": "strided", "kernel": kernel}, f)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-11 * np.max(np.abs(want)))


@pytest.mark.parametrize("name", ["compact-advection1d", "compact-square1d", "compact-rotating-cone",
                                  "compact-derivative"])
@pytest.mark.parametrize("solver", SOLVERS)
def test_presets_on_cupy_match_numpy(name, solver):
    over = ["grid.nx=64", "grid.ny=64"] if name in ("compact-rotating-cone", "compact-derivative") else []
    if name == "compact-rotating-cone":
        over.append("physics.dt=0.002")
    ref = create_engine(load_preset(name, over, backend="numpy"), get_backend("numpy"))
    variants = {"solver": solver, "kernel": "fused" if solver == "scan" else "cuda"}
    gpu = create_engine(load_preset(name, over, backend="numpy"), get_backend("cupy"), variants=variants)
    ref.step(20)
    gpu.step(20)
    for k, v in ref.state_arrays().items():
        got = gpu.backend.asnumpy(gpu.state_arrays()[k])
        np.testing.assert_allclose(got, v, rtol=0, atol=1e-11 * max(1.0, float(np.max(np.abs(v)))), err_msg=k)
    rep = gpu.batch_report(wait=True)
    assert rep.steps == 20 and rep.ms_per_step > 0
    assert set(rep.phase_ms_per_step) >= ({"derivative"} if solver == "scan" else {"rhs", "solve"})


def test_fp32_advection_pulse():
    """P4 test 1 in single precision on the GPU: the pulse at t = 0.4 within fp32 reach of exact."""
    e = create_engine(load_preset("compact-advection1d", ['physics.precision="fp32"'], backend="cupy"),
                      get_backend("cupy"))
    e.step(400)
    assert e.diagnostics()["l2_error"] < 1e-4


def test_bench_cells_run():
    """Every cell of `nagare bench compact` builds and steps on the smallest case."""
    from nagare.engine.bench import run_bench

    res = run_bench("compact", get_backend("cupy"), cases=["512x512-y-fp64"], min_time=0.02, warmup_steps=2)
    # batching = grouped has nothing to group in a scalar problem: reported unavailable, with the reason
    grouped = [r for r in res if r.label.startswith("batching=grouped")]
    assert res and all(r.ok or "gtsv2" in r.label or (r in grouped and "Navier–Stokes" in r.reason)
                       for r in res), [(r.label, r.reason) for r in res if not r.ok]


def test_grouped_navier_stokes_on_the_gpu():
    """batching = grouped (P4's 8 + 6) on CuPy, P4's vortex at 256²: the same state as stacked after 10
    steps to the solver's round-off, 2 solves per evaluation (10 per step) in the timing extras against
    stacked's 4 (18) and per-variable's 14 (64); the bench's Navier–Stokes batching cells all run."""
    from nagare.engine.bench import run_bench

    over = ["grid.nx=256", "grid.ny=256", "physics.dt=0.00298"]
    runs = {}
    for batching in ("stacked", "grouped", "per-variable"):
        e = create_engine(load_preset("compact-vortex-outflow", over, backend="cupy"), get_backend("cupy"),
                          variants={"batching": batching, **Engine.equivalence_companions("batching", batching)})
        e.step(10)
        rep = e.batch_report(wait=True)
        runs[batching] = (e.backend.asnumpy(e.state_arrays()["U"]), rep.extra)
    want = runs["stacked"][0]
    for batching, (got, extra) in runs.items():
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * float(np.max(np.abs(want))), err_msg=batching)
        per_rate = {"stacked": 4, "grouped": 2, "per-variable": 14}[batching]
        assert extra["solve_launches_per_rate"] == per_rate, extra
        assert extra["solve_launches_per_step"] == 4 * per_rate + (8 if batching == "per-variable" else 2), extra
    res = run_bench("compact", get_backend("cupy"), cases=["ns-vortex-256-fp64"], only=["default", "batching"],
                    min_time=0.02, warmup_steps=2)
    assert [r.label for r in res] == ["default", "batching=per-variable",
                                      "batching=grouped,y-direction=transpose"]
    assert all(r.ok for r in res), [(r.label, r.reason) for r in res if not r.ok]


@pytest.mark.parametrize("precision,n", [("fp64", 256), ("fp32", 128)])
def test_fused_pointwise_on_the_gpu(precision, n):
    """pointwise = fused (shaders/cuda/compact/ns_pointwise.cu, 3 launches per evaluation) against array
    (CuPy's element-wise operations), both on CuPy with the same derivatives: P4's vortex preset at n² from
    a random state (waves through every side), 10 steps. The kernels repeat the array operations in order
    without FMA (bit for bit in the g++ emulation, tests/unit/test_compact_ns_fused.py), so the states
    should agree to the last bit; 1e-13 (fp32: 1e-6) of the state's size leaves room only for a CuPy
    operation that rounds differently from its host counterpart (e.g. a pow for ``** 2``). Then the live
    switch back and the bench's pointwise cell."""
    from nagare.engine.bench import run_bench

    over = [f"grid.nx={n}", f"grid.ny={n}", f"physics.dt={0.76 / (n - 1):.3g}", 'initial.kind="random"',
            f'physics.precision="{precision}"']
    runs = {}
    for choice in ("array", "fused"):
        e = create_engine(load_preset("compact-vortex-outflow", over, backend="cupy"), get_backend("cupy"),
                          variants={"pointwise": choice})
        e.step(10)
        rep = e.batch_report(wait=True)
        runs[choice] = (e.backend.asnumpy(e.state_arrays()["U"]), rep.extra, e)
    want, got = runs["array"][0], runs["fused"][0]
    tol = (1e-13 if precision == "fp64" else 1e-6) * float(np.max(np.abs(want)))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    print(f"fused vs array on the GPU ({precision}, {n}²): max |ΔU| = {float(np.max(np.abs(got - want))):.3g}, "
          f"bit for bit: {np.array_equal(got, want)}")
    assert runs["fused"][1]["pointwise_launches_per_rate"] == 3 and runs["fused"][1]["pointwise"] == "fused"
    assert "pointwise_launches_per_rate" not in runs["array"][1]
    e = runs["fused"][2]
    e.set_variant(pointwise="array")  # live: the next steps on the array path
    e.step(2)
    assert e.ns.fused is None and np.isfinite(e.backend.asnumpy(e.state_arrays()["U"])).all()
    res = run_bench("compact", get_backend("cupy"), cases=["ns-vortex-256-fp64"], only=["default", "pointwise"],
                    min_time=0.02, warmup_steps=2)
    assert [r.label for r in res] == ["default", "pointwise=array"]
    assert all(r.ok for r in res), [(r.label, r.reason) for r in res if not r.ok]

"""``solver = window`` on the GPU (engine/compact/solvers/window.py, shaders/cuda/compact/window.cu): the device
kernel against window.py's NumPy mirror bit for bit on the target sizes (1024- to 4096-point lines, x and y,
fp32 and fp64, periodic and closures, out of place and in place), a stack's y-lines in one launch, and the
engine's derivative with it against the dense reference (odd sizes, lines shorter than a window)."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.compact import schemes, tridiag
from nagare.engine.compact.operator import Derivative
from nagare.engine.compact.solvers import window

pytestmark = pytest.mark.gpu

TOL = {np.float64: 1e-11, np.float32: 2e-4}  # relative to the derivative's max (test_compact_gpu.py's)


def _fac(n, boundary, delta=0.0):
    return tridiag.factorise(*schemes.bands(n, boundary, delta), boundary == "periodic")


@pytest.mark.parametrize("n,nsys", [(1024, 45), (2048, 45), (4096, 21)])
@pytest.mark.parametrize("layout", ["x", "y"])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
def test_window_kernel_equals_its_mirror_on_the_target_sizes(n, nsys, layout, boundary):
    """solve and fused derivative (central; dissipative on fp64), out of place and in place: bit for bit the
    mirror (the kernel is compiled without FMA and repeats the mirror's operations)."""
    cp = get_backend("cupy").xp
    rng = np.random.default_rng(n)
    for dtype in (np.float64, np.float32):
        for delta in (0.0, -0.25) if dtype == np.float64 else (0.0,):
            dev = window.DeviceWindow(window.plan(_fac(n, boundary, delta), dtype), dtype)
            p = window.for_lines(dev.plan, nsys)  # the launch's segments (shorter: 45 lines are few)
            shape = (nsys, n) if layout == "x" else (n, nsys)
            a = rng.standard_normal(shape).astype(dtype)
            lines = a if layout == "x" else a.T
            ss, es = (n, 1) if layout == "x" else (1, nsys)
            src = cp.asarray(a)
            out = cp.full(shape, cp.nan, dtype=dtype)
            tag = f"{layout} {n} {boundary} {np.dtype(dtype).name} δ={delta}"
            if not delta:
                dev.solve(src, out, nsys, ss, es)
                got = cp.asnumpy(out)
                np.testing.assert_array_equal(got if layout == "x" else got.T, window.solve(p, lines, dtype),
                                              err_msg="solve " + tag)
            want = window.derivative(p, lines, 0.01, boundary, delta, dtype)
            dev.derivative(src, out, nsys, ss, es, 0.01, delta)
            got = cp.asnumpy(out)
            np.testing.assert_array_equal(got if layout == "x" else got.T, want, err_msg="fused " + tag)
            np.testing.assert_array_equal(cp.asnumpy(src), a)
            dev.derivative(src, src, nsys, ss, es, 0.01, delta)  # in place: through the work array
            got = cp.asnumpy(src)
            np.testing.assert_array_equal(got if layout == "x" else got.T, want, err_msg="fused in place " + tag)


def test_window_kernel_on_a_stack_of_y_lines():
    """A stack (nv, ny, nx)'s y-lines as one launch of lines in groups: the mirror on each variable."""
    cp = get_backend("cupy").xp
    nv, ny, nx = 3, 700, 45
    rng = np.random.default_rng(2)
    for boundary in schemes.BOUNDARIES:
        for dtype in (np.float64, np.float32):
            dev = window.DeviceWindow(window.plan(_fac(ny, boundary, -0.25), dtype), dtype)
            p = window.for_lines(dev.plan, nv * nx)  # one launch over the stack's lines: its segments
            f = rng.standard_normal((nv, ny, nx)).astype(dtype)
            out = cp.full(f.shape, cp.nan, dtype=dtype)
            dev.derivative(cp.asarray(f), out, nv * nx, 1, nx, 0.01, -0.25, group=(nx, ny * nx))
            want = np.stack([window.derivative(p, f[v].T, 0.01, boundary, -0.25, dtype).T for v in range(nv)])
            np.testing.assert_array_equal(cp.asnumpy(out), want)


@pytest.mark.parametrize("axis", ["x", "y"])
@pytest.mark.parametrize("kernel", ["fused", "cuda"])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_window_derivative_against_dense(axis, kernel, boundary, dtype):
    """The engine's Derivative with solver = window (kernel fused: one launch; cuda: the stencil right-hand
    side, then the window solve) on odd sizes and lines shorter than one window, against the dense reference."""
    be = get_backend("cupy")
    cp = be.xp
    rng = np.random.default_rng(6)
    for shape, delta in (((37, 100), 0.0), ((130, 64), -0.25), ((9, 257), 0.25), ((3, 4096), 0.0), ((5, 9), 0.0)):
        if axis == "y":
            shape = shape[::-1]
        if kernel == "cuda" and delta:
            continue
        f = rng.standard_normal(shape)
        h = 0.37
        sel = {"solver": "window", "y-direction": "strided", "kernel": kernel}
        op = Derivative(shape=shape, axis=axis, h=h, boundary=boundary, delta=delta, dtype=dtype, selection=sel,
                        backend=be, stream=None)
        out = cp.full(shape, cp.nan, dtype=dtype)
        op(cp.asarray(f.astype(dtype)), out)
        want = schemes.derivative_dense(f, h, boundary, delta, axis=-1 if axis == "x" else 0)
        np.testing.assert_allclose(cp.asnumpy(out), want, rtol=0, atol=TOL[dtype] * np.max(np.abs(want)),
                                   err_msg=f"{axis} {kernel} {boundary} δ={delta} {shape}")


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_y_direction_window_in_the_derivative_operators(boundary, dtype):
    """y-direction = window with solver = scan: a y-derivative of a 1024² field is one window launch whose
    segments for_lines shortens (1024 lines: fp64 40 rows, fp32 19) — the mirror at that plan bit for bit —, an
    x-derivative is the scan kernel's; both against the dense reference."""
    be = get_backend("cupy")
    cp = be.xp
    n = 1024
    f = np.random.default_rng(9).standard_normal((n, n))
    h = 1.0 / n
    sel = {"solver": "scan", "y-direction": "window", "kernel": "fused"}
    for axis in ("x", "y"):
        op = Derivative(shape=(n, n), axis=axis, h=h, boundary=boundary, delta=0.0, dtype=dtype, selection=sel,
                        backend=be, stream=None)
        assert op.solver.solver == ("window" if axis == "y" else "scan")
        out = cp.full((n, n), cp.nan, dtype=dtype)
        op(cp.asarray(f.astype(dtype)), out)
        got = cp.asnumpy(out)
        want = schemes.derivative_dense(f, h, boundary, axis=-1 if axis == "x" else 0)
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * np.max(np.abs(want)), err_msg=axis)
        if axis == "y":
            q = window.for_lines(op.solver.prepared, n)
            assert q.segment == {np.float64: 40, np.float32: 19}[dtype]
            np.testing.assert_array_equal(got, window.derivative(q, f.astype(dtype).T, h, boundary, 0.0, dtype).T)

"""``solver = stream`` on the GPU (engine/compact/solvers/stream.py, shaders/cuda/compact/stream.cu): the device
kernel against stream.py's NumPy mirror bit for bit on the target sizes (1024- to 4096-point lines, x and y,
fp32 and fp64, periodic and closures, out of place and in place, both block sizes), a stack's y-lines in one
launch, and the engine's derivative with it against the dense reference (odd sizes, lines shorter than a
window)."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.compact import schemes, tridiag
from nagare.engine.compact.operator import Derivative
from nagare.engine.compact.solvers import stream, window

pytestmark = pytest.mark.gpu

TOL = {np.float64: 1e-11, np.float32: 2e-4}  # relative to the derivative's max (test_compact_gpu.py's)


def _fac(n, boundary, delta=0.0):
    return tridiag.factorise(*schemes.bands(n, boundary, delta), boundary == "periodic")


@pytest.mark.parametrize("n,nsys", [(1024, 45), (2048, 300), (4096, 21)])
@pytest.mark.parametrize("layout", ["x", "y"])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
def test_stream_kernel_equals_its_mirror_on_the_target_sizes(n, nsys, layout, boundary):
    """solve and fused derivative (central; dissipative on fp64), out of place and in place: bit for bit the
    mirror (compiled without FMA, the mirror's operations in its order). 45 and 21 lines take 8-warp blocks,
    300 lines of 2048 points 16-warp ones."""
    cp = get_backend("cupy").xp
    rng = np.random.default_rng(n)
    for dtype in (np.float64, np.float32):
        for delta in (0.0, -0.25) if dtype == np.float64 else (0.0,):
            p = window.plan(_fac(n, boundary, delta), dtype)
            dev = stream.DeviceStream(p, dtype)
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
                np.testing.assert_array_equal(got if layout == "x" else got.T, stream.solve(p, lines, dtype),
                                              err_msg="solve " + tag)
            want = stream.derivative(p, lines, 0.01, boundary, delta, dtype)
            dev.derivative(src, out, nsys, ss, es, 0.01, delta)
            got = cp.asnumpy(out)
            np.testing.assert_array_equal(got if layout == "x" else got.T, want, err_msg="fused " + tag)
            np.testing.assert_array_equal(cp.asnumpy(src), a)
            dev.derivative(src, src, nsys, ss, es, 0.01, delta)  # in place: through the work array
            got = cp.asnumpy(src)
            np.testing.assert_array_equal(got if layout == "x" else got.T, want, err_msg="fused in place " + tag)


def test_stream_kernel_on_a_stack_of_y_lines():
    """A stack (nv, ny, nx)'s y-lines as one launch of lines in groups: the mirror on each variable."""
    cp = get_backend("cupy").xp
    nv, ny, nx = 3, 700, 45
    rng = np.random.default_rng(2)
    for boundary in schemes.BOUNDARIES:
        for dtype in (np.float64, np.float32):
            p = window.plan(_fac(ny, boundary, -0.25), dtype)
            dev = stream.DeviceStream(p, dtype)
            f = rng.standard_normal((nv, ny, nx)).astype(dtype)
            out = cp.full(f.shape, cp.nan, dtype=dtype)
            dev.derivative(cp.asarray(f), out, nv * nx, 1, nx, 0.01, -0.25, group=(nx, ny * nx))
            lines = f.transpose(0, 2, 1).reshape(nv * nx, ny)  # the launch's lines, in its order
            want = stream.derivative(p, lines, 0.01, boundary, -0.25, dtype).reshape(nv, nx, ny).transpose(0, 2, 1)
            np.testing.assert_array_equal(cp.asnumpy(out), want)


@pytest.mark.parametrize("axis", ["x", "y"])
@pytest.mark.parametrize("kernel", ["fused", "cuda"])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stream_derivative_against_dense(axis, kernel, boundary, dtype):
    """The engine's Derivative with solver = stream (kernel fused: one launch; cuda: the stencil right-hand
    side, then the stream solve) on odd sizes and lines shorter than one window, against the dense reference."""
    be = get_backend("cupy")
    cp = be.xp
    rng = np.random.default_rng(6)
    for shape, delta in (((37, 100), 0.0), ((130, 64), -0.25), ((9, 257), 0.25), ((3, 4096), 0.0), ((5, 9), 0.0),
                         ((33, 1500), 0.0)):
        if axis == "y":
            shape = shape[::-1]
        if kernel == "cuda" and delta:
            continue
        f = rng.standard_normal(shape)
        h = 0.37
        sel = {"solver": "stream", "y-direction": "strided", "kernel": kernel}
        op = Derivative(shape=shape, axis=axis, h=h, boundary=boundary, delta=delta, dtype=dtype, selection=sel,
                        backend=be, stream=None)
        out = cp.full(shape, cp.nan, dtype=dtype)
        op(cp.asarray(f.astype(dtype)), out)
        want = schemes.derivative_dense(f, h, boundary, delta, axis=-1 if axis == "x" else 0)
        np.testing.assert_allclose(cp.asnumpy(out), want, rtol=0, atol=TOL[dtype] * np.max(np.abs(want)),
                                   err_msg=f"{axis} {kernel} {boundary} δ={delta} {shape}")

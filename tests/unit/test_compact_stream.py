"""``solver = stream`` (engine/compact/solvers/stream.py, shaders/cuda/compact/stream.cu): the windows (outputs
partition every line, halos at least the window plan's, no window longer than a block holds), the NumPy mirror
of the kernel's decomposition against the dense solve to the dtype's round-off (and visibly short of it with
the halos halved), and the CUDA kernel — the exact source compiled with g++ against tests/cuda_emu/emu.h —
against the mirror bit for bit: x-lines (the staged tile) and y-lines, both boundaries, both schemes, both
precisions, solve and fused derivative, several windows and several warps a window, a stack's y-lines."""
from __future__ import annotations

import ctypes
import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from nagare.engine.compact import schemes, solvers, tridiag
from nagare.engine.compact.solvers import stream, window

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "shaders" / "cuda" / "compact" / "stream.cu"
ROUND_OFF = 16  # the mirror's error bound in ε × the largest value (test_compact_window.py's: same halos)


def _fac(n, boundary, delta=0.0):
    return tridiag.factorise(*schemes.bands(n, boundary, delta), boundary == "periodic")


def _tol(dtype, want):
    return ROUND_OFF * np.finfo(dtype).eps * np.max(np.abs(want))


def test_stream_is_a_registered_solver_that_fuses():
    s = solvers.get("stream")
    assert s.fuses_rhs and not s.contiguous_only
    assert "stream" in solvers.SOLVERS and s.kernel_specs(np.float64, {}, (8, 8))[0].sources[-1].endswith("stream.cu")


@pytest.mark.parametrize("n", [9, 60, 300, 1024, 4096])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("delta", [0.0, -0.25])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_windows_partition_the_line_with_their_halos(n, boundary, delta, dtype):
    p = window.plan(_fac(n, boundary, delta), dtype)
    rows = stream.rows_of(p)
    for warps in (stream.WINDOW // rows, stream.WINDOW_FEW // rows):
        win = stream.windows(p, warps, rows)
        a, o0, o1, b = win.T
        assert o0[0] == 0 and o1[-1] == n and np.all(o0[1:] == o1[:-1]) and np.all(o1 > o0)
        assert np.all(b - a <= warps * rows)
        if boundary == "periodic":
            np.testing.assert_array_equal(o0 - a, p.halo_f)
            np.testing.assert_array_equal(b - o1, p.halo_b)
        else:  # a halo is either whole or runs to the line's end (exact sweeps there)
            assert np.all((o0 - a >= p.halo_f) | (a == 0)) and np.all((b - o1 >= p.halo_b) | (b == n))
            assert np.all(a >= 0) and np.all(b <= n)


def test_a_halo_longer_than_a_window_is_refused_in_one_line():
    p = window.plan(_fac(4096, "periodic"), np.float64)
    with pytest.raises(ValueError, match="stream solver: halos of 40 \\+ 40 rows .* window of 2 × 32 rows"):
        stream.windows(p, 2, 32)


def test_few_lines_take_the_shorter_windows():
    p = window.plan(_fac(1024, "periodic"), np.float64)
    rows = stream.rows_of(p)
    assert stream.layout(p, 1024)[1] == stream.WINDOW_FEW // rows  # 32 strips × 3 windows of 512 rows: too few
    p = window.plan(_fac(4096, "periodic"), np.float64)
    assert stream.layout(p, 4096)[1] == stream.WINDOW // rows


@pytest.mark.parametrize("n,nsys", [(9, 5), (60, 7), (300, 40), (1000, 3), (4096, 4)])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mirror_against_the_dense_derivative(n, nsys, boundary, dtype):
    """x-lines and y-lines (the same lines, transposed) of the central and dissipative schemes."""
    rng = np.random.default_rng(n)
    h = 0.37
    for delta in (0.0, -0.25, 0.25):
        p = window.plan(_fac(n, boundary, delta), dtype)
        f = rng.standard_normal((nsys, n))
        want = schemes.derivative_dense(f, h, boundary, delta, axis=-1)
        got = stream.derivative(p, f.astype(dtype), h, boundary, delta, dtype)
        np.testing.assert_allclose(got, want, rtol=0, atol=_tol(dtype, want), err_msg=f"{boundary} δ={delta}")
        got_y = stream.derivative(p, np.ascontiguousarray(f.T).astype(dtype).T, h, boundary, delta, dtype)
        np.testing.assert_array_equal(got_y, got)


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_half_halos_are_visibly_short(boundary, dtype):
    """The halos are what makes the windows exact: halved, 4096-point lines (24 windows of 256 rows) miss the dense
    derivative by more than the tolerance above (which so cannot pass by accident)."""
    n = 4096
    p = window.plan(_fac(n, boundary), dtype)
    short = dataclasses.replace(p, halo_f=p.halo_f // 2, halo_b=p.halo_b // 2)
    f = np.random.default_rng(1).standard_normal((3, n)).astype(dtype)
    want = schemes.derivative_dense(f.astype(np.float64), 0.01, boundary)
    r = schemes.rhs(np, f, 0.01, boundary)
    np.testing.assert_allclose(stream.solve(p, r, dtype), want, rtol=0, atol=_tol(dtype, want))
    assert np.max(np.abs(stream.solve(short, r, dtype) - want)) > 2 * _tol(dtype, want)


def test_the_numpy_solver_is_the_mirror():
    fac = _fac(700, "closures", -0.25)
    d = np.random.default_rng(4).standard_normal((6, 700))
    s = solvers.get("stream")
    p = s.prepare(fac, np.float64, np)
    np.testing.assert_array_equal(s.solve(fac, p, d), stream.solve(p, d))


WRAPPER = r"""
#include "emu.h"
inline void __syncwarp(unsigned = 0xffffffffu) { emu_arrive_and_wait(emu_block->warp_bar[emu_tid / 32]); }
#define nagare_smem tb_smem  // emu_launch NaN-poisons tb_smem before each block
#include "window.cu"
#include "stream.cu"
#define KARGS in, out, fac, coef, win, n, nsys, ss, es, per, gs, lo, hi

template <typename T, bool S, int R>
static void go(int periodic, int fused, int diss, int gx, int gy, int by, const T* in, T* out, const T* fac,
               const T* coef, const int* win, int n, int nsys, long long ss, long long es, int per, long long gs,
               int lo, int hi)
{
#define NAGARE_GO(P, F, D) emu_launch(gx, gy, 32, by, [=] { compact_stream<T, P, F, D, S, R>(KARGS); })
    if (periodic) {
        if (!fused) NAGARE_GO(true, false, false);
        else if (diss) NAGARE_GO(true, true, true);
        else NAGARE_GO(true, true, false);
    } else {
        if (!fused) NAGARE_GO(false, false, false);
        else if (diss) NAGARE_GO(false, true, true);
        else NAGARE_GO(false, true, false);
    }
#undef NAGARE_GO
}

#define STREAM(T, S, R) \
extern "C" void stream_##S##R(int stage, int periodic, int fused, int diss, int gx, int gy, int by, const T* in, \
                              T* out, const T* fac, const T* coef, const int* win, int n, int nsys, long long ss, \
                              long long es, int per, long long gs, int lo, int hi) { \
    if (stage) go<T, true, R>(periodic, fused, diss, gx, gy, by, KARGS); \
    else go<T, false, R>(periodic, fused, diss, gx, gy, by, KARGS); }

STREAM(double, d, 8)
STREAM(float, f, 8)
STREAM(double, d, 32)
"""
EMU_ROWS = 8  # the emulated instance's rows a thread, in windows of 128 rows (fp32 and few lines: 64): several
#              windows of several warps on short lines


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to emulate the kernels")
    from tests.unit.cuda_emulator import compile_threaded

    return compile_threaded(WRAPPER, SOURCE, "stream_emu", tmp_path_factory)


@pytest.fixture(autouse=True)
def short_windows(monkeypatch, request):
    if "lib" in request.fixturenames and "shipped" not in request.node.name:
        monkeypatch.setattr(stream, "WINDOW", 128)
        monkeypatch.setattr(stream, "WINDOW_FEW", 64)


def _p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def run(lib, p, dtype, fused, delta, src, dst, nsys, ss, es, *, h=0.3, group=None, rows=EMU_ROWS):
    """One emulated launch as stream.DeviceStream makes it (stream.layout, stream.staged, stream.shared_bytes)."""
    win, warps = stream.layout(p, nsys, rows)
    stage = stream.staged(es, group)
    assert stream.shared_bytes(warps, dtype, stage, rows) <= 400_000
    per, gs = group or (nsys, 0)
    fac, coef = p.packed().astype(dtype), stream.coefficients(dtype, h, delta)
    win = np.ascontiguousarray(win.ravel(), dtype=np.int32)
    fn = getattr(lib, ("stream_d" if np.dtype(dtype) == np.float64 else "stream_f") + str(rows))
    i, ll = ctypes.c_int, ctypes.c_longlong
    fn(i(stage), i(p.periodic), i(fused), i(bool(delta)), i(len(win) // 4), i(-(-nsys // 32)), i(warps), _p(src),
       _p(dst), _p(fac), _p(coef), _p(win), i(p.n), i(nsys), ll(ss), ll(es), i(per), ll(gs), i(p.lo), i(p.hi))


def _want(p, lines, fused, boundary, delta, dtype, h=0.3, rows=EMU_ROWS):
    r = schemes.rhs(np, lines.astype(dtype), h, boundary, delta) if fused else lines
    return stream.solve(p, r, dtype, rows=rows)


@pytest.mark.parametrize("n,other", [(13, 7), (150, 37), (9, 3), (300, 5)], ids=lambda v: str(v))
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("layout", ["x", "y"])
def test_emulated_stream_kernel_equals_the_mirror(lib, n, other, boundary, layout):
    """n-point lines, ``other`` of them (37: two groups of 32 lanes, the second partly empty), solve and
    fused derivative (central and dissipative), fp64 and fp32: the mirror bit for bit, nothing outside the
    lines written, the source untouched. 8 rows a thread: 150 and 300 points are several windows of
    several warps; 9 and 13 periodic points wrap more than once."""
    rng = np.random.default_rng(n + other)
    for delta in (0.0, -0.25):
        fac = _fac(n, boundary, delta)
        for dtype in (np.float64, np.float32):
            p = window.plan(fac, dtype)
            shape = (other, n) if layout == "x" else (n, other)
            a2 = rng.standard_normal(shape).astype(dtype)
            lines = a2 if layout == "x" else a2.T
            nsys, ss, es = (other, n, 1) if layout == "x" else (other, 1, other)
            for fused in (False, True):
                if not fused and delta:
                    continue
                src = a2.copy()
                buf = np.full(a2.size + 3, np.nan, dtype)  # 3 sentinels past the field
                dst = buf[:a2.size].reshape(shape)
                run(lib, p, dtype, fused, delta, src, dst, nsys, ss, es)
                got = dst if layout == "x" else dst.T
                tag = f"{layout} n {n} lines {other} {np.dtype(dtype).name} fused {fused} delta {delta}"
                np.testing.assert_array_equal(got, _want(p, lines, fused, boundary, delta, dtype), err_msg=tag)
                assert np.isnan(buf[a2.size:]).all()
                np.testing.assert_array_equal(src, a2)


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
def test_emulated_stream_kernel_on_a_stack_of_y_lines_against_dense(lib, boundary):
    """A stack (nv, ny, nx)'s y-lines as one launch of lines in groups (nx = 45: a warp straddles two
    variables' lines) against the dense reference derivative of each variable."""
    nv, ny, nx = 2, 200, 45
    f = np.random.default_rng(5).standard_normal((nv, ny, nx))
    p = window.plan(_fac(ny, boundary, -0.25), np.float64)
    out = np.full_like(f, np.nan)
    h = 1.0 / ny
    run(lib, p, np.float64, True, -0.25, f, out, nv * nx, 1, nx, h=h, group=(nx, ny * nx))
    for v in range(nv):
        want = schemes.derivative_dense(f[v], h, boundary, -0.25, axis=0)
        np.testing.assert_allclose(out[v], want, rtol=0, atol=_tol(np.float64, want))


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("layout", ["x", "y"])
def test_emulated_shipped_instance_equals_the_mirror(lib, boundary, layout):
    """The fp64 instance the device runs (32 rows a thread, the module's windows: 1100-point lines in 256-row
    windows of 8 warps, 6 or 7 of them), fused dissipative derivative of 40 lines: the mirror bit for bit."""
    n, other = 1100, 40
    a2 = np.random.default_rng(7).standard_normal((other, n) if layout == "x" else (n, other))
    p = window.plan(_fac(n, boundary, -0.25), np.float64)
    assert len(stream.layout(p, other)[0]) >= 6
    nsys, ss, es = (other, n, 1) if layout == "x" else (other, 1, other)
    dst = np.full_like(a2, np.nan)
    run(lib, p, np.float64, True, -0.25, a2, dst, nsys, ss, es, rows=32)
    lines = a2 if layout == "x" else a2.T
    np.testing.assert_array_equal(dst if layout == "x" else dst.T,
                                  _want(p, lines, True, boundary, -0.25, np.float64, rows=32))

"""The ``scan`` solver and the ``fused`` compact derivative (engine/compact/solvers/scan.py,
shaders/cuda/compact/scan.cu): the NumPy mirror against dense solves and Thomas, and the CUDA kernel —
the exact source compiled with g++ against tests/cuda_emu/emu.h (one fiber per CUDA thread,
barriers, warp shuffles) and launched with the engine's launch shape — against the mirror bit for bit:
every chunk size, both boundary kinds, both schemes, both precisions, contiguous and strided lines,
in place and not."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from nagare.engine.compact import schemes, tridiag
from nagare.engine.compact.solvers import scan
from nagare.engine.compact.solvers.thomas import thomas

ROOT = Path(__file__).resolve().parents[2]
EMU_DIR = ROOT / "tests" / "cuda_emu"
SOURCE = ROOT / "shaders" / "cuda" / "compact" / "scan.cu"


def _fac(n, boundary, delta=0.0):
    return tridiag.factorise(*schemes.bands(n, boundary, delta), boundary == "periodic")


@pytest.mark.parametrize("chunk", scan.CHUNKS)
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("n", [8, 13, 31, 32, 33, 100, 257])
def test_numpy_scan_solves_like_a_dense_solve(n, boundary, chunk):
    rng = np.random.default_rng(n + chunk)
    for delta in (0.0, -0.25):
        fac = _fac(n, boundary, delta)
        p = scan.plan(fac, chunk)
        d = rng.standard_normal((3, 4, n))
        exact = np.linalg.solve(schemes.dense(n, boundary, delta), d.reshape(-1, n).T).T.reshape(d.shape)
        scale = np.max(np.abs(exact))
        np.testing.assert_allclose(scan.solve(p, d), exact, rtol=0, atol=1e-13 * scale)
        np.testing.assert_allclose(scan.solve(p, d.astype(np.float32)), exact, rtol=0, atol=3e-6 * scale)
        # and Thomas, the NumPy reference, to the registry's solver tolerance
        from nagare.engine.compact.variants import SOLVER_ATOL, SOLVER_RTOL

        np.testing.assert_allclose(scan.solve(p, d), thomas(fac, d), rtol=SOLVER_RTOL, atol=SOLVER_ATOL)


def test_chunk_size_rule_and_limit():
    assert scan.chunk_size(64) == 8 and scan.chunk_size(4096) == 8 and scan.chunk_size(4097) == 16
    p = scan.plan(_fac(2048, "closures"))
    assert (p.team, p.chunk, p.rows) == (256, 8, 2048)
    assert p.team % 32 == 0 and p.team <= scan.MAX_TEAM
    with pytest.raises(ValueError, match="at most 16384 points"):
        scan.chunk_size(16385)
    with pytest.raises(ValueError, match="chunk 5 unsupported"):
        scan.plan(_fac(64, "closures"), 5)


def test_padding_rows_carry_the_last_row_and_contribute_nothing():
    """A line that ends mid-chunk and mid-team: the padded rows' constants make the loops bound-free —
    the solution equals the one of the same line solved with a team that has no padding at all."""
    rng = np.random.default_rng(3)
    for boundary in schemes.BOUNDARIES:
        d = rng.standard_normal((2, 128))
        want = scan.solve(scan.plan(_fac(128, boundary), 4), d)  # 32 chunks: one warp, no padding
        p = scan.plan(_fac(128, boundary), 16)  # 8 chunks of a 32-thread team: 24 empty chunks
        assert p.rows == 512
        np.testing.assert_allclose(scan.solve(p, d), want, rtol=0, atol=1e-14 * np.max(np.abs(want)))


def test_fused_derivative_has_the_modified_wavenumber():
    """The fused derivative (right-hand side + scan solve) of sin(kx) on a periodic line is k'(k) cos(kx)
    with Lele's modified wavenumber, to round-off."""
    n = 96
    h = 2 * np.pi / n
    x = np.arange(n) * h
    p = scan.plan(_fac(n, "periodic"))
    for m in (1, 7, 24, 40):
        kh = m * h
        got = scan.derivative(p, np.sin(m * x), h, "periodic")
        want = schemes.modified_wavenumber(kh) / h * np.cos(m * x)
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-12 * m)


# ---- the CUDA kernel on the CPU --------------------------------------------------------------------
WRAPPER = r"""
#include "emu.h"
#define nagare_smem tb_smem  // emu_launch NaN-poisons tb_smem before each block
#include "scan.cu"
#define KARGS in, out, fac, coef, n, nsys, ss, es, lo, hi, per, gs  // the kernel's arguments, in order

template <typename T, int C, int W>
static void go(int periodic, int fused, int diss, int gx, int bx, const T* in, T* out, const T* fac, const T* coef,
               int n, int nsys, long long ss, long long es, int lo, int hi, int per, long long gs)
{
#define NAGARE_GO(P, F, D) \
    emu_launch(gx, 1, bx, W, [=] { compact_scan<T, C, P, F, D, W>(KARGS); })
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

template <typename T, int W>
static void chunks(int chunk, int periodic, int fused, int diss, int gx, int bx, const T* in, T* out, const T* fac,
                   const T* coef, int n, int nsys, long long ss, long long es, int lo, int hi, int per, long long gs)
{
    switch (chunk) {
    case 4: go<T, 4, W>(periodic, fused, diss, gx, bx, KARGS); break;
    case 8: go<T, 8, W>(periodic, fused, diss, gx, bx, KARGS); break;
    case 16: go<T, 16, W>(periodic, fused, diss, gx, bx, KARGS); break;
    default: go<T, 32, W>(periodic, fused, diss, gx, bx, KARGS); }
}

#define SCAN(T, S) \
extern "C" void scan_##S(int chunk, int lines, int periodic, int fused, int diss, int gx, int bx, const T* in, \
                         T* out, const T* fac, const T* coef, int n, int nsys, long long ss, long long es, int lo, \
                         int hi, int per, long long gs) { \
    switch (lines) { \
    case 1: chunks<T, 1>(chunk, periodic, fused, diss, gx, bx, KARGS); break; \
    case 2: chunks<T, 2>(chunk, periodic, fused, diss, gx, bx, KARGS); break; \
    case 4: chunks<T, 4>(chunk, periodic, fused, diss, gx, bx, KARGS); break; \
    default: chunks<T, 8>(chunk, periodic, fused, diss, gx, bx, KARGS); } }

SCAN(double, d)
SCAN(float, f)
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to emulate the kernels")
    from tests.unit.cuda_emulator import compile_threaded

    return compile_threaded(WRAPPER, SOURCE, "scan_emu", tmp_path_factory)


def _p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def emulate(lib, p: scan.ScanPlan, a2, layout: str, *, fused: bool, h=1.0, delta=0.0, in_place=False):
    """The kernel over the lines of a 2D array: layout "x" (rows, contiguous) or "y" (columns, stride nx),
    launched as scan.DeviceScan launches it (grid = lines, block = the plan's team)."""
    dtype = a2.dtype
    ny, nx = a2.shape
    n, nsys, ss, es = (nx, ny, nx, 1) if layout == "x" else (ny, nx, 1, nx)
    assert n == p.n and p.shared_bytes(dtype) <= 400_000  # emu.h tb_smem
    fac = p.packed().astype(dtype)
    coef = scan.coefficients(dtype, h, delta)
    src = a2.copy()
    out = src if in_place else np.full_like(a2, np.nan)
    _launch(lib, p, dtype, fused, bool(delta), src, out, fac, coef, nsys, ss, es)
    return out


class _EmulatedLaunches(scan.DeviceScan):
    """scan.DeviceScan's batch logic (``_launch``: the groups, their offsets) with each kernel launch run
    on the emulated kernel; ``tiles`` records every launch's W."""

    def __init__(self, lib, p, dtype, fac):
        self.lib, self.plan, self.dtype, self.fac_host, self.tiles = lib, p, np.dtype(dtype), fac, []

    def _launch_one(self, fused, dissipative, src, dst, coef, nsys, sys_stride, elem_stride, per, group_stride):
        self.tiles.append(_launch_one(self.lib, self.plan, self.dtype, fused, dissipative, src, dst, self.fac_host,
                                      coef, nsys, sys_stride, elem_stride, per, group_stride))


def _launch(lib, p, dtype, fused, diss, src, dst, fac, coef, nsys, ss, es, group=None):
    """The emulated launches of one batch as scan.DeviceScan makes them (its ``_launch``: scan.launches;
    W lines a block for strided lines, in scan.launch_shape's geometry); ``group``: lines in groups,
    (per, group stride). Returns the last launch's W."""
    run = _EmulatedLaunches(lib, p, dtype, fac)
    run._launch(fused, diss, src, dst, coef, nsys, ss, es, group)
    return run.tiles[-1]


def _launch_one(lib, p, dtype, fused, diss, src, dst, fac, coef, nsys, ss, es, per, gs):
    w, grid, block, smem = scan.launch_shape(p, dtype, nsys, ss, es)
    assert block == (p.team, w) and smem <= 400_000  # emu.h tb_smem
    fn = getattr(lib, "scan_d" if np.dtype(dtype) == np.float64 else "scan_f")
    i, ll = ctypes.c_int, ctypes.c_longlong
    fn(i(p.chunk), i(w), i(p.periodic), i(fused), i(diss), i(grid[0]), i(p.team), _p(src), _p(dst), _p(fac),
       _p(coef), i(p.n), i(nsys), ll(ss), ll(es), i(p.t_lo), i(p.t_hi), i(per), ll(gs))
    return w


CASES = [(n, bc) for n in (8, 13, 40, 97) for bc in schemes.BOUNDARIES]


@pytest.mark.parametrize("n,boundary", CASES, ids=lambda v: str(v))
def test_emulated_scan_kernel_equals_the_numpy_mirror(lib, n, boundary):
    rng = np.random.default_rng(n)
    for chunk in (4, 8) if n < 40 else scan.CHUNKS:
        for delta in (0.0, -0.25):
            p = scan.plan(_fac(n, boundary, delta), chunk)
            for dtype in (np.float64, np.float32):
                for layout in ("x", "y"):
                    shape = (3, n) if layout == "x" else (n, 3)
                    a2 = rng.standard_normal(shape).astype(dtype)
                    lines = a2 if layout == "x" else a2.T
                    tag = f"chunk {chunk} delta {delta} {np.dtype(dtype).name} {layout}-lines"
                    got = emulate(lib, p, a2, layout, fused=False, in_place=layout == "y")
                    want = scan.solve(p, lines, dtype)
                    np.testing.assert_array_equal(got if layout == "x" else got.T, want, err_msg="solve " + tag)
                    h = 0.37
                    got = emulate(lib, p, a2, layout, fused=True, h=h, delta=delta, in_place=layout == "x")
                    want = scan.derivative(p, lines, h, boundary, delta, dtype)
                    np.testing.assert_array_equal(got if layout == "x" else got.T, want, err_msg="fused " + tag)


def test_strided_lines_go_in_sector_tiles():
    """Strided lines side by side (the y-lines of a row-major field) are solved W to a block: one 32-byte
    sector of each row (4 fp64 / 8 fp32 lines), fewer where the block would pass 512 threads; contiguous
    lines, or strided lines not side by side, one to a block."""
    assert scan.tile_lines(64, np.float64, 1, 512) == 4
    assert scan.tile_lines(64, np.float32, 1, 512) == 8
    assert scan.tile_lines(256, np.float64, 1, 2048) == 2  # 2048-point lines: 256 threads a line
    assert scan.tile_lines(512, np.float32, 1, 4096) == 1
    assert scan.tile_lines(64, np.float64, 512, 1) == 1  # x-lines
    assert scan.tile_lines(64, np.float64, 7, 512) == 1  # strided but not adjacent
    p = scan.plan(_fac(100, "closures"))
    w, grid, block, smem = scan.launch_shape(p, np.float64, 13, 1, 13)
    assert (w, grid, block) == (4, (4,), (p.team, 4))
    assert smem == 4 * (p.rows + p.team + 4) * 8  # + 128 bytes between lines: the row segments' banks differ
    assert scan.launch_shape(p, np.float64, 2, 1, 13)[0] == 2  # no wider than the lines there are
    assert scan.launch_shape(p, np.float64, 1, 1, 13)[0] == 1
    # the warm-up's module for strided lines holds those tiles' instances; none where W is 1
    assert {name.rsplit(", ", 1)[1] for name in scan.strided_spec(100, np.float64).name_expressions} == {"4>"}
    assert scan.strided_spec(4096, np.float64) is None


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
def test_emulated_tiles_of_strided_lines_equal_the_mirror(lib, boundary):
    """Tiles of W strided lines, the last one part empty (13 or 21 lines), fp64 and fp32, solve and fused
    derivative, in place and not: every line equals the mirror bit for bit, and lines past the last are
    neither read nor written (the output outside the field stays untouched)."""
    rng = np.random.default_rng(11)
    n = 97
    for nx in (13, 21):
        for dtype in (np.float64, np.float32):
            p = scan.plan(_fac(n, boundary, -0.25))
            assert scan.tile_lines(p.team, dtype, 1, nx) > 1 and nx % scan.tile_lines(p.team, dtype, 1, nx)
            a2 = rng.standard_normal((n, nx)).astype(dtype)
            for fused, delta, in_place in ((False, 0.0, True), (True, 0.0, False), (True, -0.25, True)):
                got = emulate(lib, p, a2, "y", fused=fused, h=0.3, delta=delta, in_place=in_place)
                want = (scan.derivative(p, a2.T, 0.3, boundary, delta, dtype) if fused
                        else scan.solve(p, a2.T, dtype))
                np.testing.assert_array_equal(got.T, want, err_msg=f"{nx} lines {np.dtype(dtype).name} fused {fused}")
            # a field wider than the lines solved: the tile's lines past nsys are left alone
            wide = rng.standard_normal((n, nx + 3)).astype(dtype)
            fac = p.packed().astype(dtype)
            coef = scan.coefficients(dtype, 0.3, 0.0)
            out = np.full_like(wide, 7.0)
            w = _launch(lib, p, dtype, True, False, wide.copy(), out, fac, coef, nx, 1, nx + 3)
            assert w > 1
            np.testing.assert_array_equal(out[:, nx:], 7.0)
            np.testing.assert_array_equal(out[:, :nx].T, scan.derivative(p, wide[:, :nx].T, 0.3, boundary, 0.0, dtype))


@pytest.mark.parametrize("n,chunk", [(300, 4), (1100, 8)])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
def test_emulated_tiles_of_many_warp_teams_equal_the_mirror(lib, n, chunk, boundary):
    """Tiles whose teams span several warps (96 threads in tiles of 4 lines, 160 in tiles of 2): each
    line's warp totals have their own slots, and the carries cross warps."""
    rng = np.random.default_rng(1)
    p = scan.plan(_fac(n, boundary, -0.25), chunk)
    assert p.team > 32
    for dtype in (np.float64, np.float32):
        nx = 5
        w = scan.tile_lines(p.team, dtype, 1, nx)
        assert w > 1
        a2 = rng.standard_normal((n, nx)).astype(dtype)
        for fused, delta in ((False, 0.0), (True, -0.25)):
            got = emulate(lib, p, a2, "y", fused=fused, h=0.3, delta=delta)
            want = scan.derivative(p, a2.T, 0.3, boundary, delta, dtype) if fused else scan.solve(p, a2.T, dtype)
            np.testing.assert_array_equal(got.T, want, err_msg=f"{np.dtype(dtype).name} W {w} team {p.team}")


GUARDED_CHILD = r"""
import ctypes, mmap, sys
import numpy as np
from nagare.engine.compact import schemes, tridiag
from nagare.engine.compact.solvers import scan
from nagare.engine.compact.solvers.thomas import thomas

lib = ctypes.CDLL(sys.argv[1])
control = sys.argv[2] == "control"
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
n, nx, h = 97, 13, 0.3


def guarded(shape, dtype):
    # an array whose last byte is the last byte before a page nothing may touch (PROT_NONE)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    pages = -(-nbytes // mmap.PAGESIZE) + 1
    buf = mmap.mmap(-1, pages * mmap.PAGESIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    guard = base + (pages - 1) * mmap.PAGESIZE
    assert libc.mprotect(guard, mmap.PAGESIZE, 0) == 0
    a = np.frombuffer(buf, dtype, count=int(np.prod(shape)), offset=(pages - 1) * mmap.PAGESIZE - nbytes)
    return a.reshape(shape), guard


for dtype, fn in ((np.float64, lib.scan_d), (np.float32, lib.scan_f)):
    for boundary in schemes.BOUNDARIES:
        p = scan.plan(tridiag.factorise(*schemes.bands(n, boundary), boundary == "periodic"))
        w, grid, block, _ = scan.launch_shape(p, dtype, nx, 1, nx)
        assert w > 1 and nx % w
        f, guard = guarded((n, nx), dtype)
        f[...] = np.random.default_rng(3).standard_normal((n, nx))
        want = scan.derivative(p, f.T.copy(), h, boundary, 0.0, dtype)
        out, _ = guarded((n, nx), dtype)
        if control:  # the guard works: touching it ends the process with SIGSEGV
            ctypes.c_char.from_address(guard).value
        fac, coef = p.packed().astype(dtype), scan.coefficients(dtype, h, 0.0)
        i, ll, ptr = ctypes.c_int, ctypes.c_longlong, lambda a: a.ctypes.data_as(ctypes.c_void_p)
        for src in (f, out):  # out of place, then in place on the result's array
            if src is out:
                out[...] = f
            fn(i(p.chunk), i(w), i(p.periodic), i(1), i(0), i(grid[0]), i(p.team), ptr(src), ptr(out), ptr(fac),
               ptr(coef), i(n), i(nx), ll(1), ll(nx), i(p.t_lo), i(p.t_hi), i(nx), ll(0))
            np.testing.assert_array_equal(out.T, want)
print("ok")
"""


def test_emulated_tiles_touch_nothing_past_the_last_line(lib):
    """A part-empty tile of strided lines neither reads nor writes past the last line: the field ends
    where a page no process may touch begins (lines past nsys would reach up to W - 1 values into it).
    Run in a child process (a fault ends it, not the test run); the control run touches the guard."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = [sys.executable, "-c", GUARDED_CHILD, lib._name]
    res = subprocess.run(run + ["check"], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
    ctl = subprocess.run(run + ["control"], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert ctl.returncode == -signal.SIGSEGV, (ctl.returncode, ctl.stderr[-2000:])


def test_emulated_fused_kernel_on_a_long_line_matches_a_dense_solve(lib):
    """A 2048-point line as the benchmark runs it (team 256, 8 warps: the fold over warp totals)."""
    n = 2048
    rng = np.random.default_rng(5)
    for boundary in schemes.BOUNDARIES:
        p = scan.plan(_fac(n, boundary))
        assert p.team == 256
        f = rng.standard_normal((2, n))
        h = 1.0 / n
        got = emulate(lib, p, f, "x", fused=True, h=h)
        np.testing.assert_array_equal(got, scan.derivative(p, f, h, boundary))
        exact = schemes.derivative_dense(f, h, boundary)
        np.testing.assert_allclose(got, exact, rtol=0, atol=1e-13 * np.max(np.abs(exact)))


@pytest.mark.parametrize("nx", [1, 7, 8, pytest.param(37, marks=pytest.mark.slow)])
def test_emulated_stack_y_lines_in_one_launch_equal_the_mirror(lib, nx):
    """A stack (nv, ny, nx)'s y-lines as one launch of nv groups of nx lines, a variable (ny·nx values)
    apart — tiles of W lines that straddle two variables where nx is not a multiple of W (7, 37), a
    part-empty last tile — solve and fused derivative, both boundaries, fp64/fp32, out of place and in
    place: bit for bit the mirror on each variable's lines, and nothing outside the stack written."""
    ny, nv = 40, 3
    rng = np.random.default_rng(nx)
    for boundary in schemes.BOUNDARIES:
        p = scan.plan(_fac(ny, boundary, -0.25))
        for dtype in (np.float64, np.float32):
            f = rng.standard_normal((nv, ny, nx)).astype(dtype)
            coef_h = 0.3
            for fused, delta in ((False, 0.0), (True, 0.0), (True, -0.25)):
                want = np.stack([(scan.derivative(p, f[v].T, coef_h, boundary, delta, dtype) if fused
                                  else scan.solve(p, f[v].T, dtype)).T for v in range(nv)])
                for in_place in (False, True):
                    buf = np.full(nv * ny * nx + 5, np.nan, dtype)  # 5 sentinels past the stack
                    src = buf[:nv * ny * nx].reshape(nv, ny, nx)
                    src[...] = f
                    dst = src if in_place else np.full_like(f, np.nan)
                    fac, coef = p.packed().astype(dtype), scan.coefficients(dtype, coef_h, delta)
                    w = _launch(lib, p, dtype, fused, bool(delta), src, dst, fac, coef, nv * nx, 1, nx,
                                group=(nx, ny * nx))
                    assert w == (1 if nx == 1 else 32 // np.dtype(dtype).itemsize)
                    np.testing.assert_array_equal(dst, want)
                    assert np.isnan(buf[nv * ny * nx:]).all()
                    if not in_place:
                        np.testing.assert_array_equal(src, f)


def test_emulated_stack_of_long_y_lines_goes_a_group_a_launch(lib):
    """Long strided lines (teams of 288 threads: one line a block) take no groups in the kernel: the batch
    is one launch per variable (scan.launches), and the result is still the mirror's bit for bit."""
    ny, nx, nv = 2100, 3, 4
    p = scan.plan(_fac(ny, "closures"))
    assert scan.launch_shape(p, np.float64, nv * nx, 1, nx)[0] == 1
    assert scan.launches(p, np.float64, nv * nx, 1, nx, (nx, ny * nx)) == [(v * ny * nx, nx, nx, 0) for v in range(nv)]
    f = np.random.default_rng(4).standard_normal((nv, ny, nx))
    out = np.full_like(f, np.nan)
    fac, coef = p.packed(), scan.coefficients(np.float64, 0.5, 0.0)
    _launch(lib, p, np.float64, True, False, f, out, fac, coef, nv * nx, 1, nx, group=(nx, ny * nx))
    want = np.stack([scan.derivative(p, f[v].T, 0.5, "closures", 0.0, np.float64).T for v in range(nv)])
    np.testing.assert_array_equal(out, want)


def test_grouped_lines_must_divide_the_launch():
    """scan.DeviceScan refuses groups that do not tile the lines (before any device work)."""
    d = scan.DeviceScan.__new__(scan.DeviceScan)
    d.plan, d.dtype = scan.plan(_fac(16, "closures")), np.dtype(np.float64)
    with pytest.raises(ValueError, match="groups of 5"):
        d._launch(False, False, None, None, None, 12, 1, 16, (5, 80))


@pytest.mark.parametrize("periodic", [False, True])
def test_emulated_scan_carries_across_warps_of_a_weakly_dominant_matrix(lib, periodic):
    """Lele's matrix forgets a chunk's carry within a few chunks (|l| → 0.38), so the fold over warp
    totals barely shows in its results. A weakly dominant matrix (0.499, 1, 0.499: |l| → 0.94) carries
    values across the whole line: the kernel still equals the mirror bit for bit and a dense solve."""
    n = 700
    lower, upper = np.full(n, 0.499), np.full(n, 0.499)
    if not periodic:
        lower[0] = upper[-1] = 0.0
    fac = tridiag.factorise(lower, np.ones(n), upper, periodic)
    p = scan.plan(fac, 4)
    assert p.team // 32 == 6
    a = np.diag(np.ones(n)) + np.diag(lower[1:], -1) + np.diag(upper[:-1], 1)
    if periodic:
        a[0, -1], a[-1, 0] = lower[0], upper[-1]
    d = np.random.default_rng(9).standard_normal((3, n))
    got = emulate(lib, p, d, "x", fused=False)
    np.testing.assert_array_equal(got, scan.solve(p, d))
    exact = np.linalg.solve(a, d.T).T
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-11 * np.max(np.abs(exact)))


# ---- the engine's fused paths on the emulated kernel -------------------------------------------------
class _EmulatedScanDevice:
    """The device side of solver = scan (lines.device_solver's signature) on the emulated scan.cu (launch
    shape: scan.DeviceScan's), every launch logged as (fused, nsys, sys_stride, elem_stride), its lines per
    block in ``tiles``."""

    lib = None
    log: list = []
    tiles: list = []

    def __init__(self, kind, fac, sched, dtype, stream=None):
        assert kind == "scan"
        self.plan, self.dtype = sched, np.dtype(dtype)
        self.fac = self.plan.packed().astype(self.dtype)

    groups = True

    def _run(self, src, dst, nsys, ss, es, fused, h, delta, group):
        assert src.flags.c_contiguous and dst.flags.c_contiguous  # a kernel sees only the pointer
        per, gs = group or (nsys, 0)
        assert (nsys // per - 1) * gs + (per - 1) * ss + (self.plan.n - 1) * es < src.size
        coef = scan.coefficients(self.dtype, h, delta)
        w = _launch(self.lib, self.plan, self.dtype, fused, bool(delta), src, dst, self.fac, coef, nsys, ss, es,
                    group)
        self.log.append((fused, nsys, ss, es))
        self.tiles.append(w)

    def solve(self, d, x, nsys, ss, es, group=None):
        self._run(d, x, nsys, ss, es, False, 1.0, 0.0, group)

    def derivative(self, f, out, nsys, ss, es, h, delta=0.0, group=None):
        self._run(f, out, nsys, ss, es, True, h, delta, group)


@pytest.fixture
def scan_device(lib, monkeypatch):
    from nagare.engine.compact import gpu, lines

    monkeypatch.setattr(_EmulatedScanDevice, "lib", lib)
    monkeypatch.setattr(_EmulatedScanDevice, "log", [])
    monkeypatch.setattr(_EmulatedScanDevice, "tiles", [])
    monkeypatch.setattr(lines, "device_solver", _EmulatedScanDevice)
    monkeypatch.setattr(gpu, "transpose", lambda src, dst: dst.__setitem__(Ellipsis, src.T))
    from nagare.engine.compact import filter as filt

    monkeypatch.setattr(filt, "DeviceFilterRhs", lambda *a, **k: None)  # (its kernel: test_compact_closure.py)
    return _EmulatedScanDevice


NS_CASES = [(b, y, s) for b, y in [("stacked", "transpose"), ("stacked", "strided"), ("per-variable", "transpose"),
                                    ("grouped", "transpose")]
            for s in ("periodic", "bounded") if (b, s) != ("grouped", "periodic")]  # (grouped: one matrix)


@pytest.mark.parametrize("batching,ydir,sides", NS_CASES)
def test_fused_navier_stokes_evaluation_on_the_emulated_kernel(scan_device, batching, ydir, sides):
    """kernel = fused, solver = scan on the GPU path (emulated kernels): one evaluation of dU/dt equals the
    NumPy engine's (Thomas, separate right-hand side) to round-off, every derivative is a fused launch (the
    right-hand side never a sweep of its own), and the launches are the batching's: stacked 4 (strided y-lines
    too: a stack's y-lines are one launch of grouped lines), per-variable 14, grouped 2."""
    import types

    from nagare.engine.backend import get_backend
    from nagare.engine.compact import navier_stokes as ns
    from nagare.engine.compact.config import CompactPreset
    from nagare.engine.families import create_engine

    n = 36
    bounded = {"west": "hold", "east": "nscbc", "south": "nscbc", "north": "nscbc"}
    mixed = {"west": "hold", "east": "nscbc", "south": "periodic", "north": "periodic"}
    pre = CompactPreset.model_validate({
        "engine": "compact", "description": "test", "initial": {"kind": "random"},
        "grid": {"nx": n, "ny": n, "x0": -1, "x1": 1, "y0": -1, "y1": 1},
        "physics": {"problem": "navier-stokes", "dt": 0.01, "reynolds": 200.0},
        "boundaries": bounded if sides == "bounded" else mixed})
    ref = create_engine(pre, get_backend("numpy"))  # stacked, thomas, array right-hand side
    eq = ns.NavierStokes(pre, np, np.float64)
    sel = dict(ref.selection, solver="scan", kernel="fused", batching=batching, **{"y-direction": ydir})
    eq.build(sel, types.SimpleNamespace(xp=np, is_gpu=True, name="cupy"))
    got, want = np.empty_like(ref.U), np.empty_like(ref.U)
    eq.rate(ref.U, got)
    ref.ns.rate(ref.U, want)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11 * np.max(np.abs(want)))
    log = scan_device.log
    assert log and all(fused for fused, *_ in log)
    assert len(log) == eq.launches_per_rate()
    assert eq.rhs_sweeps_per_rate() == 0
    if batching == "grouped":
        assert sorted(log) == [(True, 2 * 3 * n, n, 1), (True, 2 * 4 * n, n, 1)]
    elif batching == "per-variable":
        assert len(log) == 14
    elif ydir == "transpose":
        assert len(log) == 4
    else:  # each stack's strided y-lines in one launch (groups of n lines, a variable apart)
        assert len(log) == 4 and (True, 3 * n, 1, n) in log and (True, 4 * n, 1, n) in log
        # the strided y-lines in tiles of 4 (fp64, 36-point lines: 32-thread teams), the x-lines one a block
        assert sorted(set(zip((es for *_, es in log), scan_device.tiles))) == [(1, 1), (n, 4)]


@pytest.mark.parametrize("ydir", ["transpose", "strided"])
@pytest.mark.parametrize("preset_name", [pytest.param("compact-rotating-cone", marks=pytest.mark.slow),
                                         "compact-square1d"])
def test_fused_scalar_problems_on_the_emulated_kernel(scan_device, preset_name, ydir):
    """The scalar problems (2D rotating cone: both axes; the dissipative square pulse: both flux halves) with
    kernel = fused, solver = scan on the emulated kernels agree with the NumPy engine after 5 steps."""
    import types

    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    pre = load_preset(preset_name)
    if preset_name == "compact-rotating-cone":
        pre = pre.model_copy(update={"grid": pre.grid.model_copy(update={"nx": 40, "ny": 33})})
    ref = create_engine(pre, get_backend("numpy"))
    cand = create_engine(pre, get_backend("numpy"))
    sel = dict(ref.selection, solver="scan", kernel="fused", **{"y-direction": ydir})
    cand.backend = types.SimpleNamespace(xp=np, is_gpu=True, name="cupy")
    cand._apply_selection(cand.selection, sel)
    ref.step(5)
    cand.step(5)
    np.testing.assert_allclose(cand.phi, ref.phi, rtol=0, atol=1e-12 * float(np.max(np.abs(ref.phi))))
    assert scan_device.log and all(fused for fused, *_ in scan_device.log)


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
def test_interior_chunks_hold_the_converged_factors(boundary):
    """On a 2048-point line all but a few chunks at the ends are interior: the plan's factors there are the
    middle row's, within 4 ulp of Thomas' exact ones, and the periodic correction vector is negligible."""
    n = 2048
    fac = _fac(n, boundary)
    p = scan.plan(fac)
    assert p.t_hi - p.t_lo > 0.95 * p.team
    lo, hi = p.t_lo * p.chunk, p.t_hi * p.chunk
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(p.l[lo:hi], fac.l[lo:hi], rtol=4 * eps, atol=0)
    np.testing.assert_allclose(p.inv_d[lo:hi], fac.inv_d[lo:hi], rtol=4 * eps, atol=0)
    assert np.all(np.abs(fac.z[lo:hi]) <= 1e-18) and not np.any(p.z[lo:hi])
    np.testing.assert_array_equal(p.l[:lo], fac.l[:lo])  # the edges keep the exact factors
    np.testing.assert_array_equal(p.inv_d[hi:n], fac.inv_d[hi:n])
    ic = p.interior()
    for t in (p.t_lo, (p.t_lo + p.t_hi) // 2, p.t_hi - 1):  # every interior chunk: the same values
        s = t * p.chunk
        np.testing.assert_array_equal(p.pf[s:s + p.chunk], ic[3:3 + p.chunk])
        np.testing.assert_array_equal(p.pb[s:s + p.chunk], ic[3 + p.chunk:])
    # a weakly dominant matrix never settles within the line: no interior chunks
    m = 300
    weak = tridiag.factorise(np.r_[0.0, np.full(m - 1, 0.499)], np.ones(m), np.r_[np.full(m - 1, 0.499), 0.0], False)
    assert (scan.plan(weak).t_lo, scan.plan(weak).t_hi) == (0, 0)


def test_engine_picks_only_compiled_chunks():
    """chunk_size picks only sizes the GPU module holds (kernel_names), for every line length it takes."""
    for n in (5, 8, 100, 512, 2048, 4096, 4097, 8192, 8193, 16384):
        assert scan.chunk_size(n) in scan.COMPILED
    assert {int(name.split(", ")[1]) for name in scan.kernel_names(np.float32)} == set(scan.COMPILED)


def test_shared_memory_opt_in_is_raised_once_and_never_lowered():
    """The solvers' opt-in above 48 KiB (solvers/base.py): one driver call per function and size
    increase, none below the default limit, never lowered by a smaller plan."""
    from nagare.engine.compact.solvers.base import SharedMemoryOptIn

    class Fn:
        def __init__(self):
            self.sets = []
            self._max = 0

        @property
        def max_dynamic_shared_size_bytes(self):
            return self._max

        @max_dynamic_shared_size_bytes.setter
        def max_dynamic_shared_size_bytes(self, v):
            self.sets.append(v)
            self._max = v

    opt_in, a, b = SharedMemoryOptIn(), Fn(), Fn()
    for fn, smem in ((a, 40 * 1024), (a, 64 * 1024), (a, 64 * 1024), (a, 56 * 1024), (b, 56 * 1024),
                     (a, 100 * 1024)):
        opt_in(fn, smem)
    assert a.sets == [64 * 1024, 100 * 1024] and b.sets == [56 * 1024]

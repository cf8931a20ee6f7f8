"""``solver = scan-tile`` (engine/compact/solvers/tile.py, shaders/cuda/compact/tile.cu): the launch rules,
and the CUDA kernel — the exact source compiled with g++ against tests/cuda_emu/emu.h (one std::thread per
CUDA thread, barriers, warp shuffles; cp.async copies directly there) — against scan.py's NumPy mirror bit
for bit: x-lines and y-lines of odd sizes (not multiples of the tile), both boundaries, both schemes, both
precisions, solve and fused derivative, in place and not, with fewer blocks than tiles so every block
loops over several tiles through both of its buffers."""
from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest
from nagare.engine.compact import schemes, solvers, tridiag
from nagare.engine.compact.solvers import scan, tile

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "shaders" / "cuda" / "compact" / "tile.cu"
EMU_SMEM = 400_000  # emu.h tb_smem

H100 = {"multiProcessorCount": 132, "maxThreadsPerMultiProcessor": 2048, "regsPerMultiprocessor": 65536,
        "sharedMemPerMultiprocessor": 233472, "maxBlocksPerMultiProcessor": 32}


def _fac(n, boundary, delta=0.0):
    return tridiag.factorise(*schemes.bands(n, boundary, delta), boundary == "periodic")


def test_tile_rule_fills_a_sector_within_the_thread_and_shared_memory_bounds():
    """W: up to a 32-byte sector of a row (4 fp64, 8 fp32 lines), team·W <= 512, both buffers <= 100 KiB,
    no wider than the lines there are."""
    cases = {(1024, np.float64): 4, (1024, np.float32): 4, (2048, np.float64): 2, (2048, np.float32): 2,
             (4096, np.float64): 1, (4096, np.float32): 1, (97, np.float64): 4, (97, np.float32): 8}
    for (n, dtype), want in cases.items():
        p = scan.plan(_fac(n, "closures"))
        w = tile.tile_lines(p, dtype)
        assert w == want, (n, dtype)
        assert w * p.team <= tile.MAX_THREADS and tile.tile_smem(p, w, dtype) <= tile.TILE_SMEM
    p = scan.plan(_fac(97, "closures"))
    assert [tile.tile_lines(p, np.float32, k) for k in (1, 2, 3, 4, 5)] == [1, 2, 4, 4, 8]


def test_persistent_grid_is_the_resident_blocks_of_every_sm():
    """4096-point fp64 lines: 512 threads, 72 KiB of buffers, 64 registers — three blocks an SM by shared
    memory, two by registers: 264 blocks on 132 SMs, fewer where there are fewer tiles."""
    assert tile.resident_blocks(512, 73728 + 0, 64, 1024, H100) == 2
    assert tile.resident_blocks(512, 73728, 40, 1024, H100) == 3
    assert tile.resident_blocks(128, 18432, 32, 1024, H100) == 11
    assert tile.persistent_grid(4096, 2, 132) == 264
    assert tile.persistent_grid(7, 2, 132) == 7
    assert tile.resident_blocks(512, 73728, 40, 1024, {}) == 3  # properties a CuPy build lacks: SM_DEFAULTS


def test_scan_tile_is_a_registered_solver_that_fuses():
    s = solvers.get("scan-tile")
    assert s.fuses_rhs and s.groups if hasattr(s, "groups") else s.fuses_rhs
    assert solvers.fusing() == "scan"  # the default fused solver stays the scan kernel


WRAPPER = r"""
#include "emu.h"
#define nagare_smem tb_smem  // emu_launch NaN-poisons tb_smem before each block
#include "scan.cu"
#include "tile.cu"
#define KARGS in, out, fac, coef, n, nsys, ss, es, lo, hi, per, gs

template <typename T, int W>
static void go(int periodic, int fused, int diss, int gx, int bx, const T* in, T* out, const T* fac, const T* coef,
               int n, int nsys, long long ss, long long es, int lo, int hi, int per, long long gs)
{
#define NAGARE_GO(P, F, D) emu_launch(gx, 1, bx, W, [=] { compact_tile<T, 8, P, F, D, W>(KARGS); })
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

#define TILE(T, S) \
extern "C" void tile_##S(int lines, int periodic, int fused, int diss, int gx, int bx, const T* in, T* out, \
                         const T* fac, const T* coef, int n, int nsys, long long ss, long long es, int lo, int hi, \
                         int per, long long gs) { \
    switch (lines) { \
    case 1: go<T, 1>(periodic, fused, diss, gx, bx, KARGS); break; \
    case 2: go<T, 2>(periodic, fused, diss, gx, bx, KARGS); break; \
    case 4: go<T, 4>(periodic, fused, diss, gx, bx, KARGS); break; \
    default: go<T, 8>(periodic, fused, diss, gx, bx, KARGS); } }

TILE(double, d)
TILE(float, f)
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to emulate the kernels")
    from tests.unit.cuda_emulator import compile_threaded

    return compile_threaded(WRAPPER, SOURCE, "tile_emu", tmp_path_factory)


def _p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def run(lib, p, dtype, fused, delta, src, dst, nsys, ss, es, *, h=0.3, group=None, sms=1):
    """One emulated launch as tile.DeviceTile makes it (tile.launch_shape), on ``sms`` SMs of one resident
    block each: one block by default, which loops over every tile through both its buffers. Returns (W, grid)."""
    assert p.chunk == 8
    w, grid, block, smem = tile.launch_shape(p, dtype, nsys, 1, sms)
    assert block == (p.team, w) and smem <= EMU_SMEM
    per, gs = group or (nsys, 0)
    fac, coef = p.packed().astype(dtype), scan.coefficients(dtype, h, delta)
    fn = getattr(lib, "tile_d" if np.dtype(dtype) == np.float64 else "tile_f")
    i, ll = ctypes.c_int, ctypes.c_longlong
    fn(i(w), i(p.periodic), i(fused), i(bool(delta)), i(grid[0]), i(p.team), _p(src), _p(dst), _p(fac), _p(coef),
       i(p.n), i(nsys), ll(ss), ll(es), i(p.t_lo), i(p.t_hi), i(per), ll(gs))
    return w, grid[0]


def _want(p, lines, fused, boundary, delta, dtype, h=0.3):
    return scan.derivative(p, lines, h, boundary, delta, dtype) if fused else scan.solve(p, lines, dtype)


@pytest.mark.parametrize("n,other", [(13, 7), (97, 11), (300, 5)], ids=lambda v: str(v))
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("layout", ["x", "y"])
def test_emulated_tile_kernel_equals_the_scan_mirror(lib, n, other, boundary, layout):
    """n-point lines, ``other`` of them (never a multiple of the tile): x-lines (rows) and y-lines (columns
    of a row-major field), solve and fused derivative (central and dissipative), fp64 and fp32, out of place
    and in place — the scan mirror bit for bit, and nothing outside the lines written."""
    rng = np.random.default_rng(n + other)
    for delta in (0.0, -0.25):
        p = scan.plan(_fac(n, boundary, delta), 8)
        for dtype in (np.float64, np.float32):
            shape = (other, n) if layout == "x" else (n, other)
            a2 = rng.standard_normal(shape).astype(dtype)
            lines = a2 if layout == "x" else a2.T
            nsys, ss, es = (other, n, 1) if layout == "x" else (other, 1, other)
            for fused, in_place in ((False, True), (True, False), (True, True)):
                if not fused and delta:
                    continue
                buf = np.full(a2.size + 3, np.nan, dtype)  # 3 sentinels past the field
                src = buf[:a2.size].reshape(shape)
                src[...] = a2
                dst = src if in_place else np.full(shape, np.nan, dtype)
                w, grid = run(lib, p, dtype, fused, delta, src, dst, nsys, ss, es)
                assert grid == 1  # the block loops over the tiles
                got = dst if layout == "x" else dst.T
                tag = f"{layout} n {n} lines {other} W {w} {np.dtype(dtype).name} fused {fused} delta {delta}"
                np.testing.assert_array_equal(got, _want(p, lines, fused, boundary, delta, dtype), err_msg=tag)
                assert np.isnan(buf[a2.size:]).all()
                if not in_place:
                    np.testing.assert_array_equal(src, a2)


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
def test_emulated_tile_kernel_against_a_dense_solve(lib, boundary):
    """The fused derivative of 5 y-lines of 300 points (a 64-thread team: the carries cross two warps)
    against the dense reference derivative."""
    n, nx = 300, 5
    f = np.random.default_rng(8).standard_normal((n, nx))
    p = scan.plan(_fac(n, boundary), 8)
    out = np.full_like(f, np.nan)
    h = 1.0 / n
    run(lib, p, np.float64, True, 0.0, f, out, nx, 1, nx, h=h)
    exact = schemes.derivative_dense(f, h, boundary, axis=0)
    np.testing.assert_allclose(out, exact, rtol=0, atol=1e-13 * np.max(np.abs(exact)))


@pytest.mark.parametrize("nx", [1, 7])
def test_emulated_tile_kernel_on_a_stack_of_y_lines(lib, nx):
    """A stack (nv, ny, nx)'s y-lines as one launch of lines in groups (nv groups of nx lines a variable
    apart; tiles straddle two variables where nx is not a multiple of W): the mirror on each variable."""
    ny, nv = 40, 3
    rng = np.random.default_rng(nx)
    for boundary in schemes.BOUNDARIES:
        p = scan.plan(_fac(ny, boundary, -0.25), 8)
        for dtype in (np.float64, np.float32):
            f = rng.standard_normal((nv, ny, nx)).astype(dtype)
            for fused, delta in ((False, 0.0), (True, -0.25)):
                want = np.stack([_want(p, f[v].T, fused, boundary, delta, dtype).T for v in range(nv)])
                out = np.full_like(f, np.nan)
                run(lib, p, dtype, fused, delta, f.copy(), out, nv * nx, 1, nx, group=(nx, ny * nx), sms=2)
                np.testing.assert_array_equal(out, want)


class _EmulatedTileDevice:
    """The device side of solver = scan-tile (lines.device_solver's signature) on the emulated tile.cu, one
    launch per call (lines in groups included), every launch logged as (fused, nsys, sys_stride, elem_stride)."""

    lib = None
    log: list = []
    groups = True

    def __init__(self, kind, fac, prepared, dtype, stream=None):
        assert kind == "scan-tile"
        self.plan, self.dtype = prepared, np.dtype(dtype)

    def _run(self, src, dst, nsys, ss, es, fused, h, delta, group):
        assert src.flags.c_contiguous and dst.flags.c_contiguous  # a kernel sees only the pointer
        run(self.lib, self.plan, self.dtype, fused, delta, src, dst, nsys, ss, es, h=h, group=group, sms=2)
        self.log.append((fused, nsys, ss, es))

    def solve(self, d, x, nsys, ss, es, group=None):
        self._run(d, x, nsys, ss, es, False, 1.0, 0.0, group)

    def derivative(self, f, out, nsys, ss, es, h, delta=0.0, group=None):
        self._run(f, out, nsys, ss, es, True, h, delta, group)


@pytest.mark.parametrize("sides", ["periodic", "bounded"])
def test_fused_navier_stokes_evaluation_on_the_emulated_tile_kernel(lib, monkeypatch, sides):
    """solver = scan-tile, kernel = fused on the GPU path (emulated kernel, strided y-lines): one evaluation of
    dU/dt equals the NumPy engine's (Thomas, separate right-hand side) to round-off, in 4 fused launches — a
    stack's y-lines are one launch of lines in groups."""
    import types

    from nagare.engine.backend import get_backend
    from nagare.engine.compact import filter as filt
    from nagare.engine.compact import lines
    from nagare.engine.compact import navier_stokes as ns
    from nagare.engine.compact.config import CompactPreset
    from nagare.engine.families import create_engine

    monkeypatch.setattr(_EmulatedTileDevice, "lib", lib)
    monkeypatch.setattr(_EmulatedTileDevice, "log", [])
    monkeypatch.setattr(lines, "device_solver", _EmulatedTileDevice)
    monkeypatch.setattr(filt, "DeviceFilterRhs", lambda *a, **k: None)  # (its kernel: test_compact_closure.py)
    n = 36
    bounded = {"west": "hold", "east": "nscbc", "south": "nscbc", "north": "nscbc"}
    mixed = {"west": "hold", "east": "nscbc", "south": "periodic", "north": "periodic"}
    pre = CompactPreset.model_validate({
        "engine": "compact", "description": "test", "initial": {"kind": "random"},
        "grid": {"nx": n, "ny": n, "x0": -1, "x1": 1, "y0": -1, "y1": 1},
        "physics": {"problem": "navier-stokes", "dt": 0.01, "reynolds": 200.0},
        "boundaries": bounded if sides == "bounded" else mixed})
    ref = create_engine(pre, get_backend("numpy"))
    eq = ns.NavierStokes(pre, np, np.float64)
    sel = dict(ref.selection, solver="scan-tile", kernel="fused", batching="stacked", **{"y-direction": "strided"})
    eq.build(sel, types.SimpleNamespace(xp=np, is_gpu=True, name="cupy"))
    got, want = np.empty_like(ref.U), np.empty_like(ref.U)
    eq.rate(ref.U, got)
    ref.ns.rate(ref.U, want)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11 * np.max(np.abs(want)))
    log = _EmulatedTileDevice.log
    assert len(log) == 4 == eq.launches_per_rate() and all(fused for fused, *_ in log)
    assert (True, 3 * n, 1, n) in log and (True, 4 * n, 1, n) in log


def test_emulated_tile_of_1024_threads(lib, monkeypatch):
    """The rule's caps widened (tile.MAX_THREADS = 1024, as tools/compact_grid.py --tile-threads does): fp32
    y-lines of 1000 points in tiles of 8 (128-thread teams: 1024 threads, 32 warps' slots), 11 lines in two
    tiles — the mirror bit for bit."""
    monkeypatch.setattr(tile, "MAX_THREADS", 1024)
    n, nx = 1000, 11
    p = scan.plan(_fac(n, "closures", -0.25), 8)
    f = np.random.default_rng(3).standard_normal((n, nx)).astype(np.float32)
    out = np.full_like(f, np.nan)
    w, _ = run(lib, p, np.float32, True, -0.25, f, out, nx, 1, nx)
    assert w * p.team == 1024
    np.testing.assert_array_equal(out.T, _want(p, f.T, True, "closures", -0.25, np.float32))

"""The compact family's CUDA kernels (shaders/cuda/compact/tridiag.cu) run on the CPU: the exact
source compiled with g++ against tests/cuda_emu/emu.h (one fiber per CUDA thread, a barrier
for __syncthreads, blocks one after another, shared memory NaN-poisoned before each block), launched
with the engine's own launch shapes (engine/compact/solvers/). Every solver, both boundary kinds, both
precisions and both line layouts (contiguous x-lines, interleaved y-lines) must reproduce the
NumPy versions (engine/compact/solvers/) and a dense solve — the indexing, the level/step
schedules, the barriers and the Sherman–Morrison folding are checked without a GPU."""
from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import numpy as np
import pytest
from nagare.engine.compact import gpu, lines, rhs, schemes, solvers, tridiag
from nagare.engine.compact.solvers import gtsv2, reduction, thomas

ROOT = Path(__file__).resolve().parents[2]
EMU_DIR = ROOT / "tests" / "cuda_emu"
SOURCE = ROOT / "shaders" / "cuda" / "compact" / "tridiag.cu"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to emulate the kernels")

WRAPPER = r"""
#include "emu.h"
#define nagare_smem tb_smem  // emu_launch NaN-poisons tb_smem before each block
#include "tridiag.cu"

template <typename F>
static void run(int gx, int gy, int bx, int by, F body) { emu_launch(gx, gy, bx, by, body); }

#define SOLVERS(T, S) \
extern "C" void thomas_##S(int periodic, int gx, int bx, const T* d, T* x, const T* fac, int n, int nsys, \
                           long long ss, long long es) { \
    run(gx, 1, bx, 1, [=] { if (periodic) compact_thomas<T, true>(d, x, fac, n, nsys, ss, es); \
                             else compact_thomas<T, false>(d, x, fac, n, nsys, ss, es); }); } \
extern "C" void reduce_##S(int periodic, int gx, int bx, const T* d, T* x, const T* sched, const T* per, int n, \
                           int lc, int p, int nsys, long long ss, long long es) { \
    run(gx, 1, bx, 1, [=] { if (periodic) compact_reduce<T, true>(d, x, sched, per, n, lc, p, nsys, ss, es); \
                             else compact_reduce<T, false>(d, x, sched, per, n, lc, p, nsys, ss, es); }); } \
extern "C" void fix_##S(int gx, int bx, T* x, const T* per, int n, int nsys, long long ss) { \
    run(gx, 1, bx, 1, [=] { compact_periodic_fix<T>(x, per, n, nsys, ss); }); } \
extern "C" void fix_ends_##S(int gx, int bx, T* x, const T* per, int n, int nsys, long long ss) { \
    run(gx, 1, bx, 1, [=] { compact_periodic_fix_ends<T>(x, per, n, nsys, ss); }); } \
extern "C" void transpose_##S(int gx, int gy, int bx, int by, const T* a, T* b, int ny, int nx) { \
    run(gx, gy, bx, by, [=] { compact_transpose<T>(a, b, ny, nx); }); }

SOLVERS(double, d)
SOLVERS(float, f)
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    from tests.unit.cuda_emulator import compile_threaded

    return compile_threaded(WRAPPER, SOURCE, "compact_emu", tmp_path_factory)


def _p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def _i(v):
    return ctypes.c_int(int(v))


def _l(v):
    return ctypes.c_longlong(int(v))


def _suffix(dtype):
    return "d" if np.dtype(dtype) == np.float64 else "f"


def emulate_solve(lib, kind, fac, sched, d2, layout):
    """Solve the lines of the 2D array d2 (ny, nx) with the emulated kernel: layout "x" (systems are
    rows: contiguous) or "y" (systems are columns: interleaved). Returns the solution array."""
    dtype = d2.dtype
    ny, nx = d2.shape
    if layout == "x":
        n, nsys, ss, es = nx, ny, nx, 1
    else:
        n, nsys, ss, es = ny, nx, 1, nx
    assert n == fac.n
    x = np.full_like(d2, np.nan)
    sfx = _suffix(dtype)
    if kind == "thomas":
        packed = np.concatenate([fac.l, fac.inv_d, fac.upper, fac.z, fac.w, [fac.r, fac.q]]).astype(dtype)
        (gx,), (bx,) = thomas.thomas_launch(nsys)
        getattr(lib, f"thomas_{sfx}")(_i(fac.periodic), _i(gx), _i(bx), _p(d2), _p(x), _p(packed), _i(n),
                                      _i(nsys), _l(ss), _l(es))
    else:
        packed = sched.packed().astype(dtype)
        per = np.concatenate([fac.z, [fac.r, fac.q]]).astype(dtype)
        bx = reduction.reduce_threads(n, sched.lc, sched.p)
        assert reduction.reduce_smem(n, dtype) <= 400_000  # emu.h tb_smem
        getattr(lib, f"reduce_{sfx}")(_i(fac.periodic), _i(nsys), _i(bx), _p(d2), _p(x), _p(packed), _p(per), _i(n),
                                      _i(sched.lc), _i(sched.p), _i(nsys), _l(ss), _l(es))
    return x


CASES = [(n, bc, delta) for n in (8, 13, 64, 100) for bc in schemes.BOUNDARIES for delta in (0.0, -0.25)]


# (scan.cu has its own emulated tests: tests/unit/test_compact_scan.py)
@pytest.mark.parametrize("kind", ["thomas", "cr", "pcr", "cr-pcr"])
@pytest.mark.parametrize("n,boundary,delta", CASES, ids=lambda v: str(v))
def test_emulated_kernel_matches_numpy_and_dense(lib, kind, n, boundary, delta):
    rng = np.random.default_rng(n)
    fac = tridiag.factorise(*schemes.bands(n, boundary, delta), boundary == "periodic")
    sched = None if kind == "thomas" else reduction.schedule(fac, kind)
    a = schemes.dense(n, boundary, delta)
    nother = 5
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        for layout in ("x", "y"):
            shape = (nother, n) if layout == "x" else (n, nother)
            d2 = rng.standard_normal(shape).astype(dtype)
            got = emulate_solve(lib, kind, fac, sched, d2, layout)
            lines = d2 if layout == "x" else d2.T
            want_np = solvers.solve(kind, fac, lines, sched, dtype)
            want_np = want_np if layout == "x" else want_np.T
            # Same operations in the same order as the NumPy version: equal to round-off of the
            # last operation (g++ without FMA contraction rounds like NumPy).
            np.testing.assert_allclose(got, want_np, rtol=rtol, atol=rtol * 10,
                                       err_msg=f"{kind} {layout}-lines {np.dtype(dtype).name} vs NumPy")
            exact = np.linalg.solve(a, lines.astype(np.float64).T).T
            exact = exact if layout == "x" else exact.T
            scale = np.max(np.abs(exact))
            np.testing.assert_allclose(got, exact, rtol=0, atol=(1e-12 if dtype == np.float64 else 5e-5) * scale * 10,
                                       err_msg=f"{kind} {layout}-lines {np.dtype(dtype).name} vs dense solve")


@pytest.mark.parametrize("n", [8, 50, 96])
def test_emulated_gtsv2_periodic_fix(lib, n):
    """The Sherman–Morrison correction kernels used after cuSPARSE's solve of A' (contiguous lines)."""
    rng = np.random.default_rng(7)
    fac = tridiag.factorise(*schemes.bands(n, "periodic"), True)
    nsys, stride = 6, n + 3
    d = rng.standard_normal((nsys, stride))
    y = d.copy()
    y[:, :n] = tridiag._thomas_plain(fac, d[:, :n])  # what gtsv2 leaves: the solution of A' y = d
    x = y.copy()
    per = np.concatenate([fac.z, [fac.r, fac.q]])
    total = n * nsys
    lib.fix_d(_i(-(-total // gtsv2.FIX_BLOCK)), _i(gtsv2.FIX_BLOCK), _p(x), _p(per), _i(n), _i(nsys), _l(stride))
    lib.fix_ends_d(_i(-(-nsys // gtsv2.FIX_BLOCK)), _i(gtsv2.FIX_BLOCK), _p(x), _p(per), _i(n), _i(nsys), _l(stride))
    want = np.linalg.solve(schemes.dense(n, "periodic"), d[:, :n].T).T
    np.testing.assert_allclose(x[:, :n], want, rtol=0, atol=1e-13 * np.max(np.abs(want)))
    np.testing.assert_array_equal(x[:, n:], d[:, n:])  # padding untouched


@pytest.mark.parametrize("ny,nx", [(5, 7), (32, 32), (40, 70)])
def test_emulated_transpose(lib, ny, nx):
    a = np.arange(ny * nx, dtype=np.float64).reshape(ny, nx)
    b = np.full((nx, ny), np.nan)
    (gx, gy), (bx, by) = gpu.transpose_launch(ny, nx)
    lib.transpose_d(_i(gx), _i(gy), _i(bx), _i(by), _p(a), _p(b), _i(ny), _i(nx))
    np.testing.assert_array_equal(b, a.T)


@pytest.mark.parametrize("name", sorted(f"{s}-{a}" for s, a in rhs.STENCILS))
@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_rhs_stencils_generated_cuda_emulated(name, boundary, tmp_path):
    """The right-hand-side stencils' generated CUDA (stencil framework), emulated for a spread of the
    tuner's launch configurations, equals the framework's host engine bit for bit — including the
    1D problems' single-row grids (ny = 1)."""
    from tests.unit.test_stencil_emulated import _check, _valid_configs

    scheme, axis = name.rsplit("-", 1)
    st = rhs.STENCILS[(scheme, axis)]
    params = {"ih": 3.0} if scheme == "compact6" else {"ih": 3.0, "dd": -0.11, "de": -0.0139}
    shapes = [(1, 40), (13, 29)] if axis == "x" else [(29, 13)]
    rng = np.random.default_rng(11)
    for shape in shapes:
        _check(st, shape, np.float64, boundary, params, _valid_configs()[::13], rng, tmp_path)


class _EmulatedDevice:
    """lines.device_solver's signature and the device side's solve() on the emulated tridiag.cu kernels
    (launch shapes from engine/compact/solvers/), every launch logged."""

    lib = None
    log: list = []

    def __init__(self, kind, fac, sched, dtype, stream=None):
        self.kind, self.fac, self.sched, self.dtype = kind, fac, sched, np.dtype(dtype)
        if kind == "thomas":
            self.packed = np.concatenate([fac.l, fac.inv_d, fac.upper, fac.z, fac.w, [fac.r, fac.q]]).astype(dtype)
        else:
            self.packed = sched.packed().astype(dtype)
            self.per = np.concatenate([fac.z, [fac.r, fac.q]]).astype(dtype)

    def solve(self, d, x, nsys, sys_stride, elem_stride):
        assert d.flags.c_contiguous and x.flags.c_contiguous  # a kernel sees only the pointer
        lib, n, sfx, f = self.lib, self.fac.n, _suffix(self.dtype), self.fac
        if self.kind == "thomas":
            (gx,), (bx,) = thomas.thomas_launch(nsys)
            getattr(lib, f"thomas_{sfx}")(_i(f.periodic), _i(gx), _i(bx), _p(d), _p(x), _p(self.packed), _i(n),
                                          _i(nsys), _l(sys_stride), _l(elem_stride))
        else:
            s = self.sched
            bx = reduction.reduce_threads(n, s.lc, s.p)
            getattr(lib, f"reduce_{sfx}")(_i(f.periodic), _i(nsys), _i(bx), _p(d), _p(x), _p(self.packed),
                                          _p(self.per), _i(n), _i(s.lc), _i(s.p), _i(nsys), _l(sys_stride),
                                          _l(elem_stride))
        self.log.append((self.kind, n, nsys, sys_stride, elem_stride))


@pytest.mark.parametrize("kind", ["thomas", "cr-pcr"])
@pytest.mark.parametrize("sides", ["periodic", "bounded"])
def test_emulated_grouped_navier_stokes_evaluation(lib, monkeypatch, kind, sides):
    """batching = grouped on the GPU path with the real kernels (emulated): one Navier–Stokes evaluation
    of dU/dt is 2 solver launches — the (u, v, T) pass as 2·3·n systems, the flux pass as 2·4·n, every
    system contiguous (stride n) — plus the transpose kernel in and out of each pass, and equals the
    NumPy engine's stacked evaluation to the kernels' round-off."""
    import types

    from nagare.engine.backend import get_backend
    from nagare.engine.compact import navier_stokes as ns
    from nagare.engine.compact.config import CompactPreset
    from nagare.engine.families import create_engine

    def transpose(src, dst):
        ny, nx = src.shape
        assert src.flags.c_contiguous and dst.flags.c_contiguous and dst.shape == (nx, ny)
        (gx, gy), (bx, by) = gpu.transpose_launch(ny, nx)
        lib.transpose_d(_i(gx), _i(gy), _i(bx), _i(by), _p(src), _p(dst), _i(ny), _i(nx))
        transposes.append(src.shape)

    transposes: list = []
    from nagare.engine.compact import filter as filt

    # the filter's explicit side stays NumPy's here (its kernel: tests/unit/test_compact_closure.py)
    monkeypatch.setattr(filt, "DeviceFilterRhs", lambda *a, **k: None)
    monkeypatch.setattr(_EmulatedDevice, "lib", lib)
    monkeypatch.setattr(_EmulatedDevice, "log", [])
    monkeypatch.setattr(lines, "device_solver", _EmulatedDevice)
    monkeypatch.setattr(gpu, "transpose", transpose)
    n = 36
    bounded = {"west": "hold", "east": "nscbc", "south": "nscbc", "north": "nscbc"}
    pre = CompactPreset.model_validate({
        "engine": "compact", "description": "test", "initial": {"kind": "random"},
        "grid": {"nx": n, "ny": n, "x0": -1, "x1": 1, "y0": -1, "y1": 1},
        "physics": {"problem": "navier-stokes", "dt": 0.01, "reynolds": 200.0},
        "boundaries": bounded if sides == "bounded" else {}})
    ref = create_engine(pre, get_backend("numpy"))  # stacked, thomas, NumPy
    eq = ns.NavierStokes(pre, np, np.float64)
    eq.build(dict(ref.selection, solver=kind, batching="grouped", **{"y-direction": "transpose"}),
             types.SimpleNamespace(xp=np, is_gpu=True, name="cupy"))
    got, want = np.empty_like(ref.U), np.empty_like(ref.U)
    eq.rate(ref.U, got)
    ref.ns.rate(ref.U, want)
    assert sorted(_EmulatedDevice.log) == [(kind, n, 2 * 3 * n, n, 1), (kind, n, 2 * 4 * n, n, 1)]
    assert sorted(transposes) == sorted([(3 * n, n), (n, 3 * n), (4 * n, n), (n, 4 * n)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11 * np.max(np.abs(want)))


def test_grouped_rhs_is_one_generated_kernel_launch_on_the_fake_gpu(tmp_path, monkeypatch):
    """kernel = cuda (the GPU default) under batching = grouped: the explicit right-hand side of a whole
    group — the x-lines of one stack and the transposed y-lines of another — is ONE launch of the
    stencil framework's generated compact6_x kernel over the (2·nv·n, n) buffer (and, with closures,
    one launch of their rows) (CuPy replaced by
    tests/unit/fake_cupy.py, whose kernels run the generated CUDA on the CPU), and the derivatives equal
    the NumPy stacked ones bit for bit (the solver: a line-addressed Thomas stand-in)."""
    import sys
    import types

    from nagare.engine.backend import get_backend
    from nagare.engine.compact.batched import GroupedDerivative, StackDerivative
    from nagare.engine.stencil import loops

    from tests.unit import cuda_emulator, fake_cupy
    from tests.unit.compact_fake_gpu import LineThomas

    if not cuda_emulator.available():
        pytest.skip("needs g++ to emulate the kernels")
    fcp = fake_cupy.make(tmp_path)
    fcp.empty = fake_cupy._aligned(np.empty)
    monkeypatch.setitem(sys.modules, "cupy", fcp)
    monkeypatch.setenv("NAGARE_CACHE_DIR", str(tmp_path / "cache"))
    loops._compiled.cache_clear()

    class Device(LineThomas):  # the lines it solved, recorded
        def solve(self, d, x, nsys, ss, es):
            super().solve(d, x, nsys, ss, es)
            solves.append((nsys, ss, es))

    solves: list = []
    monkeypatch.setattr(lines, "device_solver", Device)
    monkeypatch.setattr(gpu, "transpose", lambda src, dst: dst.__setitem__(Ellipsis, src.T))
    try:
        n, nv = 24, 3
        rng = np.random.default_rng(2)
        fx, fy = rng.standard_normal((nv, n, n)), rng.standard_normal((nv, n, n))
        for boundary in ("closures", "periodic"):
            sel = {"solver": "thomas", "y-direction": "transpose", "kernel": "cuda", "batching": "grouped"}
            g = GroupedDerivative(n=n, nv=nv, h={"x": 0.1, "y": 0.1}, boundary=boundary, dtype=np.float64,
                                  selection=sel, backend=types.SimpleNamespace(xp=fcp, is_gpu=True))
            ox, oy = np.full_like(fx, np.nan), np.full_like(fy, np.nan)
            before = sum(len(k.launches) for k in fcp.kernels)
            solves.clear()
            g(fx, fy, ox, oy)
            launched = [k for k in fcp.kernels if k.launches]
            want = 2 if boundary == "closures" else 1  # + the closure rows' one launch (rhs.DeviceClosure)
            assert sum(len(k.launches) for k in fcp.kernels) - before == want, [(k.name, k.launches) for k in launched]
            assert any("compact6_x" in k.name for k in launched)
            assert solves == [(2 * nv * n, n, 1)] and g.launches() == 1 and g.rhs_sweeps() == 1
            plain = {"solver": "thomas", "y-direction": "transpose", "kernel": "array", "batching": "stacked"}
            kw = dict(shape=(n, n), h=0.1, boundary=boundary, dtype=np.float64, selection=plain,
                      backend=get_backend("numpy"))
            wx, wy = np.empty_like(fx), np.empty_like(fy)
            StackDerivative(axis="x", **kw)(fx, wx)
            StackDerivative(axis="y", **kw)(fy, wy)
            np.testing.assert_array_equal(ox, wx)
            np.testing.assert_array_equal(oy, wy)
    finally:
        loops._compiled.cache_clear()

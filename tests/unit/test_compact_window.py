"""``solver = window`` (engine/compact/solvers/window.py, shaders/cuda/compact/window.cu): the halo derived
from the scheme's matrix, the NumPy mirror of the windowed algorithm against the dense solve to the dtype's
round-off (and a halo of half the length visibly short of it), and the CUDA kernel — the exact source
compiled with g++ against tests/cuda_emu/emu.h — against the mirror bit for bit: x-lines and y-lines,
both boundaries, both schemes, both precisions, solve and fused derivative, a stack's y-lines in groups."""
from __future__ import annotations

import ctypes
import dataclasses
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from nagare.engine.compact import schemes, solvers, tridiag
from nagare.engine.compact.solvers import window

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "shaders" / "cuda" / "compact" / "window.cu"
# The mirror's error against the dense solve, in units of the dtype's ε times the derivative's largest
# value: the NumPy Thomas solver's own round-off on these lines reaches ~7 (closure rows' condition), the
# windows add at most ε/SAFETY by construction.
ROUND_OFF = 16


def _fac(n, boundary, delta=0.0):
    return tridiag.factorise(*schemes.bands(n, boundary, delta), boundary == "periodic")


def _tol(dtype, want):
    return ROUND_OFF * np.finfo(dtype).eps * np.max(np.abs(want))


def test_the_decay_rate_and_the_halo_follow_from_the_matrix():
    """ρ is the small root's modulus of α z² + z + α = 0 for Lele's α = 1/3 ((3 - √5)/2 ≈ 0.382); the two
    sides of the dissipative scheme's rows α(1 ∓ δ) decay differently (the roots' product is (1-δ)/(1+δ)),
    and H = ⌈log(ε / SAFETY) / log ρ⌉ for each."""
    a = schemes.ALPHA
    small = min(abs(z) for z in np.roots([a, 1.0, a]))
    assert window.decay(a, 1.0, a) == pytest.approx((small, small), rel=1e-14)
    assert small == pytest.approx((3 - math.sqrt(5)) / 2, rel=1e-14)
    lo, up = schemes.ALPHA * 1.25, schemes.ALPHA * 0.75  # δ = -1/4: lower α(1 - δ), upper α(1 + δ)
    roots = sorted(abs(z) for z in np.roots([up, 1.0, lo]))
    assert window.decay(lo, 1.0, up) == pytest.approx((roots[0], 1 / roots[1]), rel=1e-14)
    for dtype, want in ((np.float64, 40), (np.float32, 19)):
        h = window.halo(small, dtype)
        assert h == want == math.ceil(math.log(np.finfo(dtype).eps / window.SAFETY) / math.log(small))
        assert small ** h <= np.finfo(dtype).eps / window.SAFETY < small ** (h - 1)
    p = window.plan(_fac(300, "closures"), np.float64)
    assert (p.halo_f, p.halo_b, p.segment) == (40, 40, window.SEGMENT[np.dtype(np.float64)])
    assert 0 < p.lo < 40 and p.n - 40 < p.hi < p.n  # P4's closure rows converge within ~20 rows


def test_window_is_a_registered_solver_that_fuses():
    s = solvers.get("window")
    assert s.fuses_rhs and not s.contiguous_only
    assert solvers.fusing() == "scan"  # the default fused solver stays the scan kernel


# sizes: one segment shorter than a halo (8, 9), a line shorter than S + 2H (33, 100), several segments
# with an odd remainder (257, 1000); segments of 16 too, so short lines have many
@pytest.mark.parametrize("n", [8, 9, 33, 100, 257, 1000])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("segment", [None, 16])
def test_mirror_equals_the_dense_solve_to_round_off(n, boundary, segment):
    """The fused derivative's mirror (schemes.rhs, then the windows) of x-lines and of y-lines, both
    schemes, fp64 and fp32, against schemes.derivative_dense on the same (rounded) values."""
    if boundary == "periodic" and n < 9:
        n = 9
    rng = np.random.default_rng(n)
    h = 1.0 / n
    for delta in (0.0, -schemes.DELTA, schemes.DELTA):
        fac = _fac(n, boundary, delta)
        for dtype in (np.float64, np.float32):
            p = window.plan(fac, dtype, segment)
            f = rng.standard_normal((5, n)).astype(dtype)
            for axis in (-1, 0):
                field = f if axis == -1 else np.ascontiguousarray(f.T)
                lines = field if axis == -1 else field.T
                got = window.derivative(p, lines, h, boundary, delta, dtype)
                assert got.dtype == dtype
                want = schemes.derivative_dense(field.astype(np.float64), h, boundary, delta, axis=axis)
                want = want if axis == -1 else want.T
                np.testing.assert_allclose(got, want, rtol=0, atol=_tol(dtype, want),
                                           err_msg=f"{boundary} n {n} δ {delta} {np.dtype(dtype).name} axis {axis}")


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_half_the_halo_is_visibly_short(boundary, dtype):
    """The tolerance above is tight enough to see the truncation: with halos of half the derived length the
    same comparison misses (fp32: by several times, fp64: by orders of magnitude; ρ^(H/2) ≫ ε)."""
    n = 1000
    fac = _fac(n, boundary)
    p = window.plan(fac, dtype)
    short = dataclasses.replace(p, halo_f=p.halo_f // 2, halo_b=p.halo_b // 2)
    f = np.random.default_rng(1).standard_normal((3, n)).astype(dtype)
    want = schemes.derivative_dense(f.astype(np.float64), 0.01, boundary)
    r = schemes.rhs(np, f, 0.01, boundary)
    np.testing.assert_allclose(window.solve(p, r, dtype), want, rtol=0, atol=_tol(dtype, want))
    assert np.max(np.abs(window.solve(short, r, dtype) - want)) > 2 * _tol(dtype, want)


def test_a_short_closed_line_is_thomas_exactly():
    """A closed line of at most S rows is one segment with no halo: Thomas' sweeps, the same bits as the
    NumPy Thomas solver on the plan's factors (the same operations in the same order; the plan substitutes
    the converged values, within 4 ulps, on the rows between the ends)."""
    from nagare.engine.compact.solvers.thomas import thomas

    n = 60
    fac = _fac(n, "closures", -0.25)
    d = np.random.default_rng(2).standard_normal((4, n))
    p = window.plan(fac, np.float64)
    assert p.hi > p.lo > 0
    same = dataclasses.replace(fac, l=p.l, inv_d=p.inv_d, upper=p.upper)
    np.testing.assert_array_equal(window.solve(p, d), thomas(same, d))


WRAPPER = r"""
#include "emu.h"
// a warp's barrier: emu.h's per-warp barrier (the one its shuffles use)
inline void __syncwarp(unsigned = 0xffffffffu) { emu_arrive_and_wait(emu_block->warp_bar[emu_tid / 32]); }
#define nagare_smem tb_smem  // emu_launch NaN-poisons tb_smem before each block
#include "window.cu"
#define KARGS in, out, fac, coef, n, nsys, ss, es, per, gs, seg, hf, hb, lo, hi

template <typename T, bool S>
static void go(int periodic, int fused, int diss, int gx, int gy, int by, const T* in, T* out, const T* fac,
               const T* coef, int n, int nsys, long long ss, long long es, int per, long long gs, int seg, int hf,
               int hb, int lo, int hi)
{
#define NAGARE_GO(P, F, D) emu_launch(gx, gy, 32, by, [=] { compact_window<T, P, F, D, S>(KARGS); })
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

#define WINDOW(T, S) \
extern "C" void window_##S(int stage, int periodic, int fused, int diss, int gx, int gy, int by, const T* in, T* out, \
                           const T* fac, const T* coef, int n, int nsys, long long ss, long long es, int per, \
                           long long gs, int seg, int hf, int hb, int lo, int hi) { \
    if (stage) go<T, true>(periodic, fused, diss, gx, gy, by, KARGS); \
    else go<T, false>(periodic, fused, diss, gx, gy, by, KARGS); }

WINDOW(double, d)
WINDOW(float, f)
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to emulate the kernels")
    from tests.unit.cuda_emulator import compile_threaded

    return compile_threaded(WRAPPER, SOURCE, "window_emu", tmp_path_factory)


def _p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def run(lib, p, dtype, fused, delta, src, dst, nsys, ss, es, *, h=0.3, group=None):
    """One emulated launch of plan ``p`` as window.DeviceWindow makes it (window.staged, window.launch_shape;
    DeviceWindow's plan for the launch is window.for_lines of its own)."""
    stage = window.staged(es, group)
    grid, block, smem = window.launch_shape(p, dtype, nsys, stage)
    assert block[0] == window.LANES and smem <= 400_000
    per, gs = group or (nsys, 0)
    fac, coef = p.packed().astype(dtype), window.coefficients(dtype, h, delta)
    fn = getattr(lib, "window_d" if np.dtype(dtype) == np.float64 else "window_f")
    i, ll = ctypes.c_int, ctypes.c_longlong
    fn(i(stage), i(p.periodic), i(fused), i(bool(delta)), i(grid[0]), i(grid[1]), i(block[1]), _p(src), _p(dst),
       _p(fac), _p(coef), i(p.n), i(nsys), ll(ss), ll(es), i(per), ll(gs), i(p.segment), i(p.halo_f), i(p.halo_b),
       i(p.lo), i(p.hi))


def _want(p, lines, fused, boundary, delta, dtype, h=0.3):
    return window.derivative(p, lines, h, boundary, delta, dtype) if fused else window.solve(p, lines, dtype)


@pytest.mark.parametrize("n,other,segment", [(13, 7, None), (150, 37, 16), (9, 3, 4)], ids=lambda v: str(v))
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("layout", ["x", "y"])
def test_emulated_window_kernel_equals_the_mirror(lib, n, other, segment, boundary, layout):
    """n-point lines, ``other`` of them (37: two groups of 32 lanes, the second partly empty): x-lines (rows)
    and y-lines (columns of a row-major field), solve and fused derivative (central and dissipative), fp64
    and fp32 — the mirror bit for bit, nothing outside the lines written, the source untouched. Segments of
    16 (150 points: 10 segments, 5 blocks of 2) and of 4 (9 periodic points: wrapped halos)."""
    rng = np.random.default_rng(n + other)
    for delta in (0.0, -0.25):
        fac = _fac(n, boundary, delta)
        for dtype in (np.float64, np.float32):
            p = window.plan(fac, dtype, segment)
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
def test_emulated_window_kernel_against_a_dense_solve(lib, boundary):
    """The fused derivative of 5 y-lines of 300 points (5 segments of 64 rows, fp64 halos of 40) against the
    dense reference derivative."""
    n, nx = 300, 5
    f = np.random.default_rng(8).standard_normal((n, nx))
    p = window.plan(_fac(n, boundary), np.float64)
    out = np.full_like(f, np.nan)
    h = 1.0 / n
    run(lib, p, np.float64, True, 0.0, f, out, nx, 1, nx, h=h)
    exact = schemes.derivative_dense(f, h, boundary, axis=0)
    np.testing.assert_allclose(out, exact, rtol=0, atol=_tol(np.float64, exact))


@pytest.mark.parametrize("nx", [1, 7])
def test_emulated_window_kernel_on_a_stack_of_y_lines(lib, nx):
    """A stack (nv, ny, nx)'s y-lines as one launch of lines in groups (nv groups of nx lines a variable
    apart; a warp's lanes straddle variables): the mirror on each variable."""
    ny, nv = 40, 3
    rng = np.random.default_rng(nx)
    for boundary in schemes.BOUNDARIES:
        for dtype in (np.float64, np.float32):
            p = window.plan(_fac(ny, boundary, -0.25), dtype, 8)
            f = rng.standard_normal((nv, ny, nx)).astype(dtype)
            for fused, delta in ((False, 0.0), (True, -0.25)):
                want = np.stack([_want(p, f[v].T, fused, boundary, delta, dtype).T for v in range(nv)])
                out = np.full_like(f, np.nan)
                run(lib, p, dtype, fused, delta, f.copy(), out, nv * nx, 1, nx, group=(nx, ny * nx))
                np.testing.assert_array_equal(out, want)


class _EmulatedWindowDevice:
    """The device side of solver = window (lines.device_solver's signature) on the emulated window.cu, one
    launch per call (lines in groups included), every launch logged as (fused, nsys, sys_stride, elem_stride)."""

    lib = None
    log: list = []
    groups = True

    def __init__(self, kind, fac, prepared, dtype, stream=None):
        assert kind == "window"
        self.plan, self.dtype = prepared, np.dtype(dtype)

    def _run(self, src, dst, nsys, ss, es, fused, h, delta, group):
        assert src.flags.c_contiguous and dst.flags.c_contiguous  # a kernel sees only the pointer
        out = np.empty_like(dst) if np.shares_memory(src, dst) else dst  # DeviceWindow's work array
        p = window.for_lines(self.plan, nsys)  # DeviceWindow's segments for this launch
        run(self.lib, p, self.dtype, fused, delta, src, out, nsys, ss, es, h=h, group=group)
        if out is not dst:
            dst[...] = out
        self.log.append((fused, nsys, ss, es))

    def solve(self, d, x, nsys, ss, es, group=None):
        self._run(d, x, nsys, ss, es, False, 1.0, 0.0, group)

    def derivative(self, f, out, nsys, ss, es, h, delta=0.0, group=None):
        self._run(f, out, nsys, ss, es, True, h, delta, group)


@pytest.mark.parametrize("sides", ["periodic", "bounded"])
def test_fused_navier_stokes_evaluation_on_the_emulated_window_kernel(lib, monkeypatch, sides):
    """solver = window, kernel = fused on the GPU path (emulated kernel, strided y-lines): one evaluation of
    dU/dt equals the NumPy engine's (Thomas, separate right-hand side) to round-off, in 4 fused launches — a
    stack's y-lines are one launch of lines in groups."""
    import types

    from nagare.engine.backend import get_backend
    from nagare.engine.compact import filter as filt
    from nagare.engine.compact import lines
    from nagare.engine.compact import navier_stokes as ns
    from nagare.engine.compact.config import CompactPreset
    from nagare.engine.families import create_engine

    monkeypatch.setattr(_EmulatedWindowDevice, "lib", lib)
    monkeypatch.setattr(_EmulatedWindowDevice, "log", [])
    monkeypatch.setattr(lines, "device_solver", _EmulatedWindowDevice)
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
    sel = dict(ref.selection, solver="window", kernel="fused", batching="stacked", **{"y-direction": "strided"})
    eq.build(sel, types.SimpleNamespace(xp=np, is_gpu=True, name="cupy"))
    got, want = np.empty_like(ref.U), np.empty_like(ref.U)
    eq.rate(ref.U, got)
    ref.ns.rate(ref.U, want)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11 * np.max(np.abs(want)))
    log = _EmulatedWindowDevice.log
    assert len(log) == 4 == eq.launches_per_rate() and all(fused for fused, *_ in log)
    assert (True, 3 * n, 1, n) in log and (True, 4 * n, 1, n) in log


# ---- the segment length per launch ------------------------------------------------------------------
@pytest.mark.parametrize("n,lines,dtype,want", [
    (1024, 1024, np.float64, 40),   # 32 warps of lines: segments down to the halo (40 rows, fp64)
    (1024, 1024, np.float32, 19),   # fp32's halo
    (2048, 2048, np.float64, 40),   # 64 warps of lines want 66 segments of 32 rows: the halo is longer
    (2048, 2048, np.float32, 31),   # 67 segments of 31 rows (32 would be 64): the warps LAUNCH_WARPS asks for
    (4096, 4096, np.float32, 127),  # 33 segments of 127 rows: just shorter than the plan's 128
    (4096, 4096, np.float64, 64),   # 128 warps of lines × 64 segments: enough at the plan's length
    (2048, 3 * 2048, np.float64, 64),  # a stack of 3 at 2048² (the Navier–Stokes gradients): enough
    (512, 3 * 512, np.float64, 40),  # ... at 512²: few lines, the halo's length
])
def test_a_launch_over_few_lines_takes_shorter_segments(n, lines, dtype, want):
    """for_lines: the plan's segment while lines × segments give LAUNCH_WARPS warps, else the length that gives
    them, never below the longer halo; the windows of the shorter plan still match the dense solve."""
    p = window.plan(_fac(n, "periodic"), dtype)
    q = window.for_lines(p, lines)
    assert q.segment == want
    assert (q is p) == (want == p.segment)
    warps = -(-lines // window.LANES) * q.segments
    assert warps >= window.LAUNCH_WARPS or q.segment == max(p.halo_f, p.halo_b)
    assert dataclasses.replace(q, segment=p.segment) == p  # only the segment changes
    if q is not p:  # the longest that gives them: a row more a segment would give too few (or the halo's)
        more = -(-lines // window.LANES) * -(-n // (q.segment + 1))
        assert q.segment == max(p.halo_f, p.halo_b) or more < window.LAUNCH_WARPS


def test_the_segment_rule_never_lengthens_and_can_be_switched_off(monkeypatch):
    """A plan of explicit short segments (below the halo) keeps them; LAUNCH_WARPS = 0 (compact_grid.py's
    --window-segment) keeps the plan's segment in every launch; many lines keep it too."""
    p16 = window.plan(_fac(1000, "closures"), np.float64, 16)
    assert window.for_lines(p16, 1) is p16
    p = window.plan(_fac(1000, "closures"), np.float64)
    assert window.for_lines(p, 10**6) is p
    assert window.for_lines(p, 1).segment == 40
    monkeypatch.setattr(window, "LAUNCH_WARPS", 0)
    assert window.for_lines(p, 1) is p


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
def test_the_numpy_solver_takes_the_launchs_segments(boundary):
    """solver = window on NumPy (the mirror a LineSolver runs) solves with the segments the device's launch
    over the same lines takes: the mirror at for_lines' plan bit for bit, and the dense solve to round-off."""
    n = 500
    fac = _fac(n, boundary)
    strategy = solvers.get("window")
    for dtype in (np.float64, np.float32):
        p = strategy.prepare(fac, dtype, np)
        d = np.random.default_rng(3).standard_normal((2, 9, n)).astype(dtype)
        q = window.for_lines(p, 18)
        assert q.segment < p.segment
        got = strategy.solve(fac, p, d, dtype)
        np.testing.assert_array_equal(got, window.solve(q, d, dtype))
        want = np.linalg.solve(schemes.dense(n, boundary), d.astype(np.float64).reshape(-1, n).T).T.reshape(d.shape)
        np.testing.assert_allclose(got, want, rtol=0, atol=_tol(dtype, want))


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("layout", ["x", "y"])
def test_emulated_kernel_at_the_launchs_shorter_segments(lib, boundary, layout):
    """A launch over 37 lines of 230 points takes segments of the halo's length (fp64 40 rows: 6 segments;
    fp32 19: 13, the last short): the emulated kernel at that plan equals the mirror bit for bit, fused and
    solve."""
    n, other = 230, 37
    rng = np.random.default_rng(11)
    for dtype, segment in ((np.float64, 40), (np.float32, 19)):
        p = window.for_lines(window.plan(_fac(n, boundary), dtype), other)
        assert p.segment == segment
        shape = (other, n) if layout == "x" else (n, other)
        a2 = rng.standard_normal(shape).astype(dtype)
        lines = a2 if layout == "x" else a2.T
        nsys, ss, es = (other, n, 1) if layout == "x" else (other, 1, other)
        for fused in (False, True):
            dst = np.full(shape, np.nan, dtype)
            run(lib, p, dtype, fused, 0.0, a2.copy(), dst, nsys, ss, es)
            got = dst if layout == "x" else dst.T
            np.testing.assert_array_equal(got, _want(p, lines, fused, boundary, 0.0, dtype),
                                          err_msg=f"{layout} {np.dtype(dtype).name} fused {fused}")


# ---- y-direction = window: the y-lines by the window solver, the x-lines by the selected one ---------------
def test_y_direction_window_is_a_registered_choice_with_its_reasons():
    from nagare.engine import registry
    from nagare.engine.compact import variants
    from nagare.engine.presets import load_preset

    for backend in ("numpy", "cupy"):
        assert "window" in registry.axes("compact")["y-direction"].choices
        assert registry.default_selection("compact", backend)["y-direction"] == "strided"
    sel = {"solver": "scan", "y-direction": "window"}
    assert [solvers.for_axis(sel, a) for a in ("x", "y")] == ["scan", "window"]
    assert solvers.names(sel) == ("scan", "window") and solvers.names(dict(sel, solver="window")) == ("window",)
    # a solver of contiguous lines only (gtsv2) transposes its y-lines, unless the window solver takes them
    assert solvers.transposes_y({"solver": "gtsv2", "y-direction": "strided"})
    assert not solvers.transposes_y({"solver": "gtsv2", "y-direction": "window"})
    pre = load_preset("compact-vortex-outflow", ["grid.nx=24", "grid.ny=24"], backend="numpy")
    assert variants._window_check("cupy", dict(sel, batching="stacked"), pre) is None
    assert "grouped" in variants._window_check("cupy", dict(sel, batching="grouped"), pre)
    line1d = load_preset("compact-square1d", [], backend="numpy")
    assert variants._window_check("numpy", sel, line1d) == "a 1D problem has no y-lines for the window solver"


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
def test_derivative_operators_solve_their_y_lines_with_the_window_solver(boundary):
    """NumPy: a y-derivative under y-direction = window solves with the window mirror (at the segments a launch
    over its lines takes), an x-derivative with the selected solver; both match the dense reference."""
    from nagare.engine.backend import get_backend
    from nagare.engine.compact.batched import StackDerivative
    from nagare.engine.compact.operator import Derivative

    be = get_backend("numpy")
    sel = {"solver": "thomas", "y-direction": "window", "kernel": "array", "batching": "stacked"}
    rng = np.random.default_rng(4)
    shape = (230, 37)
    f = rng.standard_normal(shape)
    h = 0.2
    for axis in ("x", "y"):
        op = Derivative(shape=shape, axis=axis, h=h, boundary=boundary, delta=0.0, dtype=np.float64,
                        selection=sel, backend=be)
        assert op.solver.solver == ("window" if axis == "y" else "thomas") and not op.transpose
        out = np.empty(shape)
        op(f, out)
        want = schemes.derivative_dense(f, h, boundary, axis=-1 if axis == "x" else 0)
        np.testing.assert_allclose(out, want, rtol=0, atol=_tol(np.float64, want), err_msg=axis)
        if axis == "y":  # the mirror at the launch's segments (37 lines: the halo's 40 rows), bit for bit
            q = window.for_lines(op.solver.prepared, shape[1])
            assert q.segment == 40
            np.testing.assert_array_equal(out, window.derivative(q, f.T, h, boundary).T)
    stack = rng.standard_normal((3,) + shape)
    sd = StackDerivative(shape=shape, axis="y", h=h, boundary=boundary, dtype=np.float64, selection=sel, backend=be)
    out = np.empty_like(stack)
    sd(stack, out)
    q = window.for_lines(sd.solver.prepared, 3 * shape[1])  # one launch over the stack's y-lines
    np.testing.assert_array_equal(out, np.stack([window.derivative(q, v.T, h, boundary).T for v in stack]))


class _MirrorLineDevice:
    """A device side that solves on the lines a launch addresses with a solver's NumPy mirror (the fused
    derivative: schemes.rhs first) — the x-lines' solver in the test below, whose kernel is tested elsewhere."""

    groups = True

    def __init__(self, kind, fac, prepared, dtype):
        self.kind, self.fac, self.prepared, self.dtype = kind, fac, prepared, np.dtype(dtype)

    def _lines(self, a, nsys, ss, es, group):
        per, gs = group or (nsys, 0)
        s = np.arange(nsys)
        start = (s // per) * gs + (s % per) * ss
        return start[:, None] + np.arange(self.fac.n)[None, :] * es

    def _run(self, src, dst, nsys, ss, es, fused, h, delta, group):
        idx = self._lines(src, nsys, ss, es, group)
        d = src.reshape(-1)[idx]
        if fused:
            d = schemes.rhs(np, d, h, "periodic" if self.fac.periodic else "closures", delta)
        dst.reshape(-1)[idx] = solvers.get(self.kind).solve(self.fac, self.prepared, d, self.dtype)
        _EmulatedWindowDevice.log.append((self.kind, fused, nsys, ss, es))

    def solve(self, d, x, nsys, ss, es, group=None):
        self._run(d, x, nsys, ss, es, False, 1.0, 0.0, group)

    def derivative(self, f, out, nsys, ss, es, h, delta=0.0, group=None):
        self._run(f, out, nsys, ss, es, True, h, delta, group)


@pytest.mark.parametrize("sides", ["periodic", "bounded"])
def test_navier_stokes_evaluation_with_window_y_lines(lib, monkeypatch, sides):
    """y-direction = window, solver = scan, kernel = fused on the GPU path: the y-lines' 2 fused launches a
    evaluation on the emulated window kernel (a stack's y-lines one launch of lines in groups), the x-lines' 2
    with the scan solver; dU/dt equals the NumPy engine's (Thomas, separate right-hand side) to round-off.
    The filter's y-lines keep the scan solver: its matrix (α = 0.49) needs a halo longer than a segment
    (solvers.for_axis)."""
    import types

    from nagare.engine.backend import get_backend
    from nagare.engine.compact import filter as filt
    from nagare.engine.compact import lines
    from nagare.engine.compact import navier_stokes as ns
    from nagare.engine.compact.config import CompactPreset
    from nagare.engine.families import create_engine

    def device(kind, fac, prepared, dtype, stream=None):
        if kind == "window":
            return _EmulatedWindowDevice(kind, fac, prepared, dtype)
        return _MirrorLineDevice(kind, fac, prepared, dtype)

    monkeypatch.setattr(_EmulatedWindowDevice, "lib", lib)
    monkeypatch.setattr(_EmulatedWindowDevice, "log", [])
    monkeypatch.setattr(lines, "device_solver", device)
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
    sel = dict(ref.selection, solver="scan", kernel="fused", batching="stacked", **{"y-direction": "window"})
    eq.build(sel, types.SimpleNamespace(xp=np, is_gpu=True, name="cupy"))
    got, want = np.empty_like(ref.U), np.empty_like(ref.U)
    eq.rate(ref.U, got)
    ref.ns.rate(ref.U, want)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11 * np.max(np.abs(want)))
    log = _EmulatedWindowDevice.log
    assert len(log) == 4 == eq.launches_per_rate()
    assert sorted(e for e in log if e[0] == "scan") == [("scan", True, 3 * n, n, 1), ("scan", True, 4 * n, n, 1)]
    window_launches = [e for e in log if len(e) == 4]  # the emulated kernel's entries: (fused, nsys, ss, es)
    assert sorted(window_launches) == [(True, 3 * n, 1, n), (True, 4 * n, 1, n)]
    assert eq.filters
    assert {f.axis for f in eq.filters} == {"x", "y"}
    assert [f.solver.solver for f in eq.filters] == ["scan"] * len(eq.filters)
    assert not [f for f in eq.filters if window.halo_fits(f.solver.fac, np.float64)]


def test_the_bench_has_a_window_y_cell():
    """`nagare bench compact` runs y-direction = window beside the default (scan for the x-lines), no
    companion needed: the ns-vortex cases measure the hook in the Navier–Stokes step."""
    from nagare.engine.compact import Engine

    cells = dict(Engine.bench_selections("cupy"))
    assert cells["y-direction=window"] == {"y-direction": "window"}


def test_y_lines_keep_the_solver_where_the_halo_is_longer_than_a_segment():
    """y-direction = window gives the window kernel the y-lines of a matrix whose halo fits a segment (the
    derivatives' compact6, ~40 rows in fp64); the filter's nearly singular matrix (α = 0.49: ~190 rows in
    fp64, more than the 64-row segment) keeps the selection's solver, x-lines always do."""
    from nagare.engine.compact import filter as filt

    sel = {"solver": "scan", "y-direction": "window"}
    deriv = tridiag.factorise(*schemes.bands(512, "closures"), False)
    filt_fac = tridiag.factorise(*filt.bands(512, 0.49, "closures"), False)
    assert solvers.for_axis(sel, "y", deriv, np.float64) == "window"
    assert solvers.for_axis(sel, "x", deriv, np.float64) == "scan"
    p = window.plan(filt_fac, np.float64)
    assert max(p.halo_f, p.halo_b) > p.segment
    assert solvers.for_axis(sel, "y", filt_fac, np.float64) == "scan"
    assert not solvers.transposes_y(sel, "scan")
    assert solvers.transposes_y({"solver": "gtsv2", "y-direction": "window"}, "gtsv2")

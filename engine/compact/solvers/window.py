"""``solver = window``: the compact derivative solved in independent segments of S rows, each from the
right-hand side on the segment and a halo around it (shaders/cuda/compact/window.cu; this module: the
plan, the launch shape and the NumPy mirror of the kernel's operations in its order).

Why: the scan kernels (solvers/scan.py, tile.py) hold a whole line on chip, so a block of strided
y-lines can cover at most a sector's width of x (4 fp64 columns) and moves 8 or 4 bytes of every 32-byte
sector per line; y at 4096² reaches 9–13 % of copy bandwidth (docs/benchmarks/session-h200-2026-12-02).
Here no thread needs the whole line: a warp takes 32 adjacent lines (for y-lines, 32 adjacent x-columns:
one 256-byte fp64 or 128-byte fp32 row segment a load) and each thread runs Thomas' sweeps down one
segment of its line, so a field has (lines × segments) independent threads — enough warps in flight to
hide the DRAM latency without any on-chip line.

The property it rests on: away from P4's closure rows the matrix is constant-coefficient and strictly
diagonally dominant (a x_{i-1} + d x_i + c x_{i+1}, |a| + |c| < |d|), so Thomas' factors converge
(:func:`limits`) and a value of the forward sweep g forgets where the sweep started like
ρ_f^k (ρ_f = |l_∞|, the small root's modulus of c z² + d z + a = 0: 0.382 for Lele's α = 1/3), and one of
the backward elimination (the UL sweep from the right) like ρ_b^k (ρ_b = |c / E_∞| = 1 / the large root's
modulus; for compact6 ρ_b = ρ_f, for the dissipative rows α(1 ∓ δ) with δ = -¼ ρ_f = 0.472, ρ_b = 0.283,
and the other way round for δ = +¼). Starting a sweep H rows before the segment from zero changes the segment's
values by ρ^H of the line's values: H = ⌈log(ε / SAFETY) / log ρ⌉ (:func:`halo`) puts that below the
dtype's round-off — fp64 40 rows, fp32 19 for compact6 (the dissipative scheme's slower side 51
and 25). The plan derives ρ from the scheme's matrix; nothing here knows α.

One segment [s0, s1) of a line, every row's factor from the plan (the exact per-row factors near the
ends, the converged values in between):

1. backward elimination h_i = r_i - μ_i h_{i+1} from zero at row b - 1 down to s1 (the right halo,
   b = s1 + H_b; the UL factors μ_i = c_i / E_{i+1} of the whole line);
2. forward sweep g_i = r_i - l_i g_{i-1} from zero at row a = s0 - H_f up to s1 - 1, keeping g on the
   segment's rows (the LU factors of the whole line);
3. the twist at row s1 (a "burn at both ends" solve): x_{s1} = (h_{s1} - l_{s1} g_{s1-1}) / (D_{s1} + E_{s1}
   - d_{s1}) — the value the full line's Thomas solve has there, to round-off — then back substitution
   x_i = (g_i - c_i x_{i+1}) / D_i down the segment.

A segment that ends at a closed line's last row takes x = g / D there (the twist's x_{s1} is 0 and c_{n-1}
is 0: the same operations); a halo that would reach within the factors' unconverged rows of a closed
end starts at the end instead (a = 0 or b = n: exact sweeps through P4's closure rows, never a truncation
next to them — their multipliers are not below ρ). Periodic lines have no ends: the constant factors on
every row, the halo indices wrap (a segment of a line shorter than its window wraps more than once: the
infinite line's solution with a periodic right-hand side is the periodic solution). A line of at most S
rows with closures is one segment with no halo: Thomas' exact sweeps.

The kernel's launch: blocks of (32, WARPS) threads, threadIdx.x the line in a group of 32 adjacent lines,
threadIdx.y the segment; g of a segment is kept in shared memory (S values a thread, consecutive lanes
in consecutive words: no bank conflicts). y-lines (adjacent lines) read their rows directly — a warp's
load is one row segment of 32 columns — with each thread's loads 8 rows ahead of its sweep (a register
ring). x-lines (contiguous, :func:`staged`) go through a 32 × 33 shared tile a warp: 32 rows of the warp's
32 lines a chunk, one coalesced 256-byte (fp64) load per line, the next chunk in flight while the current
one is read. S per dtype (:data:`SEGMENT`): the halo costs (H_f + H_b) / S extra rows of work (the
right-hand side and a sweep step each) and of reads, served mostly by L2 (the neighbouring segment's rows);
S·itemsize of shared memory a thread bounds the warps an SM holds. 64 fp64 / 128 fp32 rows is 512 bytes a
thread (14 warps an SM at 2 warps a block; the x tile adds 8.4 KiB a warp) with ~1.25× (fp64) and ~0.3×
(fp32) extra rows: the A/B is ``tools/compact_grid.py --window-segment``, to be measured. That S is the
longest; a launch over few lines takes shorter segments (:func:`for_lines`): at 1024 lines, 32 warps of
lines × 16 segments of 64 rows is 512 warps for 132 SMs, where the DRAM latency wants thousands.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from ...cuda import KernelSpec, ctype, template
from .. import schemes
from ..tridiag import Factors
from .base import SharedMemoryOptIn, Solver
from .scan import LineKernels, coefficients  # noqa: F401 (the fused kernel's coef layout, as the scan kernel's)

SAFETY = 8.0  # the halo leaves the truncation ε/SAFETY of the line's values: the back substitution and the
#               twist amplify a g or h error by 1/(D - c) ≈ 1.9 (compact6) to ≈ 2.5 (dissipative5)
SEGMENT = {np.dtype(np.float64): 64, np.dtype(np.float32): 128}  # rows a thread (see the module's why)
WARPS = 2  # segments a block (threadIdx.y): 64-thread blocks, 32 KiB of g at 512 bytes a thread
LANES = 32  # lines a block (threadIdx.x): one warp's coalesced row segment
# Warps of work a launch should have for the DRAM latency to be hidden: 4 waves of 8 warps on each of 132 SMs
# (a large Hopper part's count). Few lines (1024², a stack of 512² fields) give too few at the plan's
# segment length, so a launch over them cuts its lines into shorter segments (:func:`for_lines`). A
# constant, not the device's SM count: a launch's segments — and so its round-off — are the same on every
# card, and the NumPy mirror computes them without a device. 0: every launch at the plan's segment
# (tools/compact_grid.py's A/B).
LAUNCH_WARPS = 4 * 132 * 8
CONVERGED_ULPS = 4  # per-row factors within this many float64 ulps of the limit count as converged
SOURCE = "cuda/compact/window.cu"
OPTIONS = ("--fmad=false",)


def limits(lower: float, diag: float, upper: float) -> dict[str, float]:
    """The converged factors of the constant-coefficient rows a x_{i-1} + d x_i + c x_{i+1} (float64): LU
    from the left, D = d - a c / D, l = a / D; UL from the right, E = d - a c / E (the same root), μ = c / E;
    the twist's denominator D + E - d. D is the root of D² - d D + a c = 0 of larger modulus (the fixed point
    the recursion converges to for a diagonally dominant matrix)."""
    disc = diag * diag - 4.0 * lower * upper
    if disc <= 0.0:
        raise ValueError(f"the rows ({lower}, {diag}, {upper}) are not diagonally dominant: no decaying solution")
    big = 0.5 * (diag + math.copysign(math.sqrt(disc), diag))
    return {"l": lower / big, "inv_d": 1.0 / big, "upper": upper, "mu": upper / big, "inv_t": 1.0 / (2.0 * big - diag)}


def decay(lower: float, diag: float, upper: float) -> tuple[float, float]:
    """(ρ_f, ρ_b): how fast the forward sweep and the backward elimination forget their start, per row."""
    lim = limits(lower, diag, upper)
    return abs(lim["l"]), abs(lim["mu"])


def halo(rho: float, dtype) -> int:
    """Rows a sweep must run before the segment for its start to fall below the dtype's round-off:
    ⌈log(ε / SAFETY) / log ρ⌉."""
    if not 0.0 < rho < 1.0:
        raise ValueError(f"a decay rate of {rho} does not decay")
    return math.ceil(math.log(np.finfo(np.dtype(dtype)).eps / SAFETY) / math.log(rho))


@dataclass(frozen=True)
class WindowPlan:
    """One factorised matrix prepared for windowed solves in one dtype: per-row factors (float64, length n;
    the converged values substituted on rows lo <= i < hi, every row of a periodic line) and the segment
    and halo sizes."""

    n: int
    periodic: bool
    dtype: str  # the dtype whose round-off the halos are sized for
    segment: int
    halo_f: int
    halo_b: int
    lo: int
    hi: int
    l: np.ndarray
    inv_d: np.ndarray
    upper: np.ndarray
    mu: np.ndarray
    inv_t: np.ndarray
    interior: np.ndarray  # [l, inv_d, upper, mu, inv_t] of the converged rows

    @property
    def segments(self) -> int:
        return -(-self.n // self.segment)

    def packed(self) -> np.ndarray:
        """The kernel's ``fac``: the five bands, then the five converged values."""
        return np.concatenate([self.l, self.inv_d, self.upper, self.mu, self.inv_t, self.interior])

    def window(self, s0: int) -> tuple[int, int, int]:
        """(a, s1, b) of the segment starting at s0: the forward sweep starts at a, the segment ends at s1,
        the backward elimination starts at b - 1 (periodic: unwrapped indices)."""
        s1 = min(self.n, s0 + self.segment)
        a, b = s0 - self.halo_f, s1 + self.halo_b
        if not self.periodic:
            a = 0 if a <= self.lo or self.hi <= self.lo else a  # no converged interior: the whole line
            b = self.n if b >= self.hi else b
        return a, s1, b


def halo_fits(fac: Factors, dtype) -> bool:
    """Whether ``fac``'s halo (both sides) is no longer than a segment in ``dtype``: a longer one reads each
    row more than three times (segment + two halos), which the other solvers beat (solvers.for_axis)."""
    p = plan(fac, dtype or np.float64)
    return max(p.halo_f, p.halo_b) <= p.segment


def plan(fac: Factors, dtype, segment: int | None = None) -> WindowPlan:
    """The window kernel's constants for ``fac`` (tridiag.factorise) in ``dtype``."""
    dt = np.dtype(dtype)
    n, mid = fac.n, fac.n // 2
    s = segment or SEGMENT[dt]
    lim = limits(fac.lower[mid], fac.diag[mid], fac.upper[mid])
    rho_f, rho_b = decay(fac.lower[mid], fac.diag[mid], fac.upper[mid])
    hf, hb = halo(rho_f, dt), halo(rho_b, dt)
    interior = np.array([lim[k] for k in ("l", "inv_d", "upper", "mu", "inv_t")])
    if fac.periodic:
        if not (np.all(fac.lower[1:] == fac.lower[mid]) and np.all(fac.upper[:-1] == fac.upper[mid])):
            raise ValueError("a periodic line's windows need constant-coefficient rows")
        bands = [np.full(n, v) for v in interior]
        return WindowPlan(n, True, dt.str, s, hf, hb, 0, n, *bands, interior)
    lower, diag, upper = fac.lower, fac.diag, fac.upper
    e = np.empty(n)  # the UL factorisation from the right end
    mu = np.zeros(n)
    e[-1] = diag[-1]
    for i in range(n - 2, -1, -1):
        mu[i] = upper[i] / e[i + 1]
        e[i] = diag[i] - mu[i] * lower[i + 1]
    d = 1.0 / fac.inv_d
    inv_t = 1.0 / (d + e - diag)
    bands = [fac.l.copy(), fac.inv_d.copy(), upper.copy(), mu, inv_t]
    lo, hi = _converged_rows(bands, interior, lower, upper, lim)
    for band, value in zip(bands, interior):
        band[lo:hi] = value
    return WindowPlan(n, False, dt.str, s, hf, hb, lo, hi, *bands, interior)


def _converged_rows(bands, interior, lower, upper, lim) -> tuple[int, int]:
    """[lo, hi): the rows around the middle whose five factors are all within :data:`CONVERGED_ULPS` of the
    limits and whose bands are the interior ones; (0, 0) where the middle row has not converged (short
    lines: every segment then spans the line)."""
    n, mid = bands[0].size, bands[0].size // 2
    tol = CONVERGED_ULPS * np.finfo(np.float64).eps
    ok = (lower == lower[mid]) & (upper == upper[mid])
    for band, value in zip(bands, interior):
        ok &= np.abs(band - value) <= tol * abs(value) if value else band == 0.0
    if not ok[mid]:
        return 0, 0
    bad = np.flatnonzero(~ok)
    lo = int(bad[bad < mid].max()) + 1 if np.any(bad < mid) else 0
    hi = int(bad[bad > mid].min()) if np.any(bad > mid) else n
    return lo, hi


def for_lines(p: WindowPlan, nsys: int) -> WindowPlan:
    """The plan of one launch over ``nsys`` lines: ``p`` when its segments give :data:`LAUNCH_WARPS` warps
    (a warp is 32 lines × one segment), else the longest segment length that gives them — never shorter than the
    longer halo (below it a thread's halo rows outnumber its segment's, work that buys no more warps than a
    segment of halo length does), never longer than the plan's. The device's launches and the mirror
    (:meth:`Window.solve`) both take their segments from here, so they agree bit for bit."""
    line_warps = -(-max(nsys, 1) // LANES)
    want = -(-LAUNCH_WARPS // line_warps)
    if LAUNCH_WARPS <= 0 or p.segments >= want:
        return p
    shortest = min(p.segment, max(p.halo_f, p.halo_b))
    s = max(shortest, -(-p.n // (want - 1)) - 1)  # the longest with ⌈n / s⌉ ≥ want (want ≥ 2 here)
    return p if s >= p.segment else replace(p, segment=s)


def solve(p: WindowPlan, r, dtype=None):
    """x = A⁻¹ r on the last axis by the kernel's operations in its order, vectorised over every (line,
    segment): the three passes of the module's docstring, rows outside a segment's window masked off."""
    dt = np.dtype(dtype or np.asarray(r).dtype)
    r = np.asarray(r, dtype=dt)
    n, s = p.n, p.segment
    if r.shape[-1] != n:
        raise ValueError(f"lines of {r.shape[-1]} points for a plan of {n}")
    lead = r.shape[:-1]
    f = {k: getattr(p, k).astype(dt) for k in ("l", "inv_d", "upper", "mu", "inv_t")}
    s0 = np.arange(p.segments) * s
    a, s1, b = (np.array(v) for v in zip(*(p.window(int(v)) for v in s0)))
    zero = np.zeros(lead + (s0.size,), dtype=dt)

    def row(i):  # the rows i (one per segment) of every line, wrapped, and their index
        w = i % n
        return r[..., w], w

    h = zero.copy()
    for k in range(int((b - s1).max()) - 1, -1, -1):  # 1. backward elimination from b - 1 down to s1
        i = s1 + k
        live = i < b
        ri, w = row(i)
        h = np.where(live, ri - f["mu"][w] * h, h)
    g = zero.copy()
    keep = np.zeros(lead + (s0.size, s), dtype=dt)
    for k in range(int((s1 - a).max())):  # 2. forward sweep from a up to s1 - 1, g kept on the segment
        i = a + k
        live = i < s1
        ri, w = row(i)
        g = np.where(live, ri - f["l"][w] * g, g)
        on = np.flatnonzero(live & (i >= s0))
        keep[..., on, (i - s0)[on]] = g[..., on]
    twist = s1 < n if not p.periodic else np.ones(s0.shape, dtype=bool)
    w1 = s1 % n
    xn = np.where(twist, (h - f["l"][w1] * g) * f["inv_t"][w1], zero)  # 3. the twist at s1 ...
    x = np.empty(lead + (n,), dtype=dt)
    for j in range(s - 1, -1, -1):  # ... and back substitution down the segment
        i = s0 + j
        live = i < s1
        w = np.minimum(i, n - 1)
        y = (keep[..., j] - f["upper"][w] * xn) * f["inv_d"][w]
        xn = np.where(live, y, xn)
        x[..., i[live]] = xn[..., live]
    return x


def derivative(p: WindowPlan, f, h: float, boundary: str, delta: float = 0.0, dtype=None):
    """What the fused kernel computes, on NumPy: the right-hand side (schemes.rhs, whose operations the
    kernel repeats row by row) then :func:`solve`."""
    dt = np.dtype(dtype or np.asarray(f).dtype)
    return solve(p, schemes.rhs(np, np.asarray(f, dtype=dt), h, boundary, delta), dt)


def staged(elem_stride: int, group) -> bool:
    """Whether a launch stages its rows through a shared tile a warp: contiguous lines (x-lines), where a
    lane's own rows are 8 bytes of a different sector each; y-lines (adjacent lines, a row's lanes
    contiguous) read their rows directly, coalesced."""
    return elem_stride == 1 and (group is None or group[1] == 0)


def launch_shape(p: WindowPlan, dtype, nsys: int, stage: bool = False):
    """(grid, block, dynamic shared bytes) of one launch over nsys lines: g of every thread's segment, and
    ``stage``: a 32 × 33 tile a warp."""
    segs = p.segments
    warps = min(WARPS, segs)
    grid = (-(-nsys // LANES), -(-segs // warps))
    values = LANES * warps * p.segment + (warps * LANES * (LANES + 1) if stage else 0)
    return grid, (LANES, warps), values * np.dtype(dtype).itemsize


def kernel_name(dtype, periodic: bool, fused: bool, dissipative: bool, stage: bool) -> str:
    return template("compact_window", ctype(dtype), periodic, fused, dissipative, stage)


def kernel_names(dtype) -> tuple[str, ...]:
    """The instances of one dtype: solve, fused, fused dissipative, for both boundary kinds, staged or not."""
    return tuple(kernel_name(dtype, periodic, fused, diss, stage) for stage in (False, True)
                 for periodic in (False, True) for fused, diss in ((False, False), (True, False), (True, True)))


def spec(dtype) -> KernelSpec:
    return _spec(np.dtype(dtype).str)


@cache
def _spec(dtype_str: str) -> KernelSpec:
    return KernelSpec(SOURCE, kernel_names(np.dtype(dtype_str)), OPTIONS)


class DeviceWindow(LineKernels):
    """The window kernel for one factorised matrix on the device: ``solve`` and ``derivative`` on any line
    batch (x-lines, strided y-lines, a stack's y-lines in groups), one launch each. A segment's halo reads
    rows its neighbours write, so an in-place call (the source is the destination) solves into a work
    array kept per size and copies back."""

    groups = True

    def __init__(self, p: WindowPlan, dtype, stream=None):
        import cupy as cp  # optional dependency: the GPU backend only

        self.cp, self.dtype, self.stream, self.plan = cp, np.dtype(dtype), stream, p
        self.fac_dev = cp.asarray(p.packed().astype(self.dtype))
        self._fns: dict = {}
        self._coefs: dict = {}
        self._work: dict = {}
        self._opt_in = SharedMemoryOptIn()
        self._plans: dict = {}  # lines a launch -> its plan (for_lines)

    def _function(self, fused: bool, dissipative: bool, stage: bool):
        key = (fused, dissipative, stage)
        fn = self._fns.get(key)
        if fn is None:
            name = kernel_name(self.dtype, self.plan.periodic, fused, dissipative, stage)
            fn = self._fns[key] = spec(self.dtype).function(name)
        return fn

    def _launch(self, fused, dissipative, src, dst, coef, nsys, sys_stride, elem_stride, group) -> None:
        if nsys <= 0:
            return
        per, group_stride = group if group is not None else (nsys, 0)
        if group is not None and (per <= 0 or nsys % per or group_stride == 0):
            raise ValueError(f"lines in groups of {per} (stride {group_stride}) do not divide {nsys} lines")
        if src.dtype != self.dtype or dst.dtype != self.dtype:
            raise TypeError(f"window solver built for {self.dtype}: got {src.dtype} → {dst.dtype}")
        out = dst
        if self.cp.may_share_memory(src, dst):
            if not dst.flags.c_contiguous:
                raise ValueError("window solver: an in-place (overlapping) call needs a C-contiguous destination")
            out = self._work.get(dst.size)
            if out is None:
                out = self._work[dst.size] = self.cp.empty(dst.size, dtype=self.dtype)
        p = self._plans.get(nsys)
        if p is None:
            p = self._plans[nsys] = for_lines(self.plan, nsys)
        stage = staged(elem_stride, group)
        grid, block, smem = launch_shape(p, self.dtype, nsys, stage)
        fn = self._function(fused, dissipative, stage)
        self._opt_in(fn, smem)
        with self.stream if self.stream is not None else contextlib.nullcontext():
            self._run(p, fn, grid, block, smem, src, out, coef, nsys, sys_stride, elem_stride, per, group_stride)
            if out is not dst:
                dst[...] = out.reshape(dst.shape)

    def _run(self, p, fn, grid, block, smem, src, out, coef, nsys, sys_stride, elem_stride, per, group_stride) -> None:
        fn(grid, block, (src, out, self.fac_dev, coef, np.int32(p.n), np.int32(nsys), np.int64(sys_stride),
                         np.int64(elem_stride), np.int32(per), np.int64(group_stride), np.int32(p.segment),
                         np.int32(p.halo_f), np.int32(p.halo_b), np.int32(p.lo), np.int32(p.hi)),
           shared_mem=smem)



class Window(Solver):
    name = "window"
    doc = ("independent segments of a line, each solved from its right-hand side and a halo long enough for the "
           "truncation to fall below round-off (engine/compact/solvers/window.py): a warp per 32 adjacent lines, "
           "a thread per segment, no line on chip; fuses the right-hand side")
    fuses_rhs = True

    def prepare(self, fac, dtype, xp, stream=None):
        return plan(fac, dtype)

    def solve(self, fac, prepared, d, dtype=None):
        dt = np.dtype(dtype or np.asarray(d).dtype)
        p = prepared if prepared is not None and np.dtype(prepared.dtype) == dt else plan(fac, dt)
        lines = int(np.prod(np.shape(d)[:-1]))  # the device's launch over these lines: the same segments
        return solve(for_lines(p, lines), d, dt)

    def device(self, fac, prepared, dtype, stream=None):
        return DeviceWindow(prepared, dtype, stream)

    def kernel_specs(self, dtype, selection, shape):
        return [spec(dtype)]


STRATEGIES = (Window(),)

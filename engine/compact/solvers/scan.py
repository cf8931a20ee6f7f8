"""``solver = scan``: Thomas' LU sweeps as parallel scans over chunks of a line, and the ``fused``
compact derivative that computes the explicit right-hand side in the same launch
(shaders/cuda/compact/scan.cu). This module holds the host side: the chunking, the constants the
kernel reads, the launch shape, and a NumPy mirror of every kernel operation in the kernel's order
(what the NumPy backend runs for ``solver = scan``; the CPU emulation checks the kernel against it bit
for bit).

Why: a compact derivative's ideal traffic is one read of the line and one write of its derivative.
The separate passes (right-hand side, closures, solve) move every line three to five times, and CR
and PCR solve a line in one block through log₂ n synchronised levels, far from the copy roofline
(docs/benchmarks/compact-h200-2026-11-25). The matrix is the same for every line, so
Thomas' factors (and everything below) are computed once in float64; a line then needs only its own
values, read once into shared memory, and the two sweeps are first-order linear recurrences
g_i = d_i - l_i g_{i-1} and x_i = (g_i - u_i x_{i+1}) / D_i. A recurrence splits over chunks: each
thread runs its chunk of C rows from a zero start, and the true values differ from those by a
multiple of the value entering the chunk, g_i = g⁰_i + pf_i G with pf_i = Π_{k=start..i} (-l_k); the
entering values themselves follow from a scan of the chunks' affine maps G_out = g⁰_end + pf_end G_in
(warp shuffles, then a fold over the warps). Both products decay like 0.38^C (|l_i|, |u_i/D_i| → 0.38
for Lele's α = 1/3), so the scan is as stable as the sequential sweep; the result differs from
``thomas`` by round-off only (the registry's solver tolerance).

Choices the papers leave open, and why:
- one block per line, one chunk per thread (C = :func:`chunk_size`): a 2048-point line is 256
  threads, and the rows of a chunk live in registers, so the recurrences cost no shared-memory
  traffic (a persistent grid prefetching its next line measured slower, in registers or by cp.async:
  shaders/cuda/compact/scan.cu); 8-row chunks are bounded to 40 registers (three 512-thread or six
  256-thread blocks an SM: the kernel is latency-bound, and more resident blocks measured faster);
- padding: rows past n get l = -1, u = 1/D = 0, z = 0 and a zero right-hand side, which carry the last
  row's values through the rest of the chunk exactly (g = 0 - (-1)·g) and contribute nothing back,
  so neither the kernel's loops nor this mirror need bounds;
- interior chunks: the factors are the same on every row away from the ends (:func:`_interior_chunks`),
  so those chunks read one small set of values (six bands per row made the kernel bound by L1
  throughput);
- periodic lines: Sherman–Morrison after the sweeps (x_0 and x_{n-1} are two threads' registers:
  one more barrier), not folded into the forward sweep as ``thomas`` does (that needs a reduction).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ...cuda import KernelSpec, ctype, template
from .. import schemes
from ..tridiag import Factors
from .base import SharedMemoryOptIn, Solver

CHUNKS = (4, 8, 16, 32)  # plannable chunk sizes (4: the emulation tests' many-warp teams)
COMPILED = (8, 16, 32)  # the instances the GPU module holds: what chunk_size picks
MAX_TEAM = 512  # threads per line at most (the kernel's __launch_bounds__)
WARP = 32


def chunk_size(n: int) -> int:
    """Rows per thread for a line of n points: 8, or the smallest larger size that keeps the team at
    most :data:`MAX_TEAM` threads: 8 rows a thread beat 4 (more threads per line, more scan work and
    barriers per row) and 16 in the measurements of docs/benchmarks/compact-scan-h100-2026-11-26."""
    for c in COMPILED:
        if -(-n // c) <= MAX_TEAM:
            return c
    raise ValueError(f"the scan solver handles lines of at most {CHUNKS[-1] * MAX_TEAM} points, got {n}")


@dataclass(frozen=True)
class ScanPlan:
    """One factorised matrix prepared for the scan kernel: chunk ``chunk`` rows, ``team`` threads (a
    multiple of 32), the bands padded to team·chunk rows; ``packed`` in the kernel's order (float64)."""

    n: int
    chunk: int
    team: int
    periodic: bool
    l: np.ndarray
    inv_d: np.ndarray
    upper: np.ndarray
    pf: np.ndarray
    pb: np.ndarray
    z: np.ndarray
    r: float
    q: float
    t_lo: int = 0  # threads t_lo <= t < t_hi own interior chunks (their factors: ``interior``)
    t_hi: int = 0

    @property
    def rows(self) -> int:
        return self.team * self.chunk

    def interior(self) -> np.ndarray:
        """[l, 1/D, u, pf(chunk), pb(chunk)] of every interior chunk (the bands hold the same values there)."""
        s = self.t_lo * self.chunk
        if self.t_hi <= self.t_lo:
            s = 0
        c = self.chunk
        return np.concatenate([[self.l[s], self.inv_d[s], self.upper[s]], self.pf[s:s + c], self.pb[s:s + c]])

    def packed(self) -> np.ndarray:
        return np.concatenate([self.l, self.inv_d, self.upper, self.pf, self.pb, self.z, [self.r, self.q],
                               self.interior()])

    def shared_bytes(self, dtype) -> int:
        """Dynamic shared memory of one block: the padded line."""
        return (self.rows + self.team) * np.dtype(dtype).itemsize


def team_size(n: int, chunk: int) -> int:
    """Threads a line of n points takes in chunks of ``chunk`` rows: a whole number of warps."""
    chunks = -(-n // chunk)
    return -(-chunks // WARP) * WARP


def plan(fac: Factors, chunk: int | None = None) -> ScanPlan:
    """The scan kernel's constants for ``fac`` (tridiag.factorise)."""
    n = fac.n
    c = chunk or chunk_size(n)
    if c not in CHUNKS:
        raise ValueError(f"chunk {c} unsupported; allowed: {', '.join(map(str, CHUNKS))}")
    team = team_size(n, c)
    rows = team * c
    l = np.full(rows, -1.0)
    l[:n] = fac.l
    inv_d = np.zeros(rows)
    inv_d[:n] = fac.inv_d
    upper = np.zeros(rows)
    upper[:n] = fac.upper
    z = np.zeros(rows)
    if fac.periodic:
        z[:n] = fac.z
    t_lo, t_hi = _interior_chunks(fac, c)
    lo, hi = t_lo * c, t_hi * c
    mid = n // 2
    l[lo:hi], inv_d[lo:hi], upper[lo:hi], z[lo:hi] = fac.l[mid], fac.inv_d[mid], fac.upper[mid], 0.0
    pf = np.empty(rows)
    pb = np.empty(rows)
    m = -upper * inv_d
    for s in range(0, rows, c):
        pf[s:s + c] = np.cumprod(-l[s:s + c])
        pb[s:s + c] = np.cumprod(m[s:s + c][::-1])[::-1]
    return ScanPlan(n, c, team, fac.periodic, l, inv_d, upper, pf, pb, z, fac.r, fac.q, t_lo, t_hi)


INTERIOR_ULPS = 4  # interior factors within this many float64 ulps of the middle row's
Z_NEGLIGIBLE = 1e-18  # |z_i| below this: the periodic correction s·z_i is below round-off of x_i ~ s


def _interior_chunks(fac: Factors, c: int) -> tuple[int, int]:
    """The chunks whose rows all have the middle row's factors (to :data:`INTERIOR_ULPS`) and a
    negligible periodic correction: Thomas' factors converge geometrically away from the ends (for
    Lele's α = 1/3 to the last bit within ~25 rows, z decays like 0.38^i), so on such a chunk the kernel
    reads one set of values instead of six bands; the plan substitutes the middle row's values there, so
    the mirror and the kernel use the same numbers. (0, 0) where the factors never settle (short lines,
    weakly dominant matrices)."""
    n, mid = fac.n, fac.n // 2
    tol = INTERIOR_ULPS * np.finfo(np.float64).eps
    ok = ((np.abs(fac.l - fac.l[mid]) <= tol * abs(fac.l[mid]))
          & (np.abs(fac.inv_d - fac.inv_d[mid]) <= tol * abs(fac.inv_d[mid]))
          & (fac.upper == fac.upper[mid]) & (fac.lower == fac.lower[mid]) & (np.abs(fac.z) <= Z_NEGLIGIBLE))
    if not ok[mid]:
        return 0, 0
    bad = np.flatnonzero(~ok)
    head = int(bad[bad < mid].max()) + 1 if np.any(bad < mid) else 0
    tail = int(bad[bad > mid].min()) if np.any(bad > mid) else n
    t_lo, t_hi = -(-head // c), tail // c
    return (t_lo, t_hi) if t_hi > t_lo else (0, 0)


def coefficients(dtype, h: float, delta: float = 0.0) -> np.ndarray:
    """The fused kernel's ``coef`` array, cast to ``dtype`` as the NumPy right-hand side casts them:
    [A/2, B/4, δ d, δ e/2, 2, c0, c1, c2, c3, pa, 1/h] (schemes.interior, schemes.closure_rows)."""
    dt = np.dtype(dtype).type
    vals = [schemes.A6 / 2, schemes.B6 / 4, delta * schemes.D5, delta * schemes.E5 / 2, 2.0,
            *schemes.CLOSURE0_RHS, schemes.PADE_A / 2, 1.0 / h]
    return np.array([dt(v) for v in vals], dtype=dtype)


def _carry(a, b, reverse: bool):
    """The kernel's compact_scan_carry on (…, team) arrays: each thread's composed affine map of the
    threads before it (after it when ``reverse``) applied to 0, by the same operations in the same order."""
    if reverse:
        return _carry(a[..., ::-1], b[..., ::-1], False)[..., ::-1]
    lead, team = a.shape[:-1], a.shape[-1]
    nw = team // WARP
    a = a.reshape(lead + (nw, WARP)).copy()
    b = b.reshape(lead + (nw, WARP)).copy()
    off = 1
    while off < WARP:  # Hillis–Steele within each warp (both read the values before this step)
        bp, ap = b[..., :-off].copy(), a[..., :-off].copy()
        b[..., off:] = b[..., off:] + a[..., off:] * bp
        a[..., off:] = a[..., off:] * ap
        off <<= 1
    pb = np.zeros(lead + (nw,), dtype=a.dtype)
    acc = np.zeros(lead, dtype=a.dtype)
    for w in range(1, nw):  # the fold over the warp totals before warp w, in order
        acc = b[..., w - 1, -1] + a[..., w - 1, -1] * acc
        pb[..., w] = acc
    full = b + a * pb[..., None]
    out = np.empty_like(b)
    out[..., 1:] = full[..., :-1]
    out[..., 0] = pb
    return out.reshape(lead + (team,))


def solve(p: ScanPlan, d, dtype=None, *, rhs_done: bool = True):
    """x = A⁻¹ d on the last axis with the kernel's operations (``dtype``: the arithmetic's precision)."""
    dt = np.dtype(dtype or np.asarray(d).dtype)
    d = np.asarray(d, dtype=dt)
    lead, n, c, team = d.shape[:-1], p.n, p.chunk, p.team
    if d.shape[-1] != n:
        raise ValueError(f"lines of {d.shape[-1]} points for a plan of {n}")
    cast = {k: getattr(p, k).astype(dt).reshape(team, c) for k in ("l", "inv_d", "upper", "pf", "pb", "z")}
    v = np.zeros(lead + (p.rows,), dtype=dt)
    v[..., :n] = d
    v = v.reshape(lead + (team, c))
    for j in range(1, c):
        v[..., j] = v[..., j] - cast["l"][:, j] * v[..., j - 1]
    gin = _carry(np.broadcast_to(cast["pf"][:, -1], v.shape[:-1]), v[..., -1], False)
    v = v + cast["pf"] * gin[..., None]
    v[..., -1] = v[..., -1] * cast["inv_d"][:, -1]
    for j in range(c - 2, -1, -1):
        v[..., j] = (v[..., j] - cast["upper"][:, j] * v[..., j + 1]) * cast["inv_d"][:, j]
    xout = _carry(np.broadcast_to(cast["pb"][:, 0], v.shape[:-1]), v[..., 0], True)
    v = v + cast["pb"] * xout[..., None]
    v = v.reshape(lead + (p.rows,))
    if p.periodic:
        t = dt.type
        sm = t(p.q) * (v[..., :1] + t(p.r) * v[..., n - 1:n])
        v = v - sm * p.z.astype(dt)
    return np.ascontiguousarray(v[..., :n])


SECTOR = 32  # bytes: the unit DRAM and L2 move; a tile of strided lines reads whole sectors of each row


def tile_lines(team: int, dtype, sys_stride: int, elem_stride: int) -> int:
    """Lines per block (the kernel's W): 1 for contiguous lines; for strided lines side by side
    (sys_stride 1, the y-lines of a row-major field) as many as fill a 32-byte sector with one row
    (4 in fp64, 8 in fp32), halved until the block is at most :data:`MAX_TEAM` threads. One strided
    line per block would use 8 (fp64) or 4 (fp32) bytes of every sector it reads and writes."""
    if elem_stride == 1 or sys_stride != 1:
        return 1
    w = max(1, SECTOR // np.dtype(dtype).itemsize)
    while w > 1 and w * team > MAX_TEAM:
        w //= 2
    return w


def strided_spec(n: int, dtype):
    """The module of the tiles that strided n-point lines of ``dtype`` take (None: one line a block),
    for a warm-up before the first strided launch."""
    c = chunk_size(n)
    w = tile_lines(team_size(n, c), dtype, 1, 2)
    return spec(dtype, c, w) if w > 1 else None


def tile_pad(w: int, dtype) -> int:
    """Values between the W shared lines of a tile beyond their length (the kernel's ``ls``): 128 bytes
    over the tile, so the W row segments a warp moves start on different banks (0 for one line)."""
    return 0 if w == 1 else 128 // (w * np.dtype(dtype).itemsize)


def launch_shape(p: ScanPlan, dtype, nsys: int, sys_stride: int, elem_stride: int):
    """(W, grid, block, dynamic shared bytes) of one scan launch over nsys lines (W: :func:`tile_lines`,
    no wider than the lines there are)."""
    w = tile_lines(p.team, dtype, sys_stride, elem_stride)
    while w > 1 and w // 2 >= nsys:
        w //= 2
    smem = w * (p.rows + p.team + tile_pad(w, dtype)) * np.dtype(dtype).itemsize
    return w, (-(-nsys // w),), (p.team, w), smem


def launches(p: ScanPlan, dtype, nsys: int, sys_stride: int, elem_stride: int, group: tuple[int, int] | None):
    """The kernel launches of one batch: [(element offset, lines, per, group stride)]. Lines in groups
    (``group = (per, group stride)``: line s at (s // per)·group stride + (s % per)·sys_stride, a stack's
    y-lines) are one launch where the lines go W > 1 to a block; one-line blocks take no groups (the
    contiguous kernel keeps its registers, scan.cu), so there it is one launch a group."""
    if group is None:
        return [(0, nsys, nsys, 0)]
    per, group_stride = group
    if per <= 0 or nsys % per or group_stride == 0:
        raise ValueError(f"lines in groups of {per} (stride {group_stride}) do not divide {nsys} lines")
    if launch_shape(p, dtype, nsys, sys_stride, elem_stride)[0] > 1:
        return [(0, nsys, per, group_stride)]
    return [(g * group_stride, per, per, 0) for g in range(nsys // per)]


def kernel_name(dtype, chunk: int, periodic: bool, fused: bool, dissipative: bool, lines: int = 1) -> str:
    return template("compact_scan", ctype(dtype), chunk, periodic, fused, dissipative, lines)


def kernel_names(dtype, chunk: int | None = None, lines: int = 1) -> tuple[str, ...]:
    """The instances a module emits for ``dtype`` (the dissipative scheme is fused only): every
    compiled chunk with one line per block, or one chunk's ``lines``-line tiles."""
    out = []
    for c in COMPILED if chunk is None else (chunk,):
        for periodic in (False, True):
            out.append(kernel_name(dtype, c, periodic, False, False, lines))
            out.append(kernel_name(dtype, c, periodic, True, False, lines))
            out.append(kernel_name(dtype, c, periodic, True, True, lines))
    return tuple(out)


SOURCE = "cuda/compact/scan.cu"
OPTIONS = ("--fmad=false",)


def spec(dtype, chunk: int | None = None, lines: int = 1):
    """The NVRTC compilation holding the instance for ``dtype`` (engine/cuda.KernelSpec): the one-line
    instances of every chunk together; tiles of strided lines per (chunk, W), compiled when first used."""
    if lines == 1:
        return _spec(np.dtype(dtype).str, None, 1)
    return _spec(np.dtype(dtype).str, chunk, lines)


@cache
def _spec(dtype_str: str, chunk, lines: int):
    return KernelSpec(SOURCE, kernel_names(np.dtype(dtype_str), chunk, lines), OPTIONS)


class LineKernels:
    """``solve`` and ``derivative`` of a device solver whose kernels take any line batch in one launch
    (DeviceScan, window.DeviceWindow, stream.DeviceStream): each subclass gives ``_launch(fused,
    dissipative, src, dst, coef, nsys, sys_stride, elem_stride, group)`` and holds ``fac_dev``, ``cp``,
    ``dtype`` and ``_coefs`` (the fused derivative's coefficients by (h, delta), uploaded once)."""

    def solve(self, d, x, nsys: int, sys_stride: int, elem_stride: int, group: tuple[int, int] | None = None) -> None:
        """x = A⁻¹ d on nsys lines (d may be x). ``group = (per, group_stride)``: the lines come in groups
        of ``per`` (line s at (s // per)·group_stride + (s % per)·sys_stride) — the y-lines of a stack of
        variables in one launch."""
        self._launch(False, False, d, x, self.fac_dev, nsys, sys_stride, elem_stride, group)

    def derivative(self, f, out, nsys: int, sys_stride: int, elem_stride: int, h: float, delta: float = 0.0,
                   group: tuple[int, int] | None = None) -> None:
        """out = ∂f along the lines: right-hand side and solve in one launch (f may be out); ``group`` as
        in :meth:`solve`."""
        key = (float(h), float(delta))
        coef = self._coefs.get(key)
        if coef is None:
            coef = self._coefs[key] = self.cp.asarray(coefficients(self.dtype, h, delta))
        self._launch(True, bool(delta), f, out, coef, nsys, sys_stride, elem_stride, group)


class DeviceScan(LineKernels):
    """The scan kernels for one factorised matrix on the device: ``solve`` (the lines hold right-hand
    sides) and ``derivative`` (the lines hold f: the fused compact derivative, one launch)."""

    groups = True  # one launch takes lines in groups (``group=``: a stack's y-lines)

    def __init__(self, p: ScanPlan, dtype, stream=None):
        import cupy as cp  # optional dependency: the GPU backend only

        if p.chunk not in COMPILED:
            raise ValueError(f"chunk {p.chunk} has no GPU instance; compiled: {', '.join(map(str, COMPILED))}")
        self.cp, self.dtype, self.stream = cp, np.dtype(dtype), stream
        self.plan = p
        self.fac_dev = cp.asarray(self.plan.packed().astype(self.dtype))
        self._fns: dict = {}
        self._opt_in = SharedMemoryOptIn()
        self._coefs: dict = {}

    def _function(self, fused: bool, dissipative: bool, lines: int = 1):
        key = (fused, dissipative, lines)
        fn = self._fns.get(key)
        if fn is None:
            name = kernel_name(self.dtype, self.plan.chunk, self.plan.periodic, fused, dissipative, lines)
            fn = spec(self.dtype, self.plan.chunk, lines).function(name)
            self._fns[key] = fn
        return fn

    def _launch(self, fused: bool, dissipative: bool, src, dst, coef, nsys: int, sys_stride: int,
                elem_stride: int, group: tuple[int, int] | None) -> None:
        if nsys <= 0:
            return
        flat = None
        for at, count, per, group_stride in launches(self.plan, self.dtype, nsys, sys_stride, elem_stride, group):
            s, d = src, dst
            if at:  # a group's own launch: views at its offset from the batch's start
                flat = flat or (src.reshape(-1), dst.reshape(-1))
                s, d = flat[0][at:], flat[1][at:]
            self._launch_one(fused, dissipative, s, d, coef, count, sys_stride, elem_stride, per, group_stride)

    def _launch_one(self, fused, dissipative, src, dst, coef, nsys, sys_stride, elem_stride, per, group_stride):
        w, grid, block, smem = launch_shape(self.plan, self.dtype, nsys, sys_stride, elem_stride)
        fn = self._function(fused, dissipative, w)
        self._opt_in(fn, smem)
        fn(
            grid, block, (src, dst, self.fac_dev, coef, np.int32(self.plan.n), np.int32(nsys), np.int64(sys_stride),
                          np.int64(elem_stride), np.int32(self.plan.t_lo), np.int32(self.plan.t_hi), np.int32(per),
                          np.int64(group_stride)),
            shared_mem=smem)


def derivative(p: ScanPlan, f, h: float, boundary: str, delta: float = 0.0, dtype=None):
    """What the fused kernel computes, on NumPy: the right-hand side (schemes.rhs) then :func:`solve`
    (the kernel's right-hand side repeats schemes.rhs' operations; tests compare the two bit for bit)."""
    dt = np.dtype(dtype or np.asarray(f).dtype)
    r = schemes.rhs(np, np.asarray(f, dtype=dt), h, boundary, delta)
    return solve(p, r, dt)


class Scan(Solver):
    name = "scan"
    doc = ("Thomas' LU sweeps as parallel scans (engine/compact/solvers/scan.py): one block per system read once "
           "into shared memory, a chunk of rows per thread in registers, the chunks' carries by warp-shuffle scans; "
           "the GPU default for the fused derivative (kernel = fused), which scan-tile also runs")
    fuses_rhs = True

    def prepare(self, fac, dtype, xp, stream=None):
        return plan(fac)

    def solve(self, fac, prepared, d, dtype=None):
        return solve(prepared if prepared is not None else plan(fac), d, dtype)

    def device(self, fac, prepared, dtype, stream=None):
        return DeviceScan(prepared, dtype, stream)

    def unavailable(self, backend, selection, config):
        longest = max(config.shape) if config is not None else 0
        if longest > CHUNKS[-1] * MAX_TEAM:
            return f"the scan solver handles lines of at most {CHUNKS[-1] * MAX_TEAM} points (this grid has {longest})"
        return None

    def kernel_specs(self, dtype, selection, shape):
        """The one-line module (the fused derivative's too) and, for strided y-lines, the tiles of adjacent
        lines."""
        specs = [spec(dtype)]
        ny = shape[0]
        if selection.get("y-direction") == "strided" and ny > 1:
            tiled = strided_spec(ny, dtype)
            if tiled is not None:
                specs.append(tiled)
        return specs

    def launches(self, prepared, dtype, nsys, sys_stride, elem_stride, group):
        return len(launches(prepared, dtype, nsys, sys_stride, elem_stride, group))


STRATEGIES = (Scan(),)

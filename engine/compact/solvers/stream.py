"""``solver = stream``: the compact derivative streamed through windows of L rows of 32 adjacent lines, each
thread holding R rows in registers (shaders/cuda/compact/stream.cu; this module: the windows, the launch
shape and the NumPy mirror of the kernel's operations in its order).

Why: the window kernel (solvers/window.py) gives every thread its own segment with its own halos — at S = 64
fp64 rows a thread reads 144 rows for 64 outputs, one row at a time behind a dependent chain, 8 loads in
flight — and the scan kernels hold whole lines on chip. Here a *block* owns one window of a line group: W
warps × R rows (512 rows at W = 16, R = 32), and only the block's two ends carry halos (the window solver's
H_f and H_b, from the matrix's decay rates: fp64 40 + 40 rows for compact6, so 432 of 512 rows are output,
1.19 reads a point instead of 2.25). Inside the block the R-row chunks are joined exactly, not by halos: each
thread sweeps its chunk from zero and the chunks' affine carries (the end value and the product of the
multipliers) are folded over the warps through shared memory, once forward and once backward — the scan
kernel's carries, with a warp's lanes as 32 independent lines instead of 32 pieces of one line.

The data movement this buys: each thread issues all R + 4 loads of its chunk at once (32 × 36 fp64 values a
warp, 147 KiB a 512-thread block in flight — several times the ~30 KiB an SM needs at an H200's bandwidth),
y-lines read as whole row segments (a warp's load: 32 adjacent columns, 256 B fp64 / 128 B fp32), x-lines
through a 32 × (R + 5) shared tile a warp, loaded and stored as runs of each line's consecutive values (the
window kernel's x-lines stored 8 bytes of 32 sectors per instruction). No line on chip, no transpose.

One window [a, b) of a line, its outputs [o0, o1) (:func:`windows`), warp k's rows a + kR .. a + kR + R - 1:

1. r, the right-hand side (fused: schemes.rhs' operations from the loaded f);
2. forward: g0_j = r_j - l_j g0_{j-1} from g0 = 0 before the chunk, P = Π(-l); the carry into warp k,
   c_k = g0_end(k-1) + P(k-1) c_{k-1} (c_0 = 0: the block's start, a truncation H_f rows before o0 or the
   line's first row, exact); g_j = g0_j + P_j c_k;
3. backward: x0_j = (g_j - u_j x0_{j+1}) inv_d_j from 0 after the chunk, Q = Π(-(u inv_d)); the carry
   d_k = x0_first(k+1) + Q(k+1) d_{k+1} (d_{W-1} = 0: H_b rows after o1, or a closed line's end where
   u_{n-1} = 0); x_j = x0_j + Q_j d_k;
4. rows of [o0, o1) stored.

The factors are the window plan's (window.plan: the whole line's LU factors near a closed line's ends, the
converged values between; periodic lines constant), and so are the halos and their rule at closed ends (a
halo that would reach the unconverged rows starts at the end instead). Periodic windows wrap.
"""
from __future__ import annotations

import contextlib
from functools import cache

import numpy as np

from ...cuda import KernelSpec, ctype, template
from .. import schemes
from .base import SharedMemoryOptIn, Solver
from .scan import LineKernels, coefficients  # noqa: F401 (the fused kernel's coef layout, as the scan kernel's)
from .window import LANES, WindowPlan, plan

# Rows a thread (the kernel's template R): 36 values in registers with the stencil's reach, 128 registers at
# 512 threads a block (fp64, no spills); 16 rows take 1024-thread blocks at 64 registers
ROWS = {np.dtype(np.float64): 32, np.dtype(np.float32): 32}
WINDOW = 512  # rows a block: 16 warps of 32 rows (fp64: 432 output rows between 40-row halos)
WINDOW_FEW = 256  # a launch over few lines (1024²: 96 blocks of 512 rows for 132 SMs) takes 256-row windows
# Blocks a launch should have before it takes 16-warp windows: two per SM of a large Hopper part. A constant,
# not the device's SM count: a launch's windows, and so its round-off, are the same on every card and the
# NumPy mirror computes them without a device.
BLOCKS_WANTED = 2 * 132
SOURCES = ("cuda/compact/window.cu", "cuda/compact/stream.cu")
OPTIONS = ("--fmad=false",)


def rows_of(p: WindowPlan) -> int:
    """Rows a thread in the plan's dtype (:data:`ROWS`)."""
    return ROWS[np.dtype(p.dtype)]


def windows(p: WindowPlan, warps: int, rows: int) -> np.ndarray:
    """(a, o0, o1, b) of every window of a line (int32, one row each): outputs [o0, o1) of equal length (the
    last shorter), the sweeps over [a, b) — the window plan's halos around the outputs, or a closed line's
    end where a halo would reach its unconverged rows — at most warps · rows rows. Periodic rows unwrapped."""
    cap = warps * rows
    out = cap - p.halo_f - p.halo_b
    while out >= 1:
        nb = -(-p.n // out)
        size = -(-p.n // nb)
        win = []
        for j in range(nb):
            o0, o1 = j * size, min(p.n, (j + 1) * size)
            a, b = o0 - p.halo_f, o1 + p.halo_b
            if not p.periodic:
                a = 0 if a <= p.lo or p.hi <= p.lo else a
                b = p.n if b >= p.hi else b
            win.append((a, o0, o1, b))
        win = np.array(win, dtype=np.int32)
        longest = int((win[:, 3] - win[:, 0]).max())
        if longest <= cap:
            return win
        out -= longest - cap  # a closed end's halo ran to the end: shorter outputs
    raise ValueError(f"stream solver: halos of {p.halo_f} + {p.halo_b} rows (n = {p.n}) leave no output rows in a "
                     f"window of {warps} × {rows} rows")


def launch_warps(p: WindowPlan, nsys: int, rows: int) -> int:
    """Warps a block of a launch over ``nsys`` lines: :data:`WINDOW` rows, or :data:`WINDOW_FEW` where the
    long windows give fewer than :data:`BLOCKS_WANTED` blocks (and the halos leave the shorter ones outputs)."""
    strips = -(-max(nsys, 1) // LANES)
    warps, few = max(1, WINDOW // rows), max(1, WINDOW_FEW // rows)
    if strips * len(windows(p, warps, rows)) >= BLOCKS_WANTED:
        return warps
    try:
        windows(p, few, rows)
    except ValueError:
        return warps
    return few


def layout(p: WindowPlan, nsys: int, rows: int | None = None) -> tuple[np.ndarray, int]:
    """(windows, warps a block) of one launch over ``nsys`` lines — the warps the longest window needs: the
    device and the mirror take both from here, so they agree bit for bit (``rows``: :func:`rows_of`)."""
    rows = rows or rows_of(p)
    win = windows(p, launch_warps(p, nsys, rows), rows)
    return win, -(-int((win[:, 3] - win[:, 0]).max()) // rows)


def solve(p: WindowPlan, r, dtype=None, rows: int | None = None):
    """x = A⁻¹ r on the last axis by the kernel's operations in its order, vectorised over every (line,
    window, warp): the module docstring's steps 2–4."""
    dt = np.dtype(dtype or np.asarray(r).dtype)
    r = np.asarray(r, dtype=dt)
    n = p.n
    if r.shape[-1] != n:
        raise ValueError(f"lines of {r.shape[-1]} points for a plan of {n}")
    lead = r.shape[:-1]
    rows = rows or rows_of(p)
    win, warps = layout(p, int(np.prod(lead)), rows)
    a, o0, o1, b = (win[:, i, None, None] for i in range(4))
    row = a + (np.arange(warps)[:, None] * rows + np.arange(rows))[None]  # (windows, warps, rows), unwrapped
    act = row < b
    w = row % n if p.periodic else np.where(act, row, 0)
    l, inv_d, upper = (getattr(p, k).astype(dt)[w] for k in ("l", "inv_d", "upper"))
    v = np.where(act, r[..., w], dt.type(0))  # lead + (windows, warps, rows)
    shape = lead + row.shape[:2]

    g, prod = np.zeros(shape, dt), np.ones(shape, dt)  # 2. forward from 0 in every chunk
    for j in range(rows):
        on = act[..., j]
        gn = v[..., j] - l[..., j] * g
        prod = np.where(on, prod * (-l[..., j]), prod)
        g = np.where(on, gn, g)
        v[..., j] = np.where(on, g, v[..., j])
    c = np.zeros(shape, dt)  # the carries into the warps: the fold from 0 over the earlier warps
    for k in range(1, warps):
        c[..., k] = g[..., k - 1] + prod[..., k - 1] * c[..., k - 1]
    prod = np.ones(shape, dt)
    for j in range(rows):
        on = act[..., j]
        prod = np.where(on, prod * (-l[..., j]), prod)
        v[..., j] = np.where(on, v[..., j] + prod * c, v[..., j])

    x, q = np.zeros(shape, dt), np.ones(shape, dt)  # 3. backward from 0 in every chunk
    m = upper * inv_d
    for j in range(rows - 1, -1, -1):
        on = act[..., j]
        xn = (v[..., j] - upper[..., j] * x) * inv_d[..., j]
        q = np.where(on, q * (-m[..., j]), q)
        x = np.where(on, xn, x)
        v[..., j] = np.where(on, x, v[..., j])
    d = np.zeros(shape, dt)  # the carries from the later warps
    for k in range(warps - 2, -1, -1):
        d[..., k] = x[..., k + 1] + q[..., k + 1] * d[..., k + 1]
    q = np.ones(shape, dt)
    for j in range(rows - 1, -1, -1):
        on = act[..., j]
        q = np.where(on, q * (-m[..., j]), q)
        v[..., j] = np.where(on, v[..., j] + q * d, v[..., j])

    out = np.empty(lead + (n,), dt)  # 4. the output rows
    keep = (row >= o0) & (row < o1)
    out[..., w[keep]] = v[..., keep]
    return out


def derivative(p: WindowPlan, f, h: float, boundary: str, delta: float = 0.0, dtype=None):
    """What the fused kernel computes, on NumPy: the right-hand side (schemes.rhs, whose operations the kernel
    repeats: window.cu's compact_window_rhs) then :func:`solve`."""
    dt = np.dtype(dtype or np.asarray(f).dtype)
    return solve(p, schemes.rhs(np, np.asarray(f, dtype=dt), h, boundary, delta), dt)


def staged(elem_stride: int, group) -> bool:
    """Contiguous lines (x-lines) go through the shared tile; y-lines read their rows directly (coalesced)."""
    return elem_stride == 1 and (group is None or group[1] == 0)


def shared_bytes(warps: int, dtype, stage: bool, rows: int) -> int:
    """Dynamic shared memory of a block: the carries (value and product a thread) and, staged, a 32 ×
    (rows + 5) tile a warp."""
    values = 2 * warps * LANES + (warps * LANES * (rows + 5) if stage else 0)
    return values * np.dtype(dtype).itemsize


def kernel_name(dtype, periodic: bool, fused: bool, dissipative: bool, stage: bool, rows: int) -> str:
    return template("compact_stream", ctype(dtype), periodic, fused, dissipative, stage, rows)


def kernel_names(dtype, rows: int) -> tuple[str, ...]:
    return tuple(kernel_name(dtype, periodic, fused, diss, stage, rows) for stage in (False, True)
                 for periodic in (False, True) for fused, diss in ((False, False), (True, False), (True, True)))


def spec(dtype, rows: int | None = None) -> KernelSpec:
    """The module of one dtype's instances at ``rows`` a thread (default :data:`ROWS`): only those compile."""
    return _spec(np.dtype(dtype).str, rows or ROWS[np.dtype(dtype)])


@cache
def _spec(dtype_str: str, rows: int) -> KernelSpec:
    return KernelSpec(SOURCES, kernel_names(np.dtype(dtype_str), rows), OPTIONS)


class DeviceStream(LineKernels):
    """The stream kernel for one factorised matrix on the device: ``solve`` and ``derivative`` on any line
    batch (x-lines, strided y-lines, a stack's y-lines in groups), one launch each. A window's halo rows are
    other windows' outputs, so an in-place call solves into a work array kept per size and copies back."""

    groups = True

    def __init__(self, p: WindowPlan, dtype, stream=None):
        import cupy as cp  # optional dependency: the GPU backend only

        self.cp, self.dtype, self.stream, self.plan = cp, np.dtype(dtype), stream, p
        self.rows = rows_of(p)  # fixed at construction: the instance and the windows agree
        self.fac_dev = cp.asarray(p.packed().astype(self.dtype))
        self._fns: dict = {}
        self._coefs: dict = {}
        self._work: dict = {}
        self._layouts: dict = {}  # lines a launch -> (windows on the device, count, warps)
        self._opt_in = SharedMemoryOptIn()

    def _function(self, fused: bool, dissipative: bool, stage: bool):
        key = (fused, dissipative, stage)
        fn = self._fns.get(key)
        if fn is None:
            name = kernel_name(self.dtype, self.plan.periodic, fused, dissipative, stage, self.rows)
            fn = self._fns[key] = spec(self.dtype, self.rows).function(name)
        return fn

    def _launch(self, fused, dissipative, src, dst, coef, nsys, sys_stride, elem_stride, group) -> None:
        if nsys <= 0:
            return
        per, group_stride = group if group is not None else (nsys, 0)
        if group is not None and (per <= 0 or nsys % per or group_stride == 0):
            raise ValueError(f"lines in groups of {per} (stride {group_stride}) do not divide {nsys} lines")
        if src.dtype != self.dtype or dst.dtype != self.dtype:
            raise TypeError(f"stream solver built for {self.dtype}: got {src.dtype} → {dst.dtype}")
        out = dst
        if self.cp.may_share_memory(src, dst):
            if not dst.flags.c_contiguous:
                raise ValueError("stream solver: an in-place (overlapping) call needs a C-contiguous destination")
            out = self._work.get(dst.size)
            if out is None:
                out = self._work[dst.size] = self.cp.empty(dst.size, dtype=self.dtype)
        lay = self._layouts.get(nsys)
        if lay is None:
            win, warps = layout(self.plan, nsys, self.rows)
            lay = self._layouts[nsys] = (self.cp.asarray(win.ravel()), len(win), warps)
        win_dev, count, warps = lay
        limit = 512 if self.rows >= 32 else 1024  # the kernel's __launch_bounds__
        if LANES * warps > limit:
            raise ValueError(f"stream solver: windows of {warps} warps × {self.rows} rows need {LANES * warps} threads "
                             f"a block, above the kernel's {limit} (stream.WINDOW)")
        stage = staged(elem_stride, group)
        smem = shared_bytes(warps, self.dtype, stage, self.rows)
        fn = self._function(fused, dissipative, stage)
        self._opt_in(fn, smem)
        p = self.plan
        with self.stream if self.stream is not None else contextlib.nullcontext():
            fn((count, -(-nsys // LANES)), (LANES, warps),
               (src, out, self.fac_dev, coef, win_dev, np.int32(p.n), np.int32(nsys), np.int64(sys_stride),
                np.int64(elem_stride), np.int32(per), np.int64(group_stride), np.int32(p.lo), np.int32(p.hi)),
               shared_mem=smem)
            if out is not dst:
                dst[...] = out.reshape(dst.shape)



class Stream(Solver):
    name = "stream"
    doc = ("windows of 512 rows of 32 adjacent lines a block, 32 rows a thread in registers, the chunks joined "
           "by carries folded over the warps and only the window's ends truncated by halos "
           "(engine/compact/solvers/stream.py): every load of a chunk in flight at once; fuses the right-hand side")
    fuses_rhs = True

    def prepare(self, fac, dtype, xp, stream=None):
        return plan(fac, dtype)

    def solve(self, fac, prepared, d, dtype=None):
        dt = np.dtype(dtype or np.asarray(d).dtype)
        p = prepared if prepared is not None and np.dtype(prepared.dtype) == dt else plan(fac, dt)
        return solve(p, d, dt)

    def device(self, fac, prepared, dtype, stream=None):
        return DeviceStream(prepared, dtype, stream)

    def kernel_specs(self, dtype, selection, shape):
        return [spec(dtype)]


STRATEGIES = (Stream(),)

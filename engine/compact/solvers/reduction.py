"""``solver = cr``, ``pcr`` and ``cr-pcr``: cyclic reduction (CR), parallel cyclic reduction (PCR) and
their hybrid (CR down to a small system, PCR on it, CR back up).

The elimination multipliers of every level depend only on the matrix, so they are computed once on the
host in float64 (:func:`schedule`); a solve then touches only the right-hand sides. NumPy: the kernel's
operation order (:func:`reduce_solve`). GPU: one block per line, the line in shared memory
(shaders/cuda/compact/tridiag.cu ``compact_reduce``); periodic lines by Sherman–Morrison after the
reduction.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...cuda import ctype, template
from .. import gpu
from ..tridiag import Factors
from .base import Solver

KINDS = ("cr", "pcr", "cr-pcr")
HYBRID_SIZE = 32  # the CR–PCR hybrid reduces by CR until at most this many equations remain
MAX_REDUCE_THREADS = 512


@dataclass
class Schedule:
    """Precomputed reduction of one matrix: ``lc`` CR levels (multipliers ``k1c``, ``k2c`` [lc, n];
    back substitution coefficients ``ca``, ``cc``, ``cinvb`` [n]), then ``p`` PCR steps on the
    equations left (stride 2^lc; multipliers ``k1p``, ``k2p`` [p, n]; ``pinvb`` [n])."""

    n: int
    lc: int
    p: int
    k1c: np.ndarray
    k2c: np.ndarray
    ca: np.ndarray
    cc: np.ndarray
    cinvb: np.ndarray
    k1p: np.ndarray
    k2p: np.ndarray
    pinvb: np.ndarray

    def packed(self) -> np.ndarray:
        """One array in the order the kernel reads it (float64)."""
        return np.concatenate([self.k1c.ravel(), self.k2c.ravel(), self.ca, self.cc, self.cinvb,
                               self.k1p.ravel(), self.k2p.ravel(), self.pinvb])


def cr_levels(kind: str, n: int) -> int:
    """CR levels of a solver: all of them (cr), none (pcr), or down to ≤ HYBRID_SIZE equations."""
    full = int(math.floor(math.log2(n)))
    if kind == "cr":
        return full
    if kind == "pcr":
        return 0
    if kind == "cr-pcr":
        lc = 0
        while n >> lc > HYBRID_SIZE:
            lc += 1
        return min(lc, full)
    raise ValueError(f"unknown reduction solver {kind!r}")


def schedule(fac: Factors, kind: str) -> Schedule:
    n = fac.n
    a, b, c = fac.lower.copy(), fac.diag.copy(), fac.upper.copy()
    lc = cr_levels(kind, n)
    k1c, k2c = np.zeros((lc, n)), np.zeros((lc, n))
    for lev in range(lc):
        s = 1 << lev
        i = np.arange(2 * s - 1, n, 2 * s)
        ip = i + s
        ok = ip < n
        k1 = a[i] / b[i - s]
        k2 = np.zeros(i.size)
        k2[ok] = c[i[ok]] / b[ip[ok]]
        a_left, c_left = a[i - s], c[i - s]
        a_right, c_right = np.zeros(i.size), np.zeros(i.size)
        a_right[ok], c_right[ok] = a[ip[ok]], c[ip[ok]]
        b[i] = b[i] - k1 * c_left - k2 * a_right
        a[i] = -k1 * a_left
        c[i] = -k2 * c_right
        k1c[lev, i], k2c[lev, i] = k1, k2
    ca, cc, cinvb = a.copy(), c.copy(), 1.0 / b
    # PCR on the members i = (j+1)·S - 1 (stride S = 2^lc)
    stride = 1 << lc
    idx = np.arange(stride - 1, n, stride)
    m = idx.size
    p = int(math.ceil(math.log2(m))) if m > 1 else 0
    ra, rb, rc = a[idx].copy(), b[idx].copy(), c[idx].copy()
    k1p, k2p = np.zeros((p, n)), np.zeros((p, n))
    for step in range(p):
        t = 1 << step
        j = np.arange(m)
        lo, hi = j - t, j + t
        okl, okh = lo >= 0, hi < m
        k1, k2 = np.zeros(m), np.zeros(m)
        k1[okl] = ra[okl] / rb[lo[okl]]
        k2[okh] = rc[okh] / rb[hi[okh]]
        na, nb, nc = np.zeros(m), rb.copy(), np.zeros(m)
        na[okl] = -k1[okl] * ra[lo[okl]]
        nb[okl] -= k1[okl] * rc[lo[okl]]
        nb[okh] -= k2[okh] * ra[hi[okh]]
        nc[okh] = -k2[okh] * rc[hi[okh]]
        ra, rb, rc = na, nb, nc
        k1p[step, idx], k2p[step, idx] = k1, k2
    pinvb = np.zeros(n)
    pinvb[idx] = 1.0 / rb
    return Schedule(n, lc, p, k1c, k2c, ca, cc, cinvb, k1p, k2p, pinvb)


def reduce_solve(sched: Schedule, d, fac: Factors | None = None, dtype=None):
    """CR / PCR / hybrid solve with the kernel's operation order; periodic correction if ``fac`` is
    periodic."""
    dt = np.dtype(dtype or np.asarray(d).dtype)
    x = np.array(d, dtype=dt)
    n = sched.n
    k1c, k2c = sched.k1c.astype(dt), sched.k2c.astype(dt)
    for lev in range(sched.lc):
        s = 1 << lev
        i = np.arange(2 * s - 1, n, 2 * s)
        ip = i + s
        right = np.zeros(x.shape[:-1] + (i.size,), dt)
        ok = ip < n
        right[..., ok] = x[..., ip[ok]]
        x[..., i] = x[..., i] - (k1c[lev, i] * x[..., i - s] + k2c[lev, i] * right)
    stride = 1 << sched.lc
    idx = np.arange(stride - 1, n, stride)
    m = idx.size
    cur = x[..., idx]
    k1p, k2p = sched.k1p.astype(dt), sched.k2p.astype(dt)
    for step in range(sched.p):
        tt = 1 << step
        left = np.zeros_like(cur)
        right = np.zeros_like(cur)
        left[..., tt:] = cur[..., : m - tt]
        right[..., : m - tt] = cur[..., tt:]
        cur = cur - (k1p[step, idx] * left + k2p[step, idx] * right)
    x[..., idx] = cur * sched.pinvb.astype(dt)[idx]
    ca, cc, cinvb = sched.ca.astype(dt), sched.cc.astype(dt), sched.cinvb.astype(dt)
    for lev in range(sched.lc - 1, -1, -1):
        s = 1 << lev
        i = np.arange(s - 1, n, 2 * s)
        lo, hi = i - s, i + s
        left = np.zeros(x.shape[:-1] + (i.size,), dt)
        right = np.zeros_like(left)
        okl, okh = lo >= 0, hi < n
        left[..., okl] = x[..., lo[okl]]
        right[..., okh] = x[..., hi[okh]]
        x[..., i] = (x[..., i] - (ca[i] * left + cc[i] * right)) * cinvb[i]
    if fac is not None and fac.periodic:
        x = periodic_correction(fac, x, dt)
    return x


def periodic_correction(fac: Factors, y, dt):
    t = np.dtype(dt).type
    s = t(fac.q) * (y[..., :1] + t(fac.r) * y[..., -1:])
    return y - s * fac.z.astype(dt)


def reduce_threads(n: int, lc: int, p: int) -> int:
    """Threads per block of the reduction kernel: the widest parallel step (the first CR level has
    n/2 equations, a PCR step n >> lc), whole warps, at most MAX_REDUCE_THREADS."""
    width = max(n >> 1 if lc else 0, (n >> lc) if p else 0, 1)
    return int(min(MAX_REDUCE_THREADS, max(32, -(-width // 32) * 32)))


def reduce_smem(n: int, dtype) -> int:
    return 2 * n * np.dtype(dtype).itemsize


class ReductionDevice:
    """The schedule on the device and the one-block-per-line reduction kernel."""

    def __init__(self, fac: Factors, sched: Schedule, dtype, stream=None):
        import cupy as cp  # optional dependency: the GPU backend only

        self.dtype, self.n, self.sched = np.dtype(dtype), fac.n, sched
        self.per = cp.asarray(np.concatenate([fac.z, [fac.r, fac.q]]).astype(self.dtype))
        self.sched_dev = cp.asarray(sched.packed().astype(self.dtype))
        self.fn = gpu.spec(self.dtype).function(template("compact_reduce", ctype(self.dtype), fac.periodic))
        self.threads = reduce_threads(self.n, sched.lc, sched.p)
        self.smem = reduce_smem(self.n, self.dtype)
        if self.smem > 48 * 1024:  # the function is shared by every plan: raise its opt-in, never lower it
            self.fn.max_dynamic_shared_size_bytes = max(self.smem, self.fn.max_dynamic_shared_size_bytes)

    def solve(self, d, x, nsys: int, sys_stride: int, elem_stride: int) -> None:
        s = self.sched
        self.fn((nsys,), (self.threads,),
                (d, x, self.sched_dev, self.per, np.int32(self.n), np.int32(s.lc), np.int32(s.p), np.int32(nsys),
                 np.int64(sys_stride), np.int64(elem_stride)),
                shared_mem=self.smem)


DOCS = {
    "cr": "cyclic reduction, all levels; GPU: one block per system, right-hand side in shared memory, "
          "level multipliers precomputed, reduction-style thread indexing with shifts",
    "pcr": "parallel cyclic reduction; GPU: one block per system, shared-memory ping-pong",
    "cr-pcr": "hybrid: CR until ≤ 32 equations remain, PCR on those, CR back substitution",
}


class Reduction(Solver):
    def __init__(self, kind: str):
        self.name, self.doc = kind, DOCS[kind]

    def prepare(self, fac, dtype, xp, stream=None):
        return schedule(fac, self.name)

    def solve(self, fac, prepared, d, dtype=None):
        return reduce_solve(prepared if prepared is not None else schedule(fac, self.name), d, fac, dtype)

    def device(self, fac, prepared, dtype, stream=None):
        return ReductionDevice(fac, prepared, dtype, stream)


STRATEGIES = tuple(Reduction(kind) for kind in KINDS)

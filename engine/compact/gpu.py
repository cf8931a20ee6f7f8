"""CUDA side of the compact family: the tridiagonal kernels of shaders/cuda/compact/tridiag.cu
(engine/cuda.KernelSpec), their launch shapes, and cuSPARSE's batched solver.

A *line batch* is described by (n, nsys, sys_stride, elem_stride): element i of system s is at
``s * sys_stride + i * elem_stride`` of a flat array (see tridiag.cu). The launch-shape functions
are plain Python so that the CPU emulation (tests/unit/test_compact_emulated.py) launches exactly
what the engine launches.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from ..cuda import KernelSpec, ctype, template

SOURCE = "cuda/compact/tridiag.cu"
OPTIONS = ("--fmad=false",)
THOMAS_BLOCK = 128
MAX_REDUCE_THREADS = 512
TRANSPOSE_BLOCK = (32, 8)
FIX_BLOCK = 256


def kernel_names(dtype) -> tuple[str, ...]:
    t = ctype(dtype)
    names = [template("compact_thomas", t, p) for p in (False, True)]
    names += [template("compact_reduce", t, p) for p in (False, True)]
    names += [template("compact_periodic_fix", t), template("compact_periodic_fix_ends", t),
              template("compact_transpose", t)]
    return tuple(names)


@cache
def spec(dtype) -> KernelSpec:
    """The one NVRTC compilation holding every kernel of the family for ``dtype``."""
    return KernelSpec(SOURCE, kernel_names(np.dtype(dtype)), OPTIONS)


def thomas_launch(nsys: int) -> tuple[tuple[int], tuple[int]]:
    return ((nsys + THOMAS_BLOCK - 1) // THOMAS_BLOCK,), (THOMAS_BLOCK,)


def reduce_threads(n: int, lc: int, p: int) -> int:
    """Threads per block of the reduction kernel: the widest parallel step (the first CR level has
    n/2 equations, a PCR step n >> lc), whole warps, at most MAX_REDUCE_THREADS."""
    width = max(n >> 1 if lc else 0, (n >> lc) if p else 0, 1)
    return int(min(MAX_REDUCE_THREADS, max(32, -(-width // 32) * 32)))


def reduce_smem(n: int, dtype) -> int:
    return 2 * n * np.dtype(dtype).itemsize


def transpose_launch(ny: int, nx: int) -> tuple[tuple[int, int], tuple[int, int]]:
    return ((nx + 31) // 32, (ny + 31) // 32), TRANSPOSE_BLOCK


class DeviceSolver:
    """One operator's factors on the device and a ``solve(d, x, lines)`` for a solver choice."""

    def __init__(self, kind: str, fac, sched, dtype, stream=None):
        import cupy as cp

        self.cp = cp
        self.kind, self.fac, self.dtype, self.stream = kind, fac, np.dtype(dtype), stream
        self.n = fac.n
        self.periodic = fac.periodic
        self.spec = spec(self.dtype)
        t = ctype(self.dtype)
        per = np.concatenate([fac.z, [fac.r, fac.q]])
        self.per = cp.asarray(per.astype(self.dtype))
        if kind == "thomas":
            packed = np.concatenate([fac.l, fac.inv_d, fac.upper, fac.z, fac.w, [fac.r, fac.q]])
            self.fac_dev = cp.asarray(packed.astype(self.dtype))
            self.fn = self.spec.function(template("compact_thomas", t, self.periodic))
        elif kind in ("cr", "pcr", "cr-pcr"):
            self.sched = sched
            self.sched_dev = cp.asarray(sched.packed().astype(self.dtype))
            self.fn = self.spec.function(template("compact_reduce", t, self.periodic))
            self.threads = reduce_threads(self.n, sched.lc, sched.p)
            self.smem = reduce_smem(self.n, self.dtype)
            if self.smem > 48 * 1024:  # the function is shared by every plan: raise its opt-in, never lower it
                self.fn.max_dynamic_shared_size_bytes = max(self.smem, self.fn.max_dynamic_shared_size_bytes)
        elif kind == "scan":  # engine/compact/scan.py: one block per line, Thomas' sweeps as scans
            from .scan import DeviceScan

            self.scan = DeviceScan(sched, self.dtype, stream)  # sched: the ScanPlan (tridiag.prepare)
        elif kind == "gtsv2":
            self._gtsv2_bands: dict = {}
            self.fix = self.spec.function(template("compact_periodic_fix", t))
            self.fix_ends = self.spec.function(template("compact_periodic_fix_ends", t))
        else:
            raise ValueError(f"unknown device solver {kind!r}")

    @property
    def groups(self) -> bool:
        """Whether one launch takes lines in groups (``group=``: a stack's y-lines): the scan kernel's."""
        return self.kind == "scan"

    def solve(self, d, x, nsys: int, sys_stride: int, elem_stride: int, group: tuple[int, int] | None = None) -> None:
        if group is not None and not self.groups:
            raise ValueError(f"the {self.kind} solver takes lines with one system stride (no groups)")
        n = self.n
        args = (np.int32(n), np.int32(nsys), np.int64(sys_stride), np.int64(elem_stride))
        if self.kind == "thomas":
            grid, block = thomas_launch(nsys)
            self.fn(grid, block, (d, x, self.fac_dev) + args)
        elif self.kind == "scan":
            self.scan.solve(d, x, nsys, sys_stride, elem_stride, group)
        elif self.kind == "gtsv2":
            if elem_stride != 1:
                raise ValueError("gtsv2 solves contiguous systems only (transpose first)")
            self._gtsv2(d, x, nsys, sys_stride)
        else:
            s = self.sched
            self.fn((nsys,), (self.threads,),
                    (d, x, self.sched_dev, self.per, np.int32(n), np.int32(s.lc), np.int32(s.p)) + args[1:],
                    shared_mem=self.smem)

    def derivative(self, f, out, nsys: int, sys_stride: int, elem_stride: int, h: float, delta: float = 0.0,
                   group: tuple[int, int] | None = None) -> None:
        """out = ∂f along the lines, right-hand side and solve in one launch (``kernel = fused``: the
        scan solver only — variants.py refuses the others)."""
        if self.kind != "scan":
            raise ValueError(f"the fused derivative runs on the scan solver, not {self.kind!r}")
        self.scan.derivative(f, out, nsys, sys_stride, elem_stride, h, delta, group)

    # cuSPARSE gtsv2StridedBatch: every system carries its own three bands (batchCount × batchStride
    # values each), solved in place in x; the periodic correction is two small kernels after it.
    def _bands(self, nsys: int, stride: int):
        key = (nsys, stride)
        if key not in self._gtsv2_bands:
            cp = self.cp
            f = self.fac

            def rep(v):
                a = np.zeros(stride)
                a[: self.n] = v
                return cp.asarray(np.tile(a, nsys).astype(self.dtype))

            self._gtsv2_bands = {key: (rep(f.lower), rep(f.diag), rep(f.upper))}  # one size kept
        return self._gtsv2_bands[key]

    def _gtsv2(self, d, x, nsys: int, stride: int) -> None:
        from cupy_backends.cuda.libs import cusparse as cs

        cp = self.cp
        if x is not d:
            x[...] = d
        dl, dd, du = self._bands(nsys, stride)
        handle = cp.cuda.device.get_cusparse_handle()
        cs.setStream(handle, cp.cuda.get_current_stream().ptr)
        prefix = "d" if self.dtype == np.float64 else "s"
        size_fn = getattr(cs, f"{prefix}gtsv2StridedBatch_bufferSizeExt")
        solve_fn = getattr(cs, f"{prefix}gtsv2StridedBatch")
        size = size_fn(handle, self.n, dl.data.ptr, dd.data.ptr, du.data.ptr, x.data.ptr, nsys, stride)
        buf = cp.empty(max(int(size), 1), dtype=np.uint8)
        solve_fn(handle, self.n, dl.data.ptr, dd.data.ptr, du.data.ptr, x.data.ptr, nsys, stride, buf.data.ptr)
        if self.periodic:
            total = self.n * nsys
            args = (x, self.per, np.int32(self.n), np.int32(nsys), np.int64(stride))
            self.fix(((total + FIX_BLOCK - 1) // FIX_BLOCK,), (FIX_BLOCK,), args)
            self.fix_ends(((nsys + FIX_BLOCK - 1) // FIX_BLOCK,), (FIX_BLOCK,), args)


def transpose(src, dst) -> None:
    """dst (nx, ny) = src (ny, nx)ᵀ with the tiled kernel (both C-contiguous device arrays)."""
    ny, nx = src.shape
    fn = spec(src.dtype).function(template("compact_transpose", ctype(src.dtype)))
    grid, block = transpose_launch(ny, nx)
    fn(grid, block, (src, dst, np.int32(ny), np.int32(nx)))


def gtsv2_reason() -> str | None:
    """Why cuSPARSE's gtsv2StridedBatch cannot be called here (None if it can)."""
    try:
        from cupy_backends.cuda.libs import cusparse as cs
    except Exception as exc:  # no CuPy, or a CuPy built without cuSPARSE
        return f"cuSPARSE bindings unavailable ({type(exc).__name__})"
    if not hasattr(cs, "dgtsv2StridedBatch"):
        return "this CuPy's cuSPARSE bindings lack gtsv2StridedBatch"
    return None

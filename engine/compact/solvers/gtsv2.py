"""``solver = gtsv2``: cuSPARSE's gtsv2StridedBatch, the library reference on the GPU.

Every system carries its own three bands (batchCount × batchStride values each) and is solved in place;
the library takes contiguous systems only, so y-lines are transposed first whatever ``y-direction``
says. Periodic systems: the library solves A' (corners removed, tridiag.factorise), then two small
kernels of shaders/cuda/compact/tridiag.cu apply the Sherman–Morrison correction. A library call has no
NumPy mirror: the choice is offered on CuPy only.
"""
from __future__ import annotations

import numpy as np

from ...cuda import ctype, template
from .. import gpu
from ..tridiag import Factors
from .base import Solver

FIX_BLOCK = 256


def gtsv2_reason() -> str | None:
    """Why cuSPARSE's gtsv2StridedBatch cannot be called here (None if it can)."""
    try:
        from cupy_backends.cuda.libs import cusparse as cs  # optional dependency: CuPy's cuSPARSE bindings
    except Exception as exc:  # no CuPy, or a CuPy built without cuSPARSE
        return f"cuSPARSE bindings unavailable ({type(exc).__name__})"
    if not hasattr(cs, "dgtsv2StridedBatch"):
        return "this CuPy's cuSPARSE bindings lack gtsv2StridedBatch"
    return None


class Gtsv2Device:
    """Per-system copies of the bands for the last batch size, and the periodic correction kernels."""

    def __init__(self, fac: Factors, dtype, stream=None):
        import cupy as cp  # optional dependency: the GPU backend only

        self.cp, self.fac, self.dtype, self.n = cp, fac, np.dtype(dtype), fac.n
        self.periodic = fac.periodic
        self.per = cp.asarray(np.concatenate([fac.z, [fac.r, fac.q]]).astype(self.dtype))
        self._bands_of: dict = {}
        t = ctype(self.dtype)
        spec = gpu.spec(self.dtype)
        self.fix = spec.function(template("compact_periodic_fix", t))
        self.fix_ends = spec.function(template("compact_periodic_fix_ends", t))

    def _bands(self, nsys: int, stride: int):
        key = (nsys, stride)
        if key not in self._bands_of:
            cp, f = self.cp, self.fac

            def rep(v):
                a = np.zeros(stride)
                a[: self.n] = v
                return cp.asarray(np.tile(a, nsys).astype(self.dtype))

            self._bands_of = {key: (rep(f.lower), rep(f.diag), rep(f.upper))}  # one size kept
        return self._bands_of[key]

    def solve(self, d, x, nsys: int, sys_stride: int, elem_stride: int) -> None:
        from cupy_backends.cuda.libs import cusparse as cs  # optional dependency: CuPy's cuSPARSE bindings

        if elem_stride != 1:
            raise ValueError("gtsv2 solves contiguous systems only (transpose first)")
        cp, stride = self.cp, sys_stride
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


class Gtsv2(Solver):
    name = "gtsv2"
    doc = ("cuSPARSE gtsv2StridedBatch (per-system copies of the bands, contiguous systems: y-lines are "
           "transposed first); periodic systems corrected by Sherman–Morrison kernels")
    backends = ("cupy",)
    contiguous_only = True

    def solve(self, fac, prepared, d, dtype=None):
        raise ValueError("gtsv2 is cuSPARSE's: it solves on the GPU only")

    def device(self, fac, prepared, dtype, stream=None):
        return Gtsv2Device(fac, dtype, stream)

    def unavailable(self, backend, selection, config):
        return gtsv2_reason() or super().unavailable(backend, selection, config)


STRATEGIES = (Gtsv2(),)

"""The explicit right-hand sides of the compact schemes, written once with P2's stencil framework.

The interior rows are a 5-point stencil along the differentiated axis (halo 2 on that axis, 0 on the
other), so the framework's loop engines (host, device, auto-tuned device) run them; the periodic
boundary is the framework's own wrap. P4's closure rows (two per end, one-sided) are not a stencil
of the interior's shape: they are four whole-array assignments after the sweep
(:func:`schemes.closure_rows`), on the lines' ends only — on the GPU one launch of
shaders/cuda/compact/closure.cu for all lines of a call (:class:`DeviceClosure`; the array form is ~25
single-column operations a call). The sums are in the order of ``schemes.interior``, so the
framework's host engine and the array reference agree bit for bit.

Parameters: ``ih`` = 1/h; the dissipative terms' ``dd`` = δ·d and ``de`` = δ·e/2.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from ..cuda import KernelSpec, ctype, template
from ..stencil import stencil
from ..stencil.loops import loop_timing_extra
from ..stencil.variants import loop_for
from . import schemes

CLOSURE_SOURCE = "cuda/compact/closure.cu"
CLOSURE_BLOCK = 128

A2, B4 = schemes.A6 / 2, schemes.B6 / 4


@stencil(inputs=["f"], outputs=["r"], params=["ih"], halo=(2, 0), ndim=2)
def compact6_x(f, ih):
    """Lele's 6th-order interior right-hand side along x."""
    return (A2 * (f[1, 0] - f[-1, 0]) + B4 * (f[2, 0] - f[-2, 0])) * ih


@stencil(inputs=["f"], outputs=["r"], params=["ih"], halo=(0, 2), ndim=2)
def compact6_y(f, ih):
    """Lele's 6th-order interior right-hand side along y."""
    return (A2 * (f[0, 1] - f[0, -1]) + B4 * (f[0, 2] - f[0, -2])) * ih


@stencil(inputs=["f"], outputs=["r"], params=["ih", "dd", "de"], halo=(2, 0), ndim=2)
def dissipative5_x(f, ih, dd, de):
    """Deng's dissipative compact interior right-hand side along x (dd = δ·d, de = δ·e/2)."""
    c = f[0, 0]
    central = A2 * (f[1, 0] - f[-1, 0]) + B4 * (f[2, 0] - f[-2, 0])
    return (central + (dd * ((f[1, 0] + f[-1, 0]) - 2.0 * c) + de * ((f[2, 0] + f[-2, 0]) - 2.0 * c))) * ih


@stencil(inputs=["f"], outputs=["r"], params=["ih", "dd", "de"], halo=(0, 2), ndim=2)
def dissipative5_y(f, ih, dd, de):
    """Deng's dissipative compact interior right-hand side along y."""
    c = f[0, 0]
    central = A2 * (f[0, 1] - f[0, -1]) + B4 * (f[0, 2] - f[0, -2])
    return (central + (dd * ((f[0, 1] + f[0, -1]) - 2.0 * c) + de * ((f[0, 2] + f[0, -2]) - 2.0 * c))) * ih


STENCILS = {("compact6", "x"): compact6_x, ("compact6", "y"): compact6_y,
            ("dissipative5", "x"): dissipative5_x, ("dissipative5", "y"): dissipative5_y}


@cache
def closure_spec(dtype):
    return KernelSpec(CLOSURE_SOURCE, (template("compact_closure", ctype(np.dtype(dtype))),), ("--fmad=false",))


def line_layout(view) -> tuple[int, int, int, int, int] | None:
    """(lines, inner, outer_stride, inner_stride, elem_stride) in elements of a view whose last axis
    is the lines' (compact_closure's addressing), or None where its leading axes do not fold into
    two strided ones."""
    item = view.dtype.itemsize
    dims = [(int(n), int(st) // item) for n, st in zip(view.shape[:-1], view.strides[:-1]) if n != 1]
    merged: list[tuple[int, int]] = []
    for n, st in dims:  # an axis that continues the one before it folds into it
        if merged and merged[-1][1] == st * n:
            merged[-1] = (merged[-1][0] * n, st)
        else:
            merged.append((n, st))
    elem = int(view.strides[-1]) // item
    if not merged:
        return 1, 1, 0, 0, elem
    if len(merged) == 1:
        return merged[0][0], 1, merged[0][1], 0, elem
    if len(merged) == 2:
        (n0, s0), (n1, s1) = merged
        return n0 * n1, n1, s0, s1, elem
    return None


class DeviceClosure:
    """:func:`schemes.closure_rows` as one CUDA launch over every line of a view (its last axis)."""

    def __init__(self, dtype):
        t = np.dtype(dtype).type
        spec = closure_spec(np.dtype(dtype))
        self.kernel = spec.function(spec.name_expressions[0])
        self.consts = tuple(t(v) for v in schemes.CLOSURE0_RHS) + (t(schemes.PADE_A / 2),)

    def __call__(self, xp, fv, ov, inv_h) -> None:
        lay = line_layout(fv)
        if lay is None or line_layout(ov) != lay or fv.shape != ov.shape or fv.shape[-1] < 4:
            schemes.closure_rows(xp, fv, ov, inv_h)  # (no caller here builds such views)
            return
        lines, inner, outer, inner_stride, elem = lay
        i64 = np.int64
        self.kernel(((lines + CLOSURE_BLOCK - 1) // CLOSURE_BLOCK,), (CLOSURE_BLOCK,),
                    (fv, ov, np.int32(fv.shape[-1]), i64(lines), i64(inner), i64(outer), i64(inner_stride),
                     i64(elem), *self.consts, inv_h))


class RightHandSide:
    """r = (explicit side of the scheme)/h along one axis of (ny, nx) arrays, by a ``kernel`` choice:
    ``array`` (schemes.rhs, whole-array slices) or a stencil-framework loop engine."""

    def __init__(self, kernel: str, shape, axis: str, h: float, boundary: str, delta: float, dtype, xp,
                 stream=None):
        self.kernel, self.axis, self.h, self.boundary, self.delta = kernel, axis, h, boundary, delta
        self.xp, self.dtype = xp, dtype
        scheme = "dissipative5" if delta else "compact6"
        self.stencil = STENCILS[(scheme, axis)]
        framework_boundary = "periodic" if boundary == "periodic" else "fixed"
        self.loop = loop_for(kernel, self.stencil, shape, dtype, framework_boundary, xp, stream)
        # the generated CUDA engines run on the GPU: their closure rows too (one launch a call)
        self.closure = DeviceClosure(dtype) if kernel.startswith("cuda") and boundary != "periodic" else None
        t = dtype.type
        self.params = {"ih": t(1.0 / h)}
        if delta:
            self.params.update(dd=t(delta * schemes.D5), de=t(delta * schemes.E5 / 2))

    def __call__(self, f, out, closures: bool = True) -> None:
        """out = r(f)/h; ``closures`` False leaves the closure rows to :meth:`closures` (a caller
        that sweeps several variables finishes them all in one call)."""
        xp, ax = self.xp, (-1 if self.axis == "x" else 0)
        if self.loop is None:
            schemes.rhs(xp, f, self.h, self.boundary, self.delta, axis=ax, out=out)
            return
        self.loop(f=f, r=out, **self.params)
        if closures:
            self.closures(f, out)

    def closures(self, f, out) -> None:
        """The closure rows of f's lines along this axis (f, out: (..., ny, nx) of the same layout)."""
        if self.boundary == "periodic" or self.loop is None:
            return
        xp = self.xp
        fv, ov = (f, out) if self.axis == "x" else (f.swapaxes(-1, -2), out.swapaxes(-1, -2))
        if self.closure is not None:
            self.closure(xp, fv, ov, self.params["ih"])
        else:
            schemes.closure_rows(xp, fv, ov, self.params["ih"])

    def timing_extra(self) -> dict:
        return loop_timing_extra(self.loop)

"""The explicit right-hand sides of the compact schemes, written once with P2's stencil framework.

The interior rows are a 5-point stencil along the differentiated axis (halo 2 on that axis, 0 on the
other), so the framework's loop engines (host, device, auto-tuned device) run them; the periodic
boundary is the framework's own wrap. P4's closure rows (two per end, one-sided) are not a stencil
of the interior's shape: they are four whole-array assignments after the sweep
(:func:`schemes.closure_rows`), on the lines' ends only. The sums are in the order of
``schemes.interior``, so the framework's host engine and the array reference agree bit for bit.

Parameters: ``ih`` = 1/h; the dissipative terms' ``dd`` = δ·d and ``de`` = δ·e/2.
"""
from __future__ import annotations

from ..stencil import stencil
from ..stencil.variants import loop_for
from . import schemes

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
        t = dtype.type
        self.params = {"ih": t(1.0 / h)}
        if delta:
            self.params.update(dd=t(delta * schemes.D5), de=t(delta * schemes.E5 / 2))

    def __call__(self, f, out) -> None:
        xp, ax = self.xp, (-1 if self.axis == "x" else 0)
        if self.loop is None:
            schemes.rhs(xp, f, self.h, self.boundary, self.delta, axis=ax, out=out)
            return
        self.loop(f=f, r=out, **self.params)
        if self.boundary != "periodic":
            fv, ov = (f, out) if ax == -1 else (f.T, out.T)
            schemes.closure_rows(xp, fv, ov, self.params["ih"])

    def timing_extra(self) -> dict:
        from ..stencil.loops import loop_timing_extra

        return loop_timing_extra(self.loop)

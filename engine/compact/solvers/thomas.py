"""``solver = thomas``: the Thomas algorithm on the LU factors computed once (tridiag.factorise).

NumPy: the kernel's operation order; periodic lines by Sherman–Morrison folded into the two sweeps
(tridiag.py). GPU: one thread per line (shaders/cuda/compact/tridiag.cu ``compact_thomas``); the NumPy
Thomas is the family's reference, every other solver is held to it.
"""
from __future__ import annotations

import numpy as np

from ...cuda import ctype, template
from .. import gpu
from ..tridiag import Factors
from .base import Solver

THOMAS_BLOCK = 128


def thomas(fac: Factors, d, dtype=None):
    """Thomas with the kernel's operation order (``dtype``: the arithmetic's precision)."""
    dt = np.dtype(dtype or np.asarray(d).dtype)
    d = np.asarray(d, dtype=dt)
    if dt == np.float64 and d.size == fac.n:
        return _thomas_scalar(fac, d)
    c = _cast(fac, dt)
    n = fac.n
    g = np.empty_like(d)
    g[..., 0] = d[..., 0]
    acc = c["w"][0] * g[..., 0]
    for i in range(1, n):
        g[..., i] = d[..., i] - c["l"][i] * g[..., i - 1]
        if fac.periodic:
            acc = acc + c["w"][i] * g[..., i]
    out = np.empty_like(d)
    y = g[..., -1] * c["inv_d"][-1]
    if fac.periodic:
        s = c["q"] * (acc + c["r"] * y)
        out[..., -1] = y - s * c["z"][-1]
    else:
        out[..., -1] = y
    for i in range(n - 2, -1, -1):
        y = (g[..., i] - c["upper"][i] * y) * c["inv_d"][i]
        out[..., i] = y - s * c["z"][i] if fac.periodic else y
    return out


def _thomas_scalar(fac: Factors, d):
    """One float64 system: the same operations on Python floats (IEEE double, no FMA: the same
    bits as the vectorised loop), ~20× faster than NumPy's per-element overhead on 1D problems."""
    n = fac.n
    dl = d.ravel().tolist()
    lf, inv_d, up, z, w = (v.tolist() for v in (fac.l, fac.inv_d, fac.upper, fac.z, fac.w))
    g = [0.0] * n
    g[0] = gi = dl[0]
    acc = w[0] * gi
    for i in range(1, n):
        gi = dl[i] - lf[i] * gi
        g[i] = gi
        acc = acc + w[i] * gi
    out = [0.0] * n
    y = gi * inv_d[-1]
    s = fac.q * (acc + fac.r * y) if fac.periodic else 0.0
    out[-1] = y - s * z[-1] if fac.periodic else y
    for i in range(n - 2, -1, -1):
        y = (g[i] - up[i] * y) * inv_d[i]
        out[i] = y - s * z[i] if fac.periodic else y
    return np.array(out, dtype=np.float64).reshape(d.shape)


def _cast(fac: Factors, dt) -> dict:
    t = dt.type
    return {"l": fac.l.astype(dt), "inv_d": fac.inv_d.astype(dt), "upper": fac.upper.astype(dt),
            "z": fac.z.astype(dt), "w": fac.w.astype(dt), "r": t(fac.r), "q": t(fac.q)}


def thomas_launch(nsys: int) -> tuple[tuple[int], tuple[int]]:
    return ((nsys + THOMAS_BLOCK - 1) // THOMAS_BLOCK,), (THOMAS_BLOCK,)


class ThomasDevice:
    """The factors on the device and the one-thread-per-line kernel."""

    def __init__(self, fac: Factors, dtype, stream=None):
        import cupy as cp  # optional dependency: the GPU backend only

        self.dtype, self.n = np.dtype(dtype), fac.n
        packed = np.concatenate([fac.l, fac.inv_d, fac.upper, fac.z, fac.w, [fac.r, fac.q]])
        self.fac_dev = cp.asarray(packed.astype(self.dtype))
        self.fn = gpu.spec(self.dtype).function(template("compact_thomas", ctype(self.dtype), fac.periodic))

    def solve(self, d, x, nsys: int, sys_stride: int, elem_stride: int) -> None:
        grid, block = thomas_launch(nsys)
        self.fn(grid, block, (d, x, self.fac_dev, np.int32(self.n), np.int32(nsys), np.int64(sys_stride),
                              np.int64(elem_stride)))


class Thomas(Solver):
    name = "thomas"
    doc = ("Thomas algorithm, LU factors computed once (float64, host); GPU: one thread per system, "
           "periodic systems by Sherman–Morrison folded into the two sweeps")

    def solve(self, fac, prepared, d, dtype=None):
        return thomas(fac, d, dtype)

    def device(self, fac, prepared, dtype, stream=None):
        return ThomasDevice(fac, dtype, stream)


STRATEGIES = (Thomas(),)

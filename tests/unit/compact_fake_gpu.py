"""The compact family on tests/unit/fake_cupy.py: a fake CuPy whose RawModule kernels (the .cu sources
and the stencil framework's generated ones) are compiled with g++ and run on the CPU, with the
tridiagonal solves replaced by NumPy's Thomas on the lines a kernel would address and the transpose
kernel by NumPy's — so any difference from the NumPy engine comes from the kernels under test."""
from __future__ import annotations

import sys

import numpy as np
from nagare.engine import cuda
from nagare.engine.compact import gpu, lines
from nagare.engine.compact.solvers.thomas import thomas
from nagare.engine.stencil import loops

from tests.unit import fake_cupy

# the NumPy functions the engine's other phases call on its xp
NUMPY_NAMES = ("multiply", "add", "negative", "where", "moveaxis", "subtract", "broadcast_to", "swapaxes")


class LineThomas:
    """lines.device_solver's signature and a device side's solve(): NumPy's Thomas on the lines a kernel
    would address."""

    def __init__(self, kind, fac, sched, dtype, stream=None):
        self.fac = fac

    def solve(self, d, x, nsys, sys_stride, elem_stride):
        idx = np.arange(nsys)[:, None] * sys_stride + np.arange(self.fac.n)[None, :] * elem_stride
        x.reshape(-1)[idx] = thomas(self.fac, d.reshape(-1)[idx])


def _clear() -> None:
    for c in (cuda._compiled, cuda._function, loops._compiled):  # modules of an earlier fake must not serve
        c.cache_clear()


def fake_gpu(workdir, monkeypatch):
    """Install the fake CuPy and the stand-ins (a generator for a pytest fixture: yields the module)."""
    cp = fake_cupy.make(workdir, cost=lambda block, last: 1.0)
    for name in NUMPY_NAMES:
        setattr(cp, name, getattr(np, name))
    cp.empty = fake_cupy._aligned(np.empty)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setenv("NAGARE_CACHE_DIR", str(workdir / "cache"))
    monkeypatch.setattr(lines, "device_solver", LineThomas)
    monkeypatch.setattr(gpu, "transpose", lambda src, dst: dst.__setitem__(Ellipsis, src.T))
    _clear()
    yield cp
    _clear()

"""What every tridiagonal solver of the compact family provides (one :class:`Solver` per ``solver`` choice).

A solver works on one factorised matrix (tridiag.Factors) and many lines:

- ``prepare(fac)``: what it precomputes from the matrix, once per operator (a reduction schedule, a
  scan plan, an iterative solver with its bands; None when the factors are all it needs);
- ``solve(fac, prepared, d, dtype)``: x = A⁻¹ d along the last axis of a NumPy array, in the operation
  order of its kernel (what the NumPy backend runs, and the CPU reference of the kernel);
- ``device(fac, prepared, dtype, stream)``: its device side — an object with
  ``solve(d, x, nsys, sys_stride, elem_stride)`` on a *line batch* (element i of line s at
  ``s·sys_stride + i·elem_stride`` of a C-contiguous array; x may be d); one whose ``groups`` is true also
  takes ``group=(per, group_stride)`` (a stack's strided y-lines in one launch), and one of a solver that
  ``fuses_rhs`` has ``derivative(f, out, nsys, sys_stride, elem_stride, h, delta, group)``, the explicit
  right-hand side computed in the solve's launch (``kernel = fused``);
- ``unavailable(backend, selection, config)``: why the choice cannot run here (None if it can) — the
  registry's availability check;
- ``kernel_specs(dtype, selection, shape)``: the NVRTC modules it needs beyond the family's tridiag.cu
  (engine/compact/gpu.py), for the warm-up before the first step;
- ``launches(prepared, dtype, nsys, sys_stride, elem_stride, group)``: kernel launches of one grouped
  batch (see ``groups``);
- ``stats(prepared)``: the last solve's statistics for the timing extras (iterative solvers), or None.

The registry of solvers is engine/compact/solvers/__init__.py; the dispatcher that lays lines out for
them, engine/compact/lines.py.
"""
from __future__ import annotations

from abc import ABC, abstractmethod


class SharedMemoryOptIn:
    """Dynamic shared memory above 48 KiB needs the function's opt-in (a driver call): raised once per
    function to the largest size it is launched with, never lowered — the function object is shared by
    every plan of its instance name, and another plan's larger lines may launch it next."""

    DEFAULT_LIMIT = 48 * 1024

    def __init__(self):
        self._opted: dict = {}  # id(function) -> the dynamic shared memory it was opted in to

    def __call__(self, fn, smem: int) -> None:
        if smem > self.DEFAULT_LIMIT and smem > self._opted.get(id(fn), 0):
            fn.max_dynamic_shared_size_bytes = max(smem, fn.max_dynamic_shared_size_bytes)
            self._opted[id(fn)] = fn.max_dynamic_shared_size_bytes


class Solver(ABC):
    name: str
    doc: str
    backends: tuple[str, ...] = ("numpy", "cupy")
    fuses_rhs = False  # its device side computes the explicit right-hand side in the solve's launch
    contiguous_only = False  # its device side takes contiguous lines only: y-lines are always transposed

    def prepare(self, fac, dtype, xp, stream=None):
        """What the solver precomputes from the factorised matrix (None: nothing beyond the factors)."""
        return None

    @abstractmethod
    def solve(self, fac, prepared, d, dtype=None):
        """x = A⁻¹ d along the last axis (NumPy; ``dtype``: the arithmetic's precision)."""

    @abstractmethod
    def device(self, fac, prepared, dtype, stream=None):
        """The device side for one factorised matrix (CuPy)."""

    def unavailable(self, backend, selection, config) -> str | None:
        """Why this solver cannot run with ``selection`` (None if it can): every solver but the fusing
        ones needs a separate right-hand side."""
        if selection.get("kernel") == "fused" and not self.fuses_rhs:
            return (f"solver = {self.name} needs a separate right-hand side (kernel = fused runs on "
                    f"solver = scan, scan-tile, window or stream only: choose another kernel first)")
        return None

    def kernel_specs(self, dtype, selection: dict, shape) -> list:
        return []

    def launches(self, prepared, dtype, nsys: int, sys_stride: int, elem_stride: int, group) -> int:
        return 1

    def stats(self, prepared) -> dict | None:
        return None

"""The compact family's shaders/cuda/compact/tridiag.cu as one NVRTC compilation (engine/cuda.KernelSpec):
the Thomas and reduction kernels (their launches: solvers/thomas.py, solvers/reduction.py), the periodic
correction after cuSPARSE (solvers/gtsv2.py) and the tiled transpose every solver's transposed y-lines
take (:func:`transpose`).

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
TRANSPOSE_BLOCK = (32, 8)


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


def transpose_launch(ny: int, nx: int) -> tuple[tuple[int, int], tuple[int, int]]:
    return ((nx + 31) // 32, (ny + 31) // 32), TRANSPOSE_BLOCK


def transpose(src, dst) -> None:
    """dst (nx, ny) = src (ny, nx)ᵀ with the tiled kernel (both C-contiguous device arrays)."""
    ny, nx = src.shape
    fn = spec(src.dtype).function(template("compact_transpose", ctype(src.dtype)))
    grid, block = transpose_launch(ny, nx)
    fn(grid, block, (src, dst, np.int32(ny), np.int32(nx)))

"""Wiring a framework stencil into an engine family's ``kernel`` variant axis.

Families built on the framework register the same three choices, one per P2 loop engine:

- ``stencil-host``  → ``host`` (vectorised NumPy/CuPy evaluation of the traced update),
- ``cuda``          → ``device`` (generated z-marching kernel, P2's fixed (128,1,1), z-march 2),
- ``cuda-autotune`` → ``device-autotune`` (same kernels, kernel shape and launch tuned live),

and 3D families a fourth (``vec_stencil``):

- ``cuda-vec``      → ``device`` with the vec kernel shape (V = 4, else 2, x-consecutive points per
  thread, aligned vector loads, x-neighbours by warp shuffles) at a fixed launch (32, 8), z-march 4;
  unavailable, with the reason, on grids it cannot run (nx not a multiple of V, x-halo > V).
"""
from __future__ import annotations

from .. import registry
from .codegen import VEC, vec_choice
from .loops import Loop

LOOP_ENGINE = {"stencil-host": "host", "cuda": "device", "cuda-autotune": "device-autotune", "cuda-vec": "device"}
# Launch of the fixed-launch choices other than P2's default: the vec kernel at the hand-written
# prototype's best 512³ configuration (block 32 × 8, z-march 4; docs/decisions.md D17).
LOOP_KW = {"cuda-vec": {"shape_kind": VEC, "block": (32, 8), "zmarch": 4}}


def register_stencil_choices(family: str, reference: dict, *, host_rtol: float, device_rtol: float,
                             vec_stencil=None) -> None:
    registry.register_choice(family, "kernel", "stencil-host", backends=("numpy", "cupy"),
                             doc="stencil framework, host loop engine: the traced point update evaluated "
                                 "with whole-array NumPy/CuPy operations",
                             reference=reference, rtol=host_rtol)
    registry.register_choice(family, "kernel", "cuda", backends=("cupy",),
                             doc="stencil framework, device loop engine: generated z-marching CUDA kernel, "
                                 "P2's fixed launch (128,1,1) with z-march 2",
                             reference=reference, rtol=device_rtol)
    registry.register_choice(family, "kernel", "cuda-autotune", backends=("cupy",),
                             doc="stencil framework, auto-tuning device loop engine: the same kernel; the "
                                 "launch (kernel shape z-marching, plain or vec; threads in x, y; z-march "
                                 "or block z) is tuned on live steps (P2)",
                             reference=reference, rtol=device_rtol)
    if vec_stencil is not None:
        def vec_check(backend, selection, config, st=vec_stencil):
            shape = getattr(config, "shape", None)
            return vec_choice(st, shape)[1] if shape is not None else None

        registry.register_choice(family, "kernel", "cuda-vec", backends=("cupy",),
                                 doc="stencil framework, device loop engine with the vec kernel shape: each "
                                     "thread updates 4 (else 2) x-consecutive points from aligned vector loads, "
                                     "x-neighbours by warp shuffles, z-march; fixed launch (32,8,1), z-march 4",
                                 reference=reference, rtol=device_rtol, check=vec_check)


def loop_for(choice: str, st, shape, dtype, boundary: str, xp, stream=None) -> Loop | None:
    """The framework loop behind a kernel choice, or None if the choice is not a framework one."""
    engine = LOOP_ENGINE.get(choice)
    if engine is None:
        return None
    return Loop(st, shape, dtype, boundary=boundary, engine=engine, xp=xp, stream=stream, **LOOP_KW.get(choice, {}))

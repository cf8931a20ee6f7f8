"""Wiring a framework stencil into an engine family's ``kernel`` variant axis.

Families built on the framework register the same three choices, one per P2 loop engine:

- ``stencil-host``  → ``host`` (vectorised NumPy/CuPy evaluation of the traced update),
- ``cuda``          → ``device`` (generated z-marching kernel, P2's fixed (128,1,1), z-march 2),
- ``cuda-autotune`` → ``device-autotune`` (same kernel, launch configuration tuned live).
"""
from __future__ import annotations

from .. import registry
from .loops import Loop

LOOP_ENGINE = {"stencil-host": "host", "cuda": "device", "cuda-autotune": "device-autotune"}


def register_stencil_choices(family: str, reference: dict, *, host_rtol: float, device_rtol: float) -> None:
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
                                 "launch (kernel shape z-marching or plain; threads in x, y; z-march or "
                                 "block z) is tuned on live steps (P2)",
                             reference=reference, rtol=device_rtol)


def loop_for(choice: str, st, shape, dtype, boundary: str, xp, stream=None) -> Loop | None:
    """The framework loop behind a kernel choice, or None if the choice is not a framework one."""
    engine = LOOP_ENGINE.get(choice)
    if engine is None:
        return None
    return Loop(st, shape, dtype, boundary=boundary, engine=engine, xp=xp, stream=stream)

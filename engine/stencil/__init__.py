"""P2's stencil framework: write the update of one grid point once, run it anywhere.

    from nagare.engine.stencil import stencil, Loop

    @stencil(inputs=["f"], outputs=["fn"], params=["r"], halo=1, ndim=3)
    def diffusion7(f, r):
        c = f[0, 0, 0]
        return c + r * (((f[-1, 0, 0] + f[1, 0, 0]) + (f[0, -1, 0] + f[0, 1, 0]))
                        + (f[0, 0, -1] + f[0, 0, 1]) - 6.0 * c)

    loop = Loop(diffusion7, f.shape, f.dtype, boundary="periodic", engine="device-autotune", xp=cupy)
    loop(f=f, fn=fn, r=0.1)          # one sweep; the tuner picks the launch configuration
    print(generate(diffusion7, "float32", "periodic"))   # the CUDA it runs

See :mod:`.definition` (the user-facing rules), :mod:`.host` (NumPy), :mod:`.codegen` (CUDA),
:mod:`.loops` (loop engines) and :mod:`.library` (built-in stencils).
"""
from __future__ import annotations

from .codegen import generate, kernel_name
from .definition import Stencil, stencil
from .expr import StencilError, call
from .host import BOUNDARIES, evaluate
from .loops import ENGINES, Loop, StencilCompileError


def sqrt(x):
    return call("sqrt", x)


def exp(x):
    return call("exp", x)


def sin(x):
    return call("sin", x)


def cos(x):
    return call("cos", x)


def fabs(x):
    return call("fabs", x)


def fmin(a, b):
    return call("fmin", a, b)


def fmax(a, b):
    return call("fmax", a, b)


__all__ = ["BOUNDARIES", "ENGINES", "Loop", "Stencil", "StencilCompileError", "StencilError", "cos", "evaluate",
           "exp", "fabs", "fmax", "fmin", "generate", "kernel_name", "sin", "sqrt", "stencil"]

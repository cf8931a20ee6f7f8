"""diffusion3d's one variant axis, ``kernel``: the whole-array reference, the stencil framework's
loop engines (engine/stencil/variants.py) and the hand-written CUDA kernel. :func:`register` runs
once, when engine.py is imported (each family registers from its own variants.py)."""
from __future__ import annotations

from .. import registry
from ..stencil.library import diffusion7
from ..stencil.variants import register_stencil_choices

FAMILY = "diffusion3d"


def register() -> None:
    registry.register_axis(FAMILY, "kernel", default={"numpy": "array", "cupy": "cuda"},
                           doc="array: whole-array expression (the reference, runs on either backend); "
                               "stencil-host / cuda / cuda-autotune: the 7-point update written once with the "
                               "stencil framework (engine/stencil) and run by P2's host, device and auto-tuning "
                               "device loop engines; cuda-vec: the framework's vec kernel shape (vector loads, "
                               "warp shuffles) at a fixed launch; cuda-handwritten: the hand-written CUDA kernel")
    registry.register_choice(FAMILY, "kernel", "array", backends=("numpy", "cupy"),
                             doc="xp-generic array expression", reference={"kernel": "array"}, rtol=1e-12)
    # The framework's host evaluation performs exactly the reference's operations in the same order:
    # bit-identical (rtol 0). Generated CUDA is compiled without FMA contraction and is expected to
    # be bit-identical too (tests/gpu checks that separately); the registry keeps the family's CUDA
    # tolerance.
    register_stencil_choices(FAMILY, {"kernel": "array"}, host_rtol=0.0, device_rtol=1e-5, vec_stencil=diffusion7)
    registry.register_choice(FAMILY, "kernel", "cuda-handwritten", backends=("cupy",),
                             doc="hand-written CUDA kernel (shaders/cuda/diffusion3d), block (128,1,1), z-march 2",
                             reference={"kernel": "array"}, rtol=1e-5)

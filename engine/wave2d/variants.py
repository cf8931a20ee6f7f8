"""wave2d's ``kernel`` axis: the independent array leapfrog (reference.py) and the stencil
framework's host, device and auto-tuning loop engines over the same point update. Registered by
:func:`register`, which engine.py calls on import (as in every family)."""
from __future__ import annotations

from .. import registry
from ..stencil.variants import register_stencil_choices

FAMILY = "wave2d"


def register() -> None:
    registry.register_axis(FAMILY, "kernel", default={"numpy": "stencil-host", "cupy": "cuda"},
                           doc="array: whole-array leapfrog (the reference); stencil-host / cuda / cuda-autotune: the "
                               "update written once with the stencil framework, run by P2's host, device and "
                               "auto-tuning device loop engines")
    registry.register_choice(FAMILY, "kernel", "array", backends=("numpy", "cupy"),
                             doc="xp-generic array expression", reference={"kernel": "array"}, rtol=1e-12)
    # Same operations in the same order as the reference: bit-identical on the host.
    register_stencil_choices(FAMILY, {"kernel": "array"}, host_rtol=0.0, device_rtol=1e-5)

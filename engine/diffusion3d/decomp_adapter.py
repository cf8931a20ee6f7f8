"""diffusion3d's adapter to engine/decomp: the stencil adapter on slabs of z planes, with the
hand-written kernel run over each whole slab."""
from __future__ import annotations

import numpy as np

from .. import cuda
from ..decomp.stencil import StencilAdapter, StencilSpec
from ..stencil.library import diffusion7
from . import reference
from .engine import CUDA_SOURCE


def _reference(engine, xp, b):
    reference.diffuse_fixed(xp, b["f"], b["fn"], engine._r)


def _handwritten(engine, kernel):
    """The ``cuda-handwritten`` kernel over a whole slab (it copies its edge planes, so it cannot
    update a range of planes from a view: no overlap split)."""
    if kernel != "cuda-handwritten":
        return None
    name = f"diffusion7<{cuda.ctype(engine.dtype)}, false>"
    block, zmarch = engine.block, engine.zmarch

    def launch(b, shape):
        kern = cuda.kernel(CUDA_SOURCE, name, (name,))  # looked up under the part's device (cached per device)
        nz, ny, nx = shape
        grid = (-(-nx // block[0]), -(-ny // block[1]), -(-nz // zmarch))
        kern(grid, block, (b["f"], b["fn"], np.int32(nx), np.int32(ny), np.int32(nz), engine._r, np.int32(zmarch)))

    return launch


class Diffusion3DSlabs(StencilAdapter):
    spec = StencilSpec(
        stencil=diffusion7, buffers=("f", "fn"), scatter_from={"f": "f", "fn": "f"}, gather_to={"f": "f"},
        out="fn", rotate=lambda b: {"f": b["fn"], "fn": b["f"]}, reference=_reference,
        params=lambda e: {"r": e._r}, phase="diffuse", whole_slab=_handwritten)
    scaling = {"gpu": {"weak": (512, 512, 512)}, "cpu": {"weak": (32, 32, 16)}}

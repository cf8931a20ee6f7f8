"""wave2d's adapter to engine/decomp: the stencil adapter on slabs of y rows, three time levels."""
from __future__ import annotations

from ..decomp.stencil import StencilAdapter, StencilSpec
from ..stencil.library import wave2d
from . import reference


def _reference(engine, xp, b):
    reference.leapfrog_fixed(xp, b["u"], b["u_prev"], b["u_next"], engine._c2)


class Wave2DSlabs(StencilAdapter):
    spec = StencilSpec(
        stencil=wave2d, buffers=("u", "u_prev", "u_next"),
        scatter_from={"u": "u", "u_prev": "u_prev", "u_next": "u_prev"}, gather_to={"u": "u", "u_prev": "u_prev"},
        out="u_next", rotate=lambda b: {"u_prev": b["u"], "u": b["u_next"], "u_next": b["u_prev"]},
        reference=_reference, params=lambda e: {"c2": e._c2}, phase="leapfrog")

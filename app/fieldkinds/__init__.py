"""One handler per field type, for every place the app turns an engine field into something.

The engine's typed fields (nagare.engine.fields: Grid2D, Grid3D, Particles, Boxes, Profile1D) each have one
module here that registers the handlers of that type:

- ``snapshot``: device copy of what is shown into a FramePacket (worker thread, engine stream);
- ``png``: the headless frame (nagare.app.frames);
- ``host_copy``: the same dataclass with host arrays (the window's VTK export);
- ``arrays``: named host arrays of an .npz dump (nagare.app.headless);
- ``vtk``: a legacy binary VTK file (nagare.app.gui.export);
- ``vtkhdf``: a VTKHDF file for ParaView (nagare.app.vtkhdf; grids are grouped there);
- ``draw``: the canvas Drawer of a packet kind (registered by nagare.app.gui.canvas, which
  needs VisPy; this package does not).

A new field type (an octree's leaf blocks, a 1-D line profile) is its dataclass plus one module
that calls :func:`register` for each role; no dispatch site changes. A field without a handler
for a role raises :class:`FieldTypeError` naming the role and the type. Why a dict per role and
not functools.singledispatch: see :mod:`.registry`.
"""
from __future__ import annotations

from . import boxes, grids, particles, profiles  # noqa: F401  (registers the built-in field types)
from .registry import ROLES, FieldTypeError, handler_for, lookup, register, registered, unregister

__all__ = ["ROLES", "FieldTypeError", "handler_for", "host_copies", "lookup", "register", "registered",
           "unregister"]


def host_copies(engine) -> dict:
    """Every field of the engine as the same dataclass holding host arrays.

    Run on the simulation thread, between steps (exports use ``fields()``, every field at once)."""
    asnumpy = engine.backend.asnumpy
    return {name: handler_for("host_copy", f)(f, asnumpy) for name, f in engine.fields().items()}

"""The handler table: (role, field type) → handler.

A plain dict keyed by role and then by the field's dataclass, rather than functools.singledispatch:
one field type needs several handlers (snapshot, png, host copy, npz arrays, VTK, canvas drawer),
and a table per role keeps them side by side, lets a test or ``nagare`` list what is registered,
and gives one error that names both the role and the type when a handler is missing (a
singledispatch fallback would have to be written per role). Lookup walks the type's MRO, so a
subclass of a registered dataclass uses its parent's handlers until it registers its own.

The canvas's ``draw`` role is keyed by the packet kind (a string such as ``"grid2d"``): a frame
packet no longer carries the engine's dataclass, and the snapshot handler names the kind it makes.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nagare.engine.errors import NagareError

# role -> what the handler is called with (the handler's docstring gives the details)
ROLES = {
    "snapshot": "(field, SnapshotContext) -> FramePacket: device copy of what is shown (worker thread)",
    "png": "(field, backend, view, vrange) -> (H, W, 3) uint8 RGB: the headless frame",
    "host_copy": "(field, asnumpy) -> the same dataclass holding host arrays (exports)",
    "arrays": "(out, name, field, asnumpy) -> None: adds named host arrays to an .npz dump",
    "vtk": "(name, host field) -> (header lines, body parts): a legacy binary VTK file",
    "vtkhdf": "(host field, path) -> None: a VTKHDF file (grids are grouped by nagare.app.vtkhdf itself)",
    "draw": "packet kind -> canvas Drawer (nagare.app.gui.drawer.Drawer)",
}
KEYED_BY_KIND = {"draw"}

_table: dict[str, dict[Any, Callable]] = {role: {} for role in ROLES}


class FieldTypeError(NagareError, TypeError):
    """A field (or packet kind) has no handler for the role asked for."""


def _check(role: str, key) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown field handler role {role!r}; roles: {', '.join(ROLES)}")
    want = str if role in KEYED_BY_KIND else type
    if not isinstance(key, want):
        raise TypeError(f"the {role!r} role is keyed by {'a packet kind (str)' if want is str else 'a field type'}, "
                        f"not {key!r}")


def register(role: str, key, handler: Callable | None = None):
    """Register ``handler`` for ``role`` and ``key`` (a field dataclass; a packet kind for ``draw``).

    Usable as a decorator (``@register("png", Grid2D)``) or called with the handler. A key
    registered again is replaced (a test may swap a handler and put it back)."""
    _check(role, key)
    if handler is None:
        return lambda fn: register(role, key, fn)
    _table[role][key] = handler
    return handler


def unregister(role: str, key) -> None:
    _check(role, key)
    _table[role].pop(key, None)


def lookup(role: str, key) -> Callable:
    """The handler for ``role`` of a field type (its MRO is searched) or of a packet kind."""
    _check(role, key)
    table = _table[role]
    for k in (key,) if isinstance(key, str) else key.__mro__:
        if k in table:
            return table[k]
    name = key if isinstance(key, str) else f"{key.__module__}.{key.__qualname__}"
    what = "packet kind" if isinstance(key, str) else "field type"
    raise FieldTypeError(f"no {role!r} handler for {what} {name}: register one with "
                         f"nagare.app.fieldkinds.register({role!r}, ...)")


def handler_for(role: str, field) -> Callable:
    """lookup() by the type of a field instance."""
    return lookup(role, type(field))


def registered(role: str) -> dict:
    """A copy of one role's table (key → handler)."""
    _check(role, "" if role in KEYED_BY_KIND else object)
    return dict(_table[role])

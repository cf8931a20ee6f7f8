"""The app handlers of the toy family's Profile field (what its own module registers)."""
from __future__ import annotations

import numpy as np
from nagare.app import colormaps, fieldkinds

from .engine import Profile


def _snapshot(f, ctx):
    return ctx.packet("toy-profile", payload=ctx.xp.asarray(f.values, dtype=ctx.xp.float32).copy())


def _png(f, backend, view, vrange):
    return colormaps.apply(np.asarray(backend.asnumpy(f.values), np.float64)[None], view.colormap, vrange)


def _host_copy(f, asnumpy):
    return Profile(asnumpy(f.values), f.label)


def _arrays(out, name, f, asnumpy):
    out[name] = asnumpy(f.values)


for role, fn in (("snapshot", _snapshot), ("png", _png), ("host_copy", _host_copy), ("arrays", _arrays)):
    fieldkinds.register(role, Profile, fn)

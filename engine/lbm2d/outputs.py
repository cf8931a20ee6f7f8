"""What lbm2d shows and exports: the macroscopic moments and the named fields, one at a time.

:func:`field` computes only what the named field needs (the app asks for the one on screen about
30 times a second); :func:`fields` computes the moments once and builds every field from them.
"""
from __future__ import annotations

import numpy as np

from ..cuda import ctype, template
from ..fields import Grid2D, Particles
from . import reference
from .tracers import VELOCITY_SPEC


def macroscopic_arrays(e):
    """ρ, ux, uy (ny × nx) of the current state, as array code (the reference of lbm_velocity).

    The state is post-collision: its momentum is the streamed populations' Σ g c plus F (the
    collision relaxes the −F/2 shift and adds the (1 − ω/2)F source), so the physical velocity
    (Σ g c + F/2)/ρ is (Σ f^post c − F/2)/ρ.
    """
    xp = e.xp
    f = e.canonical_state()
    fx, fy = e.lat.force
    rho, ux, uy = reference.moments(f, (-fx, -fy))
    solid = e.solid
    return rho, xp.where(solid, 0, ux), xp.where(solid, 0, uy)


def moments(e, with_rho: bool = True):
    """(ρ or None, ux, uy) as macroscopic(); with a stepper that allows it (CUDA, two lattices) one
    fused pass (lbm_velocity in tracers.cu) instead of ~25 array operations on the whole lattice."""
    if not e.stepper.device_moments:
        return macroscopic_arrays(e)
    xp = e.xp
    t = ctype(e.dtype)
    s = "unsigned short" if e.f.dtype == np.float16 else t
    kern = VELOCITY_SPEC.function(template("lbm_velocity", t, s))
    ny, nx = e.preset.shape
    ux = xp.empty((ny, nx), dtype=e.dtype)
    uy = xp.empty_like(ux)
    rho = xp.empty_like(ux) if with_rho else None
    T = e.dtype.type
    kern(((nx + 63) // 64, (ny + 3) // 4, 1), (64, 4, 1),
         (e.f, e.mask, np.int32(nx), np.int32(ny), T(e.lat.force[0]), T(e.lat.force[1]), ux, uy,
          rho if with_rho else np.uintp(0)))
    return rho, ux, uy


class _Moments:
    """The moments one request needs, computed at most once (with ρ only when asked for)."""

    def __init__(self, e, with_rho: bool = False):
        self.e, self.value = e, None
        if with_rho:
            self.value = moments(e, True)

    def __call__(self, with_rho: bool = False):
        if self.value is None or (with_rho and self.value[0] is None):
            self.value = moments(self.e, with_rho)
        return self.value


def _speed(e, m):
    _, ux, uy = m()
    return Grid2D(e.xp.sqrt(ux * ux + uy * uy), label="speed |u|", units="lattice", mask=e.solid)


def device_vorticity(e):
    """The vorticity in one pass from the populations (lbm_vorticity in tracers.cu): what the array
    path below computes, bit for bit, without the moments pass and ~10 whole-lattice temporaries
    (the app asks for this field at every published frame; at 2048² the array path cost ~1 % of
    the simulation's throughput in the display benchmark)."""
    xp = e.xp
    t = ctype(e.dtype)
    s = "unsigned short" if e.f.dtype == np.float16 else t
    kern = VELOCITY_SPEC.function(template("lbm_vorticity", t, s))
    ny, nx = e.preset.shape
    out = xp.empty((ny, nx), dtype=e.dtype)
    T = e.dtype.type
    kern(((nx + 63) // 64, (ny + 3) // 4, 1), (64, 4, 1),
         (e.f, e.mask, e.solid, np.int32(nx), np.int32(ny), T(e.lat.force[0]), T(e.lat.force[1]), out))
    return out


def _vorticity(e, m):
    if e.stepper.device_moments and m.value is None:
        data = device_vorticity(e)
    else:
        _, ux, uy = m()
        data = e.xp.where(e.solid, 0, reference.vorticity(e.xp, ux, uy))
    return Grid2D(data, label="vorticity", units="1/step", mask=e.solid, symmetric=True)


def _rho(e, m):
    return Grid2D(m(with_rho=True)[0], label="density ρ", units="lattice", mask=e.solid)


def _ux(e, m):
    return Grid2D(m()[1], label="ux", units="lattice", mask=e.solid, symmetric=True)


def _uy(e, m):
    return Grid2D(m()[2], label="uy", units="lattice", mask=e.solid, symmetric=True)


def _mask(e, m):
    return Grid2D(e.mask, label="node type (0 fluid, 1 solid, 2 moving wall, 3 inlet, 4 outlet)")


def _tracers(e, m):
    # The tracers move in lattice units with node centres at integers (tracers.py); the fields are
    # grids whose node i is the cell [i, i+1) (Grid2D: in the view, the exports and the probes), so
    # a tracer at node i's centre is at i + ½ in the fields' coordinates.
    ny, nx = e.preset.shape
    pos = e.tracers.pos
    return Particles(pos + pos.dtype.type(0.5), {"age": e.tracers.age}, label="tracers",
                     bounds=((0.5, 0.5), (nx - 0.5, ny - 0.5)))


FIELDS = {"speed": _speed, "vorticity": _vorticity, "rho": _rho, "ux": _ux, "uy": _uy, "mask": _mask,
          "tracers": _tracers}


def field_names(e) -> list[str]:
    return [n for n in FIELDS if n != "tracers" or e.tracers is not None]


def field(e, name: str):
    if name not in field_names(e):
        raise KeyError(name)
    return FIELDS[name](e, _Moments(e))


def fields(e) -> dict:
    m = _Moments(e, with_rho=True)
    return {name: FIELDS[name](e, m) for name in field_names(e)}

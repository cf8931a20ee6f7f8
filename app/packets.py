"""What the simulation thread hands the UI: the view request, the frame packet, and the snapshot
context a field type's snapshot handler works in.

No Qt here: the per-type snapshot handlers (nagare.app.fieldkinds) build packets without importing
the window, and the worker re-exports these names for its callers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SLICE_AXES = {"z": 0, "y": 1, "x": 2}  # (nz, ny, nx) C order
RANGE_SAMPLE = 1 << 16  # points the auto colour range is estimated from


@dataclass
class ViewRequest:
    """What the UI wants to see; the worker snapshots only that."""

    field: str | None = None
    component: str = "magnitude"  # for vector fields: magnitude | x | y | z
    slice_axis: str = "z"
    slice_pos: float = 0.5  # fraction along the slice axis
    attribute: str | None = None  # particle colouring attribute
    particles_overlay: bool = True  # draw the engine's particles (e.g. tracers) over a grid field
    mode: str = "3d"  # Grid3D: "3d" (the whole volume: slice planes in place, volume rendering) | "slice"
    boxes_overlay: bool = True  # 3D grids: draw the engine's Boxes (octree leaves) around the volume
    hide_walls: bool = True  # 3D particles with a "kind" attribute: draw the fluid (kind 0) only (headless frames too)


@dataclass
class FramePacket:
    seq: int
    step: int
    time: Any  # a float, or a device scalar (engine.device_time()) read after `event`
    field_name: str
    kind: str  # grid2d | grid3d | particles | boxes | a kind registered by another field type
    data: Any = None  # 2D scalar snapshot (grids) or (n,) attribute (particles)
    mask: Any = None
    positions: Any = None
    length_units: str | None = None  # what positions are in (the field's length_units; None: see length_units())
    centering: str = "cell"  # grids: the field's centering ("node": samples on points, drawn centred on them)
    extent: Any = None  # volume3d: the domain's world size (x, y, z) when not shape × spacing
    domain: Any = None  # grid2d: Grid2D.domain (the axes' ranges, origin added) when not the cells' extent
    lo: Any = None  # boxes
    hi: Any = None
    level: Any = None
    vmin: Any = None  # device scalars computed on the engine stream (read after `event`)
    vmax: Any = None
    vector: bool = False  # grids: the field is a vector (the View dock's component control applies)
    symmetric: bool = False  # the field asks for a range symmetric about 0 (diverging colour maps: view_range)
    slice_index: int = 0
    slice_count: int = 1
    bounds: Any = None
    event: Any = None  # CUDA event recorded after the snapshot; None on NumPy
    backend: str = "numpy"
    fields: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()  # particles: the attributes one can colour by
    spacing: float = 1.0  # grid spacing: the image spans nx*spacing × ny*spacing
    origin: tuple = (0.0, 0.0)  # 2D views: added to world (x, y) in axis labels and probe readouts (Grid2D.origin)
    axis_names: tuple = ("x", "y")  # 2D views: what the horizontal and vertical axes are (a y slice: x, z)
    overlay: Any = None  # (n, 2) positions of particles drawn over a 2D grid field
    attribute: str | None = None
    payload: Any = None  # what a field type registered outside the built-ins carries to its drawer
    label: str = ""  # the field's label and units (colour bar)
    units: str = ""
    solids: tuple = ()  # particles: obstacle boxes ((lo), (hi)) drawn as surfaces
    radius: float | None = None  # particles: sprite radius in world units (half the spacing)
    boxes: Any = None  # volume3d: (lo, hi, level) of the engine's Boxes field drawn around the volume
    boxes_levels: tuple | None = None  # volume3d: the levels in boxes' level when the engine knows them on the host
    surfaces: tuple = ()  # volume3d: the Grid3D's solid bodies ((vertices, faces) host arrays, as the engine's)
    trails: Any = None  # 3D particles: (T, n, 3) float32 copy of the trails (NaN: no sample)
    time_units: str = ""  # what `time` is in (engine.time_units)
    run: int = 0  # the worker's run id (a new one per engine built): a packet of a replaced run is not drawn
    device_scalars: Any = None  # GPU: the device copy of vmin/vmax/time being copied to pinned host memory

    def ready(self) -> bool:
        return self.event is None or self.event.done


def length_units(pk: FramePacket) -> str:
    """What a packet's world positions are in: the field's own declaration; else particles in metres
    (SPH is SI) and grids in cells × spacing ("cells" when the spacing is 1, no unit otherwise)."""
    if pk.length_units:
        return pk.length_units
    if pk.kind == "particles":
        return "m"
    return "cells" if pk.spacing == 1.0 else ""


def time_label(t: float, units: str) -> str:
    """The simulated time as the HUD and status line show it: "t = 0.25 s", "t = 1200 lattice steps"
    ("–": dimensionless, shown without a unit)."""
    unit = "" if units in ("", "–") else f" {units}"
    return f"t = {t:.6g}{unit}"


@dataclass
class SnapshotContext:
    """Everything a snapshot handler may use besides the field itself.

    ``cache`` is one dict per engine, owned by the worker (None: no reuse between packets)."""

    engine: Any
    view: ViewRequest
    cache: dict | None
    common: dict  # seq, step, time, field_name, backend, fields: the same for every kind

    @property
    def xp(self):
        return self.engine.xp

    def packet(self, kind: str, **kw) -> FramePacket:
        return FramePacket(kind=kind, **self.common, **kw)


def _percentiles(xp, a, qs):
    """Percentiles of a 1-D array with NumPy's default (linear) interpolation, as device scalars.

    Not cupy.percentile: it validates q by reading it back to the host, a sync that drained the
    engine's queue at every published frame (the display benchmark lost ~12 % to it; docs/decisions.md
    D18)."""
    s = xp.sort(a)
    n = s.size
    out = []
    for q in qs:
        pos = q / 100.0 * (n - 1)
        i = min(int(pos), n - 1)
        j = min(i + 1, n - 1)
        frac = s.dtype.type(pos - i)
        out.append(s[i] + (s[j] - s[i]) * frac)
    return out


VOLUME_TAIL = 0.01  # % cut at each end of a 3D volume's range (a 2D field's: 0.5)


def display_range(xp, data, tail: float = 0.5):
    """Robust auto range as device scalars: the ``tail``–(100 − ``tail``) percentiles (0.5–99.5 as
    the headless PNG writer), estimated on a strided subsample of ≤ 65 536 points so it stays
    cheap at 2048² and above. Peaks at walls (vorticity at a cylinder) would otherwise wash out the
    whole picture. A 3D volume passes :data:`VOLUME_TAIL`: a body and its wake fill far less than
    0.5 % of a flow's volume, and a 0.5 % cut would paint both in the lowest colour.

    The range is the data's, also for a field that asks for a symmetric one (the packet's
    ``symmetric``): the view makes it symmetric about 0 where its colour map is a diverging one
    (colormaps.view_range), which the user may change without a new packet."""
    stride = 1
    while data.size // (stride * stride) > RANGE_SAMPLE:
        stride *= 2
    sample = data[::stride, ::stride].ravel()
    sample = xp.where(xp.isfinite(sample), sample, xp.float32(0))
    lo, hi = _percentiles(xp, sample, (tail, 100.0 - tail))
    return lo, hi


def mask_copy(xp, mask, axis, index, cache: dict | None):
    """The packet's copy of an obstacle mask (2D or one slice of 3D).

    An engine's mask is static while it is the same array object (engines that move obstacles
    return a new array): the copy made for an earlier packet is handed out again, so the UI sees
    the same object and does not upload the mask texture again. ``cache`` holds the engine's
    array itself, so its id cannot be reused by another mask."""
    if mask is None:
        return None
    entry = None if cache is None else cache.get("mask")
    if entry is not None and entry[0] is mask and entry[1] == (axis, index):
        return entry[2]
    m = mask if axis is None else xp.take(mask, index, axis=axis)
    out = xp.asarray(m, dtype=bool).copy()
    if cache is not None:
        cache["mask"] = (mask, (axis, index), out)
    return out

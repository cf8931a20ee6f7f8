"""Grid2D and Grid3D: snapshot, headless PNG, host copy, .npz arrays and VTK.

A Grid3D is shown as one slice across ``view.slice_axis``; otherwise both grids share the code.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from nagare.engine.fields import Boxes, Grid2D, Grid3D, Particles

from .. import colormaps
from ..packets import SLICE_AXES, VOLUME_TAIL, SnapshotContext, display_range, mask_copy
from .boxes import boxes_copy
from .registry import register
from .vtkio import be_bytes, safe_name

GRIDS = (Grid2D, Grid3D)
# a slice across (nz, ny, nx): the (horizontal, vertical) axes of what is left ((nz, nx) for a y slice)
SLICE_PLANE_AXES = {"z": ("x", "y"), "y": ("x", "z"), "x": ("y", "z")}
SOLID = -3.0e38  # a volume3d cell inside an obstacle (slice planes: grey; volume rendering: below any range)


def _magnitude(xp, v):
    return xp.sqrt(xp.sum(v * v, axis=0))


# ---- snapshot (worker thread, engine stream) ---------------------------------------------------
def snapshot_grid(f: Grid2D | Grid3D, ctx: SnapshotContext):
    xp, view = ctx.xp, ctx.view
    data = f.data
    if f.kind == "vector":
        data = _magnitude(xp, data) if view.component == "magnitude" else data["xyz".index(view.component)]
    if isinstance(f, Grid3D) and view.mode == "3d":
        return snapshot_volume(f, data, ctx)
    slice_index, slice_count, ax = 0, 1, None
    names, origin = ("x", "y"), getattr(f, "origin", (0.0, 0.0))
    if isinstance(f, Grid3D):
        ax = SLICE_AXES[view.slice_axis]
        slice_count = data.shape[ax]
        slice_index = min(slice_count - 1, max(0, int(round(view.slice_pos * (slice_count - 1)))))
        data = xp.take(data, slice_index, axis=ax)
        names = SLICE_PLANE_AXES[view.slice_axis]
        # node samples are values on the points i·spacing, drawn as the cells [i, i+1)·spacing
        origin = (-0.5 * f.spacing,) * 2 if f.centering == "node" else (0.0, 0.0)
    data = xp.ascontiguousarray(data, dtype=xp.float32).copy()
    vmin, vmax = display_range(xp, data)
    pk = ctx.packet("grid3d" if isinstance(f, Grid3D) else "grid2d", data=data,
                    mask=mask_copy(xp, f.mask, ax, slice_index, ctx.cache),
                    vmin=vmin, vmax=vmax, symmetric=f.symmetric, vector=f.kind == "vector", slice_index=slice_index,
                    slice_count=slice_count, spacing=f.spacing, label=f.label, units=f.units,
                    length_units=f.length_units, origin=tuple(float(o) for o in origin), axis_names=names,
                    centering=getattr(f, "centering", "cell"), domain=getattr(f, "domain", None))
    if isinstance(f, Grid2D) and view.particles_overlay:
        tracers = overlay_particles(ctx)
        if tracers is not None:
            pk.overlay = xp.asarray(tracers.positions, dtype=xp.float32).copy()
    return pk


def snapshot_volume(f: Grid3D, data, ctx: SnapshotContext):
    """The whole (nz, ny, nx) scalar as one float32 device copy (kind ``volume3d``): the canvas
    puts it in one 3D texture that the slice planes and the volume rendering both sample, so
    moving a plane needs no new packet."""
    xp = ctx.xp
    data = xp.ascontiguousarray(data, dtype=xp.float32).copy()
    vmin, vmax = display_range(xp, data, VOLUME_TAIL)
    if f.mask is not None:  # solid cells: one texture carries them (the slice shader draws them grey)
        data = xp.where(xp.asarray(f.mask, dtype=bool), xp.float32(SOLID), data)
    pk = ctx.packet("volume3d", data=data, mask=mask_copy(xp, f.mask, None, 0, ctx.cache), vmin=vmin,
                    vmax=vmax, symmetric=f.symmetric, slice_count=data.shape[0], spacing=f.spacing,
                    label=f.label, units=f.units, surfaces=tuple(f.surfaces), centering=f.centering,
                    extent=f.extent, length_units=f.length_units)
    if ctx.view.particles_overlay:  # 3D particles (amr3d's tracers) drawn inside the volume, with trails
        tracers = _first_field(ctx, "overlay3d", _is_overlay3d)
        if tracers is not None:
            pk.overlay = xp.asarray(tracers.positions, dtype=xp.float32).copy()
            if tracers.trails is not None:
                pk.trails = xp.asarray(tracers.trails, dtype=xp.float32).copy()
    if ctx.view.boxes_overlay:
        boxes = overlay_boxes(ctx)
        if boxes is not None:
            pk.boxes, pk.boxes_levels = boxes_copy(xp, boxes, ctx.cache)
    return pk


def _is_overlay(f) -> bool:
    return isinstance(f, Particles) and f.positions.ndim == 2 and f.positions.shape[1] == 2


def _is_overlay3d(f) -> bool:
    return isinstance(f, Particles) and f.positions.ndim == 2 and f.positions.shape[1] == 3


_NONE = object()


def _first_field(ctx: SnapshotContext, key: str, accept) -> object | None:
    return first_field(ctx.engine, ctx.common["field_name"], ctx.cache, key, accept)


def first_field(eng, shown: str, cache: dict | None, key: str, accept) -> object | None:
    """The engine's first field other than ``shown`` that ``accept`` takes, e.g. the tracers
    drawn over a 2D grid or the octree leaves drawn around a volume.

    Found by asking each field by name once per engine (``cache[key]`` keeps the name, or that
    there is none): afterwards a frame asks for the shown field and this one only."""
    known = _NONE if cache is None else cache.get(key, _NONE)
    if known is None:
        return None
    if known is not _NONE:
        f = eng.field(known)
        if accept(f):
            return f
    for name in eng.field_names():
        if name == shown:
            continue
        f = eng.field(name)
        if accept(f):
            if cache is not None:
                cache[key] = name
            return f
    if cache is not None:
        cache[key] = None
    return None


def overlay_particles(ctx: SnapshotContext) -> Particles | None:
    """The engine's first 2D Particles field (tracers), drawn over a 2D grid."""
    return _first_field(ctx, "overlay", _is_overlay)


def tracers_over(engine, shown: str, cache: dict | None = None) -> Particles | None:
    """What a headless frame of the 2D grid ``shown`` draws over it: the field the window's
    overlay shows (:func:`overlay_particles`)."""
    return first_field(engine, shown, cache, "overlay", _is_overlay)


def overlay_boxes(ctx: SnapshotContext) -> Boxes | None:
    """The engine's Boxes field (octree leaves), drawn around a 3D grid."""
    return _first_field(ctx, "boxes", lambda f: isinstance(f, Boxes))


# ---- headless PNG ------------------------------------------------------------------------------
def slice3d(data: np.ndarray, axis: str) -> np.ndarray:
    nz, ny, nx = data.shape[-3:]
    if axis == "z":
        return data[..., nz // 2, :, :]
    if axis == "y":
        return data[..., :, ny // 2, :]
    return data[..., :, :, nx // 2]


def grid_plane(f: Grid2D | Grid3D, backend, view) -> tuple[np.ndarray, np.ndarray | None]:
    """The 2D float64 array a headless frame of ``f`` shows (a 3D grid's middle slice across
    ``view.slice_axis``, a vector's magnitude) and its solid mask."""
    data = backend.asnumpy(f.data)
    mask = None if f.mask is None else backend.asnumpy(f.mask)
    if isinstance(f, Grid3D):
        data = slice3d(data, view.slice_axis)
        mask = None if mask is None else slice3d(mask, view.slice_axis)
    if f.kind == "vector":
        data = np.sqrt((data.astype(np.float64) ** 2).sum(axis=0))
    return data.astype(np.float64), mask


def grid_range(f: Grid2D | Grid3D, data: np.ndarray, view, vrange=None) -> tuple[float, float]:
    """The colour range a headless frame uses: the one asked for, else the preset view's, else the
    robust automatic range of what is shown."""
    rng = vrange or view.range
    if rng is not None:
        return tuple(float(v) for v in rng)
    return colormaps.auto_range(data, colormaps.symmetric_for(view.colormap, f.symmetric))


def png_grid(f: Grid2D | Grid3D, backend, view, vrange) -> np.ndarray:
    data, mask = grid_plane(f, backend, view)
    return colormaps.apply(data, view.colormap, grid_range(f, data, view, vrange), mask=mask)


# ---- exports -----------------------------------------------------------------------------------
def host_copy_grid(f: Grid2D | Grid3D, asnumpy) -> Grid2D | Grid3D:
    return dataclasses.replace(f, data=asnumpy(f.data), mask=None if f.mask is None else asnumpy(f.mask))


def arrays_grid(out: dict, name: str, f: Grid2D | Grid3D, asnumpy) -> None:
    out[name] = asnumpy(f.data)
    if f.mask is not None and "mask" not in out:  # one solid mask per dump: the first grid's
        out["mask"] = asnumpy(f.mask)


def vtk_grid(name: str, f: Grid2D | Grid3D) -> tuple[list[bytes], list[bytes]]:
    data = np.asarray(f.data)
    vec = f.kind == "vector"
    shape = data.shape[1:] if vec else data.shape
    dims = tuple(reversed(shape)) + (1,) * (3 - len(shape))  # VTK: x fastest
    n = int(np.prod(shape))
    head = [b"DATASET STRUCTURED_POINTS", f"DIMENSIONS {dims[0]} {dims[1]} {dims[2]}".encode(),
            b"ORIGIN 0 0 0", f"SPACING {f.spacing} {f.spacing} {f.spacing}".encode(), f"POINT_DATA {n}".encode()]
    body: list[bytes] = []
    if vec:
        comps = [data[i].reshape(-1) for i in range(data.shape[0])]
        while len(comps) < 3:
            comps.append(np.zeros(n, data.dtype))
        head.append(f"VECTORS {safe_name(name)} float".encode())
        body.append(be_bytes(np.stack(comps, axis=1)))
    else:
        head += [f"SCALARS {safe_name(name)} float 1".encode(), b"LOOKUP_TABLE default"]
        body.append(be_bytes(data.reshape(-1)))
    if f.mask is not None:
        body.append(b"\n" + b"SCALARS solid unsigned_char 1\nLOOKUP_TABLE default\n"
                    + np.asarray(f.mask, np.uint8).reshape(-1).tobytes())
    return head, body


for _t in GRIDS:
    register("snapshot", _t, snapshot_grid)
    register("png", _t, png_grid)
    register("host_copy", _t, host_copy_grid)
    register("arrays", _t, arrays_grid)
    register("vtk", _t, vtk_grid)

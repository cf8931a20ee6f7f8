"""Grid2D and Grid3D: snapshot, headless PNG, host copy, .npz arrays and VTK.

A Grid3D is shown as one slice across ``view.slice_axis``; otherwise both grids share the code.
"""
from __future__ import annotations

import numpy as np
from nagare.engine.fields import Grid2D, Grid3D, Particles

from .. import colormaps
from ..packets import SLICE_AXES, SnapshotContext, display_range, mask_copy
from .registry import register
from .vtkio import be_bytes, safe_name

GRIDS = (Grid2D, Grid3D)


def _magnitude(xp, v):
    return xp.sqrt(xp.sum(v * v, axis=0))


# ---- snapshot (worker thread, engine stream) ---------------------------------------------------
def snapshot_grid(f: Grid2D | Grid3D, ctx: SnapshotContext):
    xp, view = ctx.xp, ctx.view
    data = f.data
    if f.kind == "vector":
        data = _magnitude(xp, data) if view.component == "magnitude" else data["xyz".index(view.component)]
    slice_index, slice_count, ax = 0, 1, None
    if isinstance(f, Grid3D):
        ax = SLICE_AXES[view.slice_axis]
        slice_count = data.shape[ax]
        slice_index = min(slice_count - 1, max(0, int(round(view.slice_pos * (slice_count - 1)))))
        data = xp.take(data, slice_index, axis=ax)
    data = xp.ascontiguousarray(data, dtype=xp.float32).copy()
    vmin, vmax = display_range(xp, data, f.symmetric)
    pk = ctx.packet("grid3d" if isinstance(f, Grid3D) else "grid2d", data=data,
                    mask=mask_copy(xp, f.mask, ax, slice_index, ctx.cache),
                    vmin=vmin, vmax=vmax, symmetric=f.symmetric, slice_index=slice_index,
                    slice_count=slice_count, spacing=f.spacing)
    if isinstance(f, Grid2D) and view.particles_overlay:
        tracers = overlay_particles(ctx)
        if tracers is not None:
            pk.overlay = xp.asarray(tracers.positions, dtype=xp.float32).copy()
    return pk


def _is_overlay(f) -> bool:
    return isinstance(f, Particles) and f.positions.ndim == 2 and f.positions.shape[1] == 2


_NONE = object()


def overlay_particles(ctx: SnapshotContext) -> Particles | None:
    """The engine's first 2D Particles field (tracers), drawn over a 2D grid.

    Found by asking each field by name once per engine (``ctx.cache`` keeps the name, or that
    there is none): afterwards a frame asks for the shown field and this one only."""
    eng, cache = ctx.engine, ctx.cache
    known = _NONE if cache is None else cache.get("overlay", _NONE)
    if known is None:
        return None
    if known is not _NONE:
        f = eng.field(known)
        if _is_overlay(f):
            return f
    for name in eng.field_names():
        if name == ctx.common["field_name"]:
            continue
        f = eng.field(name)
        if _is_overlay(f):
            if cache is not None:
                cache["overlay"] = name
            return f
    if cache is not None:
        cache["overlay"] = None
    return None


# ---- headless PNG ------------------------------------------------------------------------------
def slice3d(data: np.ndarray, axis: str) -> np.ndarray:
    nz, ny, nx = data.shape[-3:]
    if axis == "z":
        return data[..., nz // 2, :, :]
    if axis == "y":
        return data[..., :, ny // 2, :]
    return data[..., :, :, nx // 2]


def png_grid(f: Grid2D | Grid3D, backend, view, vrange) -> np.ndarray:
    data = backend.asnumpy(f.data)
    mask = None if f.mask is None else backend.asnumpy(f.mask)
    if isinstance(f, Grid3D):
        data = slice3d(data, view.slice_axis)
        mask = None if mask is None else slice3d(mask, view.slice_axis)
    if f.kind == "vector":
        data = np.sqrt((data.astype(np.float64) ** 2).sum(axis=0))
    return colormaps.apply(data.astype(np.float64), view.colormap, vrange or view.range,
                           symmetric=f.symmetric, mask=mask)


# ---- exports -----------------------------------------------------------------------------------
def host_copy_grid(f: Grid2D | Grid3D, asnumpy) -> Grid2D | Grid3D:
    return type(f)(asnumpy(f.data), f.kind, f.spacing, f.label, f.units,
                   None if f.mask is None else asnumpy(f.mask), f.symmetric)


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

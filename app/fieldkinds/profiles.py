"""Profile1D (values along a line, the 1-D compact presets): snapshot, headless PNG (a line plot
with the exact solution beside it), host copy, .npz arrays and VTK (a polyline with the values).

The profile is small (a few thousand points): the snapshot copies it to the host on the worker
thread and the canvas draws it as a line visual (nagare.app.gui.profile1d)."""
from __future__ import annotations

import dataclasses

import numpy as np
from nagare.engine.fields import Profile1D

from ..packets import SnapshotContext
from .registry import register
from .vtkio import be_bytes

PNG_SIZE = (512, 320)  # width, height of the headless image
_BG, _DATA, _EXACT, _AXIS = (16, 16, 16), (240, 200, 80), (120, 170, 255), (90, 90, 90)


@register("snapshot", Profile1D)
def snapshot_profile(f: Profile1D, ctx: SnapshotContext):
    xp = ctx.xp
    exact = None if f.exact is None else xp.asarray(f.exact).copy()
    return ctx.packet("profile1d", positions=xp.asarray(f.x).copy(), data=xp.asarray(f.data).copy(),
                      payload=exact, label=f.label, units=f.units, length_units=f.length_units)


def profile_range(data, exact=None) -> tuple[float, float]:
    """The vertical range a plot of the profile (and its exact solution) needs, 5 % padded."""
    vals = [np.asarray(data, np.float64)]
    if exact is not None:
        vals.append(np.asarray(exact, np.float64))
    v = np.concatenate([a[np.isfinite(a)] for a in vals]) if vals else np.zeros(1)
    lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
    pad = 0.05 * (hi - lo) or 0.5
    return lo - pad, hi + pad


@register("png", Profile1D)
def png_profile(f: Profile1D, backend, view, vrange) -> np.ndarray:
    x = np.asarray(backend.asnumpy(f.x), np.float64)
    y = np.asarray(backend.asnumpy(f.data), np.float64)
    ex = None if f.exact is None else np.asarray(backend.asnumpy(f.exact), np.float64)
    return profile_image(x, y, ex, vrange if vrange is not None and vrange[0] < vrange[1] else None)


def profile_image(x, y, exact=None, vrange=None, size=PNG_SIZE) -> np.ndarray:
    """A plain raster line plot: the exact solution (blue) under the computed values (amber), a
    zero line (grey) when zero is in range."""
    w, h = size
    img = np.empty((h, w, 3), np.uint8)
    img[...] = _BG
    if len(x) < 2:
        return img
    lo, hi = vrange if vrange is not None else profile_range(y, exact)
    x0, x1 = float(np.min(x)), float(np.max(x))

    def px(xv):
        return np.clip(((xv - x0) / ((x1 - x0) or 1.0) * (w - 1)).round().astype(int), 0, w - 1)

    def py(yv):
        return np.clip(((hi - yv) / ((hi - lo) or 1.0) * (h - 1)).round().astype(int), 0, h - 1)

    if lo < 0 < hi:
        img[py(np.array([0.0]))[0], :] = _AXIS
    for vals, colour in ((exact, _EXACT), (y, _DATA)):
        if vals is None:
            continue
        cols, rows = px(np.asarray(x, np.float64)), py(np.asarray(vals, np.float64))
        for i in range(len(cols) - 1):  # connect consecutive samples column by column
            c0, c1 = cols[i], cols[i + 1]
            r0, r1 = rows[i], rows[i + 1]
            n = max(abs(c1 - c0), abs(r1 - r0), 1)
            t = np.linspace(0.0, 1.0, n + 1)
            img[(r0 + (r1 - r0) * t).round().astype(int), (c0 + (c1 - c0) * t).round().astype(int)] = colour
    return img


@register("host_copy", Profile1D)
def host_copy_profile(f: Profile1D, asnumpy) -> Profile1D:
    exact = None if f.exact is None else asnumpy(f.exact)
    return dataclasses.replace(f, x=asnumpy(f.x), data=asnumpy(f.data), exact=exact)


@register("arrays", Profile1D)
def arrays_profile(out: dict, name: str, f: Profile1D, asnumpy) -> None:
    out[f"{name}/x"], out[name] = asnumpy(f.x), asnumpy(f.data)
    if f.exact is not None:
        out[f"{name}/exact"] = asnumpy(f.exact)


@register("vtk", Profile1D)
def vtk_profile(name: str, f: Profile1D) -> tuple[list[bytes], list[bytes]]:
    """POLYDATA: the points along x (y = z = 0), one polyline, the values (and exact) as point data."""
    x = np.asarray(f.x, np.float64)
    n = len(x)
    pts = np.zeros((n, 3), np.float32)
    pts[:, 0] = x
    header = [b"DATASET POLYDATA", f"POINTS {n} float".encode()]
    body = [be_bytes(pts, ">f4"), f"\nLINES 1 {n + 1}\n".encode(),
            be_bytes(np.concatenate([[n], np.arange(n)]).astype(np.int32), ">i4"),
            f"\nPOINT_DATA {n}\nSCALARS {name} float 1\nLOOKUP_TABLE default\n".encode(),
            be_bytes(np.asarray(f.data, np.float32), ">f4")]
    if f.exact is not None:
        body += [f"\nSCALARS {name}_exact float 1\nLOOKUP_TABLE default\n".encode(),
                 be_bytes(np.asarray(f.exact, np.float32), ">f4")]
    return header, body

"""Profile1D (values along a line, the 1-D compact presets): snapshot, headless PNG (a line plot
with the exact solution beside it), host copy, .npz arrays and VTK (a polyline with the values).

The profile is small (a few thousand points): the snapshot copies it to the host on the worker
thread and the canvas draws it as a line visual (nagare.app.gui.profile1d)."""
from __future__ import annotations

import dataclasses

import numpy as np
from nagare.engine.fields import Profile1D

from ..gui.overlay_style import CANVAS_RGB
from ..packets import SnapshotContext
from .registry import register
from .vtkio import be_bytes

PNG_SIZE = (512, 320)  # width, height of the headless image
# the curves as the window draws them (nagare.app.gui.profile1d uses these): the computed values an
# opaque amber line on top, the exact solution a wider, translucent blue band under it, so where the
# two agree the amber runs inside the band and where they part both show (a wide opaque exact line
# on equal terms hid the computed one wherever they agreed)
DATA_RGB, EXACT_RGB = (240, 200, 80), (120, 170, 255)
DATA_WIDTH, EXACT_WIDTH = 3, 7  # logical px: the band shows 2 px either side of the computed line
EXACT_ALPHA = 0.6
_BG = tuple(int(round(255 * c)) for c in CANVAS_RGB)  # the window's view background
# the band's colour over that background (the window draws it opaque in this colour: its line
# visual's alpha blending is not dependable, and an opaque band under an opaque line looks the same)
EXACT_ON_BG = tuple(int(round(EXACT_ALPHA * c + (1 - EXACT_ALPHA) * g)) for c, g in zip(EXACT_RGB, _BG))
_AXIS = (90, 90, 90)
_DATA, _EXACT = DATA_RGB, EXACT_RGB


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


def profile_image(x, y, exact=None, vrange=None, size=PNG_SIZE, background=_BG) -> np.ndarray:
    """A raster line plot as the window draws it: the exact solution a translucent blue band
    (EXACT_WIDTH px, EXACT_ALPHA) under the computed values, an opaque amber line (DATA_WIDTH px) on
    top; a zero line (grey) when zero is in range. x spans the columns (first to last sample), the
    values ``vrange`` (default :func:`profile_range`) the rows, high at the top."""
    w, h = size
    img = np.empty((h, w, 3), np.uint8)
    img[...] = background
    if len(x) < 2:
        return img
    lo, hi = vrange if vrange is not None else profile_range(y, exact)
    x0, x1 = float(np.min(x)), float(np.max(x))

    def px(xv):
        return (xv - x0) / ((x1 - x0) or 1.0) * (w - 1)

    def py(yv):
        return (hi - yv) / ((hi - lo) or 1.0) * (h - 1)

    if lo < 0 < hi:
        img[int(round(py(0.0))), :] = _AXIS
    cols = px(np.asarray(x, np.float64))
    if exact is not None:
        band = _stroke(cols, py(np.asarray(exact, np.float64)), EXACT_WIDTH, h, w)
        under = img[band].astype(np.float64)
        img[band] = np.rint(EXACT_ALPHA * np.asarray(EXACT_RGB) + (1 - EXACT_ALPHA) * under).astype(np.uint8)
    img[_stroke(cols, py(np.asarray(y, np.float64)), DATA_WIDTH, h, w)] = DATA_RGB
    return img


def _stroke(cols: np.ndarray, rows: np.ndarray, width: int, h: int, w: int) -> np.ndarray:
    """(h, w) bool: the polyline through the points (rows, cols) in pixels, ``width`` px wide (a
    square stamp of that side on every pixel of the one-pixel line); the parts outside the image
    are cut off, a non-finite sample breaks the line."""
    line = np.zeros((h, w), bool)
    far = 4.0 * (h + w)  # a segment is cut to this far outside the image before it is stepped
    for i in range(len(cols) - 1):  # connect consecutive samples pixel by pixel
        c0, c1, r0, r1 = cols[i], cols[i + 1], rows[i], rows[i + 1]
        if not np.isfinite([c0, c1, r0, r1]).all():
            continue
        c0, c1, r0, r1 = (float(np.clip(v, -far, far)) for v in (c0, c1, r0, r1))
        n = int(np.ceil(max(abs(c1 - c0), abs(r1 - r0), 1)))
        t = np.linspace(0.0, 1.0, n + 1)
        rr, cc = (r0 + (r1 - r0) * t).round().astype(int), (c0 + (c1 - c0) * t).round().astype(int)
        keep = (rr >= 0) & (rr < h) & (cc >= 0) & (cc < w)
        line[rr[keep], cc[keep]] = True
    out = np.zeros_like(line)
    first = -(width // 2)
    for dr in range(first, first + width):
        for dc in range(first, first + width):
            out[max(dr, 0):h + min(dr, 0), max(dc, 0):w + min(dc, 0)] |= \
                line[max(-dr, 0):h - max(dr, 0), max(-dc, 0):w - max(dc, 0)]
    return out


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

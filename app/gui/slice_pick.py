"""The geometry of the 3D view's slice planes under the mouse: which plane a pixel shows, where on
it, and how far a drag moves it. NumPy only (no GL, no VisPy), so it is unit-tested without a
display; :mod:`.slice_drag` feeds it the camera's matrix and the mouse.

Conventions
-----------
``M`` is the 4×4 homogeneous map from scene (world) coordinates to canvas pixels in row-vector
form, as VisPy's transforms apply it: ``h = [x, y, z, 1] @ M``, pixel ``= h[:2] / h[3]`` (logical
pixels, y down). For a perspective camera ``h[3]`` is proportional to the depth in front of the eye
(zero in the eye's plane); an orthographic camera has a constant ``h[3]`` and depth in ``h[2]``.

A grid's cell (i, j, k) covers [i, i+1)·h × [j, j+1)·h × [k, k+1)·h (h the spacing); the slice plane
of axis a at fraction f of that axis sits at the centre of cell ``slice_index(f, n_a)`` and spans
the whole box in the other two axes (what :class:`~.view3d.SlicePlanesVisual` draws).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

AXES = ("x", "y", "z")  # scene axes; a (nz, ny, nx) array's axis for scene axis a is 2 - a


def slice_index(frac: float, n: int) -> int:
    """The cell a plane at fraction ``frac`` of the axis shows (the worker's rule for 2D slices)."""
    return min(n - 1, max(0, int(round(frac * (n - 1)))))


def plane_coord(frac: float, n: int, spacing: float) -> float:
    """World coordinate along its axis of the plane at ``frac``: the centre of its cell."""
    return (slice_index(frac, n) + 0.5) * spacing


@dataclass(frozen=True)
class PlaneRect:
    """One slice plane as drawn: normal along scene ``axis`` (0, 1, 2) at ``coord``, spanning the
    box ``lo..hi`` in the two other axes (lo[axis] == hi[axis] == coord)."""

    axis: int
    coord: float
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]

    @property
    def name(self) -> str:
        return AXES[self.axis]


def plane_rects(planes: dict, shape, spacing: float) -> list[PlaneRect]:
    """The drawn rectangles of ``planes`` (axis name → fraction, the planes that are on) of a
    (nz, ny, nx) grid with cell size ``spacing``."""
    nz, ny, nx = (int(s) for s in shape)
    n = (nx, ny, nz)
    ext = np.array(n, np.float64) * spacing
    out = []
    for name, frac in planes.items():
        a = AXES.index(name)
        c = plane_coord(float(frac), n[a], spacing)
        lo, hi = np.zeros(3), ext.copy()
        lo[a] = hi[a] = c
        out.append(PlaneRect(a, c, tuple(lo), tuple(hi)))
    return out


# ---- rays ------------------------------------------------------------------------------------------
def project(M, pts) -> np.ndarray:
    """World points (n, 3) → canvas pixels (n, 2)."""
    p = np.atleast_2d(np.asarray(pts, np.float64))
    h = np.column_stack([p, np.ones(len(p))]) @ np.asarray(M, np.float64)
    return h[:, :2] / h[:, 3:4]


def pixel_ray(M, px) -> tuple[np.ndarray, np.ndarray]:
    """The ray of world points drawn at canvas pixel ``px``: (origin, unit direction).

    Every world point p drawn at (u, v) satisfies two linear equations, ``[p, 1] @ (M[:, 0] - u M[:, 3])
    = 0`` and the same for v: two planes whose intersection is the ray's line. The direction points
    away from the eye (depth grows along it) and, for a perspective camera, the origin is the eye
    itself (the line's point with h[3] = 0), so hits at t > 0 lie in front of the camera. For an
    orthographic camera the origin is the line's point nearest the world origin (t may be negative
    for a visible hit: compare t only between hits)."""
    M = np.asarray(M, np.float64)
    u, v = float(px[0]), float(px[1])
    r1 = M[:, 0] - u * M[:, 3]
    r2 = M[:, 1] - v * M[:, 3]
    d = np.cross(r1[:3], r2[:3])
    norm = np.linalg.norm(d)
    if norm == 0:
        raise ValueError("degenerate camera matrix: no ray through this pixel")
    d /= norm
    w = M[:3, 3]
    perspective = abs(w @ d) > 1e-12 * max(1.0, np.abs(M[:3, :]).max())
    if perspective:
        # the eye: r1·p = -r1[3], r2·p = -r2[3], w·p = -M[3, 3]
        origin = np.linalg.solve(np.stack([r1[:3], r2[:3], w]), -np.array([r1[3], r2[3], M[3, 3]]))
        if w @ d < 0:
            d = -d  # h[3] (depth in front of the eye) grows along the ray
    else:
        A = np.stack([r1[:3], r2[:3]])
        origin = np.linalg.lstsq(A, -np.array([r1[3], r2[3]]), rcond=None)[0]
        if M[:3, 2] @ d < 0:
            d = -d
    return origin, d


def ray_plane(origin, direction, axis: int, coord: float):
    """(t, point) where the ray meets the infinite plane ``x[axis] = coord``, or None if parallel."""
    o, d = np.asarray(origin, np.float64), np.asarray(direction, np.float64)
    if abs(d[axis]) < 1e-12:
        return None
    t = (coord - o[axis]) / d[axis]
    p = o + t * d
    p[axis] = coord  # exact on the plane (no round-off across a cell boundary)
    return float(t), p


def hit_rect(origin, direction, rect: PlaneRect, front_only: bool = True):
    """(t, point) where the ray meets ``rect`` inside its edges, else None (behind the eye: None)."""
    hit = ray_plane(origin, direction, rect.axis, rect.coord)
    if hit is None:
        return None
    t, p = hit
    if front_only and t < 0:
        return None
    lo, hi = np.asarray(rect.lo), np.asarray(rect.hi)
    tol = 1e-9 * max(1.0, float(np.abs(hi).max()))
    if np.all(p >= lo - tol) and np.all(p <= hi + tol):
        return t, p
    return None


def pick_plane(origin, direction, rects, front_only: bool = True):
    """The nearest plane the ray hits: (rect, t, point), or None when it misses them all."""
    best = None
    for r in rects:
        hit = hit_rect(origin, direction, r, front_only)
        if hit is not None and (best is None or hit[0] < best[1]):
            best = (r, hit[0], hit[1])
    return best


# ---- dragging ----------------------------------------------------------------------------------------
def normal_screen_dir(M, point, axis: int) -> np.ndarray:
    """Pixels per world unit moved along scene ``axis`` at ``point``: the screen direction (and
    length) of the plane normal there (the exact derivative of the projection)."""
    M = np.asarray(M, np.float64)
    h = np.append(np.asarray(point, np.float64), 1.0) @ M
    return (M[axis, :2] * h[3] - h[:2] * M[axis, 3]) / h[3] ** 2


def drag_distance(screen_dir, dpx) -> float:
    """World distance along the normal for a mouse motion ``dpx`` (pixels): the motion projected
    onto the normal's screen direction, divided by that direction's pixels per world unit (moving
    the mouse along the image of a displacement δ moves the plane by δ). A normal that points at
    the eye has no screen direction: 0."""
    s = np.asarray(screen_dir, np.float64)
    s2 = float(s @ s)
    if s2 < 1e-18:
        return 0.0
    return float(np.asarray(dpx, np.float64) @ s) / s2


def drag_fraction(frac0: float, distance: float, n: int, spacing: float) -> float:
    """The plane's new fraction after moving it by ``distance`` world units from ``frac0``
    (clamped to the box: 0 … 1; a plane of an axis one cell thick stays at 0)."""
    if n <= 1:
        return 0.0
    return float(np.clip(frac0 + distance / (spacing * (n - 1)), 0.0, 1.0))

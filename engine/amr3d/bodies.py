"""Solid bodies for amr3d flows: where the solid is, how far the surface is, and what to draw.

Every body works in level-0 lattice units (a root block is m − 1 of them; the fields' world units).
The solver needs three things of a body, all host NumPy, evaluated once per tree:
- ``inside(x)``: (N, 3) positions → (N,) bool, the solid nodes (bounce-back is half-way between a
  fluid node and a solid one);
- ``distance(x)``: signed distance to the surface (negative inside), used only to choose which
  leaves to refine (a band around the surface), so an estimate that never exceeds the true
  distance by more than a few percent is enough;
- ``bounds()``: (lo, hi) of an axis-aligned box that holds the body (skips leaves far away).
For the app and exports: ``surface()`` → (vertices (V, 3) float32, faces (F, 3) int32), and for the
drag coefficient ``frontal_area(axis)`` (the area projected on the plane normal to the flow).
"""
from __future__ import annotations

import math
import os
import warnings
from abc import ABC, abstractmethod

import numpy as np

from ..errors import PresetError


class Body(ABC):
    name = "body"

    @abstractmethod
    def inside(self, x: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def distance(self, x: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def bounds(self) -> tuple[np.ndarray, np.ndarray]: ...

    @abstractmethod
    def surface(self) -> tuple[np.ndarray, np.ndarray]: ...

    @abstractmethod
    def frontal_area(self, axis: int) -> float: ...

    @property
    @abstractmethod
    def reference_length(self) -> float: ...

    def wall_fraction(self, fluid: np.ndarray, solid: np.ndarray, iters: int = 20) -> np.ndarray:
        """For links from fluid points to solid points ((N, 3) each), the fraction Δ ∈ (0, 1] of the
        link where the surface lies (interpolated bounce-back): bisection on ``inside`` (2^−20 of
        a link), which any body has; bodies with a closed form override it."""
        a = np.zeros(len(fluid))
        b = np.ones(len(fluid))
        d = np.asarray(solid, np.float64) - np.asarray(fluid, np.float64)
        for _ in range(iters):
            mid = 0.5 * (a + b)
            inn = self.inside(fluid + mid[:, None] * d)
            b = np.where(inn, mid, b)
            a = np.where(inn, a, mid)
        return np.clip(0.5 * (a + b), 1e-6, 1.0)


class Sphere(Body):
    name = "sphere"

    def __init__(self, center, diameter: float):
        if diameter <= 0:
            raise ValueError(f"sphere: diameter must be positive, not {diameter}")
        self.center = np.asarray(center, np.float64)
        self.radius = 0.5 * float(diameter)

    def inside(self, x):
        d = np.asarray(x, np.float64) - self.center
        return np.einsum("...i,...i->...", d, d) < self.radius * self.radius

    def distance(self, x):
        return np.linalg.norm(np.asarray(x, np.float64) - self.center, axis=-1) - self.radius

    def bounds(self):
        return self.center - self.radius, self.center + self.radius

    def surface(self, n: int = 24):
        """A UV sphere: n latitude bands, 2n longitudes; the bands at the poles are fans (one
        triangle per longitude: the row at a pole is one point, so the quad's other half would be
        degenerate)."""
        th = np.linspace(0.0, math.pi, n + 1)
        ph = np.linspace(0.0, 2 * math.pi, 2 * n, endpoint=False)
        t, p = np.meshgrid(th, ph, indexing="ij")
        v = np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], axis=-1).reshape(-1, 3)
        v = (self.center + self.radius * v).astype(np.float32)
        faces = []
        m = 2 * n
        for i in range(n):
            for j in range(m):
                a, b = i * m + j, i * m + (j + 1) % m
                c, d = a + m, b + m
                if i > 0:  # row i is the north pole when i = 0
                    faces.append((a, c, b))
                if i < n - 1:  # row i + 1 is the south pole when i = n − 1
                    faces.append((b, c, d))
        return v, np.asarray(faces, np.int32)

    def frontal_area(self, axis: int) -> float:
        return math.pi * self.radius ** 2

    def wall_fraction(self, fluid, solid, iters: int = 20):
        """Closed form: the smaller root t of |fluid + t (solid − fluid) − centre| = r."""
        p = np.asarray(fluid, np.float64) - self.center
        d = np.asarray(solid, np.float64) - np.asarray(fluid, np.float64)
        a = np.einsum("ij,ij->i", d, d)
        b = 2.0 * np.einsum("ij,ij->i", p, d)
        c = np.einsum("ij,ij->i", p, p) - self.radius ** 2
        t = (-b - np.sqrt(np.maximum(b * b - 4 * a * c, 0.0))) / (2 * a)
        return np.clip(t, 1e-6, 1.0)

    @property
    def reference_length(self) -> float:
        return 2.0 * self.radius


# ---- shared helpers -------------------------------------------------------------------------------------

def _size(kind: str, name: str, value) -> float:
    """A positive, finite length, or a one-line refusal naming the body kind and the value."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{kind}: {name} must be a positive number, not {value!r}") from None
    if not (math.isfinite(v) and v > 0.0):
        raise ValueError(f"{kind}: {name} must be positive, not {value}")
    return v


def _center(kind: str, center) -> np.ndarray:
    c = np.asarray(center, np.float64).reshape(-1)
    if c.shape != (3,) or not np.isfinite(c).all():
        raise ValueError(f"{kind}: center must be three finite numbers, not {center!r}")
    return c


def _axis(kind: str, axis) -> int:
    if axis in ("x", "y", "z"):
        return "xyz".index(axis)
    if axis in (0, 1, 2):
        return int(axis)
    raise ValueError(f"{kind}: axis must be 'x', 'y' or 'z', not {axis!r}")


def _flat(x) -> tuple[np.ndarray, tuple]:
    """(…, 3) positions as (N, 3) float64, and the leading shape to give results back in."""
    x = np.asarray(x, np.float64)
    return x.reshape(-1, 3), x.shape[:-1]


def _loft(rings: list[np.ndarray]):
    """A closed mesh through rings of K points each, every ring counter-clockwise seen from the side
    the rings advance towards; neighbouring rings are joined by quads and both end rings are closed by
    a fan to their centroid. Faces point outwards (positive volume)."""
    k = len(rings[0])
    v = np.concatenate([np.asarray(r, np.float64) for r in rings]
                       + [rings[0].mean(axis=0, keepdims=True), rings[-1].mean(axis=0, keepdims=True)])
    j = np.arange(k)
    jn = (j + 1) % k
    faces = []
    for i in range(len(rings) - 1):
        a, b, c, d = i * k + j, i * k + jn, (i + 1) * k + j, (i + 1) * k + jn
        faces += [np.column_stack([a, b, d]), np.column_stack([a, d, c])]
    c0, c1 = len(rings) * k, len(rings) * k + 1
    last = (len(rings) - 1) * k
    faces += [np.column_stack([np.full(k, c0), jn, j]), np.column_stack([np.full(k, c1), last + j, last + jn])]
    return v.astype(np.float32), np.concatenate(faces).astype(np.int32)


# ---- cylinder and box -----------------------------------------------------------------------------------

class Cylinder(Body):
    """A finite circular cylinder with flat caps, its axis along x, y or z; exact signed distance."""
    name = "cylinder"

    def __init__(self, center, diameter: float, length: float, axis="z"):
        self.center = _center("cylinder", center)
        self.radius = 0.5 * _size("cylinder", "diameter", diameter)
        self.length = _size("cylinder", "length", length)
        self.axis = _axis("cylinder", axis)

    def _q(self, x):
        """(ρ − r, |h| − L/2): in (radius, axial) coordinates the capped cylinder is a 2D box."""
        p, shape = _flat(x)
        d = p - self.center
        h = np.abs(d[:, self.axis])
        d[:, self.axis] = 0.0
        return np.sqrt(np.einsum("ij,ij->i", d, d)) - self.radius, h - 0.5 * self.length, shape

    def inside(self, x):
        qr, qh, shape = self._q(x)
        return ((qr < 0.0) & (qh < 0.0)).reshape(shape)

    def distance(self, x):
        qr, qh, shape = self._q(x)
        out = np.hypot(np.maximum(qr, 0.0), np.maximum(qh, 0.0)) + np.minimum(np.maximum(qr, qh), 0.0)
        return out.reshape(shape)

    def bounds(self):
        half = np.full(3, self.radius)
        half[self.axis] = 0.5 * self.length
        return self.center - half, self.center + half

    def surface(self, n: int = 48):
        """n segments round: two rings and two capping fans."""
        t = np.linspace(0.0, 2 * math.pi, n, endpoint=False)
        e1, e2 = (self.axis + 1) % 3, (self.axis + 2) % 3   # (e1, e2, axis) is right-handed
        rings = []
        for h in (-0.5 * self.length, 0.5 * self.length):
            r = np.zeros((n, 3))
            r[:, e1], r[:, e2], r[:, self.axis] = self.radius * np.cos(t), self.radius * np.sin(t), h
            rings.append(self.center + r)
        return _loft(rings)

    def frontal_area(self, axis: int) -> float:
        if axis == self.axis:
            return math.pi * self.radius ** 2
        return 2.0 * self.radius * self.length

    @property
    def reference_length(self) -> float:
        return 2.0 * self.radius


class Box(Body):
    """An axis-aligned box of edge lengths ``size`` (x, y, z) about ``center``; exact signed distance."""
    name = "box"

    def __init__(self, center, size):
        self.center = _center("box", center)
        s = np.asarray(size, np.float64).reshape(-1)
        if s.shape != (3,):
            raise ValueError(f"box: size must be three edge lengths, not {size!r}")
        if not (np.isfinite(s).all() and (s > 0).all()):
            raise ValueError(f"box: size must be positive on every axis, not {[float(v) for v in s]}")
        self.size = s

    def inside(self, x):
        p, shape = _flat(x)
        return (np.abs(p - self.center) < 0.5 * self.size).all(axis=1).reshape(shape)

    def distance(self, x):
        p, shape = _flat(x)
        q = np.abs(p - self.center) - 0.5 * self.size
        out = np.linalg.norm(np.maximum(q, 0.0), axis=1) + np.minimum(q.max(axis=1), 0.0)
        return out.reshape(shape)

    def bounds(self):
        return self.center - 0.5 * self.size, self.center + 0.5 * self.size

    def surface(self):
        lo, hi = self.bounds()
        yz = np.array([[lo[1], lo[2]], [hi[1], lo[2]], [hi[1], hi[2]], [lo[1], hi[2]]])
        return _loft([np.column_stack([np.full(4, x), yz]) for x in (lo[0], hi[0])])

    def frontal_area(self, axis: int) -> float:
        return float(np.prod(np.delete(self.size, axis)))

    @property
    def reference_length(self) -> float:
        return float(self.size.max())


# ---- the Ahmed body ---------------------------------------------------------------------------------------

AHMED_CD_25 = 0.285
"""Drag coefficient of the 25° Ahmed body: Ahmed, Ramm & Faltin (1984), "Some salient features of the
time-averaged ground vehicle wake", SAE Technical Paper 840300; measured at 60 m/s (Re ≈ 4.3·10⁶ on the
length) with the body on its stilts 50 mm above the ground, both of which ``Ahmed`` leaves out."""

# Full-scale dimensions (mm), Ahmed et al. (1984).
_AH_L, _AH_W, _AH_H, _AH_R = 1044.0, 389.0, 288.0, 100.0
_AH_SLANT, _AH_PHI = 222.0, math.radians(25.0)


def _segment_dist(px, py, ax, ay, bx, by):
    ex, ey = bx - ax, by - ay
    t = np.clip(((px - ax) * ex + (py - ay) * ey) / (ex * ex + ey * ey), 0.0, 1.0)
    return np.hypot(px - ax - t * ex, py - ay - t * ey)


def _convex_polygon_dist(px, py, verts):
    """Distance to a convex polygon (vertices counter-clockwise), zero inside."""
    d = np.full(px.shape, np.inf)
    inside = np.ones(px.shape, bool)
    for (ax, ay), (bx, by) in zip(verts, verts[1:] + verts[:1]):
        d = np.minimum(d, _segment_dist(px, py, ax, ay, bx, by))
        inside &= (bx - ax) * (py - ay) - (by - ay) * (px - ax) >= 0.0
    return np.where(inside, 0.0, d)


def _quarter_disc_dist(u, a, r):
    """Distance to {u ≥ 0, a ≥ 0, u² + a² ≤ r²}, zero inside."""
    return np.where((u >= 0) & (a >= 0), np.maximum(np.hypot(u, a) - r, 0.0),
                    np.where(a >= 0, np.hypot(u, np.maximum(a - r, 0.0)),
                             np.where(u >= 0, np.hypot(a, np.maximum(u - r, 0.0)), np.hypot(u, a))))


def _crease_dist(u, a, b, r, samples: int = 17, iters: int = 64):
    """Distance to the arc (r cos θ, r sin θ, r sin θ), θ ∈ [0, π/2], where two fillets meet.
    The arc is a quarter ellipse whose evolute stays inside it, so from outside the squared distance
    along it has a single minimum: the best of a few samples brackets it, and a golden-section search
    narrows the bracket to rounding."""
    def f(th):
        return (u - r * np.cos(th)) ** 2 + (a - r * np.sin(th)) ** 2 + (b - r * np.sin(th)) ** 2

    grid = np.linspace(0.0, 0.5 * math.pi, samples)
    vals = np.stack([f(np.full(u.shape, t)) for t in grid])
    k = vals.argmin(axis=0)
    lo = np.maximum(grid[k] - grid[1], 0.0)
    hi = np.minimum(grid[k] + grid[1], 0.5 * math.pi)
    g = 0.5 * (math.sqrt(5.0) - 1.0)
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(iters):
        left = f1 < f2                       # the minimum lies in [lo, x2]
        hi = np.where(left, x2, hi)
        lo = np.where(left, lo, x1)
        n1 = np.where(left, hi - g * (hi - lo), x2)
        n2 = np.where(left, x1, lo + g * (hi - lo))
        fn = f(np.where(left, n1, n2))
        f1, f2 = np.where(left, fn, f2), np.where(left, f1, fn)
        x1, x2 = n1, n2
    return np.sqrt(np.minimum(np.minimum(f1, f2), vals.min(axis=0)))


class Ahmed(Body):
    """The Ahmed body (Ahmed, Ramm & Faltin 1984, SAE 840300) with a 25° rear slant, scaled to total
    length ``length``; ``center`` is the centre of its bounding box.

    Full scale (mm): length 1044, width 389, height 288; the four front edges rounded with radius 100;
    the rear slant 222 long (measured along the slant, so it spans 201.2 in x and drops 93.8) at 25° to
    the roof. Axes: x along the length (flow from −x to +x, the rounded nose at low x), y across the
    width, z up. The four stilts (30 mm diameter) and the 50 mm ground clearance of the experiment are
    not part of this body: place a floor in the domain if the ground matters.

    The rounded front is the box with its four front edges filleted (radius 100 in y and in z) and the
    long edges left sharp, which is exactly the intersection of two extrusions: the side profile (a
    rectangle with its two front corners rounded, and the slant cut off) extruded along y, and the plan
    (a rectangle with its two front corners rounded) extruded along z. Where two fillets meet, the
    corner is therefore a mitre (a crease along a quarter ellipse), not a sphere; every cross-section
    x = const is a rectangle, and the projection along x is the full width × height.

    ``inside`` is exact. ``distance`` is the exact signed distance (to rounding): inside, the nearer of
    the two extrusions' boundaries; outside (the body is convex) the nearest of the convex pieces the
    body is the union of, with the mitre creases measured by a 1D minimisation along the crease.
    """
    name = "ahmed"

    def __init__(self, center, length: float):
        self.center = _center("ahmed", center)
        self.length = _size("ahmed", "length", length)
        self.scale = self.length / _AH_L           # level-0 lattice units per mm
        self._xs = _AH_L - _AH_SLANT * math.cos(_AH_PHI)   # where the roof ends and the slant begins
        self._zr = _AH_H - _AH_SLANT * math.sin(_AH_PHI)   # height of the base (rear face)

    # Local frame, mm: x ∈ [0, L] from the nose, y ∈ [−W/2, W/2], z ∈ [0, H] from the underside.
    def _local(self, x):
        p, shape = _flat(x)
        q = (p - self.center) / self.scale
        return q[:, 0] + 0.5 * _AH_L, q[:, 1], q[:, 2] + 0.5 * _AH_H, shape

    @staticmethod
    def _reach(X):
        """How far the fillets reach out of the flat nose at x: 0 at the nose, R once past the fillets."""
        u = np.clip(_AH_R - X, 0.0, _AH_R)
        return np.sqrt(np.maximum(_AH_R * _AH_R - u * u, 0.0))

    def _slant(self, X, Z):
        """Signed distance to the slant's plane, positive above it."""
        return (X - self._xs) * math.sin(_AH_PHI) + (Z - _AH_H) * math.cos(_AH_PHI)

    def _inside_local(self, X, Y, Z):
        rho = self._reach(X)
        return ((X > 0.0) & (X < _AH_L) & (np.abs(Y) < 0.5 * _AH_W - _AH_R + rho)
                & (Z > _AH_R - rho) & (Z < _AH_H - _AH_R + rho) & (self._slant(X, Z) < 0.0))

    def inside(self, x):
        X, Y, Z, shape = self._local(x)
        return self._inside_local(X, Y, Z).reshape(shape)

    def _depth(self, X, Y, Z):
        """Distance to the surface from inside: the complement of an intersection is the union of the
        complements, so it is the nearer of the two profiles' boundaries; for a convex profile that is
        the nearest of its supporting lines (a rounded corner's only where the point faces its arc)."""
        L, W, H, R = _AH_L, _AH_W, _AH_H, _AH_R
        ay = np.abs(Y) - (0.5 * W - R)
        d = np.minimum.reduce([X, L - X, Z, H - Z, -self._slant(X, Z), 0.5 * W - np.abs(Y)])
        front = X < R
        for ok, w in ((ay > 0.0, ay), (Z > H - R, Z - (H - R)), (Z < R, R - Z)):
            d = np.where(front & ok, np.minimum(d, R - np.hypot(R - X, w)), d)
        return d

    def _gap(self, X, Y, Z):
        """Distance to the body from outside: the body is the union of convex pieces (the straight part
        behind the fillets, and in front of it a flat slab, two edge fillets and the mitred corner), so
        the distance is the smallest of theirs. The nose is symmetric in y and in z, so points are folded
        onto its +y, +z quarter first."""
        L, W, H, R = _AH_L, _AH_W, _AH_H, _AH_R
        Yf = np.abs(Y)
        # Behind the fillets: the side profile (a convex pentagon) times [−W/2, W/2].
        dq = _convex_polygon_dist(X, Z, [(R, 0.0), (L, 0.0), (L, self._zr), (self._xs, H), (R, H)])
        d = np.hypot(dq, np.maximum(Yf - 0.5 * W, 0.0))
        # The nose; u: back from x = R, a and b: out of the flat front face's edges.
        u = R - X
        a = Yf - (0.5 * W - R)
        b = np.abs(Z - 0.5 * H) - (0.5 * H - R)
        ap, bp = np.maximum(a, 0.0), np.maximum(b, 0.0)
        d = np.minimum(d, np.sqrt(np.maximum(np.abs(X - 0.5 * R) - 0.5 * R, 0.0) ** 2 + ap * ap + bp * bp))
        d = np.minimum(d, np.hypot(_quarter_disc_dist(u, a, R), bp))    # the fillet of the side edge
        d = np.minimum(d, np.hypot(_quarter_disc_dist(u, b, R), ap))    # the fillet of the top edge
        # The mitred corner: each fillet's surface up to the crease, where the nearest point is the
        # radial projection, then the crease itself.
        for s, t in ((a, b), (b, a)):
            r = np.hypot(u, s)
            with np.errstate(invalid="ignore", divide="ignore"):
                ok = (u >= 0.0) & (s >= 0.0) & (t >= 0.0) & (t <= s * R / r)
            d = np.where(ok, np.minimum(d, np.abs(r - R)), d)
        near = np.hypot(np.hypot(np.clip(u, 0.0, R) - u, np.clip(a, 0.0, R) - a), np.clip(b, 0.0, R) - b) < d
        if near.any():
            d[near] = np.minimum(d[near], _crease_dist(u[near], a[near], b[near], R))
        return d

    def distance(self, x):
        X, Y, Z, shape = self._local(x)
        ins = self._inside_local(X, Y, Z)
        d = np.empty(X.shape)
        d[ins] = -self._depth(X[ins], Y[ins], Z[ins])
        out = ~ins
        d[out] = self._gap(X[out], Y[out], Z[out])
        return (d * self.scale).reshape(shape)

    def bounds(self):
        half = 0.5 * self.scale * np.array([_AH_L, _AH_W, _AH_H])
        return self.center - half, self.center + half

    def surface(self, n: int = 24):
        """Rectangular cross-sections (see the class docstring) at n + 1 stations through the fillets,
        then where the slant starts and at the base: vertices on the surface, the fillets as chords."""
        L, W, H, R = _AH_L, _AH_W, _AH_H, _AH_R
        xs = np.concatenate([R - R * np.cos(np.linspace(0.0, 0.5 * math.pi, n + 1)), [self._xs, L]])
        rings = []
        for X in xs:
            rho = float(self._reach(np.asarray(X)))
            hw, z0 = 0.5 * W - R + rho, R - rho
            z1 = min(H - R + rho, H - max(X - self._xs, 0.0) * math.tan(_AH_PHI))
            loc = np.array([[X, -hw, z0], [X, hw, z0], [X, hw, z1], [X, -hw, z1]])
            rings.append(self.center + self.scale * (loc - [0.5 * L, 0.0, 0.5 * H]))
        return _loft(rings)

    def frontal_area(self, axis: int) -> float:
        """Exact projected areas. Along x the long edges are sharp, so the fillets cost no area: width ×
        height. Along y the side profile: less two rounded corners and the slant's triangle; along z the
        plan, less two rounded corners."""
        L, W, H, R = _AH_L, _AH_W, _AH_H, _AH_R
        corner = (1.0 - 0.25 * math.pi) * R * R
        if axis == 0:
            a = W * H
        elif axis == 1:
            a = L * H - 2.0 * corner - 0.5 * _AH_SLANT ** 2 * math.sin(_AH_PHI) * math.cos(_AH_PHI)
        else:
            a = L * W - 2.0 * corner
        return a * self.scale ** 2

    @property
    def reference_length(self) -> float:
        return self.length


# ---- bodies from a mesh file -------------------------------------------------------------------------------

_PAIRS = 1 << 16
"""Point-triangle pairs per chunk. The winding number and the distance hold about 20 float64 arrays of
that many entries (about 10 MB), far under any memory limit, and small enough to stay in cache, which
makes them faster than large chunks (about 1.5 times, measured on 2000-triangle meshes)."""

MERGE_RANGE_EXP = 20
"""A mesh whose largest coordinate reaches 2^this is scaled by a power of two before trimesh merges its
vertices (which rounds coordinates × 1e8 to int64, overflowing beyond ~1e10)."""

RASTER = 512
"""Cells per side of the grid frontal_area rasterises a mesh's projection on."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _read_mesh(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Vertices and faces of a closed, consistently oriented mesh file, faces turned outwards; or a
    one-line ValueError that names the file and what is wrong with it."""
    where = f"stl body: {path}"
    if not path:
        raise ValueError("stl body: no mesh file given (body.path is empty)")
    if not os.path.isfile(path):
        what = ("is a folder, not a mesh file" if os.path.isdir(path) else
                "is not a regular file (a pipe or a device?)" if os.path.exists(path) else "does not exist")
        raise ValueError(f"{where} {what}")
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(84)
    except OSError as e:
        raise ValueError(f"{where} cannot be read ({e.strerror or _one_line(e)})") from None
    if size == 0:
        raise ValueError(f"{where} is empty (0 bytes)")
    if path.lower().endswith(".stl"):
        # trimesh reads anything that is not STL as an empty mesh, so say "not STL" before it does.
        binary = size >= 84 and size == 84 + 50 * int.from_bytes(head[80:84], "little")
        if not binary and not head.lstrip()[:5].lower() == b"solid":
            raise ValueError(f"{where} is not an STL file (not binary STL, whose size is 84 + 50 × its triangle "
                             f"count, nor ASCII STL, which starts with 'solid')")
    import trimesh  # here, not at the top: it costs a third of a second to import

    # trimesh warns (RuntimeWarning, numpy floating-point warnings) on odd files — e.g. float32
    # coordinates near overflow, which its vertex merge rounds to int64 — and the user must see
    # at most the one line we say: every trimesh call runs with warnings silenced, and what
    # matters is checked here.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            raw = trimesh.load(path, force="mesh", process=False)
        except Exception as e:  # any reader failure is the file's fault, said in one line
            raise ValueError(f"{where} is not a mesh trimesh can read ({_one_line(e)})") from None
        if not isinstance(raw, trimesh.Trimesh):
            raise ValueError(f"{where} is not a triangle mesh (trimesh read a {type(raw).__name__})")
        v = np.asarray(raw.vertices, np.float64)
        if not np.isfinite(v).all():
            raise ValueError(f"{where} has vertices that are not finite numbers")
        # trimesh merges coincident vertices by rounding coordinates to 1e-8 units as int64: beyond
        # ~1e10 units that overflows (and would merge distinct vertices), so the merge runs on the
        # coordinates scaled by a power of two (exact), scaled back after.
        big = float(np.abs(v).max()) if v.size else 0.0
        shift = max(0, math.frexp(big)[1] - MERGE_RANGE_EXP)
        try:
            mesh = trimesh.Trimesh(np.ldexp(v, -shift), np.asarray(raw.faces), process=True)
        except Exception as e:
            raise ValueError(f"{where} is not a mesh trimesh can read ({_one_line(e)})") from None
        v = np.ldexp(np.asarray(mesh.vertices, np.float64), shift)
        f = np.asarray(mesh.faces, np.int64).reshape(-1, 3)
    # trimesh merged coincident vertices: a triangle that lost a corner to that has no area and no edge
    # of the closed surface.
    f = f[(f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 2] != f[:, 0])]
    if len(f) == 0:
        raise ValueError(f"{where} is an empty mesh (no faces)")
    nv = len(v)
    e = f[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2)
    s = np.sort(e, axis=1)
    _, count = np.unique(s[:, 0] * nv + s[:, 1], return_counts=True)
    if (count == 1).any():
        raise ValueError(f"{where} is not watertight ({int((count == 1).sum())} open edges): "
                         "close it in a mesh editor")
    if (count > 2).any():
        raise ValueError(f"{where} is not watertight ({int((count > 2).sum())} edges shared by more than two "
                         "faces): make it a closed manifold in a mesh editor")
    _, count = np.unique(e[:, 0] * nv + e[:, 1], return_counts=True)
    if (count > 1).any():
        raise ValueError(f"{where} has inconsistently oriented faces ({int((count > 1).sum())} edges run the "
                         "same way in two faces): recompute its normals in a mesh editor")
    t = v[f]
    if np.einsum("ij,ij->", t[:, 0], np.cross(t[:, 1], t[:, 2])) < 0.0:
        f = f[:, ::-1].copy()    # turned inside out: the winding number would be −1 inside
    return v, f


class StlBody(Body):
    """A closed triangle mesh from a file (STL, or any format trimesh reads), scaled uniformly so its
    largest bounding-box extent is ``length`` and moved so its bounding-box centre is ``center``.

    ``inside`` is the generalised winding number (Jacobson, Kavan & Sorkine-Hornung 2013: the solid
    angles of all triangles summed, over 4π) above 1/2, in NumPy, so no ray-casting package is needed;
    ``distance`` is the exact distance to the nearest triangle, negative where ``inside``. Both sum over
    all triangles in chunks (``_PAIRS``); ``inside`` does so only for points near the surface (see there).
    """
    name = "stl"
    LEAF = 32   # points below which a box near the surface is summed directly rather than split

    def __init__(self, path, center, length: float):
        self.path = os.fspath(path)
        self.center = _center("stl", center)
        self.length = _size("stl", "length", length)
        v, f = _read_mesh(self.path)
        lo, hi = v.min(axis=0), v.max(axis=0)
        ext = hi - lo
        if not ext.min() > 0.0:
            axes = ", ".join("xyz"[i] for i in np.flatnonzero(ext <= 0.0))
            raise ValueError(f"stl body: {self.path} has zero extent along {axes}: it encloses no volume")
        self.scale = self.length / float(ext.max())
        self.vertices = (v - 0.5 * (lo + hi)) * self.scale + self.center
        self.faces = f
        self._tri = self.vertices[f]                 # (F, 3 corners, 3)
        self._lo, self._hi = self.vertices.min(axis=0), self.vertices.max(axis=0)

    def _chunks(self, n: int):
        tc = min(len(self._tri), _PAIRS)
        pc = max(1, _PAIRS // tc)
        for i in range(0, n, pc):
            for j in range(0, len(self._tri), tc):
                yield slice(i, min(i + pc, n)), slice(j, j + tc)

    def winding(self, x) -> np.ndarray:
        """The generalised winding number: 1 inside a closed outward mesh, 0 outside. Each triangle's
        solid angle is 2 atan2(A·(B×C), |A||B||C| + (A·B)|C| + (B·C)|A| + (C·A)|B|) (Van Oosterom &
        Strackee 1983) with A, B, C its corners seen from the point; the work is on (points, triangles)
        arrays one coordinate at a time, which NumPy runs about 1.5 times as fast as (…, 3) stacks."""
        p, shape = _flat(x)
        w = np.zeros(len(p))
        t = self._tri
        for ps, ts in self._chunks(len(p)):
            q = p[ps]
            (ax, ay, az), (bx, by, bz), (cx, cy, cz) = (
                [t[ts, k, i][None, :] - q[:, i, None] for i in range(3)] for k in range(3))
            la = np.sqrt(ax * ax + ay * ay + az * az)
            lb = np.sqrt(bx * bx + by * by + bz * bz)
            lc = np.sqrt(cx * cx + cy * cy + cz * cz)
            det = ax * (by * cz - bz * cy) + ay * (bz * cx - bx * cz) + az * (bx * cy - by * cx)
            den = (la * lb * lc + (ax * bx + ay * by + az * bz) * lc
                   + (bx * cx + by * cy + bz * cz) * la + (cx * ax + cy * ay + cz * az) * lb)
            w[ps] += np.arctan2(det, den).sum(axis=1)      # half of each triangle's solid angle
        return (w / (2.0 * math.pi)).reshape(shape)

    def inside(self, x):
        """Winding number above 1/2. The winding number is constant on any box that no triangle meets,
        so the points are sorted into an octree of boxes (split to at most ``LEAF`` points or until no
        triangle's bounding box meets them) and a box clear of all triangles is settled by one of its
        points; only points near the surface pay the full sum over the triangles."""
        p, shape = _flat(x)
        out = np.zeros(len(p), bool)
        ids = np.flatnonzero(((p >= self._lo) & (p <= self._hi)).all(axis=1))
        stack = [ids] if ids.size else []
        direct, clear = [], []
        tlo, thi = self._tri.min(axis=1), self._tri.max(axis=1)
        while stack:
            ids = stack.pop()
            q = p[ids]
            lo, hi = q.min(axis=0), q.max(axis=0)
            if not ((tlo <= hi).all(axis=1) & (thi >= lo).all(axis=1)).any():
                clear.append(ids)
                continue
            if len(ids) <= self.LEAF or (lo == hi).all():
                direct.append(ids)
                continue
            code = (q > 0.5 * (lo + hi)) @ np.array([1, 2, 4])
            stack += [ids[code == c] for c in np.unique(code)]
        if direct:
            ids = np.concatenate(direct)
            out[ids] = self.winding(p[ids]) > 0.5
        if clear:
            first = np.array([c[0] for c in clear])
            for c, w in zip(clear, self.winding(p[first]) > 0.5):
                out[c] = w
        return out.reshape(shape)

    def unsigned_distance(self, x) -> np.ndarray:
        """Distance to the nearest triangle: to its plane where the foot falls inside it, otherwise to
        the nearest of its edges (coordinates one at a time, as in ``winding``)."""
        p, shape = _flat(x)
        t = self._tri
        ab, ac = t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]
        d00, d01, d11 = (np.einsum("ij,ij->i", s, r) for s, r in ((ab, ab), (ab, ac), (ac, ac)))
        n = np.cross(ab, ac)
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / (d00 * d11 - d01 * d01)
            n = n / np.linalg.norm(n, axis=1, keepdims=True)   # a sliver's is NaN: its plane never counts
        edges = [(t[:, k], t[:, (k + 1) % 3] - t[:, k]) for k in range(3)]
        tiny = np.finfo(np.float64).tiny
        inv_len = [1.0 / np.maximum(np.einsum("ij,ij->i", e, e), tiny) for _, e in edges]
        best = np.full(len(p), np.inf)
        for ps, ts in self._chunks(len(p)):
            q = p[ps]
            o = [t[ts, 0, i][None, :] for i in range(3)]
            px, py, pz = (q[:, i, None] - o[i] for i in range(3))
            d20 = px * ab[ts, 0] + py * ab[ts, 1] + pz * ab[ts, 2]
            d21 = px * ac[ts, 0] + py * ac[ts, 1] + pz * ac[ts, 2]
            with np.errstate(invalid="ignore"):
                v = (d11[ts] * d20 - d01[ts] * d21) * inv[ts]
                w = (d00[ts] * d21 - d01[ts] * d20) * inv[ts]
                foot = (v >= 0.0) & (w >= 0.0) & (v + w <= 1.0)
            h = px * n[ts, 0] + py * n[ts, 1] + pz * n[ts, 2]
            d2 = np.where(foot, h * h, np.inf)
            for (e0, e), il in zip(edges, inv_len):
                rx, ry, rz = (q[:, i, None] - e0[ts, i][None, :] for i in range(3))
                ex, ey, ez = e[ts, 0], e[ts, 1], e[ts, 2]
                s = np.clip((rx * ex + ry * ey + rz * ez) * il[ts], 0.0, 1.0)
                rx -= s * ex
                ry -= s * ey
                rz -= s * ez
                d2 = np.minimum(d2, rx * rx + ry * ry + rz * rz)
            best[ps] = np.minimum(best[ps], np.sqrt(d2.min(axis=1)))
        return best.reshape(shape)

    def distance(self, x):
        d = self.unsigned_distance(x)
        return np.where(self.inside(x), -d, d)

    def bounds(self):
        return self._lo.copy(), self._hi.copy()

    def surface(self):
        return self.vertices.astype(np.float32), self.faces.astype(np.int32)

    def frontal_area(self, axis: int) -> float:
        """The area of the projection on the plane normal to ``axis``: the triangles are rasterised on a
        RASTER × RASTER grid over the projected bounding box, a cell counting once (the union) if its
        centre falls in any triangle, row by row so the cost follows the triangles' size."""
        i, j = [k for k in range(3) if k != axis]
        P = self._tri[:, :, [i, j]]
        lo, hi = P.reshape(-1, 2).min(axis=0), P.reshape(-1, 2).max(axis=0)
        n = RASTER
        h = (hi - lo) / n
        X, Y = (P[..., 0] - lo[0]) / h[0] - 0.5, (P[..., 1] - lo[1]) / h[1] - 0.5   # in cell-centre units
        r0 = np.clip(np.ceil(Y.min(axis=1)), 0, n - 1).astype(np.int64)
        r1 = np.clip(np.floor(Y.max(axis=1)), 0, n - 1).astype(np.int64)
        rows_per = np.maximum(r1 - r0 + 1, 0)
        diff = np.zeros((n, n + 1), np.int64)
        start = np.concatenate([[0], np.cumsum(rows_per)])
        k0 = 0
        while k0 < len(P):   # triangles in groups of about _PAIRS (triangle, row) pairs
            k1 = int(np.searchsorted(start, start[k0] + _PAIRS, side="right")) - 1
            k1 = min(max(k1, k0 + 1), len(P))
            cnt = rows_per[k0:k1]
            tri_of = np.repeat(np.arange(k0, k1), cnt)
            row = r0[tri_of] + np.arange(len(tri_of)) - np.repeat(start[k0:k1] - start[k0], cnt)
            yc = row.astype(np.float64)
            xl, xr = np.full(len(row), np.inf), np.full(len(row), -np.inf)
            for e in range(3):
                xa, ya = X[tri_of, e], Y[tri_of, e]
                xb, yb = X[tri_of, (e + 1) % 3], Y[tri_of, (e + 1) % 3]
                cross = (np.minimum(ya, yb) <= yc) & (yc <= np.maximum(ya, yb))
                with np.errstate(divide="ignore", invalid="ignore"):
                    t = np.where(ya != yb, (yc - ya) / (yb - ya), 0.0)
                for xe in (xa + t * (xb - xa), np.where(ya == yb, xb, xa + t * (xb - xa))):
                    xl = np.where(cross, np.minimum(xl, xe), xl)
                    xr = np.where(cross, np.maximum(xr, xe), xr)
            c0 = np.clip(np.ceil(xl), 0, n).astype(np.int64)
            c1 = np.clip(np.floor(xr), -1, n - 1).astype(np.int64)
            ok = np.isfinite(xl) & (c1 >= c0)
            np.add.at(diff, (row[ok], c0[ok]), 1)
            np.add.at(diff, (row[ok], c1[ok] + 1), -1)
            k0 = k1
        covered = np.cumsum(diff[:, :n], axis=1) > 0
        return float(covered.sum() * h[0] * h[1])

    @property
    def reference_length(self) -> float:
        return self.length


def reference_length(spec) -> float:
    """The length Re and C_d refer to, from the preset's body entry alone (no file is read)."""
    if spec.kind in ("sphere", "cylinder"):
        return float(spec.diameter)
    if spec.kind == "box":
        return float(max(spec.size))
    return float(spec.length)


def make(spec, base_dir: str = ".") -> Body:
    """The body a preset's [[body]] entry describes (config.Body); a relative stl path is relative to
    ``base_dir`` (the preset's folder)."""
    if spec.kind == "sphere":
        return Sphere(spec.center, spec.diameter)
    if spec.kind == "cylinder":
        return Cylinder(spec.center, spec.diameter, spec.length, spec.axis)
    if spec.kind == "box":
        return Box(spec.center, spec.size)
    if spec.kind == "ahmed":
        return Ahmed(spec.center, spec.length)
    if spec.kind == "stl":
        path = spec.path
        if path and not os.path.isabs(path):
            path = os.path.join(base_dir, path)
        return StlBody(path, spec.center, spec.length)
    raise ValueError(f"body kind {spec.kind!r} is unknown (sphere, cylinder, box, ahmed, stl)")


# ---- resolution: a body must be bigger than the lattice it sits on -----------------------------------------

MIN_SPACINGS = 4
"""Lattice spacings of its level a body must span across its thinnest extent. The validated sphere
presets (amr3d-sphere-re20/-re100, docs/amr3d-flows.md "Validation") put 32 spacings across the
diameter and their NumPy previews 8; 16 already matches the uniform lattice's C_d to 0.03 %. At 4 the
half-way bounce-back wall is still a closed shell of solid nodes with at least three across every
axis, so the force has a body to act on (a coarse one: a preview, not a figure to quote). Below that
the solid is a handful of nodes whose shape is the lattice's, not the body's, and a body thinner than
one spacing may hold no node at all: a drag coefficient of such a body is noise divided by a tiny
frontal area (a sphere of 0.4 spacings reported C_d = 26)."""


def spacing(level: int) -> float:
    """The lattice spacing of a level in level-0 units (docs/amr3d.md: h_l = 2^−l)."""
    return 2.0 ** -int(level)


def _finest_level(spec) -> int:
    """The finest level a [[body]] may sit on: config.Body.level's own bound."""
    info = type(spec).model_fields.get("level") if hasattr(type(spec), "model_fields") else None
    for meta in getattr(info, "metadata", ()):
        if getattr(meta, "le", None) is not None:
            return int(meta.le)
    return 4


def _size_key(spec, thinnest_axis: int) -> tuple[str, object, float]:
    """The preset key that sets a body's thinnest extent, its value, and that value as one number
    (what scales with the body's size)."""
    if spec.kind == "sphere":
        return "diameter", spec.diameter, float(spec.diameter)
    if spec.kind == "cylinder":
        if spec.diameter <= spec.length:
            return "diameter", spec.diameter, float(spec.diameter)
        return "length", spec.length, float(spec.length)
    if spec.kind == "box":
        return "size", list(spec.size), float(spec.size[thinnest_axis])
    return "length", spec.length, float(spec.length)   # ahmed, stl: scaled by their length


def check_resolved(made: list[Body], specs, source: str) -> None:
    """Refuse, in one line, the first body whose thinnest bounding-box extent spans fewer than
    MIN_SPACINGS spacings of its level (``spec.level``); the line names the preset key, the body's
    size, the spacing at its level and the smallest level that resolves it (or, where no allowed
    level does, how large the body must be)."""
    for k, (body, spec) in enumerate(zip(made, specs)):
        lo, hi = body.bounds()
        extent = np.asarray(hi, np.float64) - np.asarray(lo, np.float64)
        axis = int(np.argmin(extent))
        thin = float(extent[axis])
        h = spacing(spec.level)
        # relative slack: a mesh scaled to `length` may come out a few ulp short of it
        if thin >= MIN_SPACINGS * h * (1.0 - 1e-9):
            continue
        name, given, value = _size_key(spec, axis)
        finest = _finest_level(spec)
        need = next((lv for lv in range(finest + 1) if thin >= MIN_SPACINGS * spacing(lv) * (1.0 - 1e-9)), None)
        size_txt = (f"the {spec.kind} is {thin:.4g} level-0 units across at its thinnest ({'xyz'[axis]}), "
                    f"{thin / h:.3g} spacings of its level {spec.level} (spacing {h:g})")
        rule = f"a body must span at least {MIN_SPACINGS} spacings of its level (docs/amr3d-flows.md)"
        if need is not None:
            fix = (f"body[{k}].level = {need} resolves it (spacing {spacing(need):g}, "
                   f"{thin / spacing(need):.3g} spacings)")
        else:
            least = MIN_SPACINGS * spacing(finest) / thin * value
            unit = 10.0 ** (math.floor(math.log10(least)) - 3)
            least = math.ceil(least / unit * (1.0 - 1e-12)) * unit   # 4 digits, rounded up: enough, not short
            fix = (f"no level up to {finest} resolves it (spacing {spacing(finest):g} there): make "
                   f"body[{k}].{name} at least {least:.4g}" + (f" along {'xyz'[axis]}" if spec.kind == "box" else ""))
        raise PresetError(source, f"body[{k}].{name}", given, f"{size_txt}; {rule}: {fix}")

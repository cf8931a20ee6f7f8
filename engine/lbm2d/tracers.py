"""Passive tracers (as in P0's application): continuous release, bilinear velocity, midpoint rule.

Written against ``xp`` so the same code runs on CuPy for millions of tracers. Positions are in
lattice units, (x, y) with node centres at integer coordinates.

Release and recycling: the tracers form a ring. Every update the next ``rate·every`` tracers of
the ring are (re)released at the sources, so the oldest go first and the ring turns over every
count/(rate·every) updates; a tracer that leaves the box or enters a solid node is released again
at once. Until its first release a tracer is parked at a source with age −1 (age is exposed, so a
renderer can hide parked ones). Source positions come from a low-discrepancy (golden-ratio)
sequence, which needs no random-number state and gives the same pattern on every backend.
"""
from __future__ import annotations

import numpy as np

from ..cuda import KernelSpec, template

GOLDEN = 0.6180339887498949
TRACER_SOURCE = "cuda/lbm2d/tracers.cu"
# The tracer update and the one-pass moments kernel (lbm_velocity, engine/lbm2d/outputs.py), each
# module with every instance it is used with.
TRACER_SPEC = KernelSpec(TRACER_SOURCE, ("tracer_advance<float>", "tracer_advance<double>"))
VELOCITY_SPEC = KernelSpec(TRACER_SOURCE, ("lbm_velocity<float, float>", "lbm_velocity<double, double>",
                                           "lbm_velocity<float, unsigned short>"))


class Tracers:
    def __init__(self, xp, cfg, shape, solid_mask):
        self.xp = xp
        self.cfg = cfg
        self.ny, self.nx = shape
        self.n = int(cfg.count)
        self.solid = solid_mask  # (ny, nx) bool on the backend
        self.cursor = 0
        self.released = 0  # how many releases so far (drives the golden-ratio sequence)
        self.pos = xp.zeros((self.n, 2), dtype=xp.float32)
        self.age = xp.full(self.n, -1.0, dtype=xp.float32)
        if self.n:
            self.pos[...] = self._sources(xp.arange(self.n, dtype=xp.float64))
        self.released = self.n

    # ---- sources ----
    def _sources(self, k):
        """Release positions for release numbers k (float64 array)."""
        xp, c = self.xp, self.cfg
        frac = (k * GOLDEN) % 1.0
        if c.release == "line":
            x0, y0, x1, y1 = c.line
            x = (x0 + (x1 - x0) * frac) * (self.nx - 1)
            y = (y0 + (y1 - y0) * frac) * (self.ny - 1)
        else:
            pts = xp.asarray(np.asarray(c.points, dtype=np.float64))
            idx = (k % len(c.points)).astype(xp.int64)
            # A small jitter disc around each point so the streak has width.
            ang = 2 * np.pi * ((k * GOLDEN * GOLDEN) % 1.0)
            x = pts[idx, 0] * (self.nx - 1) + 0.5 * frac * xp.cos(ang)
            y = pts[idx, 1] * (self.ny - 1) + 0.5 * frac * xp.sin(ang)
        return xp.stack([x, y], axis=1).astype(xp.float32)

    # ---- advection ----
    def velocity(self, ux, uy, p):
        """Bilinear interpolation of (ux, uy) at positions p (n, 2), clamped to the box."""
        xp = self.xp
        x = xp.clip(p[:, 0], 0, self.nx - 1.000001)
        y = xp.clip(p[:, 1], 0, self.ny - 1.000001)
        i0 = xp.floor(x).astype(xp.int64)
        j0 = xp.floor(y).astype(xp.int64)
        tx = (x - i0).astype(ux.dtype)
        ty = (y - j0).astype(ux.dtype)
        i1, j1 = i0 + 1, j0 + 1

        def interp(a):
            return ((1 - tx) * (1 - ty) * a[j0, i0] + tx * (1 - ty) * a[j0, i1]
                    + (1 - tx) * ty * a[j1, i0] + tx * ty * a[j1, i1])

        return xp.stack([interp(ux), interp(uy)], axis=1).astype(xp.float32)

    def advance(self, ux, uy, dt: float):
        """Midpoint (2nd-order Runge–Kutta) step of length dt in the frozen field (ux, uy)."""
        if self.n == 0:
            return
        if self.xp.__name__ == "cupy":
            self._advance_cuda(ux, uy, dt)
            return
        self._advance_array(ux, uy, dt)

    def _advance_cuda(self, ux, uy, dt: float):
        """One launch of tracer_advance (shaders/cuda/lbm2d/tracers.cu), the same operations as
        _advance_array (which stays the NumPy path and the reference it is tested against)."""
        xp, c = self.xp, self.cfg
        u = "float" if ux.dtype == np.float32 else "double"
        kern = TRACER_SPEC.function(template("tracer_advance", u))
        if not hasattr(self, "_points"):
            self._points = xp.asarray(np.asarray(c.points, dtype=np.float64).reshape(-1))
            self._solid_flat = xp.ascontiguousarray(self.solid)
        m = min(self.n, int(self.cfg.rate * dt))
        line = c.release == "line"
        x0, y0, x1, y1 = (float(v) for v in c.line)
        kern(((self.n + 255) // 256,), (256,),
             (self.pos, self.age, xp.ascontiguousarray(ux), xp.ascontiguousarray(uy), self._solid_flat,
              np.int32(self.n), np.int32(self.nx), np.int32(self.ny), np.float32(dt), np.float64(self.released),
              np.int32(self.cursor), np.int32(m), np.int32(line), np.float64(x0), np.float64(y0), np.float64(x1),
              np.float64(y1), self._points, np.int32(len(c.points))))
        self.cursor = (self.cursor + m) % self.n
        self.released += self.n

    def _advance_array(self, ux, uy, dt: float):
        xp = self.xp
        active = self.age >= 0
        mid = self.pos + 0.5 * dt * self.velocity(ux, uy, self.pos)
        new = self.pos + dt * self.velocity(ux, uy, mid)
        self.pos[...] = xp.where(active[:, None], new, self.pos)
        self.age += xp.float32(dt) * active
        # Recycle: tracers that left the box or sit in a solid node.
        x, y = self.pos[:, 0], self.pos[:, 1]
        out = (x < 0) | (x > self.nx - 1) | (y < 0) | (y > self.ny - 1)
        xi = xp.clip(xp.rint(x), 0, self.nx - 1).astype(xp.int64)
        yi = xp.clip(xp.rint(y), 0, self.ny - 1).astype(xp.int64)
        dead = active & (out | self.solid[yi, xi])
        # Release numbers need no host sync: update u releases tracer j as number u·n + j.
        k = self.released + xp.arange(self.n, dtype=xp.float64)
        src = self._sources(k)
        self.pos[...] = xp.where(dead[:, None], src, self.pos)
        self.age[...] = xp.where(dead, xp.float32(0), self.age)
        # Continuous release of the next tracers of the ring (the oldest).
        m = min(self.n, int(self.cfg.rate * dt))
        ring = (self.cursor + xp.arange(m)) % self.n
        self.cursor = (self.cursor + m) % self.n
        self.pos[ring] = src[ring]
        self.age[ring] = 0.0
        self.released += self.n

"""Passive tracers (as in P0's application): continuous release, bilinear velocity, midpoint rule.

Written against ``xp`` so the same code runs on CuPy for millions of tracers. Positions are in
lattice units, (x, y) with node centres at integer coordinates.

Release and recycling: the tracers form a ring. Every update the next ``rate·every`` tracers of
the ring are (re)released at the sources, so the oldest go first and the ring turns over every
count/(rate·every) updates; a tracer that leaves the box or enters a solid node is released again
at once. Until its first release a tracer is parked at a source with age −1 (age is exposed, so a
renderer can hide parked ones). Source positions come from a low-discrepancy (golden-ratio)
sequence, which needs no random-number state and gives the same pattern on every backend.

Time: one tracer update (Δt = ``every``) follows every ``every``-th LBM step and uses the velocity
of the state that step produced, whatever the batch (the engine cuts batches there, or the CUDA
stepper calls :meth:`Tracers.after_step` after each step, inside its graph), so ``step(N)``
equals N × ``step(1)`` bit for bit. Everything that decides the future is state: positions, ages,
the ring's (cursor, release count) and the steps since the last update (``clock``).

The ring counters live on the backend in two slots used in turn (``ring[slot]`` is current): an
update reads one slot and writes the next values to the other, so on the GPU the counters never
travel to the host and a captured CUDA graph replays the updates with the right counters.
"""
from __future__ import annotations

import numpy as np

from ..cuda import KernelSpec, template

GOLDEN = 0.6180339887498949
TRACER_SOURCE = "cuda/lbm2d/tracers.cu"
# The tracer update and the one-pass moments kernel (lbm_velocity, engine/lbm2d/outputs.py), each
# module with every instance it is used with.
TRACER_SPEC = KernelSpec(TRACER_SOURCE, ("tracer_advance<float>", "tracer_advance<double>",
                                         "tracer_advance_lattice<float, float>",
                                         "tracer_advance_lattice<double, double>",
                                         "tracer_advance_lattice<float, unsigned short>"))
VELOCITY_SPEC = KernelSpec(TRACER_SOURCE, ("lbm_velocity<float, float>", "lbm_velocity<double, double>",
                                           "lbm_velocity<float, unsigned short>",
                                           "lbm_vorticity<float, float>", "lbm_vorticity<double, double>",
                                           "lbm_vorticity<float, unsigned short>"))


class Tracers:
    def __init__(self, xp, cfg, shape, solid_mask):
        self.xp = xp
        self.cfg = cfg
        self.ny, self.nx = shape
        self.n = int(cfg.count)
        self.solid = solid_mask  # (ny, nx) bool on the backend
        self.every = int(cfg.every)
        self.m = min(self.n, int(cfg.rate * self.every))  # ring slots (re)released per update
        self.clock = 0  # LBM steps since the last tracer update (0 ≤ clock < every)
        # (cursor, released) in two slots used in turn; released: how many releases so far (drives
        # the golden-ratio sequence), the first n being the initial parking positions.
        self.ring = xp.zeros((2, 2), dtype=xp.int64)
        self.slot = 0
        self.pos = xp.zeros((self.n, 2), dtype=xp.float32)
        self.age = xp.full(self.n, -1.0, dtype=xp.float32)
        if self.n:
            self.pos[...] = self._sources(xp.arange(self.n, dtype=xp.float64))
        self.ring[0, 1] = self.n
        self.lattice = None  # (mask, fx, fy, dtype) for updates that read the populations (bind_lattice)

    # ---- ring counters (host reads sync on the GPU: checkpoints and the array path only) ----
    @property
    def cursor(self) -> int:
        return int(self.ring[self.slot, 0])

    @cursor.setter
    def cursor(self, value: int) -> None:
        self.ring[self.slot, 0] = int(value)

    @property
    def released(self) -> int:
        return int(self.ring[self.slot, 1])

    @released.setter
    def released(self, value: int) -> None:
        self.ring[self.slot, 1] = int(value)

    def _ring_args(self):
        """(ring_in, ring_out) for an update, and turn the slots."""
        ring_in, ring_out = self.ring[self.slot], self.ring[1 - self.slot]
        self.slot = 1 - self.slot
        return ring_in, ring_out

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
        x = xp.clip(p[:, 0], 0, self.nx - 1)
        y = xp.clip(p[:, 1], 0, self.ny - 1)
        # the cell's lower corner; on the last node line the last cell's, at t = 1 (a clamp just below
        # n − 1 is n − 1 itself in float32, and its i0 + 1 would read past the row)
        i0 = xp.minimum(xp.floor(x).astype(xp.int64), self.nx - 2)
        j0 = xp.minimum(xp.floor(y).astype(xp.int64), self.ny - 2)
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

    def _constants(self):
        """The kernels' constant arrays on the device (uploaded once, never under graph capture)."""
        if getattr(self, "_const", None) is None:
            xp = self.xp
            self._const = (xp.ascontiguousarray(self.solid),
                           xp.asarray(np.asarray(self.cfg.points, dtype=np.float64).reshape(-1)))
        return self._const

    def _kernel_tail(self, dt: float, m: int):
        """The kernels' arguments after the velocity source: n, nx, ny, dt, ring, m, release."""
        c = self.cfg
        solid, points = self._constants()
        x0, y0, x1, y1 = (float(v) for v in c.line)
        ring_in, ring_out = self._ring_args()
        return (solid, np.int32(self.n), np.int32(self.nx), np.int32(self.ny), np.float32(dt), ring_in,
                ring_out, np.int32(m), np.int32(c.release == "line"), np.float64(x0), np.float64(y0),
                np.float64(x1), np.float64(y1), points, np.int32(len(c.points)))

    def _advance_cuda(self, ux, uy, dt: float):
        """One launch of tracer_advance (shaders/cuda/lbm2d/tracers.cu), the same operations as
        _advance_array (which stays the NumPy path and the reference it is tested against)."""
        xp = self.xp
        u = "float" if ux.dtype == np.float32 else "double"
        kern = TRACER_SPEC.function(template("tracer_advance", u))
        m = min(self.n, int(self.cfg.rate * dt))
        kern(((self.n + 255) // 256,), (256,),
             (self.pos, self.age, xp.ascontiguousarray(ux), xp.ascontiguousarray(uy), *self._kernel_tail(dt, m)))

    # ---- updates inside the stepper's loop (CUDA, two lattices) ----
    def bind_lattice(self, mask, force, dtype) -> None:
        """What :meth:`after_step` needs to read the velocity from the populations: the node mask
        (uint8, the lattice's), the body force (Fx, Fy) and the arithmetic dtype."""
        self.lattice = (mask, float(force[0]), float(force[1]), np.dtype(dtype))
        self._lattice_kernels = {}

    def prepare(self, stored_dtype) -> None:
        """Compile/load the lattice update for a stored lattice of ``stored_dtype`` and upload the
        constant arrays now (the stepper's construction), not while a CUDA graph is captured."""
        self._constants()
        self._lattice_kernel(np.dtype(stored_dtype))

    def _lattice_kernel(self, stored: np.dtype):
        kern = self._lattice_kernels.get(stored)
        if kern is None:
            t = "float" if self.lattice[3] == np.float32 else "double"
            s = "unsigned short" if stored == np.float16 else t
            kern = self._lattice_kernels[stored] = TRACER_SPEC.function(template("tracer_advance_lattice", t, s))
        return kern

    def after_step(self, f) -> None:
        """One LBM step is done and ``f`` (the stored two-lattice state, canonical or fp16-shifted)
        is its result: every ``every``-th call, one tracer update reading the velocity from ``f``
        (tracer_advance_lattice). No host sync and no changing scalar argument: capturable."""
        self.clock += 1
        if self.clock < self.every:
            return
        self.clock = 0
        if self.n == 0:
            return
        mask, fx, fy, dtype = self.lattice
        T = dtype.type
        self._lattice_kernel(f.dtype)(((self.n + 255) // 256,), (256,),
                                      (self.pos, self.age, f, mask, T(fx), T(fy),
                                       *self._kernel_tail(float(self.every), self.m)))

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
        # Update u releases tracer j as number u·n + j.
        cursor, released = self.cursor, self.released
        k = released + xp.arange(self.n, dtype=xp.float64)
        src = self._sources(k)
        self.pos[...] = xp.where(dead[:, None], src, self.pos)
        self.age[...] = xp.where(dead, xp.float32(0), self.age)
        # Continuous release of the next tracers of the ring (the oldest).
        m = min(self.n, int(self.cfg.rate * dt))
        ring = (cursor + xp.arange(m)) % self.n
        self.pos[ring] = src[ring]
        self.age[ring] = 0.0
        _, ring_out = self._ring_args()
        ring_out[0], ring_out[1] = (cursor + m) % self.n, released + self.n

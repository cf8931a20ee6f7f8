"""The toy line split into sub-domains by engine/decomp, declared here and nowhere else: each slab
stores its owned points and one ghost point per side (the update reads both neighbours; the line
wraps), halos exchanged after every step."""
from __future__ import annotations

import numpy as np
from nagare.engine.decomp import Adapter, HaloCopy, split_rows
from nagare.engine.decomp.common import Slab, ghost_copies
from nagare.engine.decomp.transport import transport_bytes


class ToySlabs(Adapter):
    def __init__(self, engine, selection: dict, transport):
        self.engine, self.transport = engine, transport
        self.n = n = engine.preset.grid.n
        axis = engine.preset.decomp_split
        rows = split_rows(n, engine.parts, axis.halo, key=f"grid.{axis.key}", unit=axis.unit)
        h = axis.halo
        self.slabs = [Slab(i, lo, hi, lo - h, hi + h, h) for i, (lo, hi) in enumerate(rows)]
        self.copies = [HaloCopy(src, dst, (ss,), (ds,)) for src, ss, dst, ds in ghost_copies(self.slabs, n)]
        self.u: list = []

    def scatter(self):
        e, tr = self.engine, self.transport
        tr.forget_bindings()
        self.u = [tr.put(s.index, e.xp.take(e.u, e.xp.asarray(np.arange(s.a, s.b) % self.n))) for s in self.slabs]

    def gather(self):
        e, tr = self.engine, self.transport
        for s, u in zip(self.slabs, self.u):
            e.u[s.lo:s.hi] = tr.get(s.index, u[s.owned])

    def advance(self, n: int, overlap: bool) -> float:
        e = self.engine
        r = e.preset.physics.r
        for _ in range(n):
            with e.timer.phase("step", steps=1):
                for p, u in enumerate(self.u):
                    new = u.copy()  # the ghost points are refilled by the exchange
                    new[1:-1] = u[1:-1] + r * (u[:-2] - 2 * u[1:-1] + u[2:])  # the whole line's operations
                    self.u[p] = new
            with e.timer.phase("exchange", steps=1):
                self.exchange_once()
        return n * e.dt

    def exchange_once(self):
        self.transport.exchange(self.u, self.copies)

    def describe(self):
        return {"rows": [(s.lo, s.hi) for s in self.slabs], "halo": self.slabs[0].h,
                "exchange_bytes_per_step": transport_bytes(self.u, self.copies)}

"""lbm2d's adapter to engine/decomp: D2Q9 on N slabs of rows (the slowest axis, y).

Halo: one row of populations per side. Pull streaming reads the nine neighbours, so one step of
an owned row needs the rows just above and below it; the halo rows are exchanged after every step.
Every slab always carries both ghost rows and takes them from the owner of row (g mod ny): the
reference step wraps periodically in y, and walls, the lid, the obstacle, inlet and outlet are
node types in the mask, so each slab gets the mask of its rows (ghosts included) and runs the
family's own stepper (steppers.py: reference, two-kernel, fused, with native or fp16 storage, two
lattices or AA) on a slab-sized preset. Whatever a stepper computes on a ghost row (it wraps
within the slab there) is thrown away by the next exchange; the owned rows see exactly the
neighbours, masks and operations of the whole grid, so they come out bit for bit the same.

AA streaming (fused kernel, CUDA) stores populations at the neighbour a node streams to in every
other step (layout Q: A[i][x + c_i] = f_i(x)). After such a step the slots of an owned edge row
that the node across the slab edge wrote — the directions with c_y pointing into the slab — are
in the neighbour's ghost row: the exchange after a P→Q step copies exactly those directions from
the neighbour's ghost row into the owned edge row (nothing else is needed: the Q→P step reads only
a node's own slots and the ghost slots the node itself wrote); after a Q→P step it is the plain
ghost-row refresh. Written against the layouts of lbm2d.cu (test_lbm2d_aa_layout.py); the
CUDA path is checked by the ``gpu`` tests only.

Tracers stay on the gathered global field: each tracer substep (every ``tracers.every`` steps)
gathers the owned rows into the engine's global state and moves the tracers with its velocity,
exactly as the undecomposed array path does (so NumPy results are bit for bit the same).

Overlap: the owned rows the neighbours read (the first and last owned row) are updated first, their
halo copies start, then the interior rows are updated beside them. On NumPy the reference step of
the boundary rows runs on the rows and their neighbours into a temporary; on CUDA every slab's
stepper runs the ROWS instances of lbm2d.cu (``row_range``), whose launches take a row range, and
``update`` / ``finish`` split its step (two lattices: into fn, then the swap; AA: in place, then the
layout flip). Every node's update reads only its own and the neighbouring rows, so the parts give
the same bits as the whole. The copies in flight touch only what the interior update neither
reads nor writes: two lattices — the target's edge rows (read) and ghost rows (written); AA after
a P→Q step — the neighbour's ghost-row slots written by its edge row (read) and, in my first/last
owned row, the slots only a ghost-row node writes (written; ghost rows are not updated under
overlap); after a Q→P step — whole ghost rows (written) from the neighbour's edge rows (read).
"""
from __future__ import annotations

import numpy as np

from .. import registry
from ..decomp.adapter import Adapter
from ..decomp.common import GpuTimes, OnPart, Slab, ghost_copies, overlap_regions
from ..decomp.config import split_rows
from ..decomp.transport import HaloCopy, transport_bytes
from ..errors import VariantUnavailable
from . import outputs, reference
from .d2q9 import CY, Q
from .launch import node_classes, segment_classes, single_step
from .steppers import ReferenceStepper, SingleStepStepper, stepper_class
from .storage import LatticeState, Storage
from .variants import TEMPORAL_BLOCKING

H = 1  # ghost rows per side: one step of pull streaming (the preset's decomp_split.halo)
INTO_FROM_BELOW = tuple(int(i) for i in range(Q) if CY[i] == 1)  # c_y = +1: written from the row below
INTO_FROM_ABOVE = tuple(int(i) for i in range(Q) if CY[i] == -1)


class _SlabContext:
    """What a stepper reads from its engine (steppers.py), for one slab's rows."""

    def __init__(self, engine, selection, slab: Slab, transport):
        p = engine.preset
        self.index = slab.index
        self.backend, self.dtype = engine.backend, engine.dtype
        self.xp = transport.xp(slab.index)
        self.stream = transport.stream(slab.index)
        self.row_range = True  # the CUDA steppers build the ROWS kernels (overlap updates rows in parts)
        ny = p.shape[0]
        self.rows = np.arange(slab.a, slab.b) % ny
        self.mask_host = np.ascontiguousarray(engine.mask_host[self.rows])
        grid = p.grid.model_copy(update={"ny": slab.length, "n": None})
        self.preset = p.model_copy(update={"grid": grid})
        self._cc = engine.compute_capability()
        self.tracers = None  # tracers stay on the gathered global field
        xp = self.xp
        with transport.device(slab.index):
            self.mask = xp.asarray(self.mask_host)
            self.node_class = node_classes(xp, self.mask)
            self.node_segment = segment_classes(xp, self.node_class)
            self.lat = self.lattice(self.mask_host)
            self.storage = Storage.of(selection, xp, self.dtype, self.mask_host)

    def lattice(self, mask_host):
        p = self.preset
        return reference.build_lattice(self.xp, mask_host, p.tau, p.physics.force, p.wall_velocity, self.dtype,
                                       p.physics.collision, p.physics.inlet_velocity)

    def compute_capability(self):
        return self._cc


class LBM2DSlabs(Adapter):
    readers = ("canonical_state", "macroscopic", "_macroscopic_arrays")
    scaling = {"gpu": {"weak": (8192, 8192), "strong": (16384, 16384)},
               "cpu": {"weak": (128, 64), "strong": (256, 128)}}
    scaling_preset = {"physics": {"tau": 0.8}, "initial": {"kind": "taylor-green"}}

    @classmethod
    def unavailable(cls, selection: dict, backend_name: str) -> str | None:
        if selection.get("kernel") in TEMPORAL_BLOCKING:
            # the kernels that do run decomposed on this backend (two-kernel and fused need a GPU)
            here = [name for name, choice in registry.axes("lbm2d")["kernel"].choices.items()
                    if name not in TEMPORAL_BLOCKING and backend_name in choice.backends]
            return ("temporal blocking is not decomposed yet: it needs ts-row halos exchanged every ts steps "
                    f"(docs/multi-gpu.md); use {' or '.join(here)}")
        return None

    @classmethod
    def kernel_specs(cls, engine, selection: dict) -> list:
        """Every slab's single-step stepper builds the ROWS module for its own size."""
        if not issubclass(stepper_class(selection), SingleStepStepper):
            return []
        p, cc = engine.preset, engine.compute_capability()
        specs = []
        for length in sorted({hi - lo + 2 * H for lo, hi in split_rows(p.shape[0], engine.parts, H)}):
            grid = p.grid.model_copy(update={"ny": length, "n": None})
            spec = single_step(p.model_copy(update={"grid": grid}), selection["storage"], cc, rows=True).spec
            if spec not in specs:
                specs.append(spec)
        return specs

    def __init__(self, engine, selection: dict, transport):
        reason = self.unavailable(selection, engine.backend.name)
        if reason:
            raise VariantUnavailable(f"kernel={selection['kernel']} with {engine.parts} sub-domains: {reason}")
        self.engine, self.transport, self.selection = engine, transport, dict(selection)
        ny = engine.preset.shape[0]
        self.n = ny
        axis = engine.preset.decomp_split
        rows = split_rows(ny, engine.parts, H, key=f"grid.{axis.key}", unit=axis.unit)
        self.slabs = [Slab(i, lo, hi, lo - H, hi + H, H) for i, (lo, hi) in enumerate(rows)]
        self.aa = selection["streaming"] == "aa"
        self.ctx = [_SlabContext(engine, selection, s, transport) for s in self.slabs]
        self.steppers = []
        for c in self.ctx:
            with transport.device(c.index):
                self.steppers.append(stepper_class(selection)(c, selection))
        self.reference = isinstance(self.steppers[0], ReferenceStepper)
        # CUDA steppers whose step splits into row ranges (steppers.SingleStepStepper.update)
        self.row_steps = not self.reference and all(getattr(st, "launch", None) is not None and st.launch.rows
                                                     for st in self.steppers)
        rows = ghost_copies(self.slabs, ny)
        every = (slice(None),)
        self.copies = [HaloCopy(src, dst, (*every, ss), (*every, ds)) for src, ss, dst, ds in rows]
        self.aa_fixups = self._aa_fixups() if self.aa else []
        # Overlap: each slab's edge rows and interior. The reference step also needs a lattice (masks)
        # per region, on the slab's device; the CUDA steppers take the rows as a range.
        self.regions = []
        for s, c in zip(self.slabs, self.ctx):
            boundary, interior = overlap_regions(s.length, H, True, True)
            lat = {}
            if self.reference:
                with transport.device(c.index):
                    lat = {r: c.lattice(c.mask_host[r[0] - H:r[1] + H]) for r in boundary + interior}
            self.regions.append({"boundary": boundary, "interior": interior, "lat": lat})
        self.states: list[LatticeState] = []

    def _aa_fixups(self):
        """After a P→Q step: the owned edge rows' slots written from across the slab edge, from the
        neighbour's ghost row (the directions with c_y pointing into the slab)."""
        out = []
        parts = len(self.slabs)
        for s in self.slabs:
            below = self.slabs[(s.index - 1) % parts]
            above = self.slabs[(s.index + 1) % parts]
            # my first owned row (local H) <- below's upper ghost row (its local length − 1)
            out.append(HaloCopy(below.index, s.index, (list(INTO_FROM_BELOW), slice(below.length - 1, below.length)),
                                (list(INTO_FROM_BELOW), slice(H, H + 1))))
            # my last owned row (local length − 1 − H) <- above's lower ghost row (its local 0)
            out.append(HaloCopy(above.index, s.index, (list(INTO_FROM_ABOVE), slice(0, 1)),
                                (list(INTO_FROM_ABOVE), slice(s.length - 1 - H, s.length - H))))
        return out

    # ---- scatter / gather ---------------------------------------------------------------------
    def scatter(self):
        e, tr = self.engine, self.transport
        tr.forget_bindings()
        g = e.state
        self.states = []
        for s, c in zip(self.slabs, self.ctx):
            rows = e.xp.asarray(c.rows)
            f = tr.put(s.index, e.xp.take(g.f, rows, axis=1))
            with tr.device(s.index):
                fn = None if g.fn is None else c.xp.empty_like(f)
            fixed = None if g.fixed is None else tr.put(s.index, e.xp.take(g.fixed, rows, axis=1))
            self.states.append(LatticeState(f, fn, g.layout, fixed))
        for st in self.steppers:
            st.reset()

    def gather(self):
        e, tr = self.engine, self.transport
        g = e.state
        for s, st in zip(self.slabs, self.states):
            g.f[:, s.lo:s.hi] = tr.get(s.index, st.f[:, s.owned])
        g.layout = self.states[0].layout

    # ---- stepping -----------------------------------------------------------------------------
    def _ctx(self, part):
        return OnPart(self.transport.device(part), self.transport.stream(part))

    def _step_part(self, part):
        st, stepper = self.states[part], self.steppers[part]
        step = getattr(stepper, "step", None)
        if step is not None:  # the CUDA single-step steppers: one step, no CUDA graph (the exchange follows)
            step(st)
        else:
            stepper.advance(st, 1)

    def _step_rows(self, part, regions, target):
        """Reference step of the local rows in ``regions`` into ``target`` (NumPy overlap path)."""
        st, c = self.states[part], self.ctx[part]
        xp, lat_of = c.xp, self.regions[part]["lat"]
        for r0, r1 in regions:
            sub = st.f[:, r0 - H:r1 + H]
            lat = lat_of[(r0, r1)]
            if sub.dtype == np.float16:
                res = reference.step_shifted(xp, sub.astype(xp.float32), lat, storage=xp.float16).astype(xp.float16)
            else:
                res = xp.empty_like(sub)
                reference.step(xp, sub, res, lat)
            target[:, r0:r1] = res[:, H:-H]

    def _exchange_arrays(self):
        return [st.f for st in self.states]

    def _one_step(self, overlap: bool, sample: bool = False):
        e, tr = self.engine, self.transport
        parts = range(len(self.slabs))
        gpu = GpuTimes(self, sample)  # each GPU's own update time (sampled: one step a batch)
        if overlap and self.reference:
            with e.timer.phase("lbm", steps=1):
                targets = []
                for p in parts:
                    gpu.begin(p)
                    with self._ctx(p):
                        st = self.states[p]
                        target = st.fn if st.fn is not None else self.ctx[p].xp.empty_like(st.f)
                        self._step_rows(p, self.regions[p]["boundary"], target)
                        targets.append(target)
                pending = tr.start(targets, self.copies, overlap=True)
                for p in parts:
                    with self._ctx(p):
                        self._step_rows(p, self.regions[p]["interior"], targets[p])
                    gpu.end(p)
                pending.wait()
                for p in parts:
                    st = self.states[p]
                    if st.fn is not None:
                        st.f, st.fn = targets[p], st.f
                    else:
                        st.f = targets[p]
            return
        if overlap and self.row_steps:
            self._one_step_rows(gpu)
            return
        with e.timer.phase("lbm", steps=1):
            layout = self.states[0].layout
            for p in parts:
                gpu.begin(p)
                with self._ctx(p):
                    self._step_part(p)
                gpu.end(p)
        with e.timer.phase("exchange", steps=1):
            arrays = self._exchange_arrays()
            if self.aa and layout == "P":  # P→Q: the slots written across the slab edges
                tr.exchange(arrays, self.aa_fixups)
            else:
                tr.exchange(arrays, self.copies)

    def _one_step_rows(self, gpu):
        """Overlap with the CUDA steppers: edge rows, copies started, interior rows, then finish."""
        e, tr = self.engine, self.transport
        parts = range(len(self.slabs))
        aa_pq = self.aa and self.states[0].layout == "P"
        with e.timer.phase("lbm", steps=1):
            for p in parts:
                gpu.begin(p)
                with self._ctx(p):
                    for rows in self.regions[p]["boundary"]:
                        self.steppers[p].update(self.states[p], rows)
            # the step's result: fn on two lattices, the one array under AA
            targets = [st.f if self.aa else st.fn for st in self.states]
            pending = tr.start(targets, self.aa_fixups if aa_pq else self.copies, overlap=True)
            for p in parts:
                with self._ctx(p):
                    for rows in self.regions[p]["interior"]:
                        self.steppers[p].update(self.states[p], rows)
                gpu.end(p)
            pending.wait()
            for p in parts:
                self.steppers[p].finish(self.states[p])

    def _advance_lattice(self, n: int, overlap: bool):
        for i in range(n):
            self._one_step(overlap, sample=i == n - 1)

    def advance(self, n: int, overlap: bool) -> float:
        e = self.engine
        tr = e.tracers
        if tr is None:
            self._advance_lattice(n, overlap)
            return float(n)
        # Tracers on the gathered field: the batch is cut at the tracer substeps (as LBM2D._advance).
        done = 0
        while done < n:
            k = min(n - done, tr.every - tr.clock)
            self._advance_lattice(k, overlap)
            done += k
            tr.clock += k
            if tr.clock == tr.every:
                tr.clock = 0
                self.gather()
                _, ux, uy = outputs.moments(e, with_rho=False)
                tr.advance(ux, uy, float(tr.every))
        return float(n)

    def exchange_once(self) -> None:
        """One plain halo exchange of the current populations (the benchmark's exchange timing)."""
        self.transport.exchange(self._exchange_arrays(), self.copies)

    def describe(self) -> dict:
        return {"rows": [(s.lo, s.hi) for s in self.slabs], "halo": H,
                "exchange_bytes_per_step": transport_bytes(self._exchange_arrays(), self.copies),
                "overlap_split": self.reference or self.row_steps,
                "graph": "not used decomposed (the exchange runs between steps)"}

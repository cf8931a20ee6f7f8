"""The adapter of the stencil-framework families (engine/stencil): N slabs of the slowest axis.

A family built on the framework (diffusion3d, wave2d) declares its adapter in its own folder as a
subclass of :class:`StencilAdapter` with a :class:`StencilSpec` (its stencil, time levels,
reference step, parameters); everything below is the same for all of them.

Each slab stores its owned planes plus ``h`` ghost planes per side, ``h`` = the stencil's reach
along the split axis (``Stencil.halo``; 1 for diffusion7 and wave2d): one step needs exactly the
neighbours' ``h`` outermost owned planes, so halos are exchanged after every step.

Every slab is updated with the family's own kernels in the framework's ``fixed`` boundary mode
(update the points ≥ halo from every face, leave the rest): the ghost planes are never updated
and, where the global boundary is fixed, the held outer planes sit inside the first and last
slab exactly as in the whole grid. A periodic grid is padded along its fast axes too (by the
stencil's reach; x by 4 in 3D for the kernels that may run the vec shape, so it keeps its
alignment) and the pads are refilled by wrap after each update, so the fixed-mode kernels compute
exactly the periodic update on the owned points — the same operations in the same order, so the
same bits as the undecomposed run (tests/unit/test_decomp.py).

Overlap: the boundary planes (the first/last ``h`` owned planes) are updated first, their halo
copies start (a side stream on CuPy, NCCL's stream per device), then the interior is updated;
the next step waits for the copies. Updating a range of planes is the same kernel on a view of
the slab (planes [r0 − h, r1 + h)), so the thin boundary launches get their own loop — and, with
``cuda-autotune``, their own tuned launch (P2's 8×512×512 case). A family kernel that updates the
whole slab at once (``StencilSpec.whole_slab``: diffusion3d's hand-written one copies its edge
planes, so it would overwrite the boundary planes from an interior view) runs without the split:
with it overlap is the exchange after the whole-slab update (documented in docs/multi-gpu.md).

Host time: one Python thread drives every GPU, so the host work per step must stay below one
GPU step, or the run becomes launch-bound. On CuPy every update of a region list is therefore
*prepared* once per buffer rotation (:meth:`StencilAdapter._prepared`): the loop's launch
closures (its argument checks, views and grid done once) and one raw kernel that wraps the pads
of all the list's regions, cached until the buffers change (scatter) or a parameter does. A
tuning loop goes through the generic path until its tuner has settled, then is prepared with the
settled configuration.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..stencil.variants import LOOP_ENGINE, loop_for
from .adapter import Adapter
from .common import GpuTimes, OnPart, Slab, ghost_copies, overlap_regions
from .config import split_rows
from .transport import HaloCopy, transport_bytes

VEC_CAPABLE = ("cuda-vec", "cuda-autotune")  # kernel choices that may run the vec kernel shape


@dataclass(frozen=True)
class StencilSpec:
    """What the stencil adapter needs to know of a family."""
    stencil: Any  # the family's point update (engine/stencil/library.py)
    buffers: tuple[str, ...]  # the engine's time-level attributes (global arrays), in rotation order
    scatter_from: dict  # part buffer -> global attribute it is filled from
    gather_to: dict  # global attribute -> part buffer it is gathered from
    out: str  # the buffer a step writes
    rotate: Callable  # {name: array} -> {name: array} after a step
    reference: Callable  # (engine, xp, buffers) the family's array step in fixed mode
    params: Callable  # engine -> {param: value}
    phase: str
    pad_x3d: int = 4  # x pad of a periodic 3D slab (vec kernels: V-aligned rows)
    # (engine, kernel choice) -> None, or launch(buffers, local shape) for a kernel that updates a
    # whole slab at once on the part's device (non-periodic: the slab's own edges)
    whole_slab: Callable = lambda engine, kernel: None


class StencilAdapter(Adapter):
    """Every kernel choice of a stencil family runs decomposed; a subclass sets ``spec``."""

    spec: ClassVar[StencilSpec]

    def __init__(self, engine, selection: dict, transport):
        self.engine, self.transport = engine, transport
        spec = self.spec
        st = spec.stencil
        self.kernel = selection["kernel"]
        shape = tuple(engine.preset.shape)
        self.n, self.ndim = shape[0], len(shape)
        self.h = h = int(st.halo[-1])  # reach along the split (slowest) axis
        self.periodic = engine.periodic
        # Pads of the fast axes (array order, axis 1..): periodic grids only.
        pads = []
        for axis in range(1, self.ndim):
            reach = int(st.halo[self.ndim - 1 - axis])
            if self.ndim == 3 and axis == self.ndim - 1 and self.kernel in VEC_CAPABLE:
                # the vec kernels want V-aligned rows; any other kernel gets the bare reach, so its
                # updated x range is the owned one (512 points = 4 blocks of 128, as undecomposed;
                # an x pad of 4 would make it 518 = 5 blocks, the fifth nearly idle)
                reach = max(reach, spec.pad_x3d)
            pads.append(reach if self.periodic else 0)
        self.pads, self.fast = tuple(pads), shape[1:]
        axis = engine.preset.decomp_split
        rows = split_rows(self.n, engine.parts, min_rows=max(h, 1), key=f"grid.{axis.key}", unit=axis.unit)
        self.slabs = []
        for i, (lo, hi) in enumerate(rows):
            if self.periodic:
                a, b = lo - h, hi + h
            else:
                a, b = max(lo - h, 0), min(hi + h, self.n)
            self.slabs.append(Slab(i, lo, hi, a, b, h))
        self.local_shapes = [(s.length, *(m + 2 * p for m, p in zip(self.fast, self.pads))) for s in self.slabs]
        parts = len(self.slabs)
        self.copies = [HaloCopy(src, dst, (ss,), (ds,)) for src, ss, dst, ds in ghost_copies(self.slabs, self.n)]
        self.regions = []
        for s, ls in zip(self.slabs, self.local_shapes):
            low = self.periodic or s.index > 0
            high = self.periodic or s.index < parts - 1
            boundary, interior = overlap_regions(ls[0], h, low, high)
            full = [(h, ls[0] - h)] if ls[0] - h > h else []
            self.regions.append({"full": full, "boundary": boundary, "interior": interior})
        self.bufs = [dict.fromkeys(spec.buffers) for _ in self.slabs]  # filled by scatter()
        self._loops: dict = {}
        self._views: dict = {}
        self._ready: dict = {}  # (part, regions, buffer ids, params) -> launch closures (CuPy)
        self._whole = spec.whole_slab(engine, self.kernel)

    # ---- scatter / gather ---------------------------------------------------------------------
    def _local(self, global_array, s: Slab):
        xp = self.engine.xp
        if self.periodic:
            rows = xp.asarray(np.arange(s.a, s.b) % self.n)
            part = xp.take(global_array, rows, axis=0)
            widths = [(0, 0)] + [(p, p) for p in self.pads]
            return xp.pad(part, widths, mode="wrap") if any(self.pads) else part
        return global_array[s.a:s.b]

    def scatter(self):
        e, tr = self.engine, self.transport
        self._views.clear()
        self._ready.clear()
        tr.forget_bindings()
        for s, bufs in zip(self.slabs, self.bufs):
            for name, src in self.spec.scatter_from.items():
                bufs[name] = tr.put(s.index, self._local(getattr(e, src), s))

    def _interior(self):
        return tuple(slice(p, p + m) for p, m in zip(self.pads, self.fast))

    def gather(self):
        e, tr = self.engine, self.transport
        inner = self._interior()
        for s, bufs in zip(self.slabs, self.bufs):
            for dst, name in self.spec.gather_to.items():
                owned = tr.get(s.index, bufs[name][(s.owned, *inner)])
                getattr(e, dst)[s.lo:s.hi] = owned

    # ---- one update of a range of local rows -------------------------------------------------
    def _view(self, array, r0, r1):
        key = (id(array), r0, r1)
        v = self._views.get(key)
        if v is None or v[0] is not array:
            v = self._views[key] = (array, array[r0 - self.h:r1 + self.h])
        return v[1]

    def _loop(self, part, shape):
        key = (part if self.transport.name == "nccl" else 0, shape)  # one loop per shape (per device)
        loop = self._loops.get(key)
        if loop is None:
            e = self.engine
            with self.transport.device(part):
                loop = self._loops[key] = loop_for(self.kernel, self.spec.stencil, shape, e.dtype, "fixed",
                                                   self.transport.xp(part), self.transport.stream(part))
        return loop

    def _update(self, part, r0, r1):
        bufs = self.bufs[part]
        views = {k: self._view(v, r0, r1) for k, v in bufs.items()}
        xp = self.transport.xp(part)
        if self.kernel in LOOP_ENGINE:
            self._loop(part, tuple(views[self.spec.out].shape))(**views, **self.spec.params(self.engine))
        else:  # "array": the family's reference in fixed mode
            self.spec.reference(self.engine, xp, views)

    def _wrap_pads(self, part, array, r0, r1):
        """Refill the fast-axis pads of local rows [r0, r1) by periodic wrap (x first, then y,
        so the corners are right). On CuPy one kernel does every pad point (the host time per
        launch is what limits one process driving several GPUs); elsewhere slice copies."""
        if not any(self.pads) or r1 <= r0:
            return
        xp = self.transport.xp(part)
        if self.engine.backend.is_gpu:
            _wrap_kernel(xp, array, r0, r1, self.pads, self.fast)
            return
        for axis in range(self.ndim - 1, 0, -1):
            p, m = self.pads[axis - 1], self.fast[axis - 1]
            if not p:
                continue

            def sl(s, axis=axis):
                return (slice(r0, r1),) + (slice(None),) * (axis - 1) + (s,)

            if m >= p:
                array[sl(slice(0, p))] = array[sl(slice(m, m + p))]
                array[sl(slice(p + m, 2 * p + m))] = array[sl(slice(p, 2 * p))]
            else:  # a fast axis shorter than its pad: wrap index by index
                left = xp.asarray(p + np.arange(-p, 0) % m)
                right = xp.asarray(p + np.arange(m, m + p) % m)
                array[sl(slice(0, p))] = xp.take(array[sl(slice(None))], left, axis=axis)
                array[sl(slice(p + m, 2 * p + m))] = xp.take(array[sl(slice(None))], right, axis=axis)

    # ---- stepping -----------------------------------------------------------------------------
    def _ctx(self, part):
        tr = self.transport
        return OnPart(tr.device(part), tr.stream(part))

    def _run(self, part, regions):
        if not regions:
            return
        with self._ctx(part):
            ready = self._prepared(part, regions)
            if ready is not None:
                for go in ready:
                    go()
                return
            for r0, r1 in regions:
                self._update(part, r0, r1)
            out = self.bufs[part][self.spec.out]
            for r0, r1 in regions:
                self._wrap_pads(part, out, r0, r1)

    def _prepared(self, part, regions):
        """The launches of one update of ``regions`` (each region's loop, then one pad wrap for all
        of them) as zero-argument closures, built once per buffer rotation; None where the generic
        path must run (NumPy, the array kernel, a tuner still measuring)."""
        if self.kernel not in LOOP_ENGINE or LOOP_ENGINE[self.kernel] == "host":
            return None
        bufs = self.bufs[part]
        params = self.spec.params(self.engine)
        key = (part, tuple(regions), tuple(id(v) for v in bufs.values()), tuple(sorted(params.items())))
        ready = self._ready.get(key)
        if ready is not None:
            return ready
        ready = []
        for r0, r1 in regions:
            views = {k: self._view(v, r0, r1) for k, v in bufs.items()}
            loop = self._loop(part, tuple(views[self.spec.out].shape))
            if loop.tuner is not None and not loop.tuner.done:
                return None  # the tuner must see (and time) these calls
            cfg = loop.tuner.best if loop.tuner is not None else loop.fixed_config()
            ready.append(loop.prepared(cfg, **views, **params))
        wrap = _wrap_launch(self.transport.xp(part), bufs[self.spec.out], regions, self.pads, self.fast)
        if wrap is not None:
            ready.append(wrap)
        if len(self._ready) > 64:
            self._ready.clear()
        self._ready[key] = ready
        return ready

    def advance(self, n: int, overlap: bool) -> float:
        e = self.engine
        parts = range(len(self.slabs))
        for i in range(n):
            outs = [self.bufs[p][self.spec.out] for p in parts]
            gpu = GpuTimes(self, sample=i == n - 1)  # each GPU's own update time, the batch's last step
            if self._whole is not None:  # whole-slab kernel: overlap reduces to update-then-exchange
                with e.timer.phase(self.spec.phase, steps=1):
                    for p in parts:
                        with self._ctx(p):
                            gpu.begin(p)
                            self._whole(self.bufs[p], self.local_shapes[p])
                            for r0, r1 in self.regions[p]["full"]:
                                self._wrap_pads(p, outs[p], r0, r1)
                            gpu.end(p)
                with e.timer.phase("exchange", steps=1):
                    self.transport.exchange(outs, self.copies)
            elif overlap:
                with e.timer.phase(self.spec.phase, steps=1):
                    for p in parts:
                        gpu.begin(p)
                        self._run(p, self.regions[p]["boundary"])
                    pending = self.transport.start(outs, self.copies, overlap=True)
                    for p in parts:
                        self._run(p, self.regions[p]["interior"])
                        gpu.end(p)
                    pending.wait()
            else:
                with e.timer.phase(self.spec.phase, steps=1):
                    for p in parts:
                        gpu.begin(p)
                        self._run(p, self.regions[p]["full"])
                        gpu.end(p)
                with e.timer.phase("exchange", steps=1):
                    self.transport.exchange(outs, self.copies)
            self.bufs = [self.spec.rotate(b) for b in self.bufs]
        return n * e.dt

    def exchange_once(self) -> None:
        """One halo exchange of the buffer a step writes (the benchmark's exchange timing)."""
        self.transport.exchange([b[self.spec.out] for b in self.bufs], self.copies)

    def describe(self) -> dict:
        outs = [b[self.spec.out] for b in self.bufs]
        return {"rows": [(s.lo, s.hi) for s in self.slabs], "halo": self.h, "pads": self.pads,
                "exchange_bytes_per_step": transport_bytes(outs, self.copies)}


PADS_SOURCE = "cuda/decomp/pads.cu"
_BITS = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}


def _wrap_launch(cp, array, regions, pads, fast):
    """A zero-argument closure that refills the fast-axis pads of every row of ``regions`` (local
    row ranges, at most two launched together; more are split) of a padded slab (2D: (rows, X); 3D:
    (rows, Y, X)) by periodic wrap, with one raw-kernel launch per pair; None when there are no pads."""
    if len(fast) == 1:
        py, px, my, mx = 0, pads[0], 1, fast[0]
    else:
        (py, px), (my, mx) = pads, fast
    Y, X = my + 2 * py, mx + 2 * px
    npad = 2 * py * X + 2 * px * my
    regions = [(r0, r1) for r0, r1 in regions if r1 > r0]
    if npad == 0 or not regions:
        return None
    from .. import cuda

    name = f"nagare_decomp_wrap_pads<{_BITS[array.dtype.itemsize]}>"
    # cached per device; --fmad=false as the stencil loops (a copy has no arithmetic to fuse, but the
    # CPU emulation of the tests checks every module it is handed for it)
    kern = cuda.kernel(PADS_SOURCE, name, (name,), ("--fmad=false",))
    launches = []
    for i in range(0, len(regions), 2):
        (r0a, r1a), (r0b, r1b) = regions[i], (regions[i + 1] if i + 1 < len(regions) else (0, 0))
        total = ((r1a - r0a) + (r1b - r0b)) * npad
        blocks = -(-total // 256)  # 1D grid: up to 2³¹ − 1 blocks
        args = (array, np.int64(r0a), np.int64(r1a - r0a), np.int64(r0b), np.int64(r1b - r0b), np.int32(Y),
                np.int32(X), np.int32(py), np.int32(px), np.int32(my), np.int32(mx), np.int32(npad))
        launches.append(((blocks, 1, 1), (256, 1, 1), args))
    if len(launches) == 1:
        (grid, block, args), = launches
        return lambda: kern(grid, block, args)

    def go():
        for grid, block, args in launches:
            kern(grid, block, args)
    return go


def _wrap_kernel(cp, array, r0, r1, pads, fast):
    """Periodic wrap of the fast-axis pads of rows [r0, r1) of a padded slab, now (one launch)."""
    go = _wrap_launch(cp, array, [(r0, r1)], pads, fast)
    if go is not None:
        go()


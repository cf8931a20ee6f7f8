"""The CUDA path of the SPH engine: P3's neighbour searches and data layouts as CuPy launches.

Per force evaluation (names are the timed phases of P3's Tables 3–5):

- ``sort``: cell keys (kernel), ``cupy.argsort`` of the keys, cell starts (kernel), and the gather
  of the canonical state into the selected layout in sorted order. With Verlet lists the argsort
  and cell starts run only at rebuilds; between rebuilds particles keep the build's order and
  only the gather runs (P3: "sorting is needed only at rebuilds").
- ``list`` (Verlet only, at rebuilds): P3's four phases — (1) count each list and (2) the warp's
  longest list by warp shuffle (one kernel), (3) inclusive scan of the per-warp region sizes
  32·max (``cupy.cumsum``) and allocation to the size needed, (4) fill.
- ``interaction``: one thread per particle over its cells or its list; results land in the
  canonical order through the sort permutation.

No host synchronisation inside a step (the step is queued and the host moves on):

- the interaction kernels fold max|a|², max c and max|μ| into per-block maxima (one atomicMax per
  block and value) in a reduction slot; the integration kernel (one per scheme stage) computes the
  CFL Δt from that slot on the device, integrates, keeps the time and Δt in device memory
  (``st``), and resets the next step's slot. The host reads Δt and the time only when asked
  (``engine.dt``, ``engine.time``, diagnostics, a list rebuild).
- Verlet validity on the device: the integration kernels accumulate each particle's travelled
  distance and its maximum (``dmax``). The interaction over the lists checks ``dmax ≤ Δh/2``
  itself; past it (a rebuild the host decided late) it searches the build's cells with the reach
  widened by 2·dmax, which finds every pair within r_c, so late decisions cost time, never
  correctness. The host decides rebuilds from an asynchronous copy of ``dmax`` (pinned memory, an
  event it queries), extrapolated one step ahead. When the host has run PROBE_LAG steps ahead of
  that copy it waits for the copy's event: an old point of the queue, so the device (which still
  has the later steps queued) does not idle, and the decision is never more than a few steps old.

List memory: allocated at each rebuild to what the lists need; the buffer is reused while it
is large enough and not more than 4× too large, else reallocated (growth and shrink). If the
allocation fails (cupy OutOfMemoryError) the step falls back to the cell-half search, logs it
once and counts it in ``stats['verlet_oom_fallbacks']``: never a crash, never a silent truncation.
"""
from __future__ import annotations

import logging
import math

import numpy as np

from .. import cuda
from .kernels import cubic_alpha, wendland_alpha

log = logging.getLogger("nagare")

SOURCE = "cuda/sph/sph.cu"
BLOCK = 128  # a multiple of 32: the warp-interleaved lists assume whole warps per block
LAYOUT_CODE = {"soa": 0, "aos": 1, "float4": 2}
KERNEL_CODE = {"wendland": 0, "cubic": 1}
ROLES = ("keys", "starts", "gather", "cells1", "cells2", "count", "fill", "verlet", "int_verlet", "predict", "correct")
N_PARAMS = 14
PROBE_LAG = 2  # steps the host may run ahead of the last dmax copy it has read
CAP_MARGIN = 1.15  # one-pass build: room per list over the last build's longest (lists grow as the flow moves)
SLOT = 4  # reduction slot stride in `red`: [max|a|², max c, max|μ|, pad]; slots 0/1 by step parity, 2 scratch


# The fast pair's choices (variants.py, axis pair) as the Verlet interaction's template shape:
# (neighbours per step of the list walk, launch-bound blocks per SM in fp32, in fp64). nvcc -Xptxas -v,
# fp32 3D float4: U = 1 55 registers (9 blocks of 128 per SM), U = 2 62 (8 blocks, two neighbours'
# gathers in flight), U = 4 88 (5 blocks, four); 12 blocks caps U = 1 at 40 registers (12 bytes
# spilled). fp64 spills 384 bytes under that cap, so fp64 keeps no bound (1).
PAIR_SHAPE = {"fast": (1, 1, 1), "fast-u2": (2, 1, 1), "fast-u4": (4, 1, 1), "fast-lb12": (1, 12, 1)}
# The list build's candidate positions per load batch (sph.cu for_candidates_pos) under the fast pair
# choices (exact keeps 1, the build P3 describes): fp32 3D float4 count 40 registers, fill 40 (32 at 1).
BUILD_UNROLL = 4


def kernel_spec(T: str, D: int, L: int, K: int, interleaved: bool, fast: bool | str = False,
                one_pass: bool = False) -> cuda.KernelSpec:
    """The sph.cu module of one (scalar type, dimension, position layout, smoothing kernel, Verlet
    list layout, pair math): every kernel of the GPU path as a name expression, in :data:`ROLES`
    order (the plain kernel too: with name expressions CuPy looks names up). ``fast``: the
    interaction kernels of the fast pair (sph.cuh pair_fast), which take their constants as
    arguments instead of ``prm``; True or a choice of :data:`PAIR_SHAPE` (True: ``fast``). ``one_pass``:
    the one-pass list build's kernel too, as role ``fill_cap`` after :data:`ROLES`."""
    t = cuda.template
    f = "_fast" if fast else ""
    if fast:
        u, minb32, minb64 = PAIR_SHAPE["fast" if fast is True else fast]
        verlet = t("sph_interact_verlet_fast", T, D, L, K, interleaved, u, minb32 if T == "float" else minb64)
    else:
        verlet = t("sph_interact_verlet", T, D, L, K, interleaved)
    # the list build's candidate positions loaded BUILD_UNROLL at a time with the fast pair, one at a
    # time with the exact one (the lists are the same; the bench's list phase compares the two)
    bu = BUILD_UNROLL if fast else 1
    extra = (t("sph_verlet_fill_cap", T, D, L, 2, interleaved, bu),) if one_pass else ()
    return cuda.KernelSpec(SOURCE, (
        t("sph_cell_keys", T, D), t("sph_cell_starts"), t("sph_gather", T, D, L),
        t("sph_interact_cells" + f, T, D, L, K, 1), t("sph_interact_cells" + f, T, D, L, K, 2),
        t("sph_verlet_count", T, D, L, 2, bu), t("sph_verlet_fill", T, D, L, 2, interleaved, bu),
        verlet, t("sph_integrate_verlet", T, D),
        t("sph_symplectic_predict", T, D), t("sph_symplectic_correct", T, D), *extra))


class GpuSPH:
    def __init__(self, engine, selection):
        import cupy  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

        self.cp = cupy
        self.e = engine
        self.sel = dict(selection)
        e = engine
        self.n, self.dim = e.n, e.dim
        self.dtype = e.dtype
        self.T = cuda.ctype(self.dtype)
        self.layout = LAYOUT_CODE[self.sel["layout"]]
        self.interleaved = self.sel["verlet_layout"] == "warp-interleaved"
        self.one_pass = self.sel.get("verlet_build", "two-pass") == "one-pass"
        self.cap = 0  # one-pass build: entries per list (0 until the first build has counted them)
        self.blocks = (self.n + BLOCK - 1) // BLOCK
        self.nwarps = (self.n + 31) // 32
        k = e.k
        prm = np.zeros(N_PARAMS, dtype=np.float64)
        knorm = (wendland_alpha if k.kernel == "wendland" else cubic_alpha)(k.h, k.dim)
        prm[:] = [k.h, e.rc * e.rc, knorm, k.rho0, k.c0, 0.5 * (k.gamma - 1.0), k.alpha, k.eta2, k.mass,
                  k.delta * k.h * k.c0, k.gravity, k.rho0 * k.gravity / k.B, 1.0 / k.gamma,
                  1.0 if k.diffusion == "fourtakas" else 0.0]
        self.prm = cupy.asarray(prm.astype(self.dtype))
        self.pair = self.sel.get("pair", "exact")
        self.fast = self.pair != "exact"
        # The fast pair's constants, passed by value (sph.cu SPH_FAST_ARGS order).
        T = self.dtype.type
        if k.kernel == "wendland":
            cf = -5.0 * knorm / (k.h * k.h)
        else:
            cf = knorm / (k.h * k.h)
        dcoef = 2.0 * k.delta * k.h * k.c0 * k.mass if k.delta > 0 else 0.0
        self.fast_args = (T(k.h), T(1.0 / k.h), T(cf), T(k.eta2), T(e.rc * e.rc), T(k.mass), T(k.alpha), T(dcoef),
                          T(k.rho0), T(k.rho0 * k.gravity / k.B), T(1.0 / k.gamma), T(k.gravity),
                          np.int32(1 if k.diffusion == "fourtakas" else 0))
        self.prm_args = self.fast_args if self.fast else (self.prm,)
        n = self.n
        T = self.dtype
        if self.layout == 1:
            self.p, self.pz, self.v = cupy.zeros(8 * n, T), cupy.zeros(1, T), cupy.zeros(1, T)
        elif self.layout == 2:
            width = 4 if T == np.float32 else 2  # float4, or double2 + separate z (P3 §3.4)
            self.p = cupy.zeros(width * n, T)
            self.pz = cupy.zeros(n if T == np.float64 else 1, T)
            self.v = cupy.zeros(5 * n, T)
        else:
            self.p, self.pz, self.v = cupy.zeros(3 * n, T), cupy.zeros(1, T), cupy.zeros(5 * n, T)
        self.kind_s = cupy.zeros(n, cupy.int8)
        self.cs = cupy.zeros(n, T)
        self.ace = cupy.zeros((n, self.dim), T)
        self.arho = cupy.zeros(n, T)
        self.red = cupy.zeros(3 * SLOT, T)
        self.st = cupy.zeros(4, cupy.float64)  # time (parity 0 / 1), last Δt
        self.par = 0
        self.dmax = cupy.zeros(1, T)
        self.stale = cupy.zeros(1, cupy.int32)
        self.dummy = cupy.zeros(1, T)
        self.pos_save = None
        self._probe = None  # (event, steps since the build, self.steps) of the last dmax copy
        self._pinned = None
        self.steps = 0
        self.build_cell = 1.0
        g = e.preset.geometry
        self.amp, self.omega = float(g.piston_amplitude), 2.0 * math.pi / float(g.piston_period)
        self.list = None
        self.list_capacity = 0
        self.order = None
        self._compile()

    # ---- kernels ----
    def _compile(self):
        self.spec = kernel_spec(self.T, self.dim, self.layout, KERNEL_CODE[self.e.k.kernel], self.interleaved,
                                self.pair if self.fast else False, self.one_pass)
        roles = ROLES + (("fill_cap",) if self.one_pass else ())
        self.names = dict(zip(roles, self.spec.name_expressions, strict=True))
        self.kern = {k: self.spec.function(v) for k, v in self.names.items()}

    def _launch(self, name, *args, threads=None):
        n = self.n if threads is None else threads
        self.kern[name](((n + BLOCK - 1) // BLOCK,), (BLOCK,), args)

    # ---- cell grid ----
    def _grid(self, cell_size):
        dom = self.e.domain
        ncell = [max(1, int(math.ceil((dom.hi[a] - dom.lo[a]) / cell_size))) for a in range(self.dim)]
        while len(ncell) < 3:
            ncell.append(1)
        return ncell

    def _sort(self, cell_size):
        cp, T = self.cp, self.dtype.type
        dom = self.e.domain
        nc = self._grid(cell_size)
        lo = list(dom.lo) + [0.0] * (3 - self.dim)
        key = cp.empty(self.n, cp.int32)
        self._launch("keys", np.int32(self.n), self.e.pos, T(lo[0]), T(lo[1]), T(lo[2]), T(cell_size),
                     np.int32(nc[0]), np.int32(nc[1]), np.int32(nc[2]), key)
        self.order = cp.argsort(key).astype(cp.int32)
        self.skey = key[self.order]
        ncells = nc[0] * nc[1] * nc[2]
        self.start = cp.empty(ncells + 1, cp.int32)
        self._launch("starts", np.int32(self.n), np.int32(ncells), self.skey, self.start, threads=self.n + 1)
        self.ncell = nc

    def _gather(self):
        k = self.e.k
        T = self.dtype.type
        self._launch("gather", np.int32(self.n), self.order, self.e.pos, self.e.vel, self.e.rho, self.e.kind,
                     T(k.B), T(k.rho0), T(k.gamma), T(k.c0), T(0.5 * (k.gamma - 1.0)), np.int32(self.fast),
                     self.p, self.pz, self.v,
                     self.cs, self.kind_s)

    def _nc(self):
        return np.int32(self.ncell[0]), np.int32(self.ncell[1]), np.int32(self.ncell[2])

    # ---- device time and Δt (read lazily) ----
    def read_time(self) -> float:
        return float(self.st[self.par])

    def set_time(self, t: float) -> None:
        self.st[self.par] = t

    def read_dt(self) -> float:
        return float(self.st[2])

    def stale_launches(self, wait: bool = False) -> int:
        """Interactions that found the lists stale, as of the last count that has reached the host.

        The app asks for it with the timing statistics several times a second; a read of the device
        counter there was a host sync per call that drained the queue. So each call queues an
        asynchronous copy into pinned memory and returns the newest count that has landed (exact
        with ``wait``, e.g. at the end of a run)."""
        import cupyx  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

        cp = self.cp
        if self.__dict__.get("_stale_host") is None:
            self._stale_host = cupyx.empty_pinned((1,), dtype=np.int32)
            self._stale_host[0] = 0
            self._stale_event = None
        ev = self._stale_event
        if ev is not None and (wait or ev.done):
            ev.synchronize()
            self._stale_seen = int(self._stale_host[0])
            self._stale_event = None
        if self._stale_event is None:  # one copy in flight at a time
            stream = cp.cuda.get_current_stream()
            cp.cuda.runtime.memcpyAsync(self._stale_host.ctypes.data, self.stale.data.ptr, 4,
                                        cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
            self._stale_event = cp.cuda.Event(block=False, disable_timing=True)
            self._stale_event.record(stream)
            if wait:
                self._stale_event.synchronize()
                self._stale_seen = int(self._stale_host[0])
                self._stale_event = None
        return self.__dict__.get("_stale_seen", 0)

    # ---- one force evaluation ----
    def forces(self, steps, slot):
        """Queue one force evaluation; the CFL maxima land in reduction slot ``slot``."""
        timer = self.e.timer
        method = self.sel["search"]
        red = self.red[SLOT * slot:]
        if method == "verlet" and self._verlet_lists(steps):
            vl = self.e.vlist
            with timer.phase("interaction", steps=steps):
                self._launch("verlet", np.int32(self.n), self.p, self.pz, self.v, self.cs, self.kind_s, self.counts,
                             self.base, self.list, self.order, *self.prm_args, self.ace, self.arho, red, self.dmax,
                             self.dtype.type(0.5 * vl.skin), self.skey, self.start, *self._nc(),
                             self.dtype.type(self.build_cell), self.stale)
            return
        if method == "verlet":  # list did not fit in memory: this step uses the cell search
            method = "cell-half"
        frac = 1.0 if method == "cell-full" else 0.5
        with timer.phase("sort", steps=steps):
            self._sort(self.e.rc * frac)
            self._gather()
        with timer.phase("interaction", steps=steps):
            self._launch("cells1" if method == "cell-full" else "cells2", np.int32(self.n), self.p, self.pz,
                         self.v, self.cs, self.kind_s, self.skey, self.start, *self._nc(), self.order, *self.prm_args,
                         self.ace, self.arho, red)

    # ---- integration (no host reads) ----
    def _tracking(self):
        vl = self.e.vlist
        if self.sel["search"] == "verlet" and vl.built:
            return np.int32(1), vl.travelled
        return np.int32(0), self.dummy

    def _common(self):
        e, t = self.e, self.e.preset.time
        return (np.float64(e.k.h), np.float64(t.cfl), np.float64(t.dt_fixed))

    def integrate_verlet(self, euler: bool):
        """v^{n+1}, ρ^{n+1} written over v^{n−1}, ρ^{n−1}; the caller swaps the names."""
        e = self.e
        track, travelled = self._tracking()
        T = self.dtype.type
        self._launch("int_verlet", np.int32(self.n), e.pos, e.vel, e.vel_m1, e.rho, e.rho_m1, self.ace, self.arho,
                     e.kind, e.pos0, self.red[SLOT * self.par:], self.red[SLOT * (1 - self.par):], *self._common(),
                     np.int32(1 if euler else 0), self.st, np.int32(self.par), np.float64(self.amp),
                     np.float64(self.omega), T(e.k.rho0), track, travelled, self.dmax)
        self._end_step()

    def predict(self):
        e = self.e
        if self.pos_save is None:
            self.pos_save = self.cp.empty_like(e.pos)
        track, travelled = self._tracking()
        T = self.dtype.type
        self._launch("predict", np.int32(self.n), e.pos, e.vel, e.rho, self.pos_save, e.vel_m1, e.rho_m1,
                     self.ace, self.arho, e.kind, e.pos0, self.red[SLOT * self.par:],
                     self.red[SLOT * (1 - self.par):], *self._common(), self.st, np.int32(self.par),
                     np.float64(self.amp), np.float64(self.omega), T(e.k.rho0), track, travelled, self.dmax)

    def correct(self):
        e = self.e
        track, travelled = self._tracking()
        T = self.dtype.type
        self._launch("correct", np.int32(self.n), e.pos, e.vel, e.rho, self.pos_save, e.vel_m1, e.rho_m1,
                     self.ace, self.arho, e.kind, e.pos0, self.st, np.int32(self.par), np.float64(self.amp),
                     np.float64(self.omega), T(e.k.rho0), track, travelled, self.dmax)
        self._end_step()

    def _end_step(self):
        self.par = 1 - self.par
        self.steps += 1
        vl = self.e.vlist
        if self.sel["search"] == "verlet" and vl.built:
            vl.steps_since_build += 1
            self._issue_probe()

    # ---- Verlet lists ----
    def _issue_probe(self):
        """Copy dmax to pinned host memory behind this step's work; the host only queries the event."""
        cp = self.cp
        if self._probe is not None and not self._probe[0].done:
            return  # the previous copy has not landed yet: keep waiting for it, queue nothing more
        if self._pinned is None:
            import cupyx  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

            self._pinned = cupyx.empty_pinned((1,), dtype=self.dtype)
        stream = cp.cuda.get_current_stream()
        cp.cuda.runtime.memcpyAsync(self._pinned.ctypes.data, self.dmax.data.ptr, self.dtype.itemsize,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        ev = cp.cuda.Event(block=False, disable_timing=True)
        ev.record(stream)
        self._probe = (ev, self.e.vlist.steps_since_build, self.steps)

    def _rebuild_due(self) -> bool:
        """From the last landed dmax copy (m steps after the build), extrapolated linearly to one
        step past now. Only the rebuild frequency depends on this guess: the interaction checks
        the exact condition on the device."""
        vl = self.e.vlist
        if self._probe is None:
            return False
        ev, m, issued = self._probe
        if not ev.done:
            if self.steps - issued < PROBE_LAG:
                return False
            # The host ran PROBE_LAG steps ahead of the device: wait for that older point. The
            # device still has the later steps queued, so it does not idle; the lag stays bounded.
            ev.synchronize()
        travel = float(self._pinned[0])
        return m > 0 and travel * (vl.steps_since_build + 1) / m > 0.5 * vl.skin

    def _verlet_lists(self, steps) -> bool:
        """Rebuild the lists if due (sort + list phases); gather every step. False on OOM."""
        cp, e, vl, timer = self.cp, self.e, self.e.vlist, self.e.timer
        with timer.phase("sort", steps=steps):
            rebuild = not vl.built or self.list is None or self._rebuild_due()
            if rebuild:
                vl.skin = e.verlet_skin()
                self.build_cell = 0.5 * (e.rc + vl.skin)
                self._sort(self.build_cell)  # P3: half-size cells of R_c for the build
            self._gather()
        with timer.phase("list", steps=steps):
            if rebuild:
                ok = self._build_lists(e.rc + vl.skin)
                if not ok:
                    return False
                vl.mark_built(cp, self.n, self.dtype)
                self.dmax.fill(0)
                self._probe = None
                e.stats["rebuilds"] += 1
        return True

    def _build_lists(self, radius) -> bool:
        if self.one_pass:
            return self._build_lists_one_pass(radius)
        cp, T = self.cp, self.dtype.type
        counts = cp.zeros(self.n, cp.int32)
        wmax = cp.zeros(self.nwarps, cp.int32)
        args = (np.int32(self.n), self.p, self.pz, self.kind_s, self.skey, self.start, *self._nc(), T(radius * radius))
        self._launch("count", *args, counts, wmax)  # phases 1 + 2
        if self.interleaved:
            region = 32 * wmax.astype(cp.int64)
        else:
            region = counts.astype(cp.int64)
        incl = cp.cumsum(region)  # phase 3: inclusive scan
        base = incl - region
        need = int(incl[-1]) if incl.size else 0  # the one host read of a rebuild (allocation)
        if not self._ensure_list(need):
            return False
        self._launch("fill", *args, base, self.list)  # phase 4
        self.counts, self.base = counts, base
        total = int(counts.sum(dtype=cp.int64))
        lanes = 32 * int(wmax.sum(dtype=cp.int64))
        self.e.stats.update(mean_list_length=total / max(self.n, 1), list_bytes=int(self.list_capacity * 4),
                            idle_thread_share=1.0 - total / lanes if lanes else 0.0)
        return True

    def _ensure_list(self, need, quiet: bool = False) -> bool:
        """A list buffer of at least ``need`` entries (reused while not 4x too large); False, logged
        and counted (unless ``quiet``: the caller has another way), when the device memory does not
        hold it."""
        cp = self.cp
        if need > self.list_capacity or need < self.list_capacity // 4:
            self.list = None
            try:
                self.list = self._allocate_list(max(need, 1))
            except cp.cuda.memory.OutOfMemoryError:
                self.list, self.list_capacity = None, 0
                if quiet:
                    return False
                if not self.e.stats.get("verlet_oom_fallbacks"):
                    log.warning("nagare sph: the Verlet lists need %.1f MB, more than the free device memory; "
                                "falling back to the cell-half search until they fit", need * 4 / 1e6)
                self.e.stats["verlet_oom_fallbacks"] = self.e.stats.get("verlet_oom_fallbacks", 0) + 1
                return False
            self.list_capacity = max(need, 1)
        return True

    def _build_lists_one_pass(self, radius) -> bool:
        """Count and fill in one search (sph_verlet_fill_cap) with room for ``cap`` entries per list,
        cap kept from the last build with CAP_MARGIN; the one host read of a rebuild is the largest
        count. When a list outgrew cap (and at the first build, cap 0) cap grows to fit and the kernel
        runs again, so such a build costs what the two-pass build does."""
        cp, T = self.cp, self.dtype.type
        counts = cp.empty(self.n, cp.int32)
        wmax = cp.empty(self.nwarps, cp.int32)
        top = cp.zeros(1, cp.int32)
        rows = 32 * self.nwarps if self.interleaved else self.n  # list slots per entry index
        while True:
            if not self._ensure_list(max(rows * self.cap, 1), quiet=True):
                # The room a list gets is the longest list's, so one pass needs more memory than two
                # (2-3x where walls and the free surface have short lists): build in two passes from now on.
                log.warning("nagare sph: one-pass Verlet lists need %.1f MB, more than the free device memory; "
                            "building them in two passes", rows * self.cap * 4 / 1e6)
                self.e.stats["one_pass_oom_fallbacks"] = self.e.stats.get("one_pass_oom_fallbacks", 0) + 1
                self.one_pass, self.cap = False, 0
                return self._build_lists(radius)
            top.fill(0)
            self._launch("fill_cap", np.int32(self.n), self.p, self.pz, self.kind_s, self.skey, self.start,
                         *self._nc(), T(radius * radius), np.int32(self.cap), self.list, counts, wmax, top)
            m = int(top[0])
            if m <= self.cap:
                break
            self.cap = int(math.ceil(m * CAP_MARGIN)) + 1
        width = 32 * self.cap if self.interleaved else self.cap
        if m * CAP_MARGIN * 1.5 < self.cap:  # the lists shrank well below cap: less room from the next build
            self.cap = int(math.ceil(m * CAP_MARGIN)) + 1
        self.base = cp.arange(self.nwarps if self.interleaved else self.n, dtype=cp.int64) * width
        self.counts = counts
        total = int(counts.sum(dtype=cp.int64))
        lanes = 32 * int(wmax.sum(dtype=cp.int64))
        self.e.stats.update(mean_list_length=total / max(self.n, 1), list_bytes=int(self.list_capacity * 4),
                            idle_thread_share=1.0 - total / lanes if lanes else 0.0)
        return True

    def _allocate_list(self, size):
        return self.cp.empty(size, self.cp.int32)

    def memory_bytes(self) -> int:
        arrays = [self.p, self.pz, self.v, self.cs, self.kind_s, self.ace, self.arho, self.red, self.st]
        extra = sum(int(a.nbytes) for a in arrays)
        if self.list is not None:
            extra += int(self.list.nbytes)
        return extra

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

log = logging.getLogger("nagare")

SOURCE = "cuda/sph/sph.cu"
BLOCK = 128  # a multiple of 32: the warp-interleaved lists assume whole warps per block
LAYOUT_CODE = {"soa": 0, "aos": 1, "float4": 2}
KERNEL_CODE = {"wendland": 0, "cubic": 1}
N_PARAMS = 14


class GpuSPH:
    def __init__(self, engine, selection):
        import cupy

        self.cp = cupy
        self.e = engine
        self.sel = dict(selection)
        e = engine
        self.n, self.dim = e.n, e.dim
        self.dtype = e.dtype
        self.T = cuda.ctype(self.dtype)
        self.layout = LAYOUT_CODE[self.sel["layout"]]
        self.interleaved = self.sel["verlet_layout"] == "warp-interleaved"
        self.blocks = (self.n + BLOCK - 1) // BLOCK
        self.nwarps = (self.n + 31) // 32
        k = e.k
        prm = np.zeros(N_PARAMS, dtype=np.float64)
        from .kernels import cubic_alpha, wendland_alpha

        knorm = (wendland_alpha if k.kernel == "wendland" else cubic_alpha)(k.h, k.dim)
        prm[:] = [k.h, e.rc * e.rc, knorm, k.rho0, k.c0, 0.5 * (k.gamma - 1.0), k.alpha, k.eta2, k.mass,
                  k.delta * k.h * k.c0, k.gravity, k.rho0 * k.gravity / k.B, 1.0 / k.gamma,
                  1.0 if k.diffusion == "fourtakas" else 0.0]
        self.prm = cupy.asarray(prm.astype(self.dtype))
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
        self.ace = cupy.zeros((n, self.dim), T)
        self.arho = cupy.zeros(n, T)
        self.mu = cupy.zeros(n, T)
        self.list = None
        self.list_capacity = 0
        self.order = None
        self._compile()

    # ---- kernels ----
    def _compile(self):
        T, D, L = self.T, self.dim, self.layout
        K = KERNEL_CODE[self.e.k.kernel]
        W = "true" if self.interleaved else "false"
        self.names = {
            "keys": f"sph_cell_keys<{T}, {D}>",
            "starts": "sph_cell_starts",
            "gather": f"sph_gather<{T}, {D}, {L}>",
            "cells1": f"sph_interact_cells<{T}, {D}, {L}, {K}, 1>",
            "cells2": f"sph_interact_cells<{T}, {D}, {L}, {K}, 2>",
            "count": f"sph_verlet_count<{T}, {D}, {L}, 2>",
            "fill": f"sph_verlet_fill<{T}, {D}, {L}, 2, {W}>",
            "verlet": f"sph_interact_verlet<{T}, {D}, {L}, {K}, {W}>",
        }
        exprs = tuple(self.names.values())  # the plain kernel too: with name expressions CuPy looks names up
        mod = cuda.module(SOURCE, exprs)
        self.kern = {k: mod.get_function(v) for k, v in self.names.items()}

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
                     T(k.B), T(k.rho0), T(k.gamma), self.p, self.pz, self.v, self.kind_s)

    def _nc(self):
        return np.int32(self.ncell[0]), np.int32(self.ncell[1]), np.int32(self.ncell[2])

    # ---- one force evaluation ----
    def forces(self, steps):
        e, timer = self.e, self.e.timer
        method = self.sel["search"]
        if method == "verlet" and self._verlet_lists(steps):
            with timer.phase("interaction", steps=steps):
                self._launch("verlet", np.int32(self.n), self.p, self.pz, self.v, self.kind_s, self.counts,
                             self.base, self.list, self.order, self.prm, self.ace, self.arho, self.mu)
        else:
            if method == "verlet":  # list did not fit in memory: this step uses the cell search
                method = "cell-half"
            frac = 1.0 if method == "cell-full" else 0.5
            with timer.phase("sort", steps=steps):
                self._sort(e.rc * frac)
                self._gather()
            with timer.phase("interaction", steps=steps):
                self._launch("cells1" if method == "cell-full" else "cells2", np.int32(self.n), self.p, self.pz,
                             self.v, self.kind_s, self.skey, self.start, *self._nc(), self.order, self.prm,
                             self.ace, self.arho, self.mu)
        return self.ace, self.arho, float(self.mu.max())

    def _verlet_lists(self, steps) -> bool:
        """Rebuild the lists if needed (sort + list phases); gather every step. False on OOM."""
        cp, e, vl, timer = self.cp, self.e, self.e.vlist, self.e.timer
        with timer.phase("sort", steps=steps):
            rebuild = vl.needs_rebuild(cp) or self.list is None
            if rebuild:
                vl.skin = e.verlet_skin()
                self._sort(0.5 * (e.rc + vl.skin))  # P3: half-size cells of R_c for the build
            self._gather()
        with timer.phase("list", steps=steps):
            if rebuild:
                ok = self._build_lists(e.rc + vl.skin)
                if not ok:
                    return False
                vl.mark_built(cp, self.n, self.dtype)
                e.stats["rebuilds"] += 1
        return True

    def _build_lists(self, radius) -> bool:
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
        need = int(incl[-1]) if incl.size else 0
        if need > self.list_capacity or need < self.list_capacity // 4:
            self.list = None
            try:
                self.list = self._allocate_list(max(need, 1))
            except cp.cuda.memory.OutOfMemoryError:
                self.list, self.list_capacity = None, 0
                if not self.e.stats.get("verlet_oom_fallbacks"):
                    log.warning("nagare sph: the Verlet lists need %.1f MB, more than the free device memory; "
                                "falling back to the cell-half search until they fit", need * 4 / 1e6)
                self.e.stats["verlet_oom_fallbacks"] = self.e.stats.get("verlet_oom_fallbacks", 0) + 1
                return False
            self.list_capacity = max(need, 1)
        self._launch("fill", *args, base, self.list)  # phase 4
        self.counts, self.base = counts, base
        total = int(counts.sum())
        lanes = int((32 * wmax.astype(cp.int64)).sum())
        self.e.stats.update(mean_list_length=total / max(self.n, 1), list_bytes=int(self.list_capacity * 4),
                            idle_thread_share=1.0 - total / lanes if lanes else 0.0)
        return True

    def _allocate_list(self, size):
        return self.cp.empty(size, self.cp.int32)

    def memory_bytes(self) -> int:
        arrays = [self.p, self.pz, self.v, self.kind_s, self.ace, self.arho, self.mu]
        extra = sum(int(a.nbytes) for a in arrays)
        if self.list is not None:
            extra += int(self.list.nbytes)
        return extra

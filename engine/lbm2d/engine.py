"""D2Q9 lattice Boltzmann engine (paper P1): the reference array step and the CUDA variants."""
from __future__ import annotations

import numpy as np

from ..benchspec import BenchSpec
from ..contract import Engine
from ..fields import Grid2D, Particles
from . import d2q9, reference, variants
from .config import LBM2DPreset
from .d2q9 import CX, CY, OPP, Q, W
from .tracers import Tracers

FAMILY = variants.FAMILY
CUDA_SOURCE = "cuda/lbm2d/lbm2d.cu"
BLOCK = (64, 4, 1)  # 64 x-contiguous threads (256 B per direction row, coalesced); divides 320, 1024, …
# Launch of the fused kernel per storage: ((threads x, y, z), mode); mode "vec2" / "vec4" / "vec8"
# is lbm_fused_vec with W x-adjacent nodes per thread (vector loads + shuffles; needs nx % W == 0
# and x threads a multiple of 32), "packed2/4/8" the fp16-only lbm_fused_packed (the same with the
# populations kept two to a register), "pipe{S}" / "pipe{S}r{R}" the fp16-only lbm_fused_pipe (packed,
# each warp marching down R rows of a 256-column strip with S − 1 rows in flight through cp.async;
# threads x = 32 × warps per block; needs sm_80, packed8 below that), an int k is lbm_fused with k
# nodes per thread. Chosen from engine/lbm2d/fused_bench.py on an H200 (docs/benchmarks/
# lbm2d-h200-2026-11-22c/ for fp32, lbm2d-h200-2026-11-24/ for fp16); any launch gives the same result.
FUSED_LAUNCH = {"native": ((64, 1, 1), "vec4"), "fp16": ((64, 1, 1), "pipe2")}
FUSED_FALLBACK = ((64, 4, 1), 1)  # nx not a multiple of the vector width
PIPE_FALLBACK = ((128, 1, 1), "packed8")  # fp16 on a GPU without cp.async (before sm_80)
# lbm_fused_pipe needs enough warps in flight: each warp owns 256 columns × PIPE_ROWS rows. At 1024²
# fp16 ran 0.0153 ms/step through the pipe (3-row runs), 0.0143 through packed8 and 0.0133-0.0136
# through vec4; at 320² vec4 0.0091 against packed8's 0.0139; from 2048² up the pipe wins (0.0490
# against packed8's 0.0511 and vec4's 0.0542; H200, docs/benchmarks/lbm2d-h200-2026-11-24c). Below
# PIPE_MIN_NODES nodes fp16 takes SMALL_FP16_LAUNCH.
PIPE_MIN_NODES = 1 << 22
SMALL_FP16_LAUNCH = ((64, 1, 1), "vec4")
# Extra NVRTC options of the lbm2d module per (storage, arithmetic type); fused_bench --hints
# measures others. fp32 vec4 needs 88 registers; capped at 80 (no spills) one more warp fits per
# scheduler and 4096² ran 0.5 % faster on the H200 in two calls (95.5 % instead of 95.0 % of the
# copy bandwidth). fp64 is left alone (doubles need pairs). The fp16 module divides approximately
# (--prec-div=false: 1/ρ to 1 ulp of fp32, TRT's quotients to 2 ulp, ~10⁻⁷ relative, far below the
# 5·10⁻⁴ of fp16 storage):
# IEEE division's slow-path check and its registers made lbm_fused_pipe 8 % slower at 4096² on the
# H200 (0.1826 → 0.1684 ms; fp32 vec4 is memory-bound and unchanged by it, 0.2982 / 0.2984 ms). Its
# registers are left uncapped (140 since 2026-11-24c; at 174 every cap tried, 128, 152, 168, was slower).
FUSED_OPTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("native", "float"): ("--maxrregcount=80",), ("native", "double"): (), ("fp16", "float"): ("--prec-div=false",)}
SEGMENT = 64  # lbm2d.cu SEG: nodes per segment-class byte


PIPE_WIDTH = 8  # lbm2d.cu PIPE_W: nodes per lane of lbm_fused_pipe
PIPE_STAGE_BYTES = 9 * 32 * 16 + 9 * 32 * 4 + 32 * 4  # lbm2d.cu sizeof(PipeStage): one row of one warp
# Rows each warp of lbm_fused_pipe marches. Short runs of many blocks win: after the kernel lost a third
# of its instructions and 34 registers (174 → 140, 14 warps per SM instead of 10; 2026-11-24c),
# 3-row runs were the fastest at 4096² (0.1568 ms against 0.1697 for 16 rows) and within 0.2 % of the
# best at 8192² (0.6015 ms, 2 rows 0.6005) and 3072²; runs sized to fill the GPU in one wave were
# 40 % slower than 16-row runs in the first version (docs/benchmarks/lbm2d-h200-2026-11-24).
PIPE_ROWS = 3


def vector_width(mode) -> int:
    """Nodes per thread along x that are one vector access (1 for the lbm_fused modes)."""
    if not isinstance(mode, str):
        return 1
    if mode.startswith("pipe"):
        return PIPE_WIDTH
    return int(mode.removeprefix("vec").removeprefix("packed"))


def pipe_index_type(nx: int, ny: int) -> str:
    """lbm_fused_pipe's element-offset type: 32-bit while the nine planes' offsets fit (up to 21,845²
    nodes), which makes each address one multiply-add from a per-lane base; 64-bit beyond."""
    return "unsigned int" if Q * nx * ny < 2**32 else "unsigned long long"


def pipe_mode(mode) -> tuple[int, int] | None:
    """(stages, rows per warp) of a "pipe{S}[r{R}]" launch mode (R = PIPE_ROWS when not given), None
    for other modes."""
    if not (isinstance(mode, str) and mode.startswith("pipe")):
        return None
    stages, _, rows = mode.removeprefix("pipe").partition("r")
    return int(stages), int(rows) if rows else PIPE_ROWS


def fused_launch(storage: str, nx: int, compute_capability: float | None = None, ny: int | None = None):
    """(block, mode) the engine launches for this storage, grid (width nx, height ny when known) and
    GPU (cp.async needs 8.0; small grids have too few warps for the pipelined kernel)."""
    block, mode = FUSED_LAUNCH[storage]
    if pipe_mode(mode) and compute_capability is not None and compute_capability < 8.0:
        block, mode = PIPE_FALLBACK
    if pipe_mode(mode) and ny is not None and nx * ny < PIPE_MIN_NODES:
        block, mode = SMALL_FP16_LAUNCH
    if isinstance(mode, str) and (nx % vector_width(mode) or block[0] % 32):
        return FUSED_FALLBACK
    if pipe_mode(mode) and block[1] != 1:
        raise ValueError(f"fused launch mode {mode!r} takes one row of warps per block, not {block}")
    return block, mode


def segment_classes(xp, node_class):
    """Per row, the largest node class of each run of SEGMENT nodes (lbm2d.cu segment_class): 0 means
    the whole segment is FAST and the fused kernels skip the per-node class bytes there. The flat
    buffer behind the (ny, nseg) array is padded to whole 4-byte words, which lbm_fused_pipe copies."""
    ny, nx = node_class.shape
    nseg = -(-nx // SEGMENT)
    padded = xp.zeros((ny, nseg * SEGMENT), dtype=xp.uint8)
    padded[:, :nx] = node_class
    flat = xp.zeros(-(-ny * nseg // 4) * 4, dtype=xp.uint8)
    flat[: ny * nseg] = padded.reshape(ny, nseg, SEGMENT).max(axis=2).ravel()
    return flat[: ny * nseg].reshape(ny, nseg)


def node_classes(xp, mask):
    """Per-node class for the fused kernels (lbm2d.cu NodeClass): 0 FAST = fluid with no bounce-back
    upstream neighbour, 1 EDGE = fluid with one, 2 FIXED = non-fluid. Periodic wrap as the kernels."""
    mask = xp.asarray(mask)
    bounce = (mask == d2q9.SOLID) | (mask == d2q9.MOVING_WALL)
    edge = xp.zeros(mask.shape, dtype=bool)
    for i in range(1, Q):  # upstream node of direction i is x − c_i: bounce[x − c_i] = roll by +c_i
        edge |= xp.roll(bounce, (int(CY[i]), int(CX[i])), axis=(0, 1))
    return xp.where(mask != d2q9.FLUID, 2, xp.where(edge, 1, 0)).astype(xp.uint8)

variants.register()


def fp16_representable(f: np.ndarray) -> np.ndarray:
    """f rounded so that f − w_i is exactly an fp16 number (what fp16 storage holds)."""
    w = W.reshape(Q, 1, 1)
    d = (f - w).astype(np.float16)
    return d.astype(np.float32).astype(np.float64) + w.astype(np.float32).astype(np.float64)


class LBM2D(Engine):
    family = FAMILY
    Preset = LBM2DPreset
    equivalence_steps = 64

    def estimated_bytes(self):
        """Peak memory of construction: the two lattices, the initial equilibrium and its encoded
        copies (up to two more lattices; with AA streaming the canonical state, its cast, its
        encoding, the fixed-node copy and the layout-P gather live at once: six), fp64 moments and
        masks (~64 B per node), and the tracers. Checked against free memory before anything is
        allocated."""
        p = self.preset
        nodes = p.shape[0] * p.shape[1]
        lattice = Q * np.dtype(p.physics.dtype).itemsize * nodes
        lattices = 6 if self.selection.get("streaming") == "aa" else 4
        return lattices * lattice + 64 * nodes + 32 * p.tracers.count

    # ---- state ---------------------------------------------------------------------------
    def _allocate(self):
        p, xp = self.preset, self.xp
        self.dtype = np.dtype(p.physics.dtype)
        self.mask_host = reference.build_mask(p)
        self.mask = xp.asarray(self.mask_host)
        self.node_class = node_classes(xp, self.mask)
        self.node_segment = segment_classes(xp, self.node_class)
        self.lat = reference.build_lattice(xp, self.mask_host, p.tau, p.physics.force, p.wall_velocity, self.dtype,
                                           p.physics.collision, p.physics.inlet_velocity)
        self._solid = xp.asarray((self.mask_host == d2q9.SOLID) | (self.mask_host == d2q9.MOVING_WALL))
        self.tracers = Tracers(xp, p.tracers, p.shape, self._solid) if p.tracers.count else None
        # Storage arrays are (re)made by _apply_selection; the canonical state lives in self.f
        # until then.
        self.f = xp.zeros((Q, *p.shape), dtype=self.dtype)
        self.fn = None
        self._layout = None
        self._graphs = {}

    def _initialise(self):
        """Equilibrium of the initial flow, computed on the backend (8192² in fp64 is 5 GB)."""
        p, xp = self.preset, self.xp
        ny, nx = p.shape
        y, x = (v.astype(xp.float64) for v in xp.ogrid[0:ny, 0:nx])  # open grids: broadcast, not 2 full arrays
        ux = xp.zeros((ny, nx))
        uy = xp.zeros((ny, nx))
        rho = xp.ones((ny, nx))
        u0 = p.initial.u0
        if p.initial.kind == "uniform":
            ux[:] = u0
        elif p.initial.kind == "taylor-green":
            kx, ky = 2 * np.pi / nx, 2 * np.pi / ny
            ux = -u0 * xp.cos(kx * x) * xp.sin(ky * y)
            uy = u0 * (kx / ky) * xp.sin(kx * x) * xp.cos(ky * y)
            # The vortex's pressure field, p = cs²ρ: ρ = 1 − ¾u0²(cos 2kx·x + (kx/ky)² cos 2ky·y)
            rho = 1 - 0.75 * u0 ** 2 * (xp.cos(2 * kx * x) + (kx / ky) ** 2 * xp.cos(2 * ky * y))
        if p.open_boundaries:
            ux[:] = p.physics.inlet_velocity
        if p.initial.kick and p.obstacle.kind != "none":
            # A smooth one-sided transverse push in the near wake breaks the symmetry that
            # otherwise delays shedding by ~10⁴ steps.
            size = p.characteristic_length()
            cx, cy = p.obstacle.center[0] * nx, p.obstacle.center[1] * ny
            uy += p.initial.kick * u0 * xp.exp(-((x - cx - 1.5 * size) / size) ** 2 - ((y - cy) / (0.6 * size)) ** 2)
        del x, y
        wall = xp.asarray((self.mask_host == d2q9.SOLID) | (self.mask_host == d2q9.MOVING_WALL))
        ux = xp.where(wall, 0.0, ux)
        uy = xp.where(wall, 0.0, uy)
        # Direction by direction into the state's dtype (the same values as stacking the fp64
        # equilibrium and casting it, without nine fp64 planes and their stacked copy).
        feq = xp.empty((Q, ny, nx), dtype=self.dtype)
        usq = ux * ux + uy * uy
        for i in range(Q):
            feq[i] = reference.equilibrium_i(i, rho, ux, uy, usq)
        del rho, ux, uy, usq
        self._canonical_in(feq)

    def random_state(self, rng: np.random.Generator):
        """Smooth random flow near rest plus non-equilibrium noise: positive, physically valid.

        Values are rounded so that f − w_i is an fp16 number: then every storage (fp16 included)
        holds exactly the same start state, and the equivalence test compares dynamics only.
        """
        ny, nx = self.preset.shape

        def smooth(scale):
            a = rng.standard_normal((ny, nx))
            k = np.fft.fftfreq(ny)[:, None] ** 2 + np.fft.fftfreq(nx)[None, :] ** 2
            a = np.real(np.fft.ifft2(np.fft.fft2(a) * np.exp(-k * 400)))
            return scale * a / (np.abs(a).max() + 1e-300)

        rho = 1.0 + smooth(0.01)
        ux, uy = smooth(0.04), smooth(0.04)
        f = reference.equilibrium(np, rho, ux, uy)
        f *= 1.0 + 0.01 * rng.standard_normal(f.shape)
        self._load_state_arrays({"f": fp16_representable(f)})

    def state_arrays(self):
        out = {"f": self._canonical_out()}
        if self.tracers is not None:
            out["tracer_pos"] = self.tracers.pos
            out["tracer_age"] = self.tracers.age
        return out

    def _load_state_arrays(self, arrays):
        self._canonical_in(np.asarray(arrays["f"], dtype=np.float64))
        if self.tracers is not None and "tracer_pos" in arrays:
            self.tracers.pos[...] = self.xp.asarray(arrays["tracer_pos"].astype(np.float32))
            self.tracers.age[...] = self.xp.asarray(arrays["tracer_age"].astype(np.float32))

    # ---- storage layouts ------------------------------------------------------------------
    # The canonical state is f[i, y, x] (post-collision, the preset's dtype). Internally:
    #   storage native + two-lattice: self.f is canonical;
    #   storage fp16: self.f holds (f − w_i) as float16 (DDF shifting);
    #   streaming aa: self.f is the single AA lattice in layout "P" or "Q" (see lbm2d.cu), and the
    #   never-changing non-fluid nodes are kept canonical in self._fixed.
    @property
    def _storage_dtype(self):
        return np.dtype(np.float16) if self.selection["storage"] == "fp16" else self.dtype

    def _encode(self, f):
        """Canonical (backend array, self.dtype or f64) → storage values in the storage dtype."""
        xp = self.xp
        if self.selection["storage"] == "fp16":
            w = xp.asarray(W.astype(np.float32).reshape(Q, 1, 1))
            return (f.astype(xp.float32) - w).astype(xp.float16)
        return f.astype(self.dtype)

    def _decode(self, s):
        xp = self.xp
        if s.dtype == np.float16:
            w = xp.asarray(W.astype(np.float32).reshape(Q, 1, 1))
            return s.astype(xp.float32) + w
        return s

    def _canonical_in(self, f_host_or_dev):
        xp = self.xp
        f = xp.asarray(f_host_or_dev).astype(self.dtype)
        s = self._encode(f)
        self._fixed = None
        if self.selection.get("streaming") == "aa":
            # AA never touches non-fluid nodes; their canonical values are constant: keep them here.
            self._fixed = f * xp.asarray(self.mask_host != d2q9.FLUID)[None]
            s = s[OPP].copy()  # layout P: A[opp(i)][x] = f_i(x)
            self._layout = "P"
        self.f = xp.ascontiguousarray(s)
        self.fn = None if self.selection.get("streaming") == "aa" else xp.empty_like(self.f)
        self._graphs = {}

    def _canonical_out(self):
        xp = self.xp
        s = self.f
        if self.selection.get("streaming") == "aa":
            if self._layout == "P":
                s = s[OPP]
            else:  # layout Q: A[i][x + c_i] = f_i(x)
                s = xp.stack([xp.roll(s[i], (-int(CY[i]), -int(CX[i])), axis=(0, 1)) for i in range(Q)])
            f = self._decode(s).astype(self.dtype)
            return xp.where(xp.asarray(self.mask_host == d2q9.FLUID)[None], f, self._fixed)
        return self._decode(s).astype(self.dtype)

    # ---- variants ---------------------------------------------------------------------------
    def _apply_selection(self, old, new):
        canonical = None
        if old:  # keep the physical state across the switch
            saved, self.selection = self.selection, old
            canonical = self._canonical_out()
            self.selection = saved
        self._graphs = {}
        self._stepper = None
        k = new["kernel"]
        if k in variants.TEMPORAL_BLOCKING:
            tb = variants.temporal_blocking_module()
            p = self.preset
            # The interface temporal_blocking.make_stepper reads (tau, force, u_wall, dtype).
            params = {"tau": p.tau, "force": tuple(p.physics.force), "u_wall": tuple(p.wall_velocity),
                      "dtype": self.dtype}
            self._stepper = tb.make_stepper(self.xp, dict(new), p, self.mask, params)
        elif k in ("two-kernel", "fused"):
            self._build_cuda(new)
        if canonical is not None:
            self._canonical_in(canonical)

    def _build_cuda(self, sel):
        from .. import cuda

        p = self.preset
        t = cuda.ctype(self.dtype if sel["storage"] == "native" else np.float32)
        # fp16 travels as raw bits (d2q9.cuh converts with PTX cvt: no CUDA header under NVRTC).
        s = "unsigned short" if self._storage_dtype == np.float16 else cuda.ctype(self._storage_dtype)
        trt = "true" if p.physics.collision == "trt" else "false"
        ny, nx = p.shape
        cc = self.backend.device_info().compute_capability if self.backend.is_gpu else None
        self._fused_block, mode = fused_launch(sel["storage"], nx, float(cc) if cc else None, ny)
        if isinstance(mode, str):
            per_thread = vector_width(mode)  # nodes per thread along x
            fused = f"lbm_fused_vec<{t}, {s}, {trt}, {per_thread}>"
            if mode.startswith(("packed", "pipe")) and s != "unsigned short":
                raise ValueError(f"fused launch mode {mode!r} is for fp16 storage only")
            if mode.startswith("packed"):  # fp16 kept two to a register (lbm2d.cu lbm_fused_packed)
                fused = f"lbm_fused_packed<{trt}, {per_thread}>"
            elif pipe_mode(mode):  # packed, rows through a cp.async pipeline (lbm2d.cu lbm_fused_pipe)
                fused = f"lbm_fused_pipe<{trt}, {pipe_mode(mode)[0]}, {pipe_index_type(nx, ny)}>"
        else:
            per_thread = mode
            fused = f"lbm_fused<{t}, {s}, {trt}, {mode}>"
        names = {"stream": f"lbm_stream<{t}, {s}>", "collide": f"lbm_collide<{t}, {s}, {trt}>",
                 "fused": fused, "aa_p": f"lbm_fused_aa<{t}, {s}, {trt}, true>",
                 "aa_q": f"lbm_fused_aa<{t}, {s}, {trt}, false>", "open": f"lbm_open_boundaries<{t}, {s}>"}
        exprs = tuple(names.values())
        opts = FUSED_OPTIONS[(sel["storage"], t)]
        self._k = {key: cuda.kernel(CUDA_SOURCE, name, exprs, opts) for key, name in names.items()}
        T = np.float32 if t == "float" else np.float64
        self._dims = ((nx + BLOCK[0] - 1) // BLOCK[0], (ny + BLOCK[1] - 1) // BLOCK[1], 1)
        bx, by, _ = self._fused_block
        self._fused_dims = ((nx + bx * per_thread - 1) // (bx * per_thread), (ny + by - 1) // by, 1)
        self._fused_extra, self._fused_smem = (), 0
        if pipe_mode(mode):
            stages, rows = pipe_mode(mode)
            warps = bx // 32
            self._fused_smem = warps * stages * PIPE_STAGE_BYTES
            if self._fused_smem > 48 * 1024:  # beyond the default: opt in (sm_70+)
                self._k["fused"].max_dynamic_shared_size_bytes = self._fused_smem
            self._fused_dims = (-(-nx // (32 * PIPE_WIDTH * warps)), -(-ny // rows), 1)
            self._fused_extra = (np.int32(rows),)
        self._ni = (np.int32(nx), np.int32(ny))
        self._omega = (T(1.0 / p.tau), T(float(self.lat.omega_minus)))  # (ω⁺, ω⁻); ω⁻ unused by BGK
        self._force = (T(p.physics.force[0]), T(p.physics.force[1]))
        self._uw = (T(p.wall_velocity[0]), T(p.wall_velocity[1]))
        self._uin = T(p.physics.inlet_velocity)

    # ---- stepping ---------------------------------------------------------------------------
    def _advance(self, n):
        k = self.selection["kernel"]
        with self.timer.phase("lbm", steps=n):
            if k == "reference":
                for _ in range(n):
                    self._step_reference()
            elif k in variants.TEMPORAL_BLOCKING:
                self._stepper(self.f, self.fn, n)
                self.f, self.fn = self.fn, self.f
            elif self.selection["graph"] == "on":
                self._advance_graph(n)
            else:
                for _ in range(n):
                    self._step_cuda()
        if self.tracers is not None:
            self._advance_tracers(n)
        return float(n)

    def _step_reference(self):
        xp = self.xp
        if self.f.dtype == np.float16:  # fp16 storage on the array path: the kernels' shifted arithmetic
            self.f = reference.step_shifted(xp, self.f.astype(xp.float32), self._lat32(),
                                            storage=xp.float16).astype(xp.float16)
            return
        reference.step(xp, self.f, self.fn, self.lat)
        self.f, self.fn = self.fn, self.f

    def _lat32(self):
        if self.lat.dtype != np.float32:
            raise RuntimeError("fp16 storage needs an fp32 preset")
        return self.lat

    def _step_cuda(self):
        k, sel = self._k, self.selection
        nx, ny = self._ni
        if sel["streaming"] == "aa":
            kern = k["aa_p"] if self._layout == "P" else k["aa_q"]
            kern(self._dims, BLOCK, (self.f, self.mask, self.node_class, nx, ny, *self._omega, *self._force, *self._uw))
            self._layout = "Q" if self._layout == "P" else "P"
            return
        if sel["kernel"] == "two-kernel":
            k["stream"](self._dims, BLOCK, (self.f, self.fn, self.mask, nx, ny, *self._uw))
            k["collide"](self._dims, BLOCK, (self.fn, self.mask, nx, ny, *self._omega, *self._force))
        else:
            k["fused"](self._fused_dims, self._fused_block,
                       (self.f, self.fn, self.mask, self.node_class, self.node_segment, nx, ny, *self._omega,
                        *self._force, *self._uw, *self._fused_extra), shared_mem=self._fused_smem)
        self.f, self.fn = self.fn, self.f
        if self.preset.open_boundaries:
            k["open"](((int(ny) + 127) // 128, 1, 1), (128, 1, 1), (self.f, self.mask, nx, ny, self._uin))

    def _advance_graph(self, n):
        """Each batch of ≤ GRAPH_STEPS steps is one CUDA-graph launch.

        Graphs are captured on first use and cached by (steps, current buffer, AA layout): a graph
        bakes in the buffer pointers, and an odd step count ends with the ping-pong roles (or the AA
        layout) swapped, so the state after a replay is recorded with the graph.
        """
        while n > 0:
            m = min(n, variants.GRAPH_STEPS)
            key = (m, int(self.f.data.ptr), self._layout)
            entry = self._graphs.get(key)
            if entry is None:
                before = (self._layout, self.f, self.fn)
                # Relaxed mode: a lazily loaded module may not be loaded under global capture mode.
                rt = self.xp.cuda.runtime
                self.stream.begin_capture(getattr(rt, "streamCaptureModeRelaxed", None))
                try:
                    for _ in range(m):
                        self._step_cuda()
                except BaseException:
                    self._layout, self.f, self.fn = before
                    try:
                        self.stream.end_capture()
                    except Exception:
                        pass  # the launch error above is the one to report
                    raise
                graph = self.stream.end_capture()
                after = (self._layout, self.f, self.fn)
                # Capture recorded the launches without running them: restore the roles.
                self._layout, self.f, self.fn = before
                if len(self._graphs) >= 8:
                    self._graphs.clear()
                entry = self._graphs[key] = (graph, after)
            graph, after = entry
            graph.launch(self.stream)
            self._layout, self.f, self.fn = after
            n -= m

    def _advance_tracers(self, n):
        """Advect the tracers by the n steps just taken, in substeps of Δt = tracers.every.

        The velocity is sampled once per call (after the LBM steps): within one call the field is
        frozen, which is exact for steady flow and first-order in the field's own change otherwise
        (a frame is a few steps, far below the vortex-shedding period)."""
        every = self.preset.tracers.every
        self._tracer_clock = getattr(self, "_tracer_clock", 0) + n
        substeps, self._tracer_clock = divmod(self._tracer_clock, every)
        if substeps == 0:
            return
        ux, uy = self._velocity()
        for _ in range(substeps):
            self.tracers.advance(ux, uy, float(every))

    def _velocity(self):
        """(ux, uy) as macroscopic() gives them."""
        _, ux, uy = self._moments(with_rho=False)
        return ux, uy

    def _moments(self, with_rho: bool = True):
        """(ρ or None, ux, uy) as macroscopic(); on CUDA with two-lattice storage one fused pass
        (lbm_velocity in tracers.cu) instead of ~25 array operations on the whole lattice."""
        sel = self.selection
        if not self.backend.is_gpu or sel.get("streaming") == "aa" or sel["kernel"] == "reference":
            rho, ux, uy = self._macroscopic_arrays()
            return rho, ux, uy
        from .. import cuda
        from .tracers import TRACER_SOURCE

        xp = self.xp
        t = cuda.ctype(self.dtype)
        s = "unsigned short" if self.f.dtype == np.float16 else t
        names = ("lbm_velocity<float, float>", "lbm_velocity<double, double>", "lbm_velocity<float, unsigned short>")
        kern = cuda.kernel(TRACER_SOURCE, f"lbm_velocity<{t}, {s}>", names)
        ny, nx = self.preset.shape
        ux = xp.empty((ny, nx), dtype=self.dtype)
        uy = xp.empty_like(ux)
        rho = xp.empty_like(ux) if with_rho else None
        T = self.dtype.type
        kern(((nx + 63) // 64, (ny + 3) // 4, 1), (64, 4, 1),
             (self.f, self.mask, np.int32(nx), np.int32(ny), T(self.lat.force[0]), T(self.lat.force[1]), ux, uy,
              rho if with_rho else np.uintp(0)))
        return rho, ux, uy

    # ---- outputs ----------------------------------------------------------------------------
    def macroscopic(self):
        """ρ, ux, uy (ny × nx) of the current state (one fused pass on CUDA, see _moments)."""
        return self._moments()

    def _macroscopic_arrays(self):
        """ρ, ux, uy (ny × nx) of the current state, as array code (the reference of lbm_velocity).

        The state is post-collision: its momentum is the streamed populations' Σ g c plus F (the
        collision relaxes the −F/2 shift and adds the (1 − ω/2)F source), so the physical velocity
        (Σ g c + F/2)/ρ is (Σ f^post c − F/2)/ρ.
        """
        xp = self.xp
        f = self._canonical_out()
        fx, fy = self.lat.force
        rho, ux, uy = reference.moments(f, (-fx, -fy))
        solid = self._solid
        return rho, xp.where(solid, 0, ux), xp.where(solid, 0, uy)

    def fields(self):
        xp = self.xp
        rho, ux, uy = self.macroscopic()
        solid = self._solid
        out = {
            "speed": Grid2D(xp.sqrt(ux * ux + uy * uy), label="speed |u|", units="lattice", mask=solid),
            "vorticity": Grid2D(xp.where(solid, 0, reference.vorticity(xp, ux, uy)), label="vorticity",
                                units="1/step", mask=solid, symmetric=True),
            "rho": Grid2D(rho, label="density ρ", units="lattice", mask=solid),
            "ux": Grid2D(ux, label="ux", units="lattice", mask=solid, symmetric=True),
            "uy": Grid2D(uy, label="uy", units="lattice", mask=solid, symmetric=True),
            "mask": Grid2D(self.mask, label="node type (0 fluid, 1 solid, 2 moving wall, 3 inlet, 4 outlet)"),
        }
        if self.tracers is not None:
            ny, nx = self.preset.shape
            out["tracers"] = Particles(self.tracers.pos, {"age": self.tracers.age}, label="tracers",
                                       bounds=((0.0, 0.0), (float(nx - 1), float(ny - 1))))
        return out

    def device_diagnostics(self):
        xp = self.xp
        rho, ux, uy = self.macroscopic()
        fluid = xp.asarray(self.mask_host == d2q9.FLUID)
        u2 = ux * ux + uy * uy
        return {"mass": xp.sum(xp.where(fluid, rho, 0), dtype=xp.float64),
                "max_speed": xp.sqrt(xp.max(u2)),
                "kinetic_energy": 0.5 * xp.sum(xp.where(fluid, rho * u2, 0), dtype=xp.float64),
                "tau": self.preset.tau}

    @property
    def updates_per_step(self):
        ny, nx = self.preset.shape
        return float(nx * ny)

    def bytes_per_update(self):
        """One read and one write of the 9 populations per node: 72 B in fp32, 36 B fp16, 144 B fp64."""
        return 2.0 * Q * self._storage_dtype.itemsize

    # ---- tests and benchmarks ---------------------------------------------------------------
    @classmethod
    def equivalence_presets(cls):
        base = {"engine": FAMILY, "description": "equivalence test"}
        return {
            # Walls top/bottom, periodic in x, a circular obstacle and a body force (P1's setting + obstacle).
            "fp32-walls-obstacle": LBM2DPreset.model_validate({
                **base, "grid": {"nx": 48, "ny": 40}, "physics": {"tau": 0.7, "force": [2e-5, 1e-6]},
                "boundaries": {"y": "walls"}, "obstacle": {"kind": "circle", "diameter": 9, "center": [0.4, 0.45]}}),
            # Closed cavity with a moving lid and a rectangle, fp64.
            "fp64-cavity": LBM2DPreset.model_validate({
                **base, "grid": {"nx": 37, "ny": 33}, "physics": {"tau": 0.65, "precision": "fp64",
                                                                 "lid_velocity": 0.05},
                "boundaries": {"x": "walls", "y": "lid"},
                "obstacle": {"kind": "rectangle", "width": 6, "height": 4, "center": [0.5, 0.4]}}),
            # TRT collision with a lid, a body force and an obstacle (single-step kernels only).
            "fp32-trt": LBM2DPreset.model_validate({
                **base, "grid": {"nx": 40, "ny": 34}, "physics": {"tau": 0.8, "collision": "trt",
                                                                 "force": [1e-5, -2e-6], "lid_velocity": -0.04},
                "boundaries": {"y": "lid"}, "obstacle": {"kind": "circle", "diameter": 7, "center": [0.6, 0.4]}}),
            # Channel with inlet/outlet and a cylinder (single-step kernels only).
            "fp32-channel": LBM2DPreset.model_validate({
                **base, "grid": {"nx": 64, "ny": 30}, "physics": {"tau": 0.6, "inlet_velocity": 0.04},
                "boundaries": {"x": "inlet-outlet", "y": "walls"},
                "obstacle": {"kind": "circle", "diameter": 8, "center": [0.3, 0.5]}}),
        }

    @classmethod
    def equivalence_companions(cls, axis, choice):
        """ts/tr/tile only act under a temporal-blocking kernel, and srtb needs tr ≥ 1: pair each
        choice with the kernel that exercises it, so the registry test checks a real launch."""
        if axis == "kernel" and choice in ("srtb", "srtb-ws"):
            return {"tr": "2"}
        if axis == "tile" and choice in variants.WAVE_TILE_CHOICES:
            return {"kernel": "wavefront"}
        if axis in ("ts", "tile"):
            return {"kernel": "stb"}
        if axis == "tr" and choice != "0":
            return {"kernel": "srtb", "ts": "8"}
        return {}

    # Steps per timed batch: a multiple of every ts, so a temporal-blocking variant runs only full
    # ts-step launches (a batch of 10 at ts 4 ran 4 + 4 + 2 and charged every batch a short launch).
    BENCH_BATCH = 16

    @classmethod
    def bench_spec(cls):
        return BenchSpec(preset="lbm2d-poiseuille", cases=cls.bench_cases, selections=cls.bench_selections,
                         grid_axes=("nx", "ny"),  # `nagare bench lbm2d --case NXxNY`: any grid size
                         batch=cls.BENCH_BATCH, precompile=cls.bench_precompile)

    @classmethod
    def bench_selections(cls, backend: str = "cupy"):
        """two-kernel first (the speed-up baseline), the single-step ladder, then P1's grid
        (kernel × ts × tr × tile; configurations that cannot run are listed with the reason), then
        the wavefront kernel (ts × its tiles)."""
        if backend == "numpy":
            return [("reference", {"kernel": "reference"}),
                    ("reference fp16", {"kernel": "reference", "storage": "fp16"})]
        out = [("two-kernel", {"kernel": "two-kernel"}), ("fused", {"kernel": "fused"}),
               ("fused graph", {"kernel": "fused", "graph": "on"}),
               ("fused aa", {"kernel": "fused", "streaming": "aa"}),
               ("fused fp16", {"kernel": "fused", "storage": "fp16"}),
               ("fused fp16 aa graph", {"kernel": "fused", "storage": "fp16", "streaming": "aa", "graph": "on"})]
        for tile in ("8x8", "10x10", "16x16", "32x8"):  # 10x10: P1's best s8r0tb tile
            for ts in ("1", "2", "4", "8"):
                out.append((f"stb s{ts}r0tb {tile}", {"kernel": "stb", "ts": ts, "tr": "0", "tile": tile}))
                for tr in ("1", "2", "4", "8"):
                    if int(tr) <= int(ts):
                        for k in ("srtb", "srtb-ws"):
                            out.append((f"{k} s{ts}r{tr}tb {tile}", {"kernel": k, "ts": ts, "tr": tr, "tile": tile}))
        for tile in variants.WAVE_TILE_CHOICES:  # beyond P1 (docs/lbm2d-temporal-blocking.md "wavefront")
            for ts in ("2", "4", "8"):
                out.append((f"wavefront ts{ts} {tile}", {"kernel": "wavefront", "ts": ts, "tr": "0", "tile": tile}))
        return out

    @classmethod
    def bench_precompile(cls, selections: list[dict], preset, jobs: int) -> None:
        """Compile the temporal-blocking modules of ``selections`` (one NVRTC module per kernel, ts,
        tr and tile) in ``jobs`` processes before `nagare bench` times them (tb_bench.precompile)."""
        from . import tb_bench
        from . import temporal_blocking as tb

        rows = [(sel, tb.unavailable_reason(sel, preset)) for sel in selections
                if sel.get("kernel") in variants.TEMPORAL_BLOCKING]
        if rows:
            tb_bench.precompile(rows, preset.physics.precision == "fp64", jobs)

    @classmethod
    def bench_cases(cls, backend: str = "cupy"):
        sizes = [320, 1024, 4096, 8192] if backend != "numpy" else [64, 128, 256, 320]
        return [(f"{n}x{n}", [f"grid.nx={n}", f"grid.ny={n}"]) for n in sizes]

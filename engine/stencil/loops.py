"""P2's loop engines: run one stencil sweep over a grid, on the host or the device.

- ``host``: vectorised NumPy evaluation (:mod:`.host`); works on CuPy arrays too (``xp``).
- ``device``: the generated z-marching CUDA kernel with a fixed launch configuration
  (P2's default (128,1,1), z-march 2, unless given; ``shape_kind`` picks another kernel shape).
- ``device-autotune``: the same kernels; each call's launch configuration — kernel shape (march,
  plain, vec by default; tile on request) and its launch numbers — comes from a
  :class:`~nagare.engine.autotune.Tuner` (one per loop = per call site, like P2's
  ``DeviceAutoTuningInfo``), which times live calls and settles on the fastest.

Generated kernels are compiled with NVRTC through CuPy, with ``--fmad=false`` so that no
multiply-add is fused: every operation rounds like NumPy's, and host and device results agree
bit for bit (except ``sqrt/exp/sin/cos``, which are within CUDA's documented ulp bounds). The
cost is nil for memory-bound stencils.
"""
from __future__ import annotations

import re
from functools import cache

import numpy as np

from .. import cuda
from ..autotune import STENCIL_SHAPES, EventTimer, Tuner, default_cache, stencil_space, tune_key
from .codegen import (
    PLAIN,
    TILE,
    VEC,
    generate,
    kernel_name,
    kernel_variants,
    march_span,
    output_at_line,
    tile_smem_bytes,
    unroll_for,
    unroll_variants,
    vec_choice,
    vec_reason,
    vec_variant,
    vec_widths,
)
from .expr import StencilError
from .host import BOUNDARIES, check_arrays, evaluate

ENGINES = ("host", "device", "device-autotune")
DEFAULT_BLOCK = (128, 1)
DEFAULT_ZMARCH = 2
COMPILE_OPTIONS = ("--fmad=false",)
TILE_SMEM_LIMIT = 48 * 1024  # dynamic shared memory of a tile launch (no opt-in attribute set)
# Kernel shapes a launch configuration may name: "march" (the z-marching kernels), "plain", "tile",
# "vec" (the widest vector kernel the grid allows) or an explicit "vec2" / "vec4".
SHAPE_KINDS = ("march", PLAIN, TILE, VEC, vec_variant(2), vec_variant(4))


class StencilCompileError(StencilError):
    """NVRTC rejected the generated source; the message names the user's expression."""


def format_compile_error(st, source: str, log: str) -> str:
    m = re.search(r"\((\d+)\): (?:catastrophic )?error:?\s*(.*)", log)
    where = f"stencil '{st.name}' ({st.location})"
    if not m:
        first = next((ln for ln in log.splitlines() if ln.strip()), "no compiler output")
        return f"{where}: CUDA compile failed: {first.strip()}"
    line, msg = int(m.group(1)), m.group(2).strip()
    out = output_at_line(source, line)
    at = f" in output {out}" if out else f" at generated line {line}"
    return f"{where}: CUDA compile failed{at}: {msg} (see `nagare stencil show {st.name}`)"


@cache
def _compiled(source: str, names: tuple[str, ...], options: tuple[str, ...], device: int):
    """The functions ``names`` of ``source`` on ``device`` (a Function is bound to the device that
    was current when it was looked up; NVRTC compiles once, RawModule loads per device)."""
    import cupy  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

    mod = cupy.RawModule(code=source, options=cuda.DEFAULT_OPTIONS + options)
    return tuple(mod.get_function(n) for n in names)


def compile_kernels(st, dtype, boundary: str) -> dict:
    """The generated kernels of ``st`` (one NVRTC compile): {unroll: function} for the z-marching
    kernels plus {"plain": …}, and in 3D {"tile": …} and {"vec2": …, "vec4": …} (those the x-halo
    allows) for the other shapes."""
    import cupy  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

    source = generate(st, dtype, boundary)
    unrolls = kernel_variants(st)
    names = tuple(kernel_name(st, dtype, boundary, u) for u in unrolls)
    try:
        return dict(zip(unrolls, _compiled(source, names, COMPILE_OPTIONS, cupy.cuda.runtime.getDevice())))
    except cupy.cuda.compiler.CompileException as exc:
        raise StencilCompileError(format_compile_error(st, source, str(exc))) from None


def compile_kernel(st, dtype, boundary: str, unroll: int = 1):
    """One generated kernel (the given unroll)."""
    return compile_kernels(st, dtype, boundary)[unroll]


def check_offsets_fit(st, shape) -> None:
    """The generated kernels address an unrolled step with 32-bit offsets from the thread's column:
    a plane (3D: nx·ny, 2D: nx) times the step's marched span must stay below 2³¹."""
    plane = int(np.prod(tuple(shape)[::-1][: st.ndim - 1]))
    lo, hi = march_span(st)
    need = plane * (max(unroll_variants(st)) + hi - lo + 1)
    if need >= 2 ** 31:
        raise StencilError(f"stencil '{st.name}': a plane of {plane} points is too large for the generated "
                           f"kernels' 32-bit offsets (plane × march span = {need} ≥ 2³¹); split the domain")


def gpu_name(cp) -> str:
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def launch_grid(st, shape, boundary: str, bx: int, by: int, zmarch: int, vec: int = 0) -> tuple[int, int, int]:
    """CUDA grid of the generated kernel: blocks tile the updated range of x and y (3D) and z is
    split into runs of ``zmarch`` planes; in 2D, y is the marched axis (runs of ``zmarch`` rows
    per thread). The plain kernel's grid is the same with ``zmarch`` = the block's z-extent bz
    (3D: blocks of bz planes; 2D: blocks of by·bz rows). A vector kernel (``vec`` = V) covers whole
    rows in x, V points per thread (its row-end vectors store only the updated points)."""
    lo = [0 if boundary == "periodic" else h for h in st.halo]
    ex = [n - 2 * h for n, h in zip(tuple(shape)[::-1], lo)]  # x, y[, z] update lengths
    if vec:
        return (-(-int(tuple(shape)[-1]) // (vec * bx)), -(-ex[1] // by), -(-ex[2] // zmarch))
    if st.ndim == 3:
        return (-(-ex[0] // bx), -(-ex[1] // by), -(-ex[2] // zmarch))
    return (-(-ex[0] // bx), -(-ex[1] // (by * zmarch)), 1)


def loop_timing_extra(loop) -> dict:
    """What an engine publishes in ``timings.extra`` about its stencil loop: the auto-tuner's state
    (device-autotune) or the fixed launch (device); nothing for the host engine."""
    if loop is None or loop.engine == "host":
        return {}
    return {"autotune" if loop.tuner is not None else "launch": loop.state()}


class Loop:
    """One call site applying ``st`` to arrays of ``shape``/``dtype`` with one loop engine."""

    def __init__(self, st, shape, dtype, *, boundary: str = "periodic", engine: str = "host", xp=None,
                 block: tuple[int, int] = DEFAULT_BLOCK, zmarch: int = DEFAULT_ZMARCH, tune: dict | None = None,
                 tune_cache=True, stream=None, shape_kind: str = "march"):
        if engine not in ENGINES:
            raise StencilError(f"unknown loop engine {engine!r}; allowed: {', '.join(ENGINES)}")
        if boundary not in BOUNDARIES:
            raise StencilError(f"unknown boundary {boundary!r}; allowed: {', '.join(BOUNDARIES)}")
        self.st, self.shape, self.dtype = st, tuple(int(n) for n in shape), np.dtype(dtype)
        if len(self.shape) != st.ndim:
            raise StencilError(f"stencil '{st.name}' is {st.ndim}D but the grid {self.shape} is {len(self.shape)}D")
        self.boundary, self.engine = boundary, engine
        self.xp = xp if xp is not None else np
        self.block, self.zmarch = tuple(block), int(zmarch)
        if shape_kind not in SHAPE_KINDS:
            raise StencilError(f"unknown kernel shape {shape_kind!r}; allowed: {', '.join(SHAPE_KINDS)}")
        self.shape_kind = shape_kind  # device engine: "plain" runs the plain kernel with block (bx, by, zmarch)
        self.tuner = None
        self._checked: set = set()
        self.last_config: dict | None = None
        if engine == "host":
            return
        import cupy  # optional dependency (CuPy, nagare[gpu]): only the GPU path gets here

        self._cp = cupy
        check_offsets_fit(st, self.shape)
        self.kernels = compile_kernels(st, self.dtype, boundary)
        self.kernel = self.kernels[1]
        self._dims = [np.int32(n) for n in self.shape[::-1]]
        if engine == "device-autotune":
            cache_obj = default_cache() if tune_cache is True else (tune_cache or None)
            key = tune_key(gpu_name(cupy), f"stencil:{st.name}:{st.fingerprint}", self.shape, self.dtype,
                           {"boundary": boundary})
            # Measurements are batches of live calls sized from a probe (launch-bound sizes get many
            # calls per measurement behind a hold; a 512³ sweep gets one); a warm-up call only for
            # the first use of each compiled unroll; candidates more than 1.5× off the best after
            # one measurement are not measured again; the 4 fastest meet in an interleaved run-off.
            opts = {"warmup": 1, "repeats": 3, "batch": "auto", "prune": 1.5, "confirm_top": 4,
                    "confirm_repeats": 4, "warm_key": self.unroll_of, **(tune or {})}
            # The kernel shapes compete: z-marching (bx, by, zmarch), plain (bx, by, bz) and (3D, when
            # the grid allows it) vec; tile only when asked for (tune={"shapes": (..., "tile")}).
            shapes = tuple(opts.pop("shapes", STENCIL_SHAPES))
            space = opts.pop("space", None) or stencil_space(
                shapes=shapes, ndim=st.ndim,
                tile_smem=lambda cfg: tile_smem_bytes(st, self.dtype, cfg["bx"], cfg["by"]),
                vec_reason=lambda cfg: vec_choice(st, self.shape)[1])
            self.tuner = Tuner(space, EventTimer(cupy, stream), key=key, cache=cache_obj,
                               start={**self.fixed_config(), **({"shape": self.shape_kind}
                                                                if "shape" in space.names else {})},
                               label=f"stencil {st.name} {'x'.join(map(str, self.shape))}", **opts)

    # ---- launch ------------------------------------------------------------------------------
    def grid(self, bx: int, by: int, zmarch: int, vec: int = 0) -> tuple[int, int, int]:
        return launch_grid(self.st, self.shape, self.boundary, bx, by, zmarch, vec)

    def unroll_of(self, cfg: dict) -> int | str:
        """The kernel a configuration runs: ``"plain"`` / ``"tile"`` for those shapes; for ``"vec"``
        the widest vector kernel this grid allows (``"vec4"``, else ``"vec2"``; ``"vec"`` itself when
        none can, which the launch refuses with the reason); an explicit ``"vec2"``/``"vec4"`` as
        given; else the unrolled z-marching kernel, ``cfg["unroll"]`` if the space has that axis, else
        the largest generated unroll ≤ zmarch."""
        shape = cfg.get("shape", "march")
        if shape == VEC:
            return vec_choice(self.st, self.shape)[0] or VEC
        if shape != "march":
            return shape
        u = cfg.get("unroll")
        if u is None:
            return unroll_for(self.st, cfg["zmarch"])
        if u not in unroll_variants(self.st):
            raise ValueError(f"unroll {u} is not generated for stencil '{self.st.name}' "
                             f"(generated: {unroll_variants(self.st)})")
        return int(u)

    def _prepare(self, cfg: dict, args: tuple):
        """Everything host-side for one launch; returns the launch itself (what the tuner times)."""
        bx, by, zm = cfg["bx"], cfg["by"], cfg["zmarch"]
        variant = self.unroll_of(cfg)
        if variant == TILE and self.st.ndim != 3:
            raise ValueError(f"tile shape: 3D only (stencil '{self.st.name}' is {self.st.ndim}D)")
        width = 0
        if isinstance(variant, str) and variant.startswith(VEC):
            width = self._check_vec(variant, bx, args)
        kernel = self.kernels[variant]
        bz = zm if variant == PLAIN else 1  # plain: the third number is the block's z-extent
        if variant == PLAIN and int(np.prod(self.shape)) >= 2 ** 31:
            raise ValueError(f"plain shape needs < 2³¹ points (int32 indices), grid has {int(np.prod(self.shape))}")
        limit = kernel.max_threads_per_block
        if bx * by * bz > limit:
            raise ValueError(f"{bx * by * bz} threads per block > this kernel's limit {limit} (registers)")
        grid, block, full = self.grid(bx, by, zm, width), (bx, by, bz), args + (np.int32(zm),)
        self.last_config = cfg
        if variant == TILE:
            hx, hy = self.st.halo[0], self.st.halo[1]
            if bx < hx or by < hy:
                raise ValueError(f"tile shape: block ({bx}, {by}) smaller than the x/y halo ({hx}, {hy})")
            smem = tile_smem_bytes(self.st, self.dtype, bx, by)
            if smem > TILE_SMEM_LIMIT:
                raise ValueError(f"tile shape: needs {smem} B of shared memory > {TILE_SMEM_LIMIT} B per block")
            return lambda: kernel(grid, block, full, shared_mem=smem)
        return lambda: kernel(grid, block, full)

    def _check_vec(self, variant: str, bx: int, args: tuple) -> int:
        """The conditions of a vector-kernel launch (raise ValueError with the reason): the stencil
        and grid allow that V (:func:`~.codegen.vec_reason`), blockDim.x is whole warps (a warp is
        one row segment, so the shuffles connect x-neighbours) and every array starts on a V-vector
        boundary (V × itemsize bytes; rows then do too, as nx % V == 0). Returns V."""
        if variant == VEC:  # no vector kernel fits this stencil / grid
            raise ValueError(vec_choice(self.st, self.shape)[1])
        width = int(variant[len(VEC):])
        reason = vec_reason(self.st, self.shape, width)
        if reason is None and width not in vec_widths(self.st):
            reason = f"{variant} shape: not generated for stencil '{self.st.name}'"
        if reason:
            raise ValueError(reason)
        if bx % 32:
            raise ValueError(f"{variant} shape: bx = {bx} is not a multiple of 32 (a warp must be one row "
                             "segment: x-neighbours are exchanged by warp shuffles)")
        align = width * self.dtype.itemsize
        names = self.st.inputs + self.st.outputs
        for name, a in zip(names, args):
            addr = _address(a)
            if addr % align:
                raise ValueError(f"{variant} shape: array '{name}' at 0x{addr:x} is not {align}-byte aligned "
                                 f"(each thread accesses {width} values as one aligned vector)")
        return width

    def fixed_config(self) -> dict:
        """The device engine's launch configuration."""
        cfg = {"bx": self.block[0], "by": self.block[1], "zmarch": self.zmarch}
        if self.shape_kind != "march":
            cfg["shape"] = self.shape_kind
        return cfg

    def _launch(self, cfg: dict, args: tuple) -> None:
        self._prepare(cfg, args)()

    def __call__(self, **kw) -> None:
        """One sweep: ``loop(f=f, fn=fn, r=0.1)`` — arrays and params by name."""
        st = self.st
        arrays = {k: v for k, v in kw.items() if k in st.inputs or k in st.outputs}
        params = {k: v for k, v in kw.items() if k not in arrays}
        # Engines call with the same few buffers every step (swapped): check each binding once.
        binding = (tuple(sorted(params)), tuple((k, id(v), v.shape, v.dtype) for k, v in sorted(arrays.items())))
        if binding not in self._checked:
            check_arrays(st, arrays, params, self.shape, self.dtype, self.boundary)
            if len(self._checked) > 64:
                self._checked.clear()
            self._checked.add(binding)
        if self.engine == "host":
            evaluate(st, self.xp, arrays, params, self.boundary)
            return
        scalar = self.dtype.type
        args = (tuple(arrays[n] for n in st.inputs) + tuple(arrays[n] for n in st.outputs)
                + tuple(scalar(params[n]) for n in st.params) + tuple(self._dims))
        if self.tuner is None:
            self._launch(self.fixed_config(), args)
        else:
            self.tuner(lambda cfg: self._prepare(cfg, args))

    def prepared(self, cfg: dict, **kw):
        """A zero-argument callable that launches one sweep with ``cfg`` on these arrays (checked once
        here); benchmarks call it many times without the per-call Python overhead."""
        st = self.st
        arrays = {k: v for k, v in kw.items() if k in st.inputs or k in st.outputs}
        params = {k: v for k, v in kw.items() if k not in arrays}
        check_arrays(st, arrays, params, self.shape, self.dtype, self.boundary)
        scalar = self.dtype.type
        args = (tuple(arrays[n] for n in st.inputs) + tuple(arrays[n] for n in st.outputs)
                + tuple(scalar(params[n]) for n in st.params) + tuple(self._dims))
        return self._prepare(cfg, args)

    def run_with(self, cfg: dict, **kw) -> None:
        """One sweep with an explicit launch configuration (benchmarks, equivalence tests)."""
        st = self.st
        arrays = {k: v for k, v in kw.items() if k in st.inputs or k in st.outputs}
        params = {k: v for k, v in kw.items() if k not in arrays}
        check_arrays(st, arrays, params, self.shape, self.dtype, self.boundary)
        scalar = self.dtype.type
        args = (tuple(arrays[n] for n in st.inputs) + tuple(arrays[n] for n in st.outputs)
                + tuple(scalar(params[n]) for n in st.params) + tuple(self._dims))
        self._launch(cfg, args)

    def state(self) -> dict:
        """What the HUD shows: the loop engine, the launch configuration and the tuner's state."""
        out = {"engine": self.engine, "stencil": self.st.name}
        if self.engine == "device":
            out["config"] = {"bx": self.block[0], "by": self.block[1], "zmarch": self.zmarch}
            out["unroll"] = unroll_for(self.st, self.zmarch)
            if self.shape_kind != "march":
                out["config"]["shape"] = self.shape_kind
                out["unroll"] = self.unroll_of(self.fixed_config())
        if self.tuner is not None:
            out.update(self.tuner.state())
        return out


def _address(a) -> int:
    """Device address of a CuPy array (host address of a NumPy one: the CPU emulation)."""
    ptr = getattr(getattr(a, "data", None), "ptr", None)
    return int(ptr) if ptr is not None else int(a.__array_interface__["data"][0])

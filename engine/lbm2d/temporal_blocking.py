"""P1's temporal-blocking steppers for D2Q9 (stb, srtb, srtb-ws) on CuPy, and a wavefront kernel
beyond P1 (``wavefront``: a strip of columns marching along y, one barrier per row).

The interface the lbm2d engine plugs into (agreed with part A):

- :func:`unavailable_reason(selection, preset)` -> ``None`` or the reason a ``(kernel, ts, tr,
  tile)`` configuration cannot run — P1's "cannot run" cells.
- :func:`make_stepper(xp, selection, preset, mask, params)` -> ``step(f_src, f_dst, nsteps)``.

selection keys: ``kernel`` in {stb, srtb, srtb-ws, wavefront}, ``ts`` (int), ``tr`` (int), ``tile`` ("WxH"),
optionally ``storage`` ("fp16": half storage, fp32 arithmetic, rounded to half after every step).
``params["dtype"]`` is the storage dtype (float32, float64 or float16).
stb is s{ts}r0tb and needs tr = 0; srtb/srtb-ws are s{ts}r{tr}tb with 1 <= tr <= ts.
wavefront needs tr = 0 and reads its tile as W threads (a strip of W − 2·ts output columns plus the
ts-wide halo on each side) × H rows marched per block.
The device code is ``shaders/cuda/lbm2d/temporal_blocking.cu`` (P1's kernels) and
``shaders/cuda/lbm2d/wavefront.cu``; the design, the geometry and the limits are in
``docs/lbm2d-temporal-blocking.md``.
"""
from __future__ import annotations

import numpy as np

from ..cuda import KernelSpec, ctype, template
from .d2q9 import CX, CY, FLUID, MOVING_WALL, SOLID, Q

CUDA_SOURCE = "cuda/lbm2d/temporal_blocking.cu"
WAVE_SOURCE = "cuda/lbm2d/wavefront.cu"
P1_KERNELS = ("stb", "srtb", "srtb-ws")
KERNELS = P1_KERNELS + ("wavefront",)

# Hopper (sm_90): 227 KB of shared memory per block with the opt-in attribute, 48 KB without.
SMEM_OPTIN_BYTES = 227 * 1024
SMEM_DEFAULT_BYTES = 48 * 1024
MAX_THREADS_PER_BLOCK = 1024
REGS_PER_BLOCK = 65536
MAX_REGS_PER_THREAD = 255


def parse_tile(tile: str) -> tuple[int, int]:
    """"WxH" → (W, H) (the tile axis' parser; a (W, H) pair is returned as it is)."""
    if isinstance(tile, tuple) and len(tile) == 2 and all(isinstance(v, int) for v in tile):
        return tile
    try:
        w, h = (int(v) for v in str(tile).lower().split("x"))
    except ValueError:
        raise ValueError(f"tile must look like '32x8' (width x height), got {tile!r}") from None
    if w < 1 or h < 1:
        raise ValueError(f"tile sides must be positive, got {tile!r}")
    return w, h


# How the temporal-blocking axes parse their choices (variants.py registers the axes with these).
AXIS_PARSERS = {"ts": int, "tr": int, "tile": parse_tile}


def typed(selection: dict) -> dict:
    """The selection with ts, tr as ints and tile as (width, height) (the lbm2d axes' parsers);
    ValueError for a value its axis cannot parse."""
    return {k: AXIS_PARSERS[k](v) if k in AXIS_PARSERS else v for k, v in selection.items()}


def register_depth(selection: dict) -> int:
    """Steps per register phase: stb (r0) takes one step per shared-memory phase."""
    return 1 if selection["kernel"] in ("stb", "wavefront") else typed(selection)["tr"]


def shared_bytes(ts: int, tile: tuple[int, int], itemsize: int) -> int:
    """Dynamic shared memory of one block: two ping-pong buffers of 9 populations on the tile plus
    a halo of width ts, and the node codes (1 byte per node, see :func:`node_codes`) on the same region."""
    ex, ey = tile[0] + 2 * ts, tile[1] + 2 * ts
    return 2 * 9 * ex * ey * itemsize + ex * ey


def wave_code_rows(ts: int) -> int:
    """Rows of the wavefront kernel's node-code ring: a power of two > 2·ts + 2 (wavefront.cu)."""
    r = 1
    while r <= 2 * ts + 2:
        r <<= 1
    return r


def wave_shared_bytes(ts: int, threads: int, itemsize: int) -> int:
    """Dynamic shared memory of one wavefront block: levels 0..ts−1 each keep a ring of 4 rows × 9
    populations × ``threads`` columns, plus the node-code ring (1 byte per node)."""
    return ts * 4 * 9 * threads * itemsize + wave_code_rows(ts) * threads


def block_shared_bytes(kernel: str, ts: int, tile: tuple[int, int], itemsize: int) -> int:
    if kernel == "wavefront":
        return wave_shared_bytes(ts, tile[0], itemsize)
    return shared_bytes(ts, tile, itemsize)


def cone_registers(kernel: str, tr: int, itemsize: int) -> int:
    """Pre-compile estimate of the 32-bit registers a thread's register cone needs.

    srtb holds level 1 of its cone: (2tr-1)^2 nodes x 9 populations; srtb-ws computes one column
    per level and holds it with the two shuffled neighbour columns, ~2 x 9 x (2tr-1) values.
    Calibrated against ptxas (sm_90, fp32, 32x8; nvcc 13.0, factored collision): srtb tr=2 48 regs,
    tr=3 158, tr=4 255 regs plus 548 B of spill stores (estimate 441 -> "cannot run"); srtb-ws tr=4
    110 (estimate 126).
    """
    words = max(1, itemsize // 4)
    if kernel == "srtb":
        return 9 * (2 * tr - 1) ** 2 * words
    if kernel == "srtb-ws":
        return 2 * 9 * (2 * tr - 1) * words
    return 2 * 9 * words


def _dtype_of(preset, selection: dict | None = None) -> np.dtype:
    """Storage dtype: fp16 when the selection asks for ``storage = fp16``, else the preset's."""
    if selection is not None and selection.get("storage") == "fp16":
        return np.dtype(np.float16)
    phys = getattr(preset, "physics", None)
    dtype = getattr(phys, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.dtype(np.float32)


def unavailable_reason(selection: dict, preset) -> str | None:
    """Why this (kernel, ts, tr, tile) cannot run for ``preset`` (None if it can)."""
    kernel = selection.get("kernel")
    if kernel not in KERNELS:
        return f"not a temporal-blocking kernel: {kernel!r}"
    bounds = getattr(preset, "boundaries", None)
    if bounds is not None and getattr(bounds, "x", None) == "inlet-outlet":
        return ("inlet/outlet boundaries are not supported by temporal blocking (their nodes need a "
                "per-step non-local rule); use fused or two-kernel")
    collision = getattr(getattr(preset, "physics", None), "collision", "bgk")
    if collision != "bgk":
        return f"temporal-blocking kernels implement BGK only (preset asks for {collision})"
    try:
        sel = typed(selection)
        ts, tr, (tw, th) = sel["ts"], sel["tr"], sel["tile"]
    except (KeyError, ValueError) as exc:
        return f"bad selection: {exc}"
    if ts < 1:
        return f"ts = {ts}: temporal blocking needs ts >= 1"
    if kernel == "stb" and tr != 0:
        return f"stb is s{{ts}}r0tb: tr must be 0 (got {tr}); use srtb for register blocking"
    if kernel == "wavefront":
        return _wave_reason(ts, tr, tw, th, _dtype_of(preset, selection))
    if kernel != "stb" and tr < 1:
        return f"{kernel} needs tr >= 1 (tr = 0 is stb)"
    if tr > ts:
        return f"tr = {tr} > ts = {ts}: the shared-memory halo holds only ts steps (P1: tr <= ts)"
    threads = tw * th
    if threads > MAX_THREADS_PER_BLOCK:
        return f"tile {tw}x{th} = {threads} threads > {MAX_THREADS_PER_BLOCK} per block"
    storage, compute = storage_and_compute(_dtype_of(preset, selection))
    itemsize = storage.itemsize
    smem = shared_bytes(ts, (tw, th), itemsize)
    if smem > SMEM_OPTIN_BYTES:
        return (f"shared memory: {smem / 1024:.1f} KB per block > {SMEM_OPTIN_BYTES // 1024} KB "
                f"(tile {tw}x{th} + halo {ts}, 2 buffers x 9 x {itemsize} B + node codes)")
    if kernel == "srtb-ws":
        if threads % 32:
            return f"srtb-ws needs whole warps: tile {tw}x{th} = {threads} threads is not a multiple of 32"
        if (tw < 32 and 32 % tw) or (tw > 32 and tw % 32):
            return f"srtb-ws needs the tile width to divide 32 or be a multiple of 32 (got {tw})"
        seg = min(tw, 32)
        if seg - 2 * (tr - 1) < 1:
            return (f"srtb-ws: a run of {seg} x-contiguous lanes keeps {seg - 2 * (tr - 1)} nodes "
                    f"after discarding {tr - 1} per edge; use a wider tile or a smaller tr")
    regs = cone_registers(kernel, register_depth(selection), compute.itemsize)
    if regs > MAX_REGS_PER_THREAD:
        return (f"registers: the s{ts}r{tr}tb cone needs ~{regs} 32-bit registers per thread "
                f"(> {MAX_REGS_PER_THREAD}); it would spill to local memory")
    return None


def _wave_reason(ts: int, tr: int, tw: int, th: int, dtype) -> str | None:
    if tr != 0:
        return f"wavefront keeps every level in shared memory: tr must be 0 (got {tr})"
    if tw > MAX_THREADS_PER_BLOCK:
        return f"wavefront tile {tw}x{th}: {tw} threads (one per column) > {MAX_THREADS_PER_BLOCK} per block"
    if tw <= 2 * ts:
        return (f"wavefront tile {tw}x{th}: a strip of {tw} columns keeps {tw - 2 * ts} after the "
                f"{ts}-column halo on each side; use a wider tile or a smaller ts")
    smem = wave_shared_bytes(ts, tw, np.dtype(dtype).itemsize)
    if smem > SMEM_OPTIN_BYTES:
        return (f"shared memory: {smem / 1024:.1f} KB per block > {SMEM_OPTIN_BYTES // 1024} KB "
                f"(ts = {ts} levels x 4 rows x 9 x {tw} columns x {np.dtype(dtype).itemsize} B + node codes)")
    return None


def storage_and_compute(dtype) -> tuple[np.dtype, np.dtype]:
    """fp16 storage computes in fp32; fp32/fp64 compute in their own precision."""
    storage = np.dtype(dtype)
    return storage, (np.dtype(np.float32) if storage == np.float16 else storage)


def kernel_name(selection: dict, dtype) -> str:
    sel = typed(selection)
    tw, th = sel["tile"]
    storage, compute = storage_and_compute(dtype)
    stype = "tb_half" if storage == np.float16 else ctype(storage)  # raw binary16 bits, see tb_d2q9.cuh
    if sel["kernel"] == "wavefront":
        return template("lbm2d_wave", stype, compute, sel["ts"], tw, th)
    return template("lbm2d_tb", stype, compute, sel["ts"], register_depth(sel), tw, th, sel["kernel"] == "srtb-ws")


def kernel_spec(selection: dict, dtype) -> KernelSpec:
    """The NVRTC module of one configuration (each is its own module: every argument is a template
    parameter)."""
    name = kernel_name(selection, dtype)
    return KernelSpec(WAVE_SOURCE if selection["kernel"] == "wavefront" else CUDA_SOURCE, (name,))


# tb_d2q9.cuh: a node code is the mask code (bits 0-6) plus TB_EDGE on fluid nodes with a solid or
# moving-wall upstream neighbour.
TB_EDGE = 0x80


def node_codes(xp, mask):
    """The kernels' per-node byte (tb_d2q9.cuh "Node codes"): ``mask | TB_EDGE`` where a fluid node
    pulls from at least one solid / moving-wall node x − c_i (periodic wrap, as the kernels)."""
    mask = xp.asarray(mask, dtype=xp.uint8)
    if int(mask.max()) >= TB_EDGE:
        raise ValueError(f"mask codes must be < {TB_EDGE} (got {int(mask.max())})")
    bounce = (mask == SOLID) | (mask == MOVING_WALL)
    edge = xp.zeros(mask.shape, dtype=bool)
    for i in range(1, Q):  # bounce[x − c_i] = bounce rolled by +c_i
        edge |= xp.roll(bounce, (int(CY[i]), int(CX[i])), axis=(0, 1))
    return xp.ascontiguousarray(mask | xp.where(edge & (mask == FLUID), TB_EDGE, 0).astype(xp.uint8))


def compiled_kernel(selection: dict, dtype):
    return kernel_spec(selection, dtype).function()


def compiled_reason(kern, selection: dict) -> str | None:
    """'Cannot run' from the compiled kernel's attributes: a launch needing more registers than a
    block may have. (Small spills are not fatal; ``step.spill_bytes`` reports them.)"""
    tw, th = typed(selection)["tile"]
    threads = tw if selection["kernel"] == "wavefront" else tw * th
    regs = int(kern.num_regs)
    if regs * threads > REGS_PER_BLOCK or int(kern.max_threads_per_block) < threads:
        return (f"registers: {regs} per thread x {threads} threads > {REGS_PER_BLOCK} per block "
                f"(the compiled kernel allows {kern.max_threads_per_block} threads)")
    return None


def make_stepper(xp, selection: dict, preset, mask, params: dict):
    """A callable ``step(f_src, f_dst, nsteps)`` advancing nsteps >= 1 from f_src into f_dst.

    f_src is left untouched; f_dst must be a different array of the same shape (9, ny, nx).
    ``nsteps`` is split into launches of ts steps and a last shorter one (the kernel takes the
    step count as an argument, <= ts, so no second compilation is needed).
    """
    reason = unavailable_reason(selection, preset)
    if reason is not None:
        raise ValueError(f"temporal-blocking variant cannot run: {reason}")
    dtype = np.dtype(params.get("dtype", _dtype_of(preset, selection)))  # the storage dtype
    _, compute = storage_and_compute(dtype)
    kern = compiled_kernel(selection, dtype)
    reason = compiled_reason(kern, selection)
    if reason is not None:
        raise ValueError(f"temporal-blocking variant cannot run: {reason}")

    sel = typed(selection)
    ts, (tw, th) = sel["ts"], sel["tile"]
    ny, nx = mask.shape
    smem = block_shared_bytes(selection["kernel"], ts, (tw, th), dtype.itemsize)
    if smem > SMEM_DEFAULT_BYTES:
        kern.max_dynamic_shared_size_bytes = smem  # Hopper opt-in beyond 48 KB
    code_d = node_codes(xp, mask)
    tau = float(params["tau"])
    fx, fy = (float(v) for v in params.get("force", (0.0, 0.0)))
    uwx, uwy = (float(v) for v in params.get("u_wall", (0.0, 0.0)))
    scal = compute.type
    # the Guo prefactor 1 − ω/2 is computed in the kernel from ω, as d2q9::collide_bgk does
    tail = (scal(1.0 / tau), scal(fx), scal(fy), scal(uwx), scal(uwy))
    if selection["kernel"] == "wavefront":  # one thread per column of a strip of tw − 2·ts outputs
        grid = ((nx + tw - 2 * ts - 1) // (tw - 2 * ts), (ny + th - 1) // th, 1)
        block = (tw, 1, 1)
    else:
        grid = ((nx + tw - 1) // tw, (ny + th - 1) // th, 1)
        block = (tw, th, 1)
    scratch = {}

    def launch(src, dst, steps):
        kern(grid, block, (src, dst, code_d, np.int32(nx), np.int32(ny), np.int32(steps)) + tail,
             shared_mem=smem)

    def step(f_src, f_dst, nsteps: int):
        nsteps = int(nsteps)
        if nsteps < 1:
            raise ValueError(f"nsteps must be >= 1, got {nsteps}")
        if f_src is f_dst:
            raise ValueError("temporal blocking needs distinct source and destination arrays")
        if f_src.shape != (9, ny, nx) or f_dst.shape != (9, ny, nx) or f_src.dtype != dtype:
            raise ValueError(f"expected two {dtype} arrays of shape (9, {ny}, {nx})")
        blocks = [ts] * (nsteps // ts) + ([nsteps % ts] if nsteps % ts else [])
        # Ping-pong between f_dst and a scratch array, parity chosen so the last block lands in f_dst.
        if len(blocks) > 1 and "tmp" not in scratch:
            scratch["tmp"] = xp.empty_like(f_dst)
        src = f_src
        for j, steps in enumerate(blocks):
            dst = f_dst if (len(blocks) - 1 - j) % 2 == 0 else scratch["tmp"]
            launch(src, dst, steps)
            src = dst

    step.selection = dict(selection)
    step.shared_bytes = smem
    step.kernel = kern
    step.spill_bytes = int(kern.local_size_bytes)
    return step


P1_TS = (1, 2, 4, 8)
P1_TR = (0, 1, 2, 3, 4)
P1_TILES = ("8x8", "16x8", "32x4", "32x8", "32x16", "64x4", "64x8")


def p1_grid(preset, kernels=P1_KERNELS, ts_values=P1_TS, tr_values=P1_TR, tiles=P1_TILES):
    """P1's Fig. 8/10 grid: every (kernel, ts, tr, tile) with its "cannot run" reason (or None).

    stb (and wavefront) appear only with tr = 0 and srtb/srtb-ws only with tr >= 1, so every row is
    meaningful.
    """
    rows = []
    for kernel in kernels:
        for ts in ts_values:
            for tr in tr_values:
                if (kernel in ("stb", "wavefront")) != (tr == 0):
                    continue
                for tile in tiles:
                    sel = {"kernel": kernel, "ts": ts, "tr": tr, "tile": tile}
                    rows.append((sel, unavailable_reason(sel, preset)))
    return rows

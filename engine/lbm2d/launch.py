"""Launch configuration of the single-step D2Q9 kernels (shaders/cuda/lbm2d/lbm2d.cu): the fused
kernel's launch per storage and grid, the NVRTC options, the node classes the fused kernels read,
and :func:`single_step`, the module's :class:`~nagare.engine.cuda.KernelSpec` with its launch
geometry for one (preset, storage, GPU).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cuda import KernelSpec, ctype, template
from . import d2q9
from .d2q9 import CX, CY, Q

CUDA_SOURCE = "cuda/lbm2d/lbm2d.cu"
BLOCK = (64, 4, 1)  # 64 x-contiguous threads (256 B per direction row, coalesced); divides 320, 1024, …
# Launch of the fused kernel per storage: ((threads x, y, z), mode); mode "vec2" / "vec4" / "vec8"
# is lbm_fused_vec with W x-adjacent nodes per thread (vector loads + shuffles; needs nx % W == 0
# and x threads a multiple of 32), "packed2/4/8" the fp16-only lbm_fused_packed (the same with the
# populations kept two to a register), "pipe{S}" / "pipe{S}r{R}" the fp16-only lbm_fused_pipe (packed,
# each warp marching down R rows of a 256-column strip with S − 1 rows in flight through cp.async;
# threads x = 32 × warps per block; needs sm_80, packed8 below that), an int k is lbm_fused with k
# nodes per thread. Chosen with engine/lbm2d/fused_bench.py's launch sweep (docs/decisions.md D6 for
# fp32, D8 for fp16); any launch gives the same result.
FUSED_LAUNCH = {"native": ((64, 1, 1), "vec4"), "fp16": ((64, 1, 1), "pipe2")}
FUSED_FALLBACK = ((64, 4, 1), 1)  # nx not a multiple of the vector width
PIPE_FALLBACK = ((128, 1, 1), "packed8")  # fp16 on a GPU without cp.async (before sm_80)
# lbm_fused_pipe needs enough warps in flight: each warp owns 256 columns × PIPE_ROWS rows, so on
# small grids too few warps run and vec4 is faster; from 2048² up the pipe wins (docs/decisions.md
# D8). Below PIPE_MIN_NODES nodes fp16 takes SMALL_FP16_LAUNCH.
PIPE_MIN_NODES = 1 << 22
SMALL_FP16_LAUNCH = ((64, 1, 1), "vec4")
# Extra NVRTC options of the lbm2d module per (storage, arithmetic type); fused_bench --hints
# measures others. fp32 vec4 needs 88 registers; capped at 80 (no spills) one more warp fits per
# scheduler, and 4096² runs faster (docs/decisions.md D7). fp64 is left alone (doubles need pairs).
# The fp16 module divides approximately (--prec-div=false: 1/ρ to 1 ulp of fp32, TRT's quotients to
# 2 ulp, ~10⁻⁷ relative, far below the 5·10⁻⁴ of fp16 storage): IEEE division's slow-path check and
# its registers made lbm_fused_pipe 8 % slower at 4096², while fp32 vec4 is memory-bound and
# unchanged by it. Its registers are left uncapped: every cap tried was slower (D9).
FUSED_OPTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("native", "float"): ("--maxrregcount=80",), ("native", "double"): (), ("fp16", "float"): ("--prec-div=false",)}
SEGMENT = 64  # lbm2d.cu SEG: nodes per segment-class byte


PIPE_WIDTH = 8  # lbm2d.cu PIPE_W: nodes per lane of lbm_fused_pipe
PIPE_STAGE_BYTES = 9 * 32 * 16 + 9 * 32 * 4 + 32 * 4  # lbm2d.cu sizeof(PipeStage): one row of one warp
# Rows each warp of lbm_fused_pipe marches. Short runs of many blocks win: at 140 registers (14 warps
# per SM) 3-row runs are the fastest at 4096² and within 0.2 % of the best at 8192² and 3072²; runs
# sized to fill the GPU in one wave are slower still (docs/decisions.md D10).
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


@dataclass(frozen=True)
class SingleStep:
    """The single-step module of one (preset, storage, GPU) and how each of its kernels launches."""
    spec: KernelSpec
    names: dict[str, str]  # role (stream, collide, fused, aa_p, aa_q, open) -> name expression
    scalar: type  # the arithmetic type's NumPy scalar (kernel arguments)
    dims: tuple[int, int, int]  # grid of the BLOCK-shaped kernels
    fused_block: tuple[int, int, int]
    fused_dims: tuple[int, int, int]
    fused_smem: int = 0  # dynamic shared memory of the fused kernel (lbm_fused_pipe's stages)
    fused_extra: tuple = ()  # trailing arguments of the fused kernel (lbm_fused_pipe's rows)
    rows: bool = False  # the ROWS instances (lbm2d.cu): a launch may update a row range of the grid
    fused_rows_per_block: int = 1  # rows one grid-y block of the fused kernel covers

    def dims_for(self, count: int) -> tuple[int, int, int]:
        """Grid of the BLOCK-shaped kernels over ``count`` rows (a row range of a ROWS module)."""
        return (self.dims[0], -(-int(count) // BLOCK[1]), 1)

    def fused_dims_for(self, count: int) -> tuple[int, int, int]:
        """Grid of the fused kernel over ``count`` rows."""
        return (self.fused_dims[0], -(-int(count) // self.fused_rows_per_block), 1)


def single_step(preset, storage: str, compute_capability: float | None = None, rows: bool = False) -> SingleStep:
    """The lbm2d.cu module (stream, collide, fused, both AA kernels, open boundaries) for this
    preset's precision and collision, ``storage`` ("native" / "fp16") and GPU; ValueError for a
    FUSED_LAUNCH mode the storage cannot take. ``rows``: the ROWS instances, whose launches take a
    row range (the decomposed step's overlap); otherwise the whole-grid ones (same arguments, the
    range ignored at compile time)."""
    arith = np.dtype(preset.physics.dtype) if storage == "native" else np.dtype(np.float32)
    t = ctype(arith)
    # fp16 travels as raw bits (d2q9.cuh converts with PTX cvt: no CUDA header under NVRTC).
    s = "unsigned short" if storage == "fp16" else t
    trt = preset.physics.collision == "trt"
    ny, nx = preset.shape
    block, mode = fused_launch(storage, nx, compute_capability, ny)
    if isinstance(mode, str):
        per_thread = vector_width(mode)  # nodes per thread along x
        fused = template("lbm_fused_vec", t, s, trt, per_thread, rows)
        if mode.startswith(("packed", "pipe")) and s != "unsigned short":
            raise ValueError(f"fused launch mode {mode!r} is for fp16 storage only")
        if mode.startswith("packed"):  # fp16 kept two to a register (lbm2d.cu lbm_fused_packed)
            fused = template("lbm_fused_packed", trt, per_thread, rows)
        elif pipe_mode(mode):  # packed, rows through a cp.async pipeline (lbm2d.cu lbm_fused_pipe)
            fused = template("lbm_fused_pipe", trt, pipe_mode(mode)[0], pipe_index_type(nx, ny), rows)
    else:
        per_thread = mode
        fused = template("lbm_fused", t, s, trt, mode, rows)
    names = {"stream": template("lbm_stream", t, s, rows), "collide": template("lbm_collide", t, s, trt, rows),
             "fused": fused, "aa_p": template("lbm_fused_aa", t, s, trt, True, rows),
             "aa_q": template("lbm_fused_aa", t, s, trt, False, rows),
             "open": template("lbm_open_boundaries", t, s, rows)}
    spec = KernelSpec(CUDA_SOURCE, tuple(names.values()), FUSED_OPTIONS[(storage, t)])
    dims = ((nx + BLOCK[0] - 1) // BLOCK[0], (ny + BLOCK[1] - 1) // BLOCK[1], 1)
    bx, by, _ = block
    fused_dims = ((nx + bx * per_thread - 1) // (bx * per_thread), (ny + by - 1) // by, 1)
    smem, extra, per_block = 0, (), by
    if pipe_mode(mode):
        stages, per_block = pipe_mode(mode)
        warps = bx // 32
        smem = warps * stages * PIPE_STAGE_BYTES
        fused_dims = (-(-nx // (32 * PIPE_WIDTH * warps)), -(-ny // per_block), 1)
        extra = (np.int32(per_block),)
    return SingleStep(spec, names, arith.type, dims, block, fused_dims, smem, extra, rows, per_block)

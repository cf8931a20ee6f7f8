"""``solver = scan-tile``: the scan solver's arithmetic (solvers/scan.py: the plan, the NumPy mirror, the
fused right-hand side) with persistent blocks that keep the next tile of lines in flight while they
solve the current one (shaders/cuda/compact/tile.cu). ``solver = scan`` stays selectable beside it.

Why: the scan kernel solves one line (or one tile) per block in phases — load, barrier, right-hand side,
two scans with barriers, store — and a block has bytes in flight only in its load phase. With three
resident blocks an SM the SM's loads come in bursts, and on average too few bytes are in flight to cover
the DRAM latency at several TB/s of bandwidth: the fraction of copy bandwidth falls as the card's bandwidth
rises (docs/compact.md, "Solvers"). Here each block loops over tiles of W lines and issues the
asynchronous copies (cp.async: global to shared, no registers held) of its next tile before it solves the
current one, so every resident block has a whole tile in flight at all times: for 4096-point fp64 lines,
32 KiB a block, ~96 KiB an SM, several times what Little's law asks at ~32 GB/s an SM.

The launch parameters follow from three rules, no per-size table:

- the tile (:func:`tile_lines`): W = the largest power of two up to one 32-byte sector of a row (4 fp64,
  8 fp32 lines) with team·W at most :data:`MAX_THREADS` and both buffers within :data:`TILE_SMEM` — a warp
  then moves W·itemsize contiguous bytes of each row of strided y-lines (whole sectors where W reaches
  the sector), and short lines get blocks of several teams; the line is solved on chip whole, so long
  lines get W = 1 (a 4096-point fp64 line is 36 KiB padded; two buffers of W of them must leave room
  for two or three blocks an SM);
- the chunk: scan.chunk_size (8 rows a thread up to 4096 points), as the mirror's plan;
- the grid (:func:`persistent_grid`): the blocks that are resident at once (:func:`resident_blocks`:
  threads, registers and shared memory an SM against the kernel's), times the SMs, at most the tiles —
  more blocks would only queue, fewer would leave SMs without bytes in flight.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from ...cuda import KernelSpec, ctype, template
from . import scan

# The rule's caps, module constants so an A/B run can widen them (tools/compact_grid.py --tile-threads,
# --tile-smem-kib): a block of team·W <= MAX_THREADS threads (several resident blocks an SM hide each
# other's barriers), both buffers <= TILE_SMEM (two blocks an SM on a 228 KiB SM, with room).
MAX_THREADS = 512
TILE_SMEM = 100 * 1024
MAX_LINES = 8  # the compiled tile widths: 1, 2, 4, 8
# An SM of compute capability 8.0-9.0, for properties a CuPy build does not report
SM_DEFAULTS = {"multiProcessorCount": 1, "maxThreadsPerMultiProcessor": 2048, "regsPerMultiprocessor": 65536,
               "sharedMemPerMultiprocessor": 228 * 1024, "maxBlocksPerMultiProcessor": 32}
SECTOR = scan.SECTOR
SOURCE = (scan.SOURCE, "cuda/compact/tile.cu")  # one NVRTC unit: tile.cu calls scan.cu's device functions
OPTIONS = scan.OPTIONS


def line_values(team: int, rows: int, w: int, dtype) -> int:
    """Values from one line of a tile buffer to the next (the kernel's ``ls``) for a team of ``team``
    threads over ``rows`` = team·chunk rows."""
    return rows + team + scan.tile_pad(w, dtype)


def tile_smem(p: scan.ScanPlan, w: int, dtype) -> int:
    """Dynamic shared memory of one block: two buffers of W padded lines."""
    return _smem(p.team, p.rows, w, dtype)


def _smem(team: int, rows: int, w: int, dtype) -> int:
    return 2 * w * line_values(team, rows, w, dtype) * np.dtype(dtype).itemsize


def kernel_max_threads(chunk: int) -> int:
    """A block's threads at most: tile.cu's __launch_bounds__ (64 registers for 8-row chunks, 128 above)."""
    return 1024 if chunk <= 8 else 512


def tile_lines(p: scan.ScanPlan, dtype, nsys: int | None = None) -> int:
    """Lines a block solves at a time (the kernel's W): see the module's rules; no wider than the lines
    there are."""
    return _tile_lines(p.team, p.chunk, dtype, nsys)


def _tile_lines(team: int, chunk: int, dtype, nsys: int | None = None) -> int:
    threads = min(MAX_THREADS, kernel_max_threads(chunk))
    w = max(1, min(MAX_LINES, SECTOR // np.dtype(dtype).itemsize))
    while w > 1 and (w * team > threads or _smem(team, team * chunk, w, dtype) > TILE_SMEM
                     or (nsys is not None and w // 2 >= nsys)):
        w //= 2
    return w


def resident_blocks(threads: int, smem: int, regs: int, static_smem: int, sm: dict) -> int:
    """Blocks of the kernel an SM holds at once: the least of what its threads, registers (allocated
    per warp in units of 256) and shared memory (+ the 1 KiB the runtime reserves a block) allow, and
    the SM's block limit. ``sm``: cudaDeviceProp's maxThreadsPerMultiProcessor, regsPerMultiprocessor,
    sharedMemPerMultiprocessor and maxBlocksPerMultiProcessor (:data:`SM_DEFAULTS` where missing)."""
    sm = {**SM_DEFAULTS, **sm}
    warps = -(-threads // 32)
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_threads = sm["maxThreadsPerMultiProcessor"] // (warps * 32)
    by_regs = sm["regsPerMultiprocessor"] // (per_warp * warps)
    by_smem = sm["sharedMemPerMultiprocessor"] // (smem + static_smem + 1024)
    return max(1, min(by_threads, by_regs, by_smem, sm["maxBlocksPerMultiProcessor"]))


def persistent_grid(tiles: int, resident: int, sms: int) -> int:
    """Blocks of one launch: every resident slot of every SM, but no more than the tiles."""
    return max(1, min(tiles, resident * sms))


def launch_shape(p: scan.ScanPlan, dtype, nsys: int, resident: int = 1, sms: int = 1):
    """(W, grid, block, dynamic shared bytes) of one launch over nsys lines."""
    w = tile_lines(p, dtype, nsys)
    tiles = -(-nsys // w)
    return w, (persistent_grid(tiles, resident, sms),), (p.team, w), tile_smem(p, w, dtype)


def kernel_name(dtype, chunk: int, periodic: bool, fused: bool, dissipative: bool, lines: int) -> str:
    return template("compact_tile", ctype(dtype), chunk, periodic, fused, dissipative, lines)


def kernel_names(dtype, chunk: int, lines: int) -> tuple[str, ...]:
    """One (chunk, W)'s instances: solve, fused, fused dissipative, for both boundary kinds."""
    return tuple(kernel_name(dtype, chunk, periodic, fused, diss, lines)
                 for periodic in (False, True) for fused, diss in ((False, False), (True, False), (True, True)))


def spec(dtype, chunk: int, lines: int) -> KernelSpec:
    """The NVRTC compilation of one (chunk, W)'s instances, compiled when first used."""
    return _spec(np.dtype(dtype).str, chunk, lines)


@cache
def _spec(dtype_str: str, chunk: int, lines: int) -> KernelSpec:
    return KernelSpec(SOURCE, kernel_names(np.dtype(dtype_str), chunk, lines), OPTIONS)


def specs_for(n: int, dtype) -> list[KernelSpec]:
    """The modules n-point lines of ``dtype`` take — the widest tile and the narrower ones a launch over
    fewer lines falls back to — for the warm-up."""
    c = scan.chunk_size(n)
    w = _tile_lines(scan.team_size(n, c), c, dtype)
    out = []
    while w >= 1:
        out.append(spec(dtype, c, w))
        w //= 2
    return out


class DeviceTile(scan.DeviceScan):
    """The tile kernels for one factorised matrix on the device: scan.DeviceScan's ``solve`` and
    ``derivative``, each one launch (a stack's strided y-lines too: lines in groups)."""

    def __init__(self, p: scan.ScanPlan, dtype, stream=None):
        super().__init__(p, dtype, stream)
        props = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)
        self._sm = {k: int(props.get(k, v)) for k, v in SM_DEFAULTS.items()}

    def _function(self, fused: bool, dissipative: bool, lines: int = 1):
        key = ("tile", fused, dissipative, lines)
        fn = self._fns.get(key)
        if fn is None:
            name = kernel_name(self.dtype, self.plan.chunk, self.plan.periodic, fused, dissipative, lines)
            fn = self._fns[key] = spec(self.dtype, self.plan.chunk, lines).function(name)
        return fn

    def _launch(self, fused: bool, dissipative: bool, src, dst, coef, nsys: int, sys_stride: int,
                elem_stride: int, group: tuple[int, int] | None) -> None:
        if nsys <= 0:
            return
        per, group_stride = group if group is not None else (nsys, 0)
        if group is not None and (per <= 0 or nsys % per or group_stride == 0):
            raise ValueError(f"lines in groups of {per} (stride {group_stride}) do not divide {nsys} lines")
        p = self.plan
        w = tile_lines(p, self.dtype, nsys)
        fn = self._function(fused, dissipative, w)
        smem = tile_smem(p, w, self.dtype)
        self._opt_in(fn, smem)
        resident = resident_blocks(p.team * w, smem, fn.num_regs, fn.shared_size_bytes, self._sm)
        grid = persistent_grid(-(-nsys // w), resident, self._sm["multiProcessorCount"])
        fn((grid,), (p.team, w),
           (src, dst, self.fac_dev, coef, np.int32(p.n), np.int32(nsys), np.int64(sys_stride),
            np.int64(elem_stride), np.int32(p.t_lo), np.int32(p.t_hi), np.int32(per), np.int64(group_stride)),
           shared_mem=smem)


class ScanTile(scan.Scan):
    name = "scan-tile"
    doc = ("the scan solver's arithmetic (bit for bit its NumPy mirror) with persistent blocks that keep the next "
           "tile of W lines in flight (cp.async) while solving the current one (engine/compact/solvers/tile.py); "
           "fuses the right-hand side like scan")

    def device(self, fac, prepared, dtype, stream=None):
        return DeviceTile(prepared, dtype, stream)

    def kernel_specs(self, dtype, selection, shape):
        """The tile modules of the x-lines and, unless transposed, the y-lines."""
        out = list(specs_for(shape[-1], dtype))
        if len(shape) > 1 and shape[0] > 1:
            out += [s for s in specs_for(shape[0], dtype) if s not in out]
        return out

    def launches(self, prepared, dtype, nsys, sys_stride, elem_stride, group):
        return 1


STRATEGIES = (ScanTile(),)

"""Parameter spaces: named axes with their values, plus constraints that say why a point is invalid."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Config = dict  # {axis name: value}
Constraint = Callable[[Config], "str | None"]  # None = valid, else the reason it cannot run


@dataclass(frozen=True)
class Space:
    """A finite product space ``axes`` (ordered) restricted by ``constraints``."""

    axes: dict[str, tuple]
    constraints: tuple[Constraint, ...] = field(default=())

    def __post_init__(self):
        for name, values in self.axes.items():
            if not values:
                raise ValueError(f"tuning axis '{name}' has no values")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.axes)

    @property
    def size(self) -> int:
        n = 1
        for v in self.axes.values():
            n *= len(v)
        return n

    def key(self, cfg: Config) -> tuple:
        return tuple(cfg[n] for n in self.names)

    def config(self, key: Sequence) -> Config:
        return dict(zip(self.names, key))

    def all_keys(self) -> list[tuple]:
        return list(itertools.product(*self.axes.values()))

    def contains(self, cfg: Config) -> bool:
        return set(cfg) == set(self.names) and all(cfg[n] in self.axes[n] for n in self.names)

    def invalid_reason(self, cfg: Config) -> str | None:
        for c in self.constraints:
            reason = c(cfg)
            if reason:
                return reason
        return None


def max_threads(limit: int = 1024, axes: tuple[str, ...] = ("bx", "by")) -> Constraint:
    def check(cfg: Config) -> str | None:
        n = 1
        for a in axes:
            n *= cfg[a]
        return f"{n} threads per block > {limit}" if n > limit else None

    return check


def min_threads(limit: int = 32, axes: tuple[str, ...] = ("bx", "by")) -> Constraint:
    """Invalid below one full warp: the missing lanes of the block's only warp stay idle."""
    def check(cfg: Config) -> str | None:
        n = 1
        for a in axes:
            n *= cfg[a]
        return f"{n} threads per block < one warp ({limit}): idle lanes" if n < limit else None

    return check


def max_shared_bytes(bytes_of: Callable[[Config], int], limit: int) -> Constraint:
    """Invalid when the candidate's shared memory (e.g. an LBM tile with its halo) exceeds ``limit``
    (the device's per-block opt-in maximum: cupy ``Device().attributes['MaxSharedMemoryPerBlockOptin']``)."""
    def check(cfg: Config) -> str | None:
        need = int(bytes_of(cfg))
        return f"needs {need} B of shared memory > {limit} B per block" if need > limit else None

    return check


def product_space(axes: dict, *constraints: Constraint) -> Space:
    """A generic space for any engine, e.g. LBM blocking ``{"tile": (16, 32, 64), "ts": (1, 2, 4), "tr": (1, 2)}``
    or SPH ``{"block": (64, 128, 256, 512)}``; the launch callable compiles/launches per candidate and may
    raise (failed compile, launch out of resources): the tuner then skips that candidate with the reason."""
    return Space({k: tuple(v) for k, v in axes.items()}, tuple(constraints))


# P2's table 1: threads in x, threads in y, z-marching length — with longer marches (32, 64) than
# the paper's 16: on a current GPU a 512³ sweep needs long runs to amortise each run's halo planes
# and to keep several unrolled planes of loads in flight per thread (docs/decisions.md D13).
STENCIL_BX = (4, 8, 16, 32, 64, 128)
STENCIL_BY = (1, 2, 4, 8, 16)
STENCIL_ZMARCH = (1, 2, 4, 8, 16, 32, 64)
P2_ZMARCH = (1, 2, 4, 8, 16)


# The plain shape (no z-march, one thread per point, 3D blocks): the third launch number is the
# block's z-extent bz; x-rows of at least a warp, as in the usual 3D stencil launches.
# The default shapes the loop engines' tuner chooses from; "tile" is selectable explicitly
# (shapes=STENCIL_SHAPES + ("tile",)) but never won a measurement and costs 36 candidates of tuning
# (docs/decisions.md D14).
STENCIL_SHAPES = ("march", "plain", "vec")
ALL_STENCIL_SHAPES = ("march", "plain", "tile", "vec")
PLAIN_BX = (32, 64, 128)
PLAIN_BY = (1, 2, 4, 8)
PLAIN_BZ = (1, 2, 4)
# The tile shape (2.5D blocking: a (bx, by) block marches over zmarch planes, staging each plane's
# xy tile + halo in shared memory): its own small sub-space.
TILE_BX = (32, 64, 128)
TILE_BY = (2, 4, 8)
TILE_ZMARCH = (8, 16, 32, 64)
SMEM_DEFAULT_LIMIT = 48 * 1024  # dynamic shared memory per block without the opt-in attribute
# The vec shape (3D: V x-consecutive points per thread, aligned vector loads, x-neighbours by warp
# shuffles, z-march): blocks of whole warps in x; marches of 4…32 planes (the hand-written kernel's
# best at 512³ was 32×8 / 4, with 32×4 and 64×4 / 8 within 1 %; a march of 1 or 2 re-reads most
# of each column's z-neighbours and 64 leaves too few blocks below 512³). Four march values keep
# the default space at 249 valid points (the tuner's auto strategy searches it by descent).
VEC_BX = (32, 64, 128)
VEC_BY = (1, 2, 4, 8, 16)
VEC_ZMARCH = (4, 8, 16, 32)


def block_threads(cfg: Config) -> int:
    """Threads per block of a stencil launch: bx·by, times bz (= ``zmarch``) for the plain shape."""
    n = cfg["bx"] * cfg["by"]
    return n * cfg["zmarch"] if cfg.get("shape", "march") == "plain" else n


def plain_limits(bx=PLAIN_BX, by=PLAIN_BY, bz=PLAIN_BZ) -> Constraint:
    """The plain shape's own sub-space (its third number is the block's z-extent, not a march)."""
    def check(cfg: Config) -> str | None:
        if cfg.get("shape", "march") != "plain":
            return None
        for name, got, allowed in (("bx", cfg["bx"], bx), ("by", cfg["by"], by), ("bz", cfg["zmarch"], bz)):
            if got not in allowed:
                return f"plain shape: {name} = {got} not in {tuple(allowed)}"
        return None

    return check


def tile_limits(bx=TILE_BX, by=TILE_BY, zmarch=TILE_ZMARCH, ndim: int | None = None,
                smem_bytes: Callable[[Config], int] | None = None, smem_limit: int = SMEM_DEFAULT_LIMIT) -> Constraint:
    """The tile shape's sub-space, 3D only, and its shared memory (``smem_bytes(cfg)``) ≤ ``smem_limit``."""
    def check(cfg: Config) -> str | None:
        if cfg.get("shape", "march") != "tile":
            return None
        if ndim is not None and ndim != 3:
            return (f"tile shape: 3D only ({ndim}D: a row's x-neighbours are in the same coalesced row, "
                    "there is no plane to stage)")
        for name, got, allowed in (("bx", cfg["bx"], bx), ("by", cfg["by"], by), ("zmarch", cfg["zmarch"], zmarch)):
            if got not in allowed:
                return f"tile shape: {name} = {got} not in {tuple(allowed)}"
        if smem_bytes is not None:
            need = int(smem_bytes(cfg))
            if need > smem_limit:
                return f"tile shape: needs {need} B of shared memory > {smem_limit} B per block"
        return None

    return check


def vec_limits(bx=VEC_BX, by=VEC_BY, zmarch=VEC_ZMARCH, ndim: int | None = None,
               reason: Callable[[Config], str | None] | None = None) -> Constraint:
    """The vec shape's sub-space: 3D only (``ndim``), bx whole warps (a warp is one row segment, its
    lanes exchange x-neighbours by shuffles), and ``reason(cfg)`` — the stencil's and grid's own
    conditions (x-halo ≤ V, nx % V == 0: ``codegen.vec_choice``) — when given."""
    def check(cfg: Config) -> str | None:
        if cfg.get("shape", "march") != "vec":
            return None
        if ndim is not None and ndim != 3:
            return f"vec shape: 3D only ({ndim}D)"
        for name, got, allowed in (("bx", cfg["bx"], bx), ("by", cfg["by"], by), ("zmarch", cfg["zmarch"], zmarch)):
            if got not in allowed:
                why = " (whole warps in x: a warp is one row segment)" if name == "bx" else ""
                return f"vec shape: {name} = {got} not in {tuple(allowed)}{why}"
        return reason(cfg) if reason is not None else None

    return check


def stencil_space(bx=STENCIL_BX, by=STENCIL_BY, zmarch=STENCIL_ZMARCH, max_block_threads: int = 1024,
                  min_block_threads: int = 32, shapes=("march",), plain=(PLAIN_BX, PLAIN_BY, PLAIN_BZ),
                  tile=(TILE_BX, TILE_BY, TILE_ZMARCH), ndim: int | None = None,
                  tile_smem: Callable[[Config], int] | None = None, smem_limit: int = SMEM_DEFAULT_LIMIT,
                  vec=(VEC_BX, VEC_BY, VEC_ZMARCH), vec_reason: Callable[[Config], str | None] | None = None) -> Space:
    """The launch space of stencil kernels.

    ``shapes=("march",)`` (default): the z-marching kernels, axes (bx, by, zmarch): 210 points, of
    which 161 valid (blocks of one warp up to 1024 threads); ``zmarch=P2_ZMARCH, min_block_threads=1``
    is P2's own 150 (145 valid). With ``shapes=STENCIL_SHAPES`` (the loop engines' default) a fourth
    axis ``shape`` adds the plain kernel, whose block is (bx, by, bz = zmarch) restricted to ``plain`` =
    (bx, by, bz) values, and the vec kernel (block (bx, by), z-march) restricted to ``vec`` =
    (bx, by, zmarch) values, 3D only (``ndim``), valid only where ``vec_reason(cfg)`` is None:
    630 points, 161 + 32 + 56 = 249 valid (above the tuner's exhaustive limit of 64: descent; 193 where the grid
    rules vec out). ``"tile"`` in ``shapes`` adds the tile kernel (2.5D blocking, block (bx, by),
    z-march) restricted to ``tile`` = (bx, by, zmarch) values, 3D only, with ``tile_smem(cfg)`` bytes
    of shared memory ≤ ``smem_limit`` (36 points; ALL_STENCIL_SHAPES: 840 points, 285 valid)."""
    axes = {"bx": tuple(bx), "by": tuple(by), "zmarch": tuple(zmarch)}
    if tuple(shapes) != ("march",):
        axes["shape"] = tuple(shapes)

    def too_many(cfg: Config) -> str | None:
        n = block_threads(cfg)
        return f"{n} threads per block > {max_block_threads}" if n > max_block_threads else None

    def too_few(cfg: Config) -> str | None:
        n = block_threads(cfg)
        return f"{n} threads per block < one warp ({min_block_threads}): idle lanes" if n < min_block_threads else None

    constraints = [plain_limits(*plain), tile_limits(*tile, ndim=ndim, smem_bytes=tile_smem, smem_limit=smem_limit),
                   vec_limits(*vec, ndim=ndim, reason=vec_reason), too_many]
    if min_block_threads > 1:
        constraints.append(too_few)
    return Space(axes, tuple(constraints))

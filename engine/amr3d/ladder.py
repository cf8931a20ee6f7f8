"""P0's kernel ladder on one level of leaves (shaders/cuda/amr3d/ladder.cu), host side.

A *leaf grid* is what the ladder runs on: ``nleaf`` leaves of M³ node-centred points, f stored as
[q][leaf][k][j][i], and a neighbour table ``nbr[leaf, 27]`` (slot (nz+1)·9 + (ny+1)·3 + (nx+1),
the leaf itself at slot 13) that any tree, or a plain periodic arrangement, provides. This module
knows the kernels' names, their launch shapes and the shell classes; it never searches a tree.

Rungs (axis ``kernels``, P0 §3; each adds to the previous):
  naive        one kernel over every point, runtime neighbour branches
  split        inner kernel + one outer-shell kernel over a point list
  templates    inner + 26 class kernels (compile-time access patterns), concurrent on streams
  sorted       inner + the 26 class bodies in one launch, one class per warp (beyond P0)
  apart        split's two kernels on the apart storage (inner blocks and shells stored in separate
               runs, storage.py): each kernel writes whole 32-byte sectors (beyond P0, for HBM)
The mother-leaf rung is a storage change (leaves of 2m−1 points), not a kernel change:
see engine/amr3d/storage.py.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from .collision import prelude as collision_prelude

SOURCE = "cuda/amr3d/ladder.cu"
BLOCK = 128

# The 26 shell classes in the order of amr3d_shell_sorted's switch: 6 faces, 12 edges, 8 corners.
FACES = [(-1, 0, 0), (1, 0, 0), (0, -1, 0), (0, 1, 0), (0, 0, -1), (0, 0, 1)]
EDGES = ([(gi, gj, 0) for gj in (-1, 1) for gi in (-1, 1)] + [(gi, 0, gk) for gk in (-1, 1) for gi in (-1, 1)]
         + [(0, gj, gk) for gk in (-1, 1) for gj in (-1, 1)])
CORNERS = [(gi, gj, gk) for gk in (-1, 1) for gj in (-1, 1) for gi in (-1, 1)]
SHELL_CLASSES = FACES + EDGES + CORNERS
RUNGS = ("naive", "split", "templates", "sorted")  # on any leaf grid (a box, or one level of a tree)
BOX_RUNGS = ("apart",)  # on a storage of their own: one level of periodic leaves only


def velocity_prelude(c: np.ndarray, w, model=None) -> str:
    """#define lines carrying the velocity set (c: (27, 3) ints, w: 27 weights, exact fractions
    preferred) into ladder.cu, prepended to its source: the table lives in one place, the Python
    module that defines it. (Not -D options: nvcc splits option values at commas.)

    ``model`` (collision.Collision, default P0's BGK) adds the macros that select d3q27.cuh's
    collision operator and its tables (collision.prelude); for BGK nothing is added, so the BGK
    source is the one of before (same NVRTC cache entries, same bits)."""
    def ints(v):
        return "{" + ",".join(str(int(x)) for x in v) + "}"

    def exact(x):
        fr = x if isinstance(x, Fraction) else Fraction(x).limit_denominator(10**6)
        return f"{fr.numerator}.0/{fr.denominator}.0"
    c = np.asarray(c)
    return (f"#define D3Q27_CX {ints(c[:, 0])}\n#define D3Q27_CY {ints(c[:, 1])}\n#define D3Q27_CZ {ints(c[:, 2])}\n"
            "#define D3Q27_W {" + ",".join(exact(x) for x in w) + "}\n") + collision_prelude(c, model)


def class_points(m: int, g: tuple[int, int, int]) -> int:
    """Points of shell class g in one leaf of m³ points."""
    return math.prod(1 if gi else m - 2 for gi in g)  # (plain ints: a stepper asks for 26 classes a level)


def shell_list(m: int) -> np.ndarray:
    """Point indices ((k·m + j)·m + i) of a leaf's outer shell, in index order (split's shell kernel)."""
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    on = (i == 0) | (i == m - 1) | (j == 0) | (j == m - 1) | (k == 0) | (k == m - 1)
    return ((k * m + j) * m + i)[on].astype(np.int32)


def sorted_segments(m: int, nleaf: int, warp: int = 32) -> np.ndarray:
    """First thread of each class in amr3d_shell_sorted (each class padded to whole warps), then the total."""
    sizes = [nleaf * class_points(m, g) for g in SHELL_CLASSES]
    padded = [-(-s // warp) * warp for s in sizes]
    return np.concatenate([[0], np.cumsum(padded)]).astype(np.int64)


@dataclass(frozen=True)
class PointCounts:
    total: int
    inner: int
    shell: int


def point_counts(m: int, nleaf: int) -> PointCounts:
    return PointCounts(nleaf * m**3, nleaf * (m - 2) ** 3, nleaf * (m**3 - (m - 2) ** 3))


def shared_copies(nbr: np.ndarray, same: np.ndarray | None, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(dst, src) int64 point ids (leaf · m³ + local) of one level's leaf grid: every stored copy of a
    shared node (a face, edge or corner node that same-level neighbours also store) that is not
    the node's *owner*, and the owner's copy — the lowest point id among the copies, i.e. the
    lowest leaf index (then the lowest local index: a one-leaf periodic axis stores one node at 0
    and m−1 of the same leaf). ``nbr`` (n, 27): the neighbour rows of the ladder; ``same`` (n, 27)
    bool: which rows hold a same-level neighbour (None: all, as on P0's periodic box).
    Used by Kobayashi's CSM (collision.py): C of a shared node is the owner's, so every copy
    collides alike and the copies stay equal, as the ladder keeps them without LES."""
    nbr = np.asarray(nbr, np.int64)
    n, m3 = nbr.shape[0], m ** 3
    same = np.ones(nbr.shape, bool) if same is None else np.asarray(same, bool)
    local, slots = _shared_node_slots(m)
    own = np.arange(n, dtype=np.int64)[:, None] * m3 + local[None, :]  # (n, S)
    best = own.copy()
    for slot, on, their_local in slots:
        rows = same[:, slot]
        if not rows.any():
            continue
        theirs = nbr[rows, slot][:, None] * m3 + their_local[None, :]
        sub = best[np.ix_(rows, on)]
        best[np.ix_(rows, on)] = np.minimum(sub, theirs)
    moved = best != own
    return own[moved], best[moved]


@lru_cache(maxsize=8)
def _shared_node_slots(m: int):
    """A leaf's shell (local flat ids (S,), x, y, z order) and, for each neighbour slot whose leaf
    shares nodes with it, (slot, which shell points (S,) bool, their local ids in that neighbour):
    shared_copies' geometry, the same for every level and regrid of one m."""
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    shell = ((i == 0) | (i == m - 1) | (j == 0) | (j == m - 1) | (k == 0) | (k == m - 1)).ravel()
    ijk = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)[shell]  # (S, 3) x, y, z
    local = ((ijk[:, 2] * m + ijk[:, 1]) * m + ijk[:, 0]).astype(np.int64)
    slots = []
    for nz, ny, nx in itertools.product((-1, 0, 1), repeat=3):
        if nx == ny == nz == 0:
            continue
        on = np.ones(len(local), bool)
        for g, col in ((nx, 0), (ny, 1), (nz, 2)):
            if g:
                on &= ijk[:, col] == (m - 1 if g > 0 else 0)
        if not on.any():
            continue
        o = ijk[on] - np.array([nx, ny, nz]) * (m - 1)
        their = (o[:, 2] * m + o[:, 1]) * m + o[:, 0]
        for a in (on, their):
            a.flags.writeable = False
        slots.append(((nz + 1) * 9 + (ny + 1) * 3 + (nx + 1), on, their))
    local.flags.writeable = False
    return local, tuple(slots)


# ---- plain periodic leaf grids (P0's benchmark box; the uniform-level test) ---------------------
def periodic_neighbours(shape: tuple[int, int, int]) -> np.ndarray:
    """nbr[leaf, 27] for a periodic lx × ly × lz arrangement of same-level leaves, leaf index
    (z·ly + y)·lx + x."""
    lx, ly, lz = shape
    z, y, x = np.meshgrid(np.arange(lz), np.arange(ly), np.arange(lx), indexing="ij")
    cols = []
    for nz, ny, nx in itertools.product((-1, 0, 1), repeat=3):
        cols.append((((z + nz) % lz) * ly + (y + ny) % ly) * lx + (x + nx) % lx)
    return np.stack([c.ravel() for c in cols], axis=1).astype(np.int32)

"""The storages of one level of leaves, and lossless conversions between them (any xp).

- leaves:   f[..., leaf, m, m, m], leaf = (z·ly + y)·lx + x; neighbouring leaves share face nodes
            (each stores a copy; the copies are equal after every step);
- mothers:  P0 §3.3 on one level: each 2×2×2 group of sibling leaves as one mother leaf of
            (2m−1)³ points, their shared faces stored once;
- uniform:  the plain periodic lattice the leaves tile, f[..., Z, Y, X] (the break-even reference);
- apart:    the leaves' points, each direction's plane as [every leaf's inner block][every leaf's
            shell] (f[..., nleaf·m³]; inner points and shell points in index order): the storage on
            which split's two kernels each write one contiguous run (ladder.cu "The apart storage").
The mothers and uniform conversions go through the uniform lattice, which holds each node once, so
converting and converting back returns the same bits; the apart conversion is a permutation of the
stored points (shared nodes' copies kept as they are), lossless too.
"""
from __future__ import annotations

import numpy as np

from . import d3q27
from .uploads import constant


def uniform_from_leaves(xp, f, m: int, shape: tuple[int, int, int]):
    """f[..., leaf, m, m, m] → u[..., lz·s, ly·s, lx·s] with s = m − 1 (each node from the leaf that
    holds it at an index 0..m−2)."""
    lx, ly, lz = shape
    s = m - 1
    lead = f.shape[:-4]
    b = f[..., :s, :s, :s].reshape(*lead, lz, ly, lx, s, s, s)
    n = len(lead)
    b = b.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2, n + 5)
    return xp.ascontiguousarray(b).reshape(*lead, lz * s, ly * s, lx * s)


def leaves_from_uniform(xp, u, m: int, shape: tuple[int, int, int]):
    """Inverse of :func:`uniform_from_leaves`: cut the periodic lattice into leaves that share faces."""
    lx, ly, lz = shape
    s = m - 1
    r = xp.arange(m)
    zz = (xp.arange(lz)[:, None] * s + r[None, :]) % u.shape[-3]
    yy = (xp.arange(ly)[:, None] * s + r[None, :]) % u.shape[-2]
    xx = (xp.arange(lx)[:, None] * s + r[None, :]) % u.shape[-1]
    g = u[..., zz[:, None, None, :, None, None], yy[None, :, None, None, :, None], xx[None, None, :, None, None, :]]
    return xp.ascontiguousarray(g).reshape(*u.shape[:-3], lx * ly * lz, m, m, m)


def mother_size(m: int) -> int:
    """Points along each axis of a mother leaf: 2 × 2 × 2 sibling leaves of m³ points, their shared
    faces stored once (P0 §3.3)."""
    return 2 * m - 1


def mother_shape(shape: tuple[int, int, int]) -> tuple[int, int, int] | None:
    """The arrangement of mother leaves, or None when some axis has an odd number of leaves."""
    if any(n % 2 for n in shape):
        return None
    return (shape[0] // 2, shape[1] // 2, shape[2] // 2)


def mothers_from_leaves(xp, f, m: int, shape):
    half = mother_shape(shape)
    if half is None:
        raise ValueError(f"mother leaves need an even number of leaves per axis, not {tuple(shape)}")
    return leaves_from_uniform(xp, uniform_from_leaves(xp, f, m, shape), mother_size(m), half)


def leaves_from_mothers(xp, f, m: int, shape):
    half = mother_shape(shape)
    return leaves_from_uniform(xp, uniform_from_leaves(xp, f, mother_size(m), half), m, shape)


def apart_order(m: int) -> np.ndarray:
    """A leaf's local point ids ((k·m + j)·m + i) in the apart storage's order: the (m−2)³ inner
    points in index order, then the shell points in index order (ladder.shell_list's)."""
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    on = ((i == 0) | (i == m - 1) | (j == 0) | (j == m - 1) | (k == 0) | (k == m - 1)).ravel()
    p = np.arange(m**3)
    return np.concatenate([p[~on], p[on]]).astype(np.int64)


def apart_from_leaves(xp, f, m: int):
    """f[..., leaf, m, m, m] → a[..., nleaf·m³]: every leaf's inner block, then every leaf's shell."""
    lead, n, n3 = f.shape[:-4], f.shape[-4], (m - 2) ** 3
    g = f.reshape(*lead, n, m**3)
    order = xp.asarray(apart_order(m))
    inner = g[..., order[:n3]].reshape(*lead, n * n3)
    shell = g[..., order[n3:]].reshape(*lead, n * (m**3 - n3))
    return xp.concatenate([inner, shell], axis=-1)


def leaves_from_apart(xp, a, m: int, nleaf: int):
    """Inverse of :func:`apart_from_leaves`."""
    lead, n3 = a.shape[:-1], (m - 2) ** 3
    if a.shape[-1] != nleaf * m**3:
        raise ValueError(f"an apart storage of {a.shape[-1]} points is not {nleaf} leaves of {m}³")
    order = xp.asarray(apart_order(m))
    g = xp.empty((*lead, nleaf, m**3), dtype=a.dtype)
    g[..., order[:n3]] = a[..., :nleaf * n3].reshape(*lead, nleaf, n3)
    g[..., order[n3:]] = a[..., nleaf * n3:].reshape(*lead, nleaf, m**3 - n3)
    return g.reshape(*lead, nleaf, m, m, m)


# ---- fp16 storage (beyond P0; as lbm2d's): the shifted populations f_q − w_q in IEEE half ----------
def _w(xp, ndim: int):
    """The weights as the kernels hold them (fp32, d3q27.cuh w(q)), shaped to broadcast over f[q, ...]
    (on a device once: a regrid converts every level's state, each conversion would upload them)."""
    w = constant(xp, "fp16 storage weights", lambda: d3q27.W.astype(np.float32))
    return w.reshape(-1, *([1] * (ndim - 1)))


def to_fp16(xp, f):
    """fp32 populations f[q, ...] → their fp16 storage: f − w in fp32, rounded to nearest even
    (the kernels' store_pop, bit for bit)."""
    return (f.astype(np.float32, copy=False) - _w(xp, f.ndim)).astype(np.float16)


def from_fp16(xp, h):
    """fp16 storage → fp32 populations: half → fp32, + w in fp32 (the kernels' load_pop)."""
    return h.astype(np.float32) + _w(xp, h.ndim)


def round_fp16(xp, f):
    """What fp16 storage keeps of fp32 populations (the reference rung's fp16 path)."""
    return from_fp16(xp, to_fp16(xp, f))

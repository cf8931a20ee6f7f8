"""The distinct rows of an int64 matrix in np.unique's order, fast: the interpolated buffer of the
level coupling holds the distinct coarse stencils in that order (interface.level_coupling,
group_desc.py), and sorting them as NumPy's structured records took seconds of a tree's build."""
from __future__ import annotations

import numpy as np

from .uploads import constant


def unique_rows(key: np.ndarray, lead=None) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse) of the distinct rows of an int64 matrix, exactly as ``np.unique(key,
    axis=0, return_index=True, return_inverse=True)`` gives them (same groups, same lexicographic
    order), faster: rows are hashed to one int64 each (a dot product with odd random weights, wrapping),
    the hashes made unique, every row compared with its group's first — a collision (never seen)
    falls back to ``np.unique(axis=0)`` — and only the distinct rows are then sorted (as byte strings).
    np.unique over all rows sorts them as structured records: 4 s of an 18 s build. The order
    matters on the GPU: the interpolated buffer follows it, and in hash order the coupling kernels
    would gather the coarse points at random (about three times the coupling phase's time on the
    sphere bench: docs/benchmarks/amr3d-design-figures/README.md).
    ``lead``: columns that order the rows where the caller expects them all distinct
    (:func:`distinct_order`): tried first, the hashing only where that finds equal rows."""
    key = np.ascontiguousarray(key, np.int64)
    if key.ndim != 2 or not len(key):
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        return first, inv.reshape(-1)
    if lead is not None:
        order = distinct_order(np, key, lead)
        if order is not None:
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            return order, rank
    mult = np.random.default_rng(0x6E61676172).integers(1, 2 ** 62, key.shape[1], dtype=np.int64) | 1
    h = key @ mult  # wrapping int64 dot product: one pass over the rows (a column loop took 20× as long)
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    rep = key[first]
    for c0 in range(0, len(key), _CHECK_ROWS):  # (in cache-sized blocks: no K × columns temporaries)
        if not np.array_equal(rep[inv[c0:c0 + _CHECK_ROWS]], key[c0:c0 + _CHECK_ROWS]):
            _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
            return first, inv.reshape(-1)
    order = _lexicographic_order(rep)  # the distinct rows in np.unique's order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inv]


_CHECK_ROWS = 4096  # rows compared at a time by unique_rows' collision check


def distinct_order(xp, rows, lead):
    """np.unique's order of the rows (an xp int64 matrix) if they are all distinct, else None:
    sorted by the ``lead`` columns (a few int64 sorts), the runs those leave tied sorted as whole
    rows, then every neighbour pair checked — the first column where they differ increases — so a
    wrong guess of the leading columns costs time, never a wrong order. The same array code on
    NumPy and CuPy (the tied runs sorted as byte strings on NumPy, by CuPy's lexsort on a device)."""
    lead = np.asarray(lead, np.int64)
    key = tuple(lead.tolist())  # (the columns' indices on the device once)
    order = xp.lexsort(rows[:, constant(xp, ("lead reversed", key), lambda: lead[::-1])].T)
    ld = rows[order][:, constant(xp, ("lead", key), lambda: lead)]
    tied = xp.zeros(len(order), bool)
    same = (ld[1:] == ld[:-1]).all(axis=1)
    tied[1:] |= same
    tied[:-1] |= same
    at = xp.flatnonzero(tied)
    if at.size:
        run = xp.cumsum(~xp.concatenate([xp.zeros(1, bool), same]))[at]  # the run each tied row is in
        sub = order[at]
        keyed = xp.concatenate([run[:, None], rows[sub]], axis=1)
        if xp is np:
            order[at] = sub[_lexicographic_order(keyed)]
        else:
            order[at] = sub[xp.lexsort(keyed.T[::-1])]
    srt = rows[order]
    diff = srt[1:] != srt[:-1]
    col = diff.argmax(axis=1)
    i = xp.arange(len(col))
    # every neighbour pair differs, and increases where it first differs (one read-back for both)
    if not bool(diff[i, col].all() & (srt[1:][i, col] > srt[:-1][i, col]).all()):
        return None
    return order


def _lexicographic_order(rows: np.ndarray) -> np.ndarray:
    """The order ``np.lexsort(rows.T[::-1])`` gives for distinct int64 rows, as one sort of byte
    strings: each value's sign bit flipped and its bytes big-endian, so comparing a row's bytes
    compares its values in order, first column first (five times as fast as 54 lexsort passes)."""
    flipped = (rows.view(np.uint64) ^ np.uint64(1 << 63)).astype(">u8")
    records = np.ascontiguousarray(flipped).view(np.dtype((np.void, 8 * rows.shape[1]))).reshape(-1)
    return np.argsort(records, kind="stable")

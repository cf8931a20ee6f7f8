"""Compact interpolation rows of a level's coupling (interface.LevelCoupling interp_slot, interp_w):
per distinct source position u only its nonzero (coarse node, weight) pairs, and a 27-bit mask of
the populations the level's fix-up reads there (its descriptors' entries in the interpolated
buffer), for coupling.cu amr3d_interpolate_rows.

Why: the quadratic stencil is a tensor product of three 3-point axes, and an axis on which the
source lies on a coarse node has weights (0, 1, 0) — measured on the three-level test tree, 25 % of
the positions have 3 nonzero weights, 50 % 9 and 25 % 27 (12 of 27 on average). And a fine point
next to the interface pulls across it only the populations that stream in from the coarse side,
about a third of the 27 at a position. The dense rows read all 27 stencil nodes for all 27
populations; the compact rows read ~12 nodes for ~9 populations.

Same values, bit for bit: a zero weight adds w · x = ±0 to a nonzero sum (exact, contracted into
an FMA or not), and a row's first nonzero term stands where the dense row's zero first term plus
it stood (0 + w x = w x); the pairs keep the dense row's order s = 0 … S−1, so the sum runs in the
reference's order. Entries outside the mask are left as they were: nothing reads them.

Every function takes the arrays of any xp (NumPy, or CuPy where the tables were built or uploaded).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import d3q27


@dataclass
class InterpRows:
    row: object  # (U + 1,) int32: position u's pairs are [row[u], row[u + 1])
    slot: object  # (nnz,) int32: index into the coarse buffer's nodes (coarse_pts)
    w: object  # (nnz,) float32 weights, never 0
    mask: object  # (U,) uint32: bit q set where the fix-up reads population q at position u

    @property
    def n(self) -> int:
        return int(self.mask.size)

    def nbytes(self) -> int:
        return int(self.row.nbytes + self.slot.nbytes + self.w.nbytes + self.mask.nbytes)


def build(xp, interp_slot, interp_w, desc, n_fine: int) -> InterpRows:
    """The compact rows of a level from its dense rows (U, S) and its fix-up descriptors (Q, R):
    an entry −1 − j with Q · n_fine ≤ j < Q · n_fine + Q · U reads population (j − Q · n_fine) // U
    of position (j − Q · n_fine) % U. ``n_fine``: the level's fine nodes (fine_pts.size)."""
    slot, w = xp.asarray(interp_slot), xp.asarray(interp_w)
    u_count = int(slot.shape[0])
    nz = w != 0
    counts = nz.sum(axis=1, dtype=np.int64)
    row = xp.zeros(u_count + 1, np.int64)
    row[1:] = xp.cumsum(counts)
    need = xp.zeros(d3q27.Q * u_count, bool)
    if u_count:
        d = xp.asarray(desc).reshape(-1)
        j = -1 - d[d < 0].astype(np.int64) - d3q27.Q * int(n_fine)
        need[j[(j >= 0) & (j < d3q27.Q * u_count)]] = True
    bits = xp.asarray((np.uint32(1) << np.arange(d3q27.Q, dtype=np.uint32))[:, None])
    mask = (need.reshape(d3q27.Q, u_count).astype(np.uint32) * bits).sum(axis=0, dtype=np.uint32)
    return InterpRows(row=row.astype(np.int32), slot=slot[nz].astype(np.int32), w=w[nz].astype(np.float32),
                      mask=mask)


def apply(xp, rows: InterpRows, coarse, out) -> None:
    """out[q, u] = Σ over u's pairs, in order, w · coarse[q, slot] where mask[u] has bit q (the
    kernel's arithmetic in array code: the first pair's product, then one addition a pair)."""
    u_count = rows.n
    if not u_count:
        return
    row = rows.row.astype(np.int64)
    length = row[1:] - row[:-1]
    acc = xp.zeros((coarse.shape[0], u_count), coarse.dtype)
    for k in range(int(length.max(initial=0))):
        sel = xp.nonzero(length > k)[0]
        at = row[sel] + k
        term = rows.w[at].astype(coarse.dtype) * coarse[:, rows.slot[at]]
        acc[:, sel] = term if k == 0 else acc[:, sel] + term
    bits = xp.asarray((np.uint32(1) << np.arange(d3q27.Q, dtype=np.uint32))[:, None])
    need = (rows.mask[None, :] & bits) != 0
    out[need] = acc[need]

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
    count: object  # (U,) int32: position u's nonzero pairs, the first count[u] of its row
    slot: object  # (U, S) int32: index into the coarse buffer's nodes (coarse_pts), nonzero pairs first
    w: object  # (U, S) float32 weights in the same order (zeros after the row's count, never read)
    mask: object  # (U,) uint32: bit q set where the fix-up reads population q at position u

    @property
    def n(self) -> int:
        return int(self.mask.shape[0])

    @property
    def stride(self) -> int:
        return int(self.slot.shape[1])

    def nbytes(self) -> int:
        return int(self.count.nbytes + self.slot.nbytes + self.w.nbytes + self.mask.nbytes)


def build(xp, interp_slot, interp_w, desc, n_fine: int) -> InterpRows:
    """The compact rows of a level from its dense rows (U, S) and its fix-up descriptors (Q, R):
    an entry −1 − j with Q · n_fine ≤ j < Q · n_fine + Q · U reads population (j − Q · n_fine) // U
    of position (j − Q · n_fine) % U. ``n_fine``: the level's fine nodes (fine_pts.size).
    The rows keep the dense shape (each row's nonzero pairs moved to its front in their order, the
    zeros behind): on a device the build is whole-array operations without a read-back or an
    upload (a regrid builds it while the device works: tests/unit/test_amr3d_regrid_count.py). The
    CUDA stepper builds the same arrays in two launches (tree_stepper.CupyKernels._build_rows)."""
    slot, w = xp.asarray(interp_slot), xp.asarray(interp_w)
    u_count, stencil = int(slot.shape[0]), int(slot.shape[1])
    # the entries' indices in 32 bits where the rows' entries fit
    idx = np.int32 if u_count * stencil < 2**31 else np.int64
    nz = w != 0
    nonzero = xp.cumsum(nz, axis=1, dtype=idx)  # the row's nonzero pairs up to and including each
    count = nonzero[:, -1].astype(np.int32)
    # each pair's column in the compact row: the nonzero ones first, each group in its order (a zero
    # pair at s has s − nonzero[s] zeros before it)
    col = xp.where(nz, nonzero - 1, count[:, None] + xp.arange(stencil, dtype=idx)[None] - nonzero)
    at = xp.arange(u_count, dtype=idx)[:, None] * stencil + col
    cslot = xp.zeros(u_count * stencil, np.int32)
    cw = xp.zeros(u_count * stencil, np.float32)
    cslot[at.reshape(-1)] = slot.reshape(-1).astype(np.int32)
    cw[at.reshape(-1)] = w.reshape(-1).astype(np.float32)
    # the populations read: entries past the interpolated buffer's land in one spare slot
    size = d3q27.Q * u_count
    d = xp.asarray(desc).reshape(-1).astype(np.int64)
    j = -1 - d - d3q27.Q * int(n_fine)
    need = xp.zeros(size + 1, np.uint32)
    need[xp.where((d < 0) & (j >= 0) & (j < size), j, size)] = 1
    bits = xp.arange(d3q27.Q, dtype=np.uint32)[:, None]
    mask = (need[:size].reshape(d3q27.Q, u_count) << bits).sum(axis=0, dtype=np.uint32)
    return InterpRows(count=count, slot=cslot.reshape(u_count, stencil), w=cw.reshape(u_count, stencil), mask=mask)


def apply(xp, rows: InterpRows, coarse, out) -> None:
    """out[q, u] = Σ over u's pairs, in order, w · coarse[q, slot] where mask[u] has bit q (the
    kernel's arithmetic in array code: the first pair's product, then one addition a pair)."""
    u_count = rows.n
    if not u_count:
        return
    acc = xp.zeros((coarse.shape[0], u_count), coarse.dtype)
    for k in range(rows.stride):
        sel = xp.nonzero(rows.count > k)[0]
        if not sel.size:
            break
        term = rows.w[sel, k].astype(coarse.dtype) * coarse[:, rows.slot[sel, k]]
        acc[:, sel] = term if k == 0 else acc[:, sel] + term
    bits = xp.arange(d3q27.Q, dtype=np.uint32)[:, None]
    need = ((rows.mask[None, :] >> bits) & 1) != 0
    out[need] = acc[need]

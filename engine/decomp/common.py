"""Pieces the adapters share: the slab geometry of one sub-domain, the ghost copies, the overlap
split, the per-GPU step times, and entering a part's device and stream."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Slab:
    """One sub-domain along the split axis, in global rows: it owns [lo, hi) and stores [a, b)
    (owned rows plus up to ``h`` ghost rows per side; outside 0..n only where the axis wraps)."""
    index: int
    lo: int
    hi: int
    a: int
    b: int
    h: int

    @property
    def length(self) -> int:
        return self.b - self.a

    @property
    def owned(self) -> slice:
        """The owned rows in local indices."""
        return slice(self.lo - self.a, self.hi - self.a)


def ghost_copies(slabs: list[Slab], n: int):
    """[(src part, src local rows, dst part, dst local rows)] filling every ghost row of every slab
    from the slab that owns it (global row g mod n). Each ghost run of a side lies in one owner
    (ghost width ≤ rows of every part)."""
    owner = {}
    for s in slabs:
        for g in range(s.lo, s.hi):
            owner[g] = s
    out = []
    for s in slabs:
        for g0, g1 in ((s.a, s.lo), (s.hi, s.b)):
            if g1 <= g0:
                continue
            src = owner[g0 % n]
            start = g0 % n - src.a
            out.append((src.index, slice(start, start + (g1 - g0)), s.index, slice(g0 - s.a, g1 - s.a)))
    return out


def overlap_regions(length: int, h: int, low: bool, high: bool) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Split the update range [h, length − h) of a slab (local rows) into the boundary rows its
    neighbours read — the first ``h`` (if it has a lower neighbour) and the last ``h`` (upper) — and
    the interior. Returns (boundary intervals, interior intervals); thin slabs are all boundary."""
    u0, u1 = h, length - h
    if u1 <= u0:
        return [], []
    lo_b = (u0, min(u0 + h, u1)) if low else None
    hi_b = (max(u1 - h, u0), u1) if high else None
    if lo_b and hi_b and hi_b[0] <= lo_b[1]:
        return [(u0, u1)], []
    boundary = [r for r in (lo_b, hi_b) if r]
    i0 = lo_b[1] if lo_b else u0
    i1 = hi_b[0] if hi_b else u1
    return boundary, ([(i0, i1)] if i1 > i0 else [])


class GpuTimes:
    """Each GPU's own time for one step, as *detail* phases ``gpu<device>`` of the engine's timer
    (shown beside the step's phases, not added to the step: engine/timing.py). Events on the part's
    compute stream around its update — between them only that GPU's work, so a GPU that waits for
    its neighbours' halos shows as a shorter bar than the step. Sampled on one step of a batch (a
    pair of events per GPU per batch, nothing per step). Only where the parts are GPUs (NCCL)."""

    def __init__(self, adapter, sample: bool):
        tr = adapter.transport
        self.on = sample and tr.name == "nccl"
        self.adapter, self.marks = adapter, {}

    def begin(self, part: int) -> None:
        if self.on:
            a = self.adapter
            with a.transport.device(part):
                name = f"gpu{a.transport.devices[part]}"
                self.marks[part] = a.engine.timer.begin(name, a.transport.stream(part), detail=True)

    def end(self, part: int) -> None:
        if self.on and part in self.marks:
            with self.adapter.transport.device(part):
                self.adapter.engine.timer.end(self.marks.pop(part), steps=1)


class OnPart:
    """Enter a part's device and stream (either may be None): ``with OnPart(tr.device(p), tr.stream(p))``."""

    def __init__(self, device, stream):
        self.items = [x for x in (device, stream) if x is not None]

    def __enter__(self):
        for x in self.items:
            x.__enter__()
        return self

    def __exit__(self, *exc):
        for x in reversed(self.items):
            x.__exit__(*exc)
        return False

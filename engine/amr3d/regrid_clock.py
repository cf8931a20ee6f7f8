"""One regrid's wall time in parts (Regridding.regrid; regrid_figures' ``regrid_<part>_ms`` and the
bench's Regrids table)."""
from __future__ import annotations

import time

# A regrid's wall time in parts (RegridClock; regrid_figures' regrid_<part>_ms, the bench's Regrids
# table): the criterion, the refine/coarsen plan, the coupling build's host part and its passes on a
# device, the populations' transfer, boundaries + restriction + same-level copies ("synchronise"),
# the stepper rebuilt for the new tree ("select"), and the rest (boundaries' lists, tracers' lookup).
REGRID_PARTS = ("criterion", "plan", "coupling_host", "coupling_device", "transfer", "synchronise", "select",
                "other")


class RegridClock:
    """Splits one regrid's wall time into REGRID_PARTS: ``lap(part)`` waits for the device, then adds
    the time since the previous lap to ``part``, so the device work a part queued counts for it.
    The waits cost little: the criterion and the coupling end in a wait of their own (per-leaf
    maxima, the tables copied back), the regrid waits at its start and end anyway, and the other
    parts lose only the overlap of their device work with the host work of the part after them."""

    def __init__(self, synchronize=None):
        self._synchronize = synchronize
        self.seconds = dict.fromkeys(REGRID_PARTS, 0.0)
        self.start = self._last = time.perf_counter()

    def lap(self, part: str) -> None:
        if self._synchronize is not None:
            self._synchronize()
        now = time.perf_counter()
        self.seconds[part] += now - self._last
        self._last = now

    def move(self, seconds: float, src: str, dst: str) -> None:
        """Seconds measured inside one part that belong to another (the coupling's device passes)."""
        self.seconds[src] -= seconds
        self.seconds[dst] += seconds

    @property
    def total(self) -> float:
        return self._last - self.start

"""One regrid's wall time in parts (Regridding.regrid; regrid_figures' ``regrid_<part>_ms`` and the
bench's Regrids table)."""
from __future__ import annotations

import time

# A regrid's wall time in parts (RegridClock; regrid_figures' regrid_<part>_ms, the bench's Regrids
# table): the criterion, the refine/coarsen plan, the coupling build's host part and its passes on a
# device, the populations' transfer, boundaries + restriction + same-level copies ("synchronise"),
# the stepper rebuilt for the new tree ("select"), the rest (boundaries' lists, tracers' lookup), and
# the wait at the end for the device work still queued ("drain").
REGRID_PARTS = ("criterion", "plan", "coupling_host", "coupling_device", "transfer", "synchronise", "select",
                "other", "drain")


class RegridClock:
    """Splits one regrid's wall time into REGRID_PARTS: ``lap(part)`` adds the time since the previous
    lap to ``part``; ``finish()`` waits for the device and counts that wait as "drain".

    By default (``serial`` false) a lap does not wait for the device: the host queues a part's
    launches and goes on with the next part while the device runs them, so a part's time is its host
    time plus whatever waits it does itself (a read-back), and the device work nobody waited for
    shows in the part that waits next or in "drain". With ``serial`` every lap waits for the device
    first, so each part's device work counts for it (tools/amr3d_regrid_profile.py's per-part
    figures), at the cost of the overlap: a serial regrid is slower."""

    def __init__(self, synchronize=None, serial: bool = False):
        self._synchronize = synchronize
        self.serial = serial
        self.seconds = dict.fromkeys(REGRID_PARTS, 0.0)
        self.start = self._last = time.perf_counter()

    def lap(self, part: str) -> None:
        if self.serial and self._synchronize is not None:
            self._synchronize()
        now = time.perf_counter()
        self.seconds[part] += now - self._last
        self._last = now

    def finish(self) -> None:
        """The end of the regrid: the device's queued work waited for (its time in "drain")."""
        if not self.serial and self._synchronize is not None:
            self._synchronize()
        self.lap("drain")  # (serial: the lap waits)

    def move(self, seconds: float, src: str, dst: str) -> None:
        """Seconds measured inside one part that belong to another (the coupling's device passes)."""
        self.seconds[src] -= seconds
        self.seconds[dst] += seconds

    @property
    def total(self) -> float:
        return self._last - self.start

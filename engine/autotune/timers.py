"""Timers the tuner uses: CUDA events (never a host sync) or wall clock (synchronous NumPy work).

Protocol: ``token = start()``; run the work; ``handle = stop(token)``; later ``poll(handle)``
returns the milliseconds once known, else ``None`` (the work has not finished yet); ``wait(handle)``
blocks until known. Optional ``restart(token)``: take the start time again, now.
"""
from __future__ import annotations

import time


class EventTimer:
    """A pair of CUDA events per timed call, on the caller's stream; read only when ``done``."""

    def __init__(self, cupy, stream=None):
        self._cp = cupy
        self.stream = stream
        self._free: list = []

    def _event(self):
        return self._free.pop() if self._free else self._cp.cuda.Event()

    def start(self):
        ev = self._event()
        ev.record(self.stream)
        return ev

    def restart(self, token):
        """Record the start event again, now (reuses the event)."""
        token.record(self.stream)
        return token

    def stop(self, token):
        end = self._event()
        end.record(self.stream)
        return (token, end)

    def poll(self, handle) -> float | None:
        start, end = handle
        if not end.done:
            return None
        ms = self._cp.cuda.get_elapsed_time(start, end)
        self._free.extend((start, end))
        return float(ms)

    def wait(self, handle) -> float:
        handle[1].synchronize()
        return self.poll(handle)


class WallTimer:
    """perf_counter around synchronous (host) work."""

    def start(self):
        return time.perf_counter()

    def restart(self, token):
        return time.perf_counter()

    def stop(self, token):
        return (time.perf_counter() - token) * 1e3

    def poll(self, handle) -> float:
        return handle

    def wait(self, handle) -> float:
        return handle

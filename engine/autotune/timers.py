"""Timers the tuner uses: CUDA events (never a host sync) or wall clock (synchronous NumPy work).

Protocol: ``token = start()``; run the work; ``handle = stop(token)``; later ``poll(handle)``
returns the milliseconds once known, else ``None`` (the work has not finished yet); ``wait(handle)``
blocks until known. Optional ``restart(token)``: take the start time again, now. Optional
``hold(ms)``: keep the device's stream busy for ``ms`` so that what the host queues next runs back
to back (see :mod:`.measure`).
"""
from __future__ import annotations

import time

import numpy as np

# One thread spinning on the GPU's nanosecond global timer (no clock-rate lookup needed).
SPIN_SOURCE = r"""
extern "C" __global__ void nagare_spin(long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
}
"""
_spin_kernels: dict = {}


def spin_kernel(cupy):
    """The hold kernel, compiled once per process and device (a Function is bound to the device
    current at lookup; decomposed engines tune on several GPUs), and per CuPy module for the tests'
    fake."""
    key = (id(cupy), cupy.cuda.runtime.getDevice())
    k = _spin_kernels.get(key)
    if k is None:
        k = _spin_kernels[key] = cupy.RawModule(code=SPIN_SOURCE).get_function("nagare_spin")
    return k


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

    def hold(self, ms: float) -> None:
        """Queue a spin of ``ms`` on the stream (see :mod:`.measure`)."""
        k, args = spin_kernel(self._cp), (np.int64(int(ms * 1e6)),)
        if self.stream is None:
            k((1,), (1,), args)
        else:
            with self.stream:
                k((1,), (1,), args)

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

"""How a launch configuration is timed: one method shared by the live tuner and the benchmark.

A *measurement* is a batch of ``B`` back-to-back launches of one configuration between two CUDA
events, reported per launch (event time / B); a candidate's score is the median of several
measurements. Two things make this meaningful for kernels of a few microseconds, where a single
launch between two events mostly times the host's launch latency:

- ``B`` is chosen so that a batch keeps the GPU busy for about ``BATCH_MS`` (:func:`batch_size`),
  from a first estimate of the kernel's time; the same ``B`` serves every candidate of a search.
- When the kernel is shorter than the host's time per call (launch-bound), a *hold* is queued
  before the start event: a one-thread kernel that spins on the GPU's global timer for a bit
  longer than the host needs to issue the batch (:func:`hold_ms`). The batch then waits in the
  stream and runs back to back, so the events time the kernels, not the host. When the kernel
  takes longer than the host's call, the host stays ahead within a batch — but a measurement
  that waits for its result (:func:`time_batches`) leaves the GPU idle, so the start event would
  fire before the first launch has even reached the GPU and its launch latency would count
  (≈ 2 % of a 0.28 ms kernel timed alone at 512³; docs/decisions.md D16). There a hold covering the
  first launch is queued in front of every measurement.

The live tuner applies this to live calls (each call of the batch is one real step of the run);
``nagare bench stencil`` applies it to launches it issues itself (:func:`time_batches`), so the
exhaustive table and the tuner's pick are measured the same way.
"""
from __future__ import annotations

import statistics
import time
from collections import deque

BATCH_MS = 0.2       # GPU time one measurement aims at
MAX_BATCH = 128      # launches per measurement at most
HOLD_FACTOR = 1.3    # the hold lasts this many times the host's time to issue the batch …
HOLD_EXTRA_MS = 0.03  # … plus this
DEFAULT_HOST_MS = 0.05  # host time per call assumed before any has been measured


def batch_size(est_ms: float | None, target_ms: float = BATCH_MS, max_batch: int = MAX_BATCH) -> int:
    """Launches per measurement for a kernel estimated at ``est_ms``."""
    if not est_ms or est_ms <= 0:
        return 1
    return int(max(1, min(max_batch, round(target_ms / est_ms))))


def needs_hold(ref_ms: float | None, host_ms: float | None) -> bool:
    """Launch-bound (or not known yet): the GPU would otherwise drain between the host's calls."""
    h = host_ms if host_ms else DEFAULT_HOST_MS
    return ref_ms is None or ref_ms < 2.0 * h


def hold_ms(batch: int, host_ms: float | None) -> float:
    h = host_ms if host_ms else DEFAULT_HOST_MS
    return HOLD_FACTOR * batch * h + HOLD_EXTRA_MS


class HostClock:
    """Median host time between successive calls (what the hold must cover)."""

    def __init__(self, keep: int = 64):
        self._last: float | None = None
        self._gaps = deque(maxlen=keep)

    def tick(self) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self._gaps.append((now - self._last) * 1e3)
        self._last = now

    @property
    def ms(self) -> float | None:
        return statistics.median(self._gaps) if len(self._gaps) >= 3 else None


def time_batches(launch, timer, *, batch: int, batches: int, ref_ms: float | None = None,
                 host_ms: float | None = None) -> list[float]:
    """Per-launch ms of ``batches`` measurements of ``batch`` calls of ``launch()`` each (blocking).

    ``timer`` is an :class:`~.timers.EventTimer` (or anything with start/stop/wait and optionally
    hold); ``ref_ms`` is the expected kernel time and ``host_ms`` the host's time per launch, which
    decide whether a hold is queued (:func:`needs_hold`)."""
    out = []
    hold = getattr(timer, "hold", None)
    for _ in range(batches):
        if hold is not None:  # the GPU is idle here (the last batch was waited for): hold at least the first launch
            hold(hold_ms(batch if needs_hold(ref_ms, host_ms) else 1, host_ms))
        token = timer.start()
        for _ in range(batch):
            launch()
        out.append(timer.wait(timer.stop(token)) / batch)
    return out


def host_ms_per_launch(launch, n: int = 8) -> float:
    """Host time of one ``launch()`` (median of ``n``), issued without waiting for the GPU."""
    gaps = []
    for _ in range(n):
        t0 = time.perf_counter()
        launch()
        gaps.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(gaps)

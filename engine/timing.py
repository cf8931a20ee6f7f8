"""Per-phase device timing that never forces a host sync per step.

On CuPy, each timed region records a pair of CUDA events on the engine's stream; the pairs are
resolved later, only once the GPU has passed them (``Event.done``), so the host never waits. On
NumPy the region is timed with ``perf_counter`` (the work is synchronous anyway).
"""
from __future__ import annotations

import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class PhaseSample:
    phase: str
    ms: float
    steps: int
    detail: bool = False  # a breakdown of time another phase already covers (not added to the step)


@dataclass
class TimingReport:
    """Summary over the samples resolved so far in the current window."""

    steps: int = 0
    phase_ms_per_step: dict[str, float] = field(default_factory=dict)
    ms_per_step: float = 0.0
    updates_per_s: float = 0.0
    bytes_per_s: float = 0.0
    roofline_fraction: float | None = None
    extra: dict = field(default_factory=dict)  # engine-specific (e.g. auto-tuner state)

    @property
    def gbytes_per_s(self) -> float:
        return self.bytes_per_s / 1e9


class PhaseTimer:
    """Records named phases; ``collect()`` returns the samples whose device work has finished."""

    def __init__(self, backend, stream=None, pool: int = 512):
        self.backend = backend
        self.stream = stream
        self._pending: deque = deque()
        self._free: dict[int, list] = {}  # device -> events ready for reuse
        self._pool = pool

    def _event(self, device: int):
        free = self._free.get(device)
        if free:
            return free.pop()
        return self.backend.xp.cuda.Event()  # created on the current device (events belong to one)

    def begin(self, name: str, stream=None, detail: bool = False):
        """Start timing ``name`` on ``stream`` (default: the timer's) of the current device; returns
        the token :meth:`end` takes. For regions that a context manager cannot enclose (a GPU's
        part of a decomposed step, issued in two pieces around the other GPUs' work)."""
        if not self.backend.is_gpu:
            return (name, detail, time.perf_counter(), None, None)
        device = self.backend.xp.cuda.runtime.getDevice()
        stream = self.stream if stream is None else stream
        start = self._event(device)
        start.record(stream)
        return (name, detail, start, stream, device)

    def end(self, token, steps: int = 1) -> None:
        name, detail, start, stream, device = token
        if stream is None and device is None:  # NumPy: host time
            self._pending.append((name, steps, (time.perf_counter() - start) * 1e3, None, detail, None))
            return
        end = self._event(device)
        end.record(stream)
        self._pending.append((name, steps, start, end, detail, device))
        if len(self._pending) > self._pool:  # keep memory bounded: resolve the oldest
            self._pending[0][3].synchronize()

    @contextmanager
    def phase(self, name: str, steps: int = 1, stream=None, detail: bool = False):
        token = self.begin(name, stream, detail)
        yield
        self.end(token, steps)

    def collect(self, wait: bool = False) -> list[PhaseSample]:
        out = []
        while self._pending:
            name, steps, start, end, detail, device = self._pending[0]
            if end is None:
                ms = start
            else:
                if not wait and not end.done:
                    break
                end.synchronize()
                ms = self.backend.xp.cuda.get_elapsed_time(start, end)
                self._free.setdefault(device, []).extend((start, end))
            self._pending.popleft()
            out.append(PhaseSample(name, ms, steps, detail))
        return out


class TimingWindow:
    """Accumulates samples into per-step phase times and throughput (sliding window of samples)."""

    def __init__(self, max_samples: int = 4096):
        self.samples: deque[PhaseSample] = deque(maxlen=max_samples)

    def add(self, samples) -> None:
        self.samples.extend(samples)

    def clear(self) -> None:
        self.samples.clear()

    def report(self, updates_per_step: float, bytes_per_update: float,
               roofline_bytes_per_s: float | None) -> TimingReport:
        return summarise(self.samples, updates_per_step, bytes_per_update, roofline_bytes_per_s)


def summarise(samples, updates_per_step: float, bytes_per_update: float,
              roofline_bytes_per_s: float | None) -> TimingReport:
    """Per-phase time per step = that phase's summed time over the steps it covered.

    Each sample carries the number of steps it covered, so phases that are resolved at different
    moments (device events lag behind the host) still give consistent per-step figures.
    """
    total_ms: dict[str, float] = {}
    total_steps: dict[str, int] = {}
    details = set()
    for s in samples:
        total_ms[s.phase] = total_ms.get(s.phase, 0.0) + s.ms
        total_steps[s.phase] = total_steps.get(s.phase, 0) + s.steps
        if s.detail:
            details.add(s.phase)
    if not total_steps:
        return TimingReport()
    per_step = {k: total_ms[k] / total_steps[k] for k in total_ms if total_steps[k] > 0}
    ms = sum(v for k, v in per_step.items() if k not in details)  # detail phases break down others'
    total_steps = {k: v for k, v in total_steps.items() if k not in details} or total_steps
    ups = updates_per_step / (ms * 1e-3) if ms > 0 else 0.0
    bps = ups * bytes_per_update
    frac = bps / roofline_bytes_per_s if roofline_bytes_per_s else None
    return TimingReport(max(total_steps.values()), per_step, ms, ups, bps, frac)

"""The tuner: picks a configuration for each live call, times it, settles on the fastest.

Search strategies (plans) are generators that yield *batches* of candidates; the tuner measures
each batch of candidates on live calls and moves on once every timing of it has been read back.

Measuring (see :mod:`.measure`, shared with ``nagare bench stencil``): a *measurement* of a
candidate is ``batch`` consecutive live calls between two timer events (per-call time = event
time / batch), preceded by a *hold* when the kernel is shorter than the host's time per call, so
that the calls run back to back on the GPU and the events time the kernel, not the host.
``batch="auto"`` first probes the starting configuration (two single-call measurements, not
scored) and sizes the batch from it. Candidates get ``warmup`` untimed calls first (once per
``warm_key`` when given: e.g. once per compiled kernel, not once per launch shape).

Phases per batch of candidates: *screen* (one measurement each), *refine* (``repeats`` − 1 more
for those within ``prune`` × the best screened time; all of them when ``prune`` is None); score =
median of a candidate's measurements. When the plan is done, a *run-off*: the ``confirm_top``
fastest are measured again, interleaved (round-robin, ``confirm_repeats`` rounds, so drifts of the
GPU's clocks hit them alike), and the tuner settles on the lowest run-off median.

While timings are outstanding, calls run the best candidate known so far (or the starting
configuration) untimed; after ``max_waiting_calls`` such calls the tuner waits for the timings
instead of queueing more (when the GPU is behind, waiting costs nothing and a deep queue of
untuned calls would be the real overhead).

- ``exhaustive``: one batch with every valid candidate (P2's method).
- ``descent``: greedy coordinate descent from the starting configuration: sweep each axis in
  turn with the others fixed, move to the best, repeat until a full sweep changes nothing.
  A candidate is measured once and its score reused, so the scores the plan compares are fixed
  and the descent (strictly decreasing) always terminates.
- ``random``: a seeded random sample of the space, then descent from its best point.
- ``auto``: exhaustive when the valid space has at most ``exhaustive_limit`` (64) points, else
  descent. The stencil space's 249 valid points cost 1,712 steps of 512³ exhaustively (not
  amortised within 1,000 steps), descent 83 steps for a pick within 1.4 % of the exhaustive best
  (docs/decisions.md D15); random sampling adds its sample to that.
"""
from __future__ import annotations

import logging
import random
import statistics
from collections import deque
from collections.abc import Callable

from . import measure
from .space import Config, Space

log = logging.getLogger("nagare")

STRATEGIES = ("auto", "exhaustive", "descent", "random")


class NoValidCandidate(RuntimeError):
    """Every candidate of the space was invalid or failed."""


class Tuner:
    def __init__(self, space: Space, timer, *, key: str | None = None, cache=None, strategy: str = "auto",
                 start: Config | None = None, warmup: int = 1, repeats: int = 3, exhaustive_limit: int = 64,
                 random_samples: int = 24, seed: int = 0, label: str = "", confirm_top: int = 3,
                 confirm_repeats: int = 4, batch: int | str = 1, batch_ms: float = measure.BATCH_MS,
                 max_batch: int = measure.MAX_BATCH, prune: float | None = None,
                 warm_key: Callable[[Config], object] | None = None, hold: bool = True,
                 max_waiting_calls: int = 8, probe: int = 2, max_held_pending: int = 2):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown tuning strategy {strategy!r}; allowed: {', '.join(STRATEGIES)}")
        if repeats < 1 or warmup < 0:
            raise ValueError("repeats must be ≥ 1 and warmup ≥ 0")
        if batch != "auto" and (not isinstance(batch, int) or batch < 1):
            raise ValueError(f"batch must be a positive integer or 'auto', not {batch!r}")
        self.space, self.timer, self.key, self.cache = space, timer, key, cache
        self.label = label or (key or "")
        self.warmup, self.repeats = warmup, repeats
        self.confirm_top, self.confirm_repeats = confirm_top, confirm_repeats
        self.batch = None if batch == "auto" else batch   # calls per measurement (None: not probed yet)
        self.batch_ms, self.max_batch, self.prune = batch_ms, max_batch, prune
        self.warm_key, self.hold, self.max_waiting_calls = warm_key, hold, max_waiting_calls
        self.max_held_pending = max_held_pending
        self._probe_n = probe
        self._probe: list[float] | None = None if batch == "auto" else []
        self.results: dict[tuple, float] = {}      # measured candidates → score (ms per call)
        self.invalid: dict[tuple, str] = {}        # candidates that cannot run → reason
        self._samples: dict[tuple, list[float]] = {}
        self._runoff: dict[tuple, list[float]] | None = None
        self._runoff_done = False
        self._proven: set[tuple] = set()           # candidates that have launched successfully
        self._warmed: set = set()
        self._queue: deque = deque()               # [key, warm-ups left, measurements left, kind]
        self._cur: dict | None = None              # the measurement in progress
        self._pending: list = []                   # (key, timer handle, calls, kind) not yet read back
        self._stage, self._current = "screen", []
        self._waiting = 0
        self._host = measure.HostClock()
        self._last: tuple | None = None
        self.calls = 0
        self.tuning_calls: list[tuple] = []        # the candidate each call used before settling
        self.hold_ms_total = 0.0                   # GPU time spent in holds while tuning
        self.settled: tuple | None = None
        self.from_cache = False

        keys = space.all_keys()
        for k in keys:
            reason = space.invalid_reason(space.config(k))
            if reason:
                self.invalid[k] = reason
        valid = [k for k in keys if k not in self.invalid]
        if not valid:
            raise NoValidCandidate(f"auto-tuner {self.label}: no valid candidate in the space "
                                   f"({next(iter(self.invalid.values()), 'empty space')})")
        if start is not None and not space.contains(start):
            start = None  # a custom space without the default launch: start from its first valid point
        start_key = space.key(start) if start is not None else None
        self.start = start_key if start_key is not None and start_key not in self.invalid else valid[0]
        if strategy == "auto":
            strategy = "exhaustive" if len(valid) <= exhaustive_limit else "descent"
        self.strategy = strategy
        self._rng = random.Random(seed)
        self._random_samples = random_samples
        self._plan = self._make_plan(valid)
        if cache is not None and key is not None:
            self._load_cached()

    # ---- plans -------------------------------------------------------------------------------
    def _make_plan(self, valid: list[tuple]):
        if self.strategy == "exhaustive":
            return self._exhaustive(valid)
        if self.strategy == "descent":
            return self._descent(self.start)
        return self._random_then_descent(valid)

    def _exhaustive(self, valid):
        yield list(valid)

    def _best_of(self, keys) -> tuple | None:
        scored = [k for k in keys if k in self.results and k not in self.invalid]
        return min(scored, key=lambda k: self.results[k]) if scored else None

    def _descent(self, start):
        yield [start]
        inc = start if start in self.results else self._best_of(self.results)
        if inc is None:  # the start failed to launch: descend from the first candidate that runs
            return
        names = self.space.names
        improved = True
        while improved:
            improved = False
            for i, name in enumerate(names):
                batch = [inc[:i] + (v,) + inc[i + 1:] for v in self.space.axes[name]]
                yield batch
                best = self._best_of(batch)
                if best is not None and self.results[best] < self.results[inc]:
                    inc, improved = best, True

    def _random_then_descent(self, valid):
        n = min(self._random_samples, len(valid))
        sample = self._rng.sample(valid, n)
        if self.start not in sample:
            sample[0] = self.start
        yield sample
        best = self._best_of(sample)
        if best is not None:
            yield from self._descent(best)

    # ---- the live call -----------------------------------------------------------------------
    def __call__(self, launch: Callable[[Config], object]) -> Config:
        """Run ``launch(config)`` once with the configuration this call should use (if it returns a
        callable, that is called too and only it is timed)."""
        self._host.tick()
        self.poll()
        while True:
            k, timed = self._next()
            cfg = self.space.config(k)
            cur = self._cur if timed else None
            first = cur is not None and cur["left"] == cur["calls"]
            try:
                # ``launch`` may return a zero-argument callable that does only the device launch:
                # then only that is timed, not the host-side preparation (which matters when a
                # kernel takes microseconds and the GPU sits idle between host calls).
                if first:
                    self._begin_measurement(cur)
                go = launch(cfg)
                if callable(go):
                    if first:
                        restart = getattr(self.timer, "restart", None)
                        cur["token"] = restart(cur["token"]) if restart else self.timer.start()
                    go()
            except Exception as exc:
                if k in self._proven:
                    raise
                if cur is not None:
                    self._cur = None
                self._reject(k, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
                continue
            self._proven.add(k)
            if self.warm_key is not None:
                self._warmed.add(self.warm_key(cfg))
            if cur is not None:
                cur["left"] -= 1
                if cur["left"] == 0:
                    self._pending.append((k, self.timer.stop(cur["token"]), cur["calls"], cur["kind"]))
                    self._cur = None
            self._last = k
            self.calls += 1
            if self.settled is None:
                self.tuning_calls.append(k)
            return cfg

    def _begin_measurement(self, cur: dict) -> None:
        hold = getattr(self.timer, "hold", None) if self.hold else None
        if hold is not None and measure.needs_hold(self._reference_ms(), self._host.ms):
            # Each hold leaves the GPU a little behind the host; bound how far, or a full launch
            # queue would pace the host by the GPU, inflate the host time the holds are sized from
            # and make them grow. Waiting here costs nothing: the host is the bottleneck anyway.
            if len(self._pending) >= self.max_held_pending:
                self.poll(wait_first=len(self._pending) - self.max_held_pending + 1)
            ms = measure.hold_ms(cur["calls"], self._host.ms)
            hold(ms)
            self.hold_ms_total += ms
        cur["token"] = self.timer.start()

    def _reference_ms(self) -> float | None:
        """The kernel time the hold decision uses: the best score so far, else the probe's."""
        best = self._best_of(self.results)
        if best is not None:
            return self.results[best]
        return statistics.median(self._probe) if self._probe else None

    def _reject(self, k: tuple, reason: str) -> None:
        log.info("nagare: auto-tuner %s skips %s: %s", self.label, self.space.config(k), reason)
        self.invalid[k] = reason
        self.results.pop(k, None)
        if self.settled == k:  # a cached pick that no longer runs: tune afresh
            self.settled, self.from_cache = None, False
            if self.cache is not None and self.key is not None:
                self.cache.remove(self.key)
            self._plan = self._make_plan([x for x in self.space.all_keys() if x not in self.invalid])
            self._stage, self._current, self._runoff, self._runoff_done = "screen", [], None, False

    def _next(self) -> tuple[tuple, bool]:
        while True:
            if self.settled is not None:
                return self.settled, False
            if self._cur is not None:
                return self._cur["key"], True
            while self._queue:
                entry = self._queue[0]
                k = entry[0]
                if k in self.invalid:
                    self._queue.popleft()
                    continue
                if entry[1] > 0 and not (self.warm_key is not None
                                         and self.warm_key(self.space.config(k)) in self._warmed):
                    entry[1] -= 1
                    self._waiting = 0
                    return k, False
                entry[1] = 0
                entry[2] -= 1
                if entry[2] == 0:
                    self._queue.popleft()
                calls = 1 if entry[3] == "probe" else (self.batch or 1)
                self._cur = {"key": k, "kind": entry[3], "calls": calls, "left": calls, "token": None}
                self._waiting = 0
                return k, True
            if self._pending:
                if self._waiting < self.max_waiting_calls:
                    self._waiting += 1
                    return self._fallback(), False
                self.poll(wait=True)  # the GPU is behind: wait for the timings, queue nothing more
                self._waiting = 0
                continue
            self._advance_plan()

    def _fallback(self) -> tuple:
        best = self._best_of(self.results)
        if best is not None:
            return best
        if self.start not in self.invalid:
            return self.start
        proven = [k for k in self._proven if k not in self.invalid]
        if proven:
            return proven[0]
        # Nothing has run yet: try candidates in order until one launches (rejections skip them).
        return next(k for k in self.space.all_keys() if k not in self.invalid)

    def _advance_plan(self) -> None:
        """Called when nothing is queued or outstanding: probe, refine, next plan batch, run-off."""
        if self._probe is None:  # batch="auto": size the measurements from the start configuration
            self._probe = []
            self._queue.append([self.start, self.warmup, self._probe_n, "probe"])
            return
        if self.batch is None:
            est = statistics.median(self._probe) if self._probe else None
            self.batch = measure.batch_size(est, self.batch_ms, self.max_batch)
        if self._stage == "screen":
            self._stage = "refine"
            if self.repeats > 1:
                best = self._best_of(self._current)
                limit = self.results[best] * self.prune if (best is not None and self.prune) else None
                for k in self._current:
                    n = len(self._samples.get(k, ()))
                    if k in self.invalid or n == 0 or n >= self.repeats:
                        continue
                    if limit is not None and self.results[k] > limit:
                        continue  # pruned: one measurement says it is far off the best
                    self._queue.append([k, 0, self.repeats - n, "score"])
                if self._queue:
                    return
        try:
            batch = next(self._plan)
        except StopIteration:
            if self._runoff is None and self.confirm_top > 1:
                top = sorted((k for k in self.results if k not in self.invalid),
                             key=self.results.get)[: self.confirm_top]
                if len(top) > 1:
                    # Run-off: the few fastest measured again, interleaved round-robin.
                    self._runoff = {k: [] for k in top}
                    for r in range(self.confirm_repeats):
                        for k in top[r % len(top):] + top[: r % len(top)]:
                            self._queue.append([k, 0, 1, "runoff"])
                    return
            if self._runoff and not self._runoff_done:
                self._runoff_done = True
                for k, s in self._runoff.items():
                    if s and k not in self.invalid:
                        self.results[k] = statistics.median(s)
            self._settle()
            return
        self._stage, self._current = "screen", []
        seen = set()
        for k in batch:
            if k in seen or k in self.invalid:
                continue
            seen.add(k)
            self._current.append(k)
            if k not in self.results:
                self._queue.append([k, self.warmup, 1, "score"])

    def _settle(self) -> None:
        best = self._best_of(self.results)
        if best is None:
            reasons = "; ".join(sorted(set(self.invalid.values())))[:300]
            raise NoValidCandidate(f"auto-tuner {self.label}: no candidate could run ({reasons})")
        self.settled = best
        log.info("nagare: auto-tuner %s settled on %s (%.4g ms) after %d calls", self.label,
                 self.space.config(best), self.results[best], self.calls)
        if self.cache is not None and self.key is not None:
            self.cache.put(self.key, self.space.config(best), self.results[best], strategy=self.strategy,
                           candidates=len(self.results), invalid=len(self.invalid), batch=self.batch)

    def _load_cached(self) -> None:
        entry = self.cache.get(self.key)
        if not entry:
            return
        cfg = entry.get("config")
        if not isinstance(cfg, dict) or not self.space.contains(cfg):
            return
        k = self.space.key(cfg)
        if k in self.invalid:
            return
        self.settled, self.from_cache = k, True
        self.results[k] = float(entry.get("ms", 0.0))

    # ---- reading timings back ----------------------------------------------------------------
    def poll(self, wait: bool = False, wait_first: int = 0) -> None:
        """Read back every finished timing (``wait=True`` blocks until all are known, ``wait_first=n``
        until the oldest n are)."""
        still = []
        for n, (k, handle, calls, kind) in enumerate(self._pending):
            ms = self.timer.wait(handle) if (wait or n < wait_first) else self.timer.poll(handle)
            if ms is None:
                still.append((k, handle, calls, kind))
                continue
            if k in self.invalid:
                continue
            per_call = ms / calls
            if kind == "probe":
                self._probe.append(per_call)
            elif kind == "runoff":
                self._runoff[k].append(per_call)
            else:
                s = self._samples.setdefault(k, [])
                s.append(per_call)
                self.results[k] = statistics.median(s)
        self._pending = still

    def finish(self) -> Config:
        """Block until tuning is complete without launching anything (for tests/benchmarks that
        drive the tuner themselves and want the answer now); returns the settled configuration."""
        self.poll(wait=True)
        return self.best

    # ---- what the HUD shows ------------------------------------------------------------------
    @property
    def best(self) -> Config | None:
        k = self.settled if self.settled is not None else self._best_of(self.results)
        return self.space.config(k) if k is not None else None

    @property
    def done(self) -> bool:
        return self.settled is not None

    def state(self) -> dict:
        queued = len({e[0] for e in self._queue if e[0] not in self.invalid})
        best = self.settled if self.settled is not None else self._best_of(self.results)
        if self.settled is not None:
            status = "cached" if self.from_cache else "settled"
        else:
            status = "waiting" if not queued and self._cur is None and self._pending else "tuning"
        phase = None
        if self.settled is None:
            phase = ("probe" if self.batch is None else "run-off" if self._runoff is not None
                     else self._stage)
        return {
            "label": self.label,
            "strategy": self.strategy,
            "status": status,
            "phase": phase,
            "current": self.space.config(self._last) if self._last is not None else None,
            "measured": len(self.results),
            "invalid": len(self.invalid),
            "remaining": queued + len({k for k, *_ in self._pending} - {e[0] for e in self._queue}),
            "space": self.space.size,
            "best": self.space.config(best) if best is not None else None,
            "best_ms": self.results.get(best) if best is not None else None,
            "batch": self.batch,
            "calls": self.calls,
        }

    def overhead_ms(self) -> float | None:
        """Extra device time the tuning cost: Σ over the calls before settling of (t_used − t_best),
        plus the holds (None until settled, or if a used candidate has no score)."""
        if self.settled is None:
            return None
        if self.from_cache:
            return 0.0
        best = self.results[self.settled]
        total = self.hold_ms_total
        for k in self.tuning_calls:
            if k not in self.results:
                return None
            total += self.results[k] - best
        return total

    def overhead_calls(self) -> float | None:
        """Tuning cost in calls of the settled configuration: :meth:`overhead_ms` / t_best."""
        ms = self.overhead_ms()
        if ms is None or ms == 0.0:
            return ms
        best = self.results[self.settled]
        return ms / best if best > 0 else None

"""The tuner: picks a configuration for each live call, times it, settles on the fastest.

Search strategies (plans) are generators that yield *batches* of candidates; the tuner measures
a batch on live calls (``warmup`` untimed calls, then ``repeats`` timed ones per candidate) and
moves on once every timing of the batch has been read back. While it waits for the GPU to
report, calls run the best candidate known so far (or the starting configuration) untimed, so
the host never blocks on tuning.

- ``exhaustive``: one batch with every valid candidate (P2's method; fine for P2's 150 points).
- ``descent``: greedy coordinate descent from the starting configuration: sweep each axis in
  turn with the others fixed, move to the best, repeat until a full sweep changes nothing.
  A candidate is measured once and its score reused, so the scores the plan compares are fixed
  and the descent (strictly decreasing) always terminates.
- ``random``: a seeded random sample of the space, then descent from its best point.
- ``auto``: exhaustive when the valid space has at most ``exhaustive_limit`` points, else random.

Score of a candidate = median of its timed calls (robust to one slow call on a shared GPU). When the
plan is done, the ``confirm_top`` fastest candidates get ``confirm_repeats`` more timed calls each
before the tuner settles (a confirmation round against measurement noise).
"""
from __future__ import annotations

import logging
import random
import statistics
from collections import deque
from collections.abc import Callable

from .space import Config, Space

log = logging.getLogger("nagare")

STRATEGIES = ("auto", "exhaustive", "descent", "random")


class NoValidCandidate(RuntimeError):
    """Every candidate of the space was invalid or failed."""


class Tuner:
    def __init__(self, space: Space, timer, *, key: str | None = None, cache=None, strategy: str = "auto",
                 start: Config | None = None, warmup: int = 1, repeats: int = 3, exhaustive_limit: int = 200,
                 random_samples: int = 24, seed: int = 0, label: str = "", confirm_top: int = 3,
                 confirm_repeats: int = 4):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown tuning strategy {strategy!r}; allowed: {', '.join(STRATEGIES)}")
        if repeats < 1 or warmup < 0:
            raise ValueError("repeats must be ≥ 1 and warmup ≥ 0")
        self.space, self.timer, self.key, self.cache = space, timer, key, cache
        self.label = label or (key or "")
        self.warmup, self.repeats = warmup, repeats
        self.confirm_top, self.confirm_repeats = confirm_top, confirm_repeats
        self._confirmed = False
        self.results: dict[tuple, float] = {}      # measured candidates → score (ms)
        self.invalid: dict[tuple, str] = {}        # candidates that cannot run → reason
        self._samples: dict[tuple, list[float]] = {}
        self._proven: set[tuple] = set()           # candidates that have launched successfully
        self._queue: deque = deque()               # [key, warm-ups left, timed calls left]
        self._pending: list = []                   # (key, timer handle) not yet read back
        self._last: tuple | None = None
        self.calls = 0
        self.tuning_calls: list[tuple] = []        # the candidate each call used before settling
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
            strategy = "exhaustive" if len(valid) <= exhaustive_limit else "random"
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
        scored = [k for k in keys if k in self.results]
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
        self.poll()
        while True:
            k, timed = self._next()
            cfg = self.space.config(k)
            try:
                # ``launch`` may return a zero-argument callable that does only the device launch:
                # then only that is timed, not the host-side preparation (which matters when a
                # kernel takes microseconds and the GPU sits idle between host calls).
                token = self.timer.start() if timed else None
                go = launch(cfg)
                if callable(go):
                    if timed:
                        restart = getattr(self.timer, "restart", None)
                        token = restart(token) if restart else self.timer.start()
                    go()
            except Exception as exc:
                if k in self._proven:
                    raise
                self._reject(k, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
                continue
            self._proven.add(k)
            if timed:
                self._pending.append((k, self.timer.stop(token)))
            self._last = k
            self.calls += 1
            if self.settled is None:
                self.tuning_calls.append(k)
            return cfg

    def _reject(self, k: tuple, reason: str) -> None:
        log.info("nagare: auto-tuner %s skips %s: %s", self.label, self.space.config(k), reason)
        self.invalid[k] = reason
        self.results.pop(k, None)
        if self.settled == k:  # a cached pick that no longer runs: tune afresh
            self.settled, self.from_cache = None, False
            if self.cache is not None and self.key is not None:
                self.cache.remove(self.key)
            self._plan = self._make_plan([x for x in self.space.all_keys() if x not in self.invalid])

    def _next(self) -> tuple[tuple, bool]:
        while True:
            if self.settled is not None:
                return self.settled, False
            while self._queue:
                entry = self._queue[0]
                k = entry[0]
                if k in self.invalid:
                    self._queue.popleft()
                    continue
                if entry[1] > 0:
                    entry[1] -= 1
                    return k, False
                entry[2] -= 1
                if entry[2] == 0:
                    self._queue.popleft()
                return k, True
            if self._pending:
                return self._fallback(), False
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
        try:
            batch = next(self._plan)
        except StopIteration:
            if self.confirm_top > 1 and not self._confirmed:
                # Confirmation round: the few fastest get more timed calls (their scores become the
                # median over all their samples), so one lucky or unlucky sample cannot decide.
                self._confirmed = True
                top = sorted(self.results, key=self.results.get)[: self.confirm_top]
                if len(top) > 1:
                    self._queue.extend([k, 0, self.confirm_repeats] for k in top)
                    return
            self._settle()
            return
        seen = set()
        for k in batch:
            if k in seen or k in self.results or k in self.invalid:
                continue
            seen.add(k)
            self._queue.append([k, self.warmup, self.repeats])

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
                           candidates=len(self.results), invalid=len(self.invalid))

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
    def poll(self, wait: bool = False) -> None:
        """Read back every finished timing (``wait=True`` blocks until all are known)."""
        still = []
        for k, handle in self._pending:
            ms = self.timer.wait(handle) if wait else self.timer.poll(handle)
            if ms is None:
                still.append((k, handle))
                continue
            if k in self.invalid:
                continue
            s = self._samples.setdefault(k, [])
            s.append(ms)
            if len(s) >= self.repeats:
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
        queued = sum(1 for e in self._queue if e[0] not in self.invalid)
        best = self.settled if self.settled is not None else self._best_of(self.results)
        if self.settled is not None:
            status = "cached" if self.from_cache else "settled"
        else:
            status = "waiting" if not queued and self._pending else "tuning"
        return {
            "label": self.label,
            "strategy": self.strategy,
            "status": status,
            "current": self.space.config(self._last) if self._last is not None else None,
            "measured": len(self.results),
            "invalid": len(self.invalid),
            "remaining": queued + len({k for k, _ in self._pending}),
            "space": self.space.size,
            "best": self.space.config(best) if best is not None else None,
            "best_ms": self.results.get(best) if best is not None else None,
            "calls": self.calls,
        }

    def overhead_calls(self) -> float | None:
        """Tuning cost in calls of the settled configuration: Σ (t_used − t_best)/t_best over the
        calls made before settling (None until settled, or if a used candidate has no score)."""
        if self.settled is None or self.from_cache:
            return None if self.settled is None else 0.0
        best = self.results[self.settled]
        if best <= 0:
            return None
        total = 0.0
        for k in self.tuning_calls:
            if k not in self.results:
                return None
            total += (self.results[k] - best) / best
        return total

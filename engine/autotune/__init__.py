"""The runtime auto-tuner of P2, for every engine's kernels.

One :class:`Tuner` lives at one call site (P2's ``DeviceAutoTuningInfo``). Each *live* call asks
it for a launch configuration, runs the kernel with it and lets the tuner time the call with a
pair of CUDA events; the events are read later, once the GPU has passed them, so tuning never
adds a host sync per call. Candidates that cannot run (too many threads, too much shared memory,
a failed compile or launch) are skipped with the reason. When the search is over the tuner
settles on the fastest candidate and uses it from then on, and the result is written to a
persistent cache (see :mod:`.cache`) so the next run starts tuned.

The tuner knows nothing about CUDA: time comes from a *timer* object (``start() -> token``,
``stop(token) -> handle``, ``poll(handle) -> ms | None``), so the whole logic is unit-tested on
the CPU with a fake timer (tests/unit/test_autotune.py).

Use from any engine (one tuner per call site, created once, e.g. in ``_apply_selection``)::

    space = product_space({"tile": (16, 32, 64), "ts": (1, 2, 4)},
                          max_shared_bytes(lambda c: (c["tile"] + 2) ** 2 * 9 * 4, smem_limit))
    tuner = Tuner(space, EventTimer(cupy, self.stream), key=tune_key(gpu, "lbm:srtb", shape, dtype),
                  cache=default_cache(), start={"tile": 32, "ts": 2})
    ...
    tuner(lambda cfg: self._launch_srtb(**cfg))      # in _advance, once per step
    report.extra["autotune"] = tuner.state()         # in timings, for the HUD
"""
from __future__ import annotations

from . import measure
from .cache import TuneCache, default_cache, tune_key
from .space import (
    ALL_STENCIL_SHAPES,
    STENCIL_SHAPES,
    Space,
    block_threads,
    max_shared_bytes,
    max_threads,
    min_threads,
    product_space,
    stencil_space,
)
from .timers import EventTimer, WallTimer
from .tuner import Tuner

__all__ = ["ALL_STENCIL_SHAPES", "STENCIL_SHAPES", "EventTimer", "Space", "block_threads",
           "TuneCache", "Tuner", "WallTimer", "default_cache", "max_shared_bytes", "max_threads",
           "measure", "min_threads", "product_space", "stencil_space", "tune_key"]

"""``graph = on``: the compact family's step replayed as a CUDA graph (CuPy's stream capture).

A compact step is dozens of small launches (P4's Navier–Stokes RK4 step at 512²: ~50, each a few µs of
GPU work): issued one by one from Python the GPU waits for the host. Captured once, a batch of up to
:data:`GRAPH_STEPS` steps is one ``cudaGraphLaunch``.

Capture safety — what a captured region may not contain, and how this module keeps it out:

- **allocations**: a graph keeps the pointers it was captured with, and CuPy's pool would hand a
  temporary's block out again. Every work buffer is allocated before the capture — :meth:`StepGraph.warm`
  runs one uncaptured step first (lazily made buffers, coefficient uploads, kernel compilation and loading
  all happen there) on the live state and then puts the state back — and the capture runs under an
  allocator that refuses (:func:`_refuse`): an allocation inside it is an error naming the cause, never a
  graph that writes into freed memory;
- **host synchronisation** and **host→device copies**: none in the step's code paths under the selections
  the registry lets capture (variants._graph_check refuses the solvers and kernels that have them; a sync
  under capture would be a CUDA error, a copy needs an allocation first);
- **timing events**: a phase's events recorded under capture would be graph nodes that time nothing; the
  engine's phases record nothing while capturing (``Compact._phase``). The replay is timed as the phase
  ``step``; per-phase times come from :meth:`StepGraph.profiled_step` (below).

Rebuilt when anything captured changes: the engine drops its StepGraph on every variant switch (a new
selection builds new operators and buffers) and Δt is fixed for an engine's life; the state arrays are
written in place by restores, so their addresses — and the graphs — stay valid.

Per-phase timing (the HUD's and the bench's phases): the first step of a call of :meth:`StepGraph.advance`
(one call in :data:`PROFILE_EVERY`, a call of one step included, and every call longer than one graph —
the bench's batches) replays the same launches as one graph per phase region, in order, with the timer's events
between them (samples marked ``detail``: a breakdown of the step, not added to it; the ``step`` samples
are the whole-graph replays only). The regions are the same kernels on the same buffers, so the state
evolves exactly as in a whole-step replay.
"""
from __future__ import annotations

from contextlib import contextmanager

GRAPH_STEPS = 16  # steps per captured graph (a longer batch replays it several times)
PROFILE_EVERY = 8  # calls of advance() per profiled step


class CaptureError(RuntimeError):
    """Something inside the captured step would not be replayable (an allocation)."""


def _refuse(size: int):
    raise CaptureError(f"an allocation of {size} bytes inside the captured compact step: every work buffer "
                       "must exist before the capture (engine/compact/graph.py)")


class StepGraph:
    """Captured replays of ``step`` (one step of the engine on its stream) for one selection."""

    def __init__(self, engine, step):
        self.engine, self.step = engine, step
        self.cp = engine.xp
        self.graphs: dict[int, object] = {}
        self.segments: list[tuple[str, object]] | None = None
        self.warmed = False
        self.calls = 0

    # ---- capture ----
    def warm(self) -> None:
        """One uncaptured, untimed step on the live state, then the state put back bit for bit: every
        buffer the step makes lazily exists (and every kernel is loaded) before any capture."""
        e = self.engine
        state = e.state_arrays()
        saved = {k: v.copy() for k, v in state.items()}
        with e.untimed():
            self.step()
        for k, v in state.items():
            v[...] = saved[k]
        self.warmed = True

    @contextmanager
    def _capturing(self):
        cp, stream = self.cp, self.engine.stream
        rt = cp.cuda.runtime
        # the stream made current too: a launch that takes the current stream is captured as well. Capturing
        # a blocking stream forbids the legacy default stream to every thread meanwhile; the app's other
        # threads draw on non-blocking streams of their own, so nothing else stalls on it.
        with self.engine.untimed(), cp.cuda.using_allocator(_refuse), stream:
            # relaxed: a module loaded lazily may be loaded while another thread's stream captures
            stream.begin_capture(getattr(rt, "streamCaptureModeRelaxed", None))
            try:
                yield
            except BaseException:
                try:
                    stream.end_capture()
                except Exception:
                    pass  # the error above is the one to report
                raise

    def _capture(self, steps: int):
        with self._capturing():
            for _ in range(steps):
                self.step()
            return self.engine.stream.end_capture()

    def _capture_segments(self) -> list[tuple[str, object]]:
        """One step as one graph per phase region, in launch order: [(phase, graph)]."""
        e, stream = self.engine, self.engine.stream
        rt = self.cp.cuda.runtime
        mode = getattr(rt, "streamCaptureModeRelaxed", None)
        segments: list[tuple[str, object]] = []
        current = ["untimed"]

        def switch(name: str | None) -> None:
            segments.append((current[0], stream.end_capture()))
            current[0] = name or "untimed"
            stream.begin_capture(mode)

        with self._capturing():
            with e.phase_hook(switch):
                self.step()
            segments.append((current[0], stream.end_capture()))
        return segments

    # ---- replay ----
    def advance(self, n: int) -> None:
        """n steps: whole graphs of ≤ GRAPH_STEPS steps, the first step phase by phase where this call profiles.

        Every graph the call needs is captured before any is launched: a capture that fails (an allocation
        refused) then leaves the state where the engine's step count says it is."""
        e = self.engine
        if not self.warmed:
            self.warm()
        # a call of one step (the app while it records) profiles too: else its HUD would never show the phases
        profile = n >= 1 and (self.calls % PROFILE_EVERY == 0 or n > GRAPH_STEPS)
        whole = n - 1 if profile else n
        batches = [GRAPH_STEPS] * (whole // GRAPH_STEPS) + ([whole % GRAPH_STEPS] if whole % GRAPH_STEPS else [])
        if profile and self.segments is None:
            self.segments = self._capture_segments()
        for m in batches:  # captured before the timing starts: the GPU idles while the host captures
            if m not in self.graphs:
                self.graphs[m] = self._capture(m)
        self.calls += 1
        if profile:
            self.profiled_step()
        if not batches:
            return
        with e.timer.phase("step", steps=whole):
            for m in batches:
                self.graphs[m].launch(e.stream)

    def profiled_step(self) -> None:
        """One step as its phase regions' graphs, each timed as a detail sample of its phase. Not part of
        ``step``'s samples: the regions' launches cost more than one graph's, so the step time stays the
        whole-graph replay's (the call's other steps)."""
        e = self.engine
        if self.segments is None:
            self.segments = self._capture_segments()
        timer = e.timer
        seen: set = set()
        for name, g in self.segments:
            if name == "untimed":
                g.launch(e.stream)
                continue
            with timer.phase(name, steps=0 if name in seen else 1, detail=True):
                g.launch(e.stream)
            seen.add(name)

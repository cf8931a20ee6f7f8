"""The simulation thread: owns the engine, applies queued commands between steps, publishes frames.

Threading contract (docs/architecture.md, "Threads"; docs/app.md):

- Only this thread touches the engine (construction included, so CUDA compilation happens here,
  never in the middle of a UI frame).
- The UI sends :class:`Command` objects through a queue; they are applied between steps.
- Every display interval the worker publishes a :class:`FramePacket` into a one-slot mailbox: a
  *device snapshot* of the displayed quantity (a copy, never a live state array) plus the CUDA
  event recorded after the copy. The UI takes the newest packet whose event has completed; the
  worker overwrites an unread packet instead of waiting, so neither side ever blocks the other.
- Everything else the UI must hear about (errors, divergence, finished checkpoints) goes through
  an event queue of :class:`Notice` objects that the UI drains on its timer.
- Timings (:class:`Stats`) and the engine's logged quantities (:class:`QuantitySample`, e.g. a
  body's drag coefficient) are host values the worker appends to bounded deques the UI reads.

Keeping the GPU busy (CuPy): the UI thread holds the GIL while it draws, and the worker needs the
GIL to launch kernels. So the worker never waits for the device per step or per frame: each loop
iteration records a fence event and the worker runs ahead of the GPU by up to ``max_lag_s`` of
host time (the queued work carries the GPU through the UI's GIL stalls), waiting — GIL released —
only on a fence older than that. The NaN check of a frame is launched on the engine stream and
read one or more frames later, once its event is done; only explicit steps/view changes check
synchronously. The last-good checkpoint (every few seconds) is a device snapshot copied to host
memory by a helper thread on a side stream (engine/pending_checkpoint.py); it becomes "last good" once
the copies are done and the NaN/sanity check of its own step has passed.
"""
from __future__ import annotations

import copy
import logging
import numbers
import queue
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from nagare.app.fieldkinds import handler_for
from nagare.app.packets import SLICE_AXES, FramePacket, SnapshotContext, ViewRequest, _percentiles, display_range
from nagare.app.timinglog import TimingLog
from nagare.engine import cuda, progress, registry
from nagare.engine.backend import get_backend
from nagare.engine.contract import Engine
from nagare.engine.errors import Diverged, NagareError, one_line
from nagare.engine.families import create_engine
from nagare.engine.pending_checkpoint import release as release_checkpoint_buffers

from .interop import InFlight, poll_until_done
from .pacing import publish_schedule

log = logging.getLogger("nagare")
# FramePacket, ViewRequest, display_range, ... live in nagare.app.packets (no Qt there, so the field
# types' snapshot handlers can build packets); callers and tests keep importing them from here.
__all__ = ["SLICE_AXES", "Command", "FramePacket", "Notice", "QuantitySample", "SimulationWorker", "Stats",
           "ViewRequest", "_percentiles", "display_range", "snapshot"]


@dataclass
class Command:
    kind: str  # a key of SimulationWorker._commands: play | pause | step | reset | variant | ...
    args: dict = field(default_factory=dict)


@dataclass
class Notice:
    kind: str  # info | error | diverged | engine | variant | checkpoint | result
    text: str = ""
    payload: Any = None
    preset: Any = None  # engine: the preset object it was built from (the window's, passed through)


@dataclass
class Stats:
    """Timing figures the status bar and HUD show (host floats, already resolved)."""

    wall: float
    step: int
    steps_per_s: float
    updates_per_s: float
    gbytes_per_s: float
    roofline_pct: float | None
    phase_ms: dict[str, float]
    selection: dict


@dataclass(frozen=True)
class QuantitySample:
    """One reading of ``engine.logged_quantities()`` (host floats) at a step."""

    seq: int  # increases over the worker's whole life: the UI takes each sample once
    step: int
    values: dict[str, float]


_read_streams = threading.local()


def _read_float(x) -> float:
    """A diagnostics value as a host float (see :func:`_to_host`)."""
    if isinstance(x, int | float):
        return float(x)
    return float(_to_host(x))


def _to_host(x) -> np.ndarray:
    """A device value whose event is done, as a NumPy array, read on this thread's private
    non-blocking stream (the copy must not queue behind the engine's steps)."""
    if type(x).__module__.startswith("numpy"):
        return np.asarray(x)
    s = getattr(_read_streams, "stream", None)
    if s is None:
        import cupy  # optional dependency (CuPy): only a CuPy engine gets here

        s = _read_streams.stream = cupy.cuda.Stream(non_blocking=True)
    return x.get(stream=s)


def snapshot(engine, view: ViewRequest, seq: int, cache: dict | None = None, run: int = 0) -> FramePacket:
    """Copy what is shown out of the engine state, on the engine's stream (no host sync).

    Only the field on screen is asked for (``engine.field(name)``); the field type's ``snapshot``
    handler (nagare.app.fieldkinds) makes the packet. ``cache`` (one dict per engine, owned by the
    caller) lets packets share the copy of an unchanged obstacle mask and remembers which field
    holds the tracers drawn over a 2D grid."""
    names = tuple(engine.field_names())
    name = view.field if view.field in names else names[0]
    f = engine.field(name)
    ctx = SnapshotContext(engine, view, cache, dict(seq=seq, step=engine.step_count, time=engine.device_time(),
                                                    time_units=engine.time_units, run=run,
                                                    field_name=name, backend=engine.backend.name, fields=names))
    pk = handler_for("snapshot", f)(f, ctx)
    if engine.backend.is_gpu:
        pinned = scalars_to_host(engine.xp, pk, engine.stream)
        pk.event = engine.xp.cuda.Event(block=False, disable_timing=True)
        pk.event.record(engine.stream)
        if pinned is not None:
            # CuPy's pinned pool knows no streams: a packet dropped before its copy ran must not hand
            # the block to another allocation while the copy can still write it
            held = getattr(_pinned_copies, "held", None)
            if held is None:
                held = _pinned_copies.held = InFlight()
            held.release_done()
            held.hold(pinned, pk.event)
    return pk


_pinned_copies = threading.local()  # per worker thread: the packets' pinned scalar blocks, until copied


PACKET_SCALARS = ("vmin", "vmax", "time")  # what the UI reads of a packet as host floats every frame


def scalars_to_host(xp, pk: FramePacket, stream):
    """The packet's device scalars (colour range, time) copied into pinned host memory on
    ``stream`` (the engine's: the one the packet's event is recorded on, whichever stream is
    current), before the packet's event: once the event is done they are host
    floats, and the UI reads them without a device→host copy of its own (which would be one
    synchronous copy per scalar per frame; the display's host bytes a frame stay 0).

    Pinned memory, so the copy is asynchronous; snapshot() holds the block until the packet's
    event is done, so that it is never reused while the copy may still write it. Returns the
    pinned array (None when there was nothing to copy)."""
    names = [n for n in PACKET_SCALARS if getattr(pk, n) is not None
             and not isinstance(getattr(pk, n), int | float | np.generic | np.ndarray)]
    if not names:
        return None
    import cupyx  # optional dependency (CuPy): only a GPU engine's packets come here

    with stream:  # the stack's kernels on the copy's stream too: ordered before it
        dev = xp.stack([xp.asarray(getattr(pk, n), dtype=xp.float64).reshape(()) for n in names])
    out = cupyx.empty_pinned((len(names),), np.float64)
    xp.cuda.runtime.memcpyAsync(out.ctypes.data, dev.data.ptr, dev.nbytes, xp.cuda.runtime.memcpyDeviceToHost,
                                stream.ptr)
    for i, n in enumerate(names):
        setattr(pk, n, out[i:i + 1].reshape(()))  # a 0-d view: a host float once the event is done
    pk.device_scalars = dev  # read by the copy until the event: kept with the packet
    return out



def warm_up_specs(engine) -> list:
    """The kernel specs (engine/cuda.py) of the selections one live switch away from the current one."""
    specs = []
    for axis, info in engine.variants.items():
        if not info["live"]:
            continue
        for choice, reason in info["choices"].items():
            if reason is None and choice != info["current"]:
                comp = info.get("companions", {}).get(choice, {})
                specs += engine.kernel_specs(dict(engine.selection, **comp, **{axis: choice}))
    return list(dict.fromkeys(specs))

class SimulationWorker:
    """Runs an engine in a daemon thread. All public methods are safe to call from the UI thread."""

    max_lag_s = 0.1  # how far (host time) the worker may run ahead of the GPU
    diagnostics_interval = 0.25  # s between NaN/Inf checks while running (GPU: launched, read later)
    packet_slots = 8  # published packets kept, so one whose snapshot is complete is always at hand
    # Also bound in count: each fence is one loop iteration (tens of kernel launches); a deep queue
    # of launches made the display fall to 8–15 frames/s with CUDA graphs on (packets completed
    # late and in bursts), 16 keeps it at 28–29 with the same throughput (docs/decisions.md D20).
    max_fences = 16
    poll_s = 2e-4  # sleep between queries of a fence the worker waits for
    # Frames are published every whole number of batches whose steps fill a frame interval at the
    # loop's measured pace, not at the first batch end past a schedule kept in the worker's time:
    # that time runs ahead of the GPU's in bursts (the GIL shared with the UI thread), so frames
    # published a constant interval apart in it hold uneven numbers of steps and reach the screen
    # unevenly, below the cap (the measurements: docs/decisions.md D50). False: the schedule alone.
    pace_by_steps = True
    # Speed (Run ▸ Speed, run.paced): None runs as fast as it goes, frames at the cap; N advances
    # exactly N steps a frame and waits for the next frame's time, so a fast solver is watched at
    # N × the cap steps a second (a standing wave of 282 steps a period, stepped 141 steps a frame
    # at full speed, showed its opposite phase in every frame).
    frame_steps: int | None = None
    stats_interval = 0.2  # s between Stats records (status bar, HUD charts) unless forced
    checkpoint_share = 0.01  # last-good checkpoints may take at most this share of the run time
    # Logged quantities a few times a second, never one per step: on the GPU launched on the stream
    # (engine.device_quantities) and read at a later frame once done; engines without that path
    # make logged_quantities() wait for the stream.
    quantities_interval = 0.25
    # Samples kept for the UI: as many as the HUD's plots show, so a HUD that was hidden for a
    # while still finds its whole history here; bounded, so hours of running stay small.
    quantity_slots = 500

    def __init__(self, preset, backend: str = "auto", display_interval: float = 1 / 30,
                 checkpoint_interval: float = 3.0, history_seconds: float = 30.0):
        self.backend_name = backend
        self.display_interval = display_interval
        self.checkpoint_interval = checkpoint_interval
        self._ckpt_every = checkpoint_interval
        self._fences: deque = deque()  # (event, host time) per loop iteration, GPU only
        self._diag_pending: deque = deque()  # (step, device diagnostics, event)
        self._quant_pending: tuple | None = None  # (step, device values, finish, event): quantities on their way
        self._snapshot_cache: dict = {}  # per engine: the mask copy and tracer field snapshot() reuse
        self.publish_s = 0.0  # worker time spent in _publish (bench_display reports it)
        self.checkpoints_taken = 0  # last-good checkpoints so far, and the worker time they took
        self.checkpoint_s = 0.0
        self.throttle_waits = 0
        self.log_interval = 1.0
        self.commands: queue.Queue[Command] = queue.Queue()
        self.notices: queue.Queue[Notice] = queue.Queue()
        self.view = ViewRequest(field=preset.view.field, slice_axis=preset.view.slice_axis,
                                particles_overlay=preset.view.particles_overlay)
        self._preset = preset
        # The last few packets: the worker runs up to max_lag_s ahead of the GPU, so the newest
        # packet's snapshot is usually still queued; the UI shows the newest one that is complete.
        self._packets: deque[FramePacket] = deque(maxlen=self.packet_slots)
        self._packet_lock = threading.Lock()
        self._stats: Stats | None = None
        self.history: deque[Stats] = deque()
        self.history_seconds = history_seconds
        # (run id, samples of that run): replaced as one tuple when an engine is built (preset,
        # reset, non-live variant), so the UI never mixes two runs' samples in one history.
        self.run_id = 0
        self.quantity_feed: tuple[int, deque[QuantitySample]] = (0, deque(maxlen=self.quantity_slots))
        self._asks_quantities = False  # the engine overrides Engine.logged_quantities
        self._q_seq = 0
        self.running = False
        self.diverged: str | None = None
        self.last_good: dict | None = None  # host checkpoint of the last finite state
        # GPU: the next last-good checkpoint while its copies run and its diagnostics are read
        # (engine/pending_checkpoint.py): it becomes last_good only when both are done.
        self._ckpt_pending = None
        self.engine = None
        self._pause_at: int | None = None  # run.pause_at_end: the step to pause at once
        self._t_next_frame = 0.0  # with frame_steps: when the next frame's steps may start
        self._speed_source: str | None = None  # the preset file whose run.paced set the speed
        self.timing_log = None
        # a timing-log row waiting for its simulated time's device→host copy: (step, time, event)
        self._log_pending: tuple | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._seq = 0
        # clocks (perf_counter seconds) of the periodic jobs; 0.0: due at once
        self._t_publish = 0.0
        self._t_stats = 0.0
        self._t_diag = 0.0
        self._t_log = 0.0
        self._t_quant = 0.0
        self._t_last_ckpt = 0.0
        self._t_steps: tuple[float, int] | None = None  # (time, step) the steps/s figure counts from
        self._sps: float | None = None  # the last steps/s measured over ≥ 0.5 s
        # Commands by kind (Command.kind → bound method); "preset" and "view" need no engine.
        self._commands = {
            "preset": self._cmd_preset, "view": self._cmd_view, "play": self._cmd_play,
            "pause": self._cmd_pause, "toggle": self._cmd_toggle, "step": self._cmd_step,
            "reset": self._cmd_reset, "variant": self._cmd_variant, "checkpoint": self._cmd_checkpoint,
            "restore": self._cmd_restore, "call": self._cmd_call, "recording": self._cmd_recording,
            "speed": self._cmd_speed,
        }
        self._engine_free = frozenset({"preset", "view", "recording", "speed"})
        # while a video is recorded, a slow run (NumPy) steps in batches of about one display
        # interval, so the video gets a frame per interval where a step allows it, not one per
        # run.steps_per_frame steps (4 frames in 12 s of a slow run); the GPU's batches are
        # launched in far less than an interval and stay whole (but for _batch_steps' half-interval rule)
        self.recording = False
        self._step_s: float | None = None  # host seconds per step of the last batch
        self._iter_step_s: float | None = None  # seconds per step of the run's loop iterations (smoothed)
        self._last_batch = 0  # steps of the run's last loop iteration
        self._published_step = 0  # the engine's step at the last published frame
        self._thread = threading.Thread(target=self._main, name="nagare-sim", daemon=True)

    # ---- UI side ------------------------------------------------------------------------
    # The worker and the UI thread share the GIL. A worker that waits for the GPU (SPH's steps
    # read a few device values) must get the GIL back as soon as the wait ends, but Python hands
    # it over only every switch interval (5 ms by default) while the UI thread runs Python code
    # (drawing: about half of its time). 1M-particle SPH with the display on ran at 0.85 of its
    # headless rate; a 1 ms interval bounds that wait per step (docs/decisions.md D21).
    gil_switch_interval = 1e-3

    def start(self) -> SimulationWorker:
        if sys.getswitchinterval() > self.gil_switch_interval:
            sys.setswitchinterval(self.gil_switch_interval)
        self._thread.start()
        return self

    def send(self, kind: str, **args) -> None:
        self.commands.put(Command(kind, args))
        self._wake.set()

    def latest_packet(self) -> FramePacket | None:
        """The newest published packet whose snapshot is complete (None before the first one)."""
        with self._packet_lock:
            packets = list(self._packets)
        for pk in reversed(packets):
            if pk.ready():
                return pk
        return None

    def next_packet(self, seq: int) -> FramePacket | None:
        """The packet to draw after the one numbered ``seq``: the oldest complete newer one while at
        most one more is complete behind it, else the newest but one (None when nothing newer is
        complete).

        Packets are published a frame interval apart in the worker's time, which runs ahead of the
        GPU's: two packets' snapshots often complete at once (a throttled worker launches a few
        batches back to back). Drawing only the newest then drops the older one (amr3d-sphere-re100
        drew 26 of its 30 packets a second at a cap of 30); drawing them in turn costs at most one
        frame of latency, which the backlog bound keeps from growing when the UI is the slower."""
        with self._packet_lock:
            packets = list(self._packets)
        ready = [pk for pk in packets if pk.seq > seq and pk.ready()]
        if not ready:
            return None
        pk = ready[-2] if len(ready) > 1 else ready[0]
        return pk if pk.run == ready[-1].run else ready[-1]  # a new run's frame replaces the old run's

    def packets_after(self, seq: int) -> list[FramePacket]:
        """The published packets newer than ``seq`` whose snapshots are complete, oldest first (a
        recording takes every one; the newest few are kept, see packet_slots)."""
        with self._packet_lock:
            packets = list(self._packets)
        newer = [pk for pk in packets if pk.seq > seq]
        ready = []
        for pk in newer:  # in order: a later packet waits for an earlier one still being copied
            if not pk.ready():
                break
            ready.append(pk)
        return ready

    def latest_stats(self) -> Stats | None:
        return self._stats

    def quantities(self) -> tuple[int, list[QuantitySample]]:
        """(run id, the current run's newest samples, oldest first). The run id changes whenever
        an engine is built (preset, reset, non-live variant): a new history starts."""
        run, samples = self.quantity_feed  # one tuple: read atomically
        return run, list(samples)  # list() of a deque copies it in C, under the GIL

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def drain_notices(self) -> list[Notice]:
        out = []
        while True:
            try:
                out.append(self.notices.get_nowait())
            except queue.Empty:
                return out

    # ---- worker side --------------------------------------------------------------------
    def _notify(self, kind: str, text: str = "", payload=None, preset=None) -> None:
        self.notices.put(Notice(kind, text, payload, preset))

    def _build(self, preset, variants: dict | None = None, run: int | None = None) -> None:
        backend = get_backend(self.backend_name)
        self._notify("progress", f"building {preset.engine}: {Path(preset.source).stem}", payload=0.0)
        if self.engine is not None:  # its checkpoint buffers (a state's worth of device memory) go first
            self._ckpt_pending = None
            release_checkpoint_buffers(self.engine)
        engine = create_engine(preset, backend, variants=variants)
        other_preset = preset.source != self._speed_source  # (the first build too)
        self._speed_source = preset.source
        self.engine, self._preset = engine, preset
        self._forget_pace()
        # before the first packet: the window draws this run's packets only. A preset switch from
        # the window names the id (the window cannot read this thread's counter safely); never
        # below an id already used, so a stale packet is never taken for the new run's
        self.run_id = max(self.run_id + 1, run or 0)
        # a test problem with an end time pauses there once (run.pause_at_end)
        self._pause_at = preset.run.steps if preset.run.pause_at_end else None
        if other_preset:  # the preset's speed; a reset, a variant rebuild or Apply keeps the user's
            steps = preset.run.steps_per_frame if preset.run.paced else None
            if steps != self.frame_steps or self._seq == 0:  # said once at the start, then on a change
                self.frame_steps = steps
                self._notify("speed", payload=steps)
        self.timing_log = TimingLog(engine, argv=["nagare", "gui", preset.source])
        self._log_pending = None
        self.diverged = None
        self.last_good = None
        self._ckpt_pending = None
        self._t_last_ckpt = 0.0
        self._ckpt_every = self.checkpoint_interval
        self._fences.clear()
        self._diag_pending.clear()
        self._snapshot_cache = {}
        self._t_stats = 0.0
        self.history.clear()
        # Engines that keep the contract's empty default are never asked (on the GPU an ask
        # costs a wait for the stream, see _stream_idle).
        self._asks_quantities = type(engine).logged_quantities is not Engine.logged_quantities
        self.quantity_feed = (self.run_id, deque(maxlen=self.quantity_slots))
        self._quant_pending = None
        self._t_quant = 0.0
        self._publish(force=True)
        # a snapshot of the variant table, not the engine: only this thread touches the engine
        self._notify("engine", f"{engine.family} on {backend.name}", payload=copy.deepcopy(engine.variants),
                     preset=preset)
        if backend.is_gpu:
            self._warm_up(engine)

    def _warm_up(self, engine) -> None:
        """Compile, in background processes, the kernels of every live choice one switch away, so a
        live switch loads them from CuPy's disk cache instead of stalling the stream on NVRTC."""
        specs = warm_up_specs(engine)
        if specs:
            threading.Thread(target=cuda.precompile, args=(specs, 2), name="nagare-warm-up", daemon=True).start()

    def _main(self) -> None:
        # what the engine reports while it is built or compiles kernels (engine/progress.py) goes
        # to the window as "progress" notices
        with progress.reporting(lambda stage, frac: self._notify("progress", stage, payload=frac)):
            self._loop()

    def _loop(self) -> None:
        try:
            self._build(self._preset)
        except Exception as exc:  # a preset that cannot be built: say so, keep the thread for the next one
            log.exception("nagare: cannot build engine")
            self._notify("error", one_line(exc))
        self._t_publish = time.perf_counter()
        self._t_steps = (time.perf_counter(), self.engine.step_count if self.engine else 0)
        while not self._stop.is_set():
            pending_steps = self._apply_commands()
            if self.engine is None or (not self.running and pending_steps == 0):
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            paced = self.frame_steps is not None and not pending_steps
            if paced:
                wait = self._t_next_frame - time.perf_counter()
                if wait > 0:  # the next frame's time: commands are still taken meanwhile
                    self._wake.wait(min(wait, 0.05))
                    self._wake.clear()
                    continue
            n = pending_steps or (self.frame_steps if paced else self._batch_steps())
            end = self._pause_at
            if end is not None and not pending_steps and self.engine.step_count < end:
                n = min(n, end - self.engine.step_count)  # land on the preset's end exactly
            try:
                t_iter = time.perf_counter()
                self._throttle()
                t0 = time.perf_counter()
                self.engine.step(n)
                self._step_s = (time.perf_counter() - t0) / n
                self._fence()
            except Exception as exc:
                self._fail(exc)
                continue
            if end is not None and self.engine.step_count >= end:
                self._pause_at = None  # once: Space runs on past it
                self.running = False
                self._notify("info", f"paused at the preset's end: step {end} (run.steps), t = "
                                     f"{float(self.engine.time):.6g} — Space runs on")
            self._publish(force=pending_steps > 0 or end is not None and self.engine.step_count >= end, due=paced)
            if paced:  # a fixed cadence; after steps that took longer than a frame, at most one frame behind
                self._t_next_frame = max(self._t_next_frame + self.display_interval,
                                         time.perf_counter() - self.display_interval)
            if not pending_steps:  # a run's iteration: waiting for the GPU, stepping and publishing
                self._last_batch = n
                per_step = (time.perf_counter() - t_iter) / n
                self._iter_step_s = per_step if self._iter_step_s is None else 0.8 * self._iter_step_s + 0.2 * per_step

    def _forget_pace(self) -> None:
        """A new engine or variant: batches are sized from its own steps again."""
        self._step_s = self._iter_step_s = None

    def _batch_steps(self) -> int:
        n = self._preset.run.steps_per_frame
        # a step's share of a loop iteration (the GPU's pace when the worker waits for it, the
        # host's when the host is slower), else its host time alone before one is measured
        if self.recording and self._step_s:  # by the host's time: a slow (NumPy) run's steps
            n = max(1, min(n, int(self.display_interval / self._step_s)))
        step_s = self._iter_step_s or self._step_s
        if not step_s:
            return n
        batch_s = n * step_s
        if 0.5 * self.display_interval < batch_s <= self.display_interval:
            # The step rate allows the cap at steps_per_frame, but frames are published only at
            # the end of a batch: batches longer than half an interval leave too few ends to
            # publish at, and the frame rate falls below the cap (the 1M-particle dam break at a
            # cap of 60, 4 steps of 3.7 ms a batch: 55.5 frames/s). Half-interval batches keep
            # the cap; a batch longer than the interval keeps steps_per_frame steps a frame.
            n = max(1, int(0.5 * self.display_interval / step_s))
        return n

    def _fence(self) -> None:
        eng = self.engine
        if eng.backend.is_gpu:
            ev = eng.xp.cuda.Event(block=False, disable_timing=True)
            ev.record(eng.stream)
            self._fences.append((ev, time.perf_counter()))

    def _throttle(self) -> None:
        """Bound the run-ahead: wait (GIL released) for fences older than max_lag_s; never per step."""
        fences = self._fences
        while fences and fences[0][0].done:
            fences.popleft()
        now = time.perf_counter()
        while fences and (len(fences) >= self.max_fences or now - fences[0][1] > self.max_lag_s):
            self.throttle_waits += 1
            # Polled, never Event.synchronize(): the display fell to a few frames/s whenever the
            # worker ran ahead (interop.poll_until_done says why).
            poll_until_done(fences.popleft()[0], self.poll_s)

    def _apply_commands(self) -> int:
        steps = 0
        while True:
            try:
                cmd = self.commands.get_nowait()
            except queue.Empty:
                return steps
            try:
                steps += self._apply(cmd) or 0
            except NagareError as exc:
                self._notify("error", str(exc))
            except Exception as exc:
                log.exception("nagare: command %s failed", cmd.kind)
                self._notify("error", one_line(exc))

    def _apply(self, cmd: Command) -> int | None:
        """Run one command; returns the number of steps it asks for (None: none)."""
        handler = self._commands.get(cmd.kind)
        if handler is None:
            raise NagareError(f"unknown command {cmd.kind!r}")
        if self.engine is None and cmd.kind not in self._engine_free:
            # a status-bar line, not a dialog: the build that failed has said why in its own dialog,
            # and the commands queued behind it (play, the tracer-capacity ask) must not cover it
            self._notify("info", "no engine is loaded; open a preset")
            return None
        return handler(cmd.args)

    # ---- commands (worker thread; ``a`` is Command.args) ------------------------------------
    def _cmd_preset(self, a: dict) -> None:
        """Build the new preset's engine; only once it is built does the view follow it (its field)
        and does it run (``play``). A build that fails leaves the run that was loaded as it was:
        its engine, its view, running or paused."""
        try:
            self._build(a["preset"], a.get("variants"), a.get("run"))
        except Exception:
            # the engine that ran before is still loaded (_build replaces it only once the new one is
            # built): the window shows its preset again; the error notice comes after, on top
            self._notify("preset-kept", payload=self._preset if self.engine is not None else None)
            raise
        for k, v in a.get("view", {}).items():  # e.g. the new preset's field, before its first packet
            setattr(self.view, k, v)
        self.running = bool(a.get("play"))
        if a.get("view"):
            self._publish(force=True)

    def _cmd_speed(self, a: dict) -> None:
        """``steps``: N steps a frame (paced), or None: as fast as the run goes."""
        steps = a.get("steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1):
            raise NagareError(f"speed: steps a frame must be a whole number ≥ 1 (got {steps!r})")
        self.frame_steps = None if steps is None else int(steps)
        self._t_next_frame = 0.0
        self._forget_pace()  # batches and the publish pace from the new speed's own iterations
        self._notify("speed", payload=self.frame_steps)

    def _cmd_view(self, a: dict) -> None:
        for k, v in a.items():
            setattr(self.view, k, v)
        if self.engine is not None:
            self._publish(force=True)

    def _refuse_if_diverged(self) -> None:
        if self.diverged:
            raise NagareError(f"the run diverged ({self.diverged}); reset or load the last good checkpoint")

    def _cmd_play(self, a: dict) -> None:
        self._refuse_if_diverged()
        self.running = True

    def _cmd_pause(self, a: dict) -> None:
        self.running = False

    def _cmd_toggle(self, a: dict) -> None:
        if self.running:
            self.running = False
        else:
            self._cmd_play(a)

    def _cmd_step(self, a: dict) -> int:
        self._refuse_if_diverged()
        return int(a.get("n", 1))

    def _cmd_reset(self, a: dict) -> None:
        self._build(self._preset, dict(self.engine.selection))
        self._notify("info", "reset to the initial state")

    def _cmd_variant(self, a: dict) -> None:
        eng = self.engine
        axis = registry.axes(eng.family).get(a["axis"])
        # the other choices it needs, switched with it (engine.variants: "companions")
        comp = eng.variants.get(a["axis"], {}).get("companions", {}).get(a["choice"], {}) if axis else {}
        change = {**comp, a["axis"]: a["choice"]}
        also = "".join(f", with {k} = {v} (which it needs)" for k, v in comp.items())
        if axis is not None and not all(registry.axes(eng.family)[k].live for k in change):
            # Not switchable between steps (its registration says so): rebuild from the
            # initial state with the new choice, and say that the run was reset.
            self._build(self._preset, dict(eng.selection, **change))
            self._notify("info", f"{a['axis']} = {a['choice']}{also} is not a live switch: the run was reset")
        else:
            if self.timing_log is not None:
                # the samples so far belong to the old choice: their row is written before the switch,
                # so no row mixes two variants' phases (graph = on times phases as details of a step)
                self._log_pending = None  # this row, read now, supersedes it
                self.timing_log.record(wait=True)
            eng.set_variant(**change)
            self._forget_pace()  # another kernel: another pace
            self._publish(force=True)
        self._notify("variant", f"{a['axis']} = {a['choice']}{also}", payload=dict(self.engine.selection))

    def _cmd_checkpoint(self, a: dict) -> None:
        self._notify("checkpoint", a.get("path", ""), payload=_owned_checkpoint(self.engine))

    def _cmd_restore(self, a: dict) -> None:
        ckpt = a["checkpoint"] if "checkpoint" in a else self.last_good
        if "checkpoint" not in a:
            self._promote_checkpoint(wait=True)  # a copied snapshot whose check passed is the newest good
            ckpt = self.last_good
        if ckpt is None:
            raise NagareError("no good checkpoint is kept yet")
        self._ckpt_pending = None  # a snapshot of the state being replaced
        if "checkpoint" in a:  # a file: finite (load_checkpoint checked it) is not enough, it must be physical
            previous = _owned_checkpoint(self.engine)
            self.engine.restore(ckpt)
            try:
                self.engine.check_physical()
            except NagareError:
                self.engine.restore(previous)  # the run that was loaded stays loaded
                raise
        else:
            self.engine.restore(ckpt)
        self._diag_pending.clear()  # checks of the replaced state (a diverged run's later NaNs)
        self.diverged = None
        self._publish(force=True)
        self._notify("info", f"state restored to step {self.engine.step_count}")

    def _cmd_recording(self, a: dict) -> None:
        self.recording = bool(a["on"])

    def _cmd_call(self, a: dict) -> None:
        """Run fn(engine) on this thread; the result comes back as a "result" notice."""
        self._notify("result", a.get("tag", ""), payload=a["fn"](self.engine))

    def _fail(self, exc: Exception) -> None:
        self.running = False
        pending, self._ckpt_pending = self._ckpt_pending, None
        if (isinstance(exc, Diverged) and pending is not None and exc.step > pending.step
                and not any(step <= pending.step for step, _, _ in self._diag_pending)):
            # its own diagnostics were read and passed (they are read in step order): it is good
            self._adopt(pending)
        if isinstance(exc, Diverged):
            self._diag_pending.clear()  # the diverged run's later checks say nothing new
            self.diverged = exc.detail
            self._notify("diverged", str(exc) + (
                "; paused — the last good checkpoint (step "
                f"{self.last_good['meta']['step']}) can be restored" if self.last_good else "; paused"))
        else:
            log.exception("nagare: step failed")
            self._notify("error", one_line(exc))

    def _publish(self, force: bool = False, due: bool = False) -> None:
        """A frame if ``force`` (an explicit step, view or variant change: checked at once) or ``due``
        (a paced frame: published like a scheduled one, its checks deferred on a GPU) or on schedule."""
        now = time.perf_counter()
        if not (force or due) and not self._publish_due(now):
            return
        eng = self.engine
        deferred = eng.backend.is_gpu and not force  # GPU: no wait for the device in this frame
        # a checkpoint at most every _ckpt_every, and one at a time (decided before a promotion
        # below frees the slot: a deferred checkpoint needs the check launched at its own step)
        ckpt_due = now - self._t_last_ckpt > self._ckpt_every and self._ckpt_pending is None
        try:
            if deferred:
                self._check_diagnostics(wait=False)  # earlier frames' checks the GPU has finished
                if now - self._t_diag >= self.diagnostics_interval or ckpt_due:
                    self._t_diag = now  # a whole-lattice pass: a few a second, not one per frame
                    self._launch_diagnostics()  # with a checkpoint next: its state's own check
                self._promote_checkpoint()
            else:
                # NumPy, or an explicit step/view/variant: check now (a sync)
                self._check_diagnostics(wait=True)
                eng.diagnostics()  # raises Diverged on NaN/Inf or outside the family's sanity bounds
                self._promote_checkpoint(wait=True)  # every check is read: a pending snapshot is settled
                ckpt_due = now - self._t_last_ckpt > self._ckpt_every
        except Diverged as exc:
            self._fail(exc)
            return
        if self._asks_quantities:
            self._collect_quantities(wait=False)
            if force or now - self._t_quant >= self.quantities_interval:
                self._t_quant = now  # the state just passed the NaN check: its quantities are worth showing
                self._read_quantities(wait=not deferred)
        self._t_publish = publish_schedule(self._t_publish, now, self.display_interval)
        self._published_step = eng.step_count
        self._seq += 1
        with eng.on_stream():
            pk = snapshot(eng, self.view, self._seq, self._snapshot_cache, self.run_id)
        with self._packet_lock:
            self._packets.append(pk)
        if force or now - self._t_stats >= self.stats_interval:
            self._t_stats = now
            self._record_stats(now)
        if ckpt_due:
            t0 = time.perf_counter()
            if deferred:  # last good once its copies are done and the check launched above passed
                self._ckpt_pending = eng.begin_checkpoint()
            else:  # the diagnostics just said: finite and within the sanity bounds
                self._ckpt_pending = None
                self.last_good = _owned_checkpoint(eng)
            # A 2048² D2Q9 state is 150 MB: space the checkpoints so they cost ≤ checkpoint_share
            # of the worker's time (synchronous: the copy; deferred: allocating and launching it).
            cost = time.perf_counter() - t0
            self.checkpoints_taken += 1
            self.checkpoint_s += cost
            self._ckpt_every = max(self.checkpoint_interval, cost / self.checkpoint_share)
            self._t_last_ckpt = time.perf_counter()
        self.publish_s += time.perf_counter() - now

    def _publish_due(self, now: float) -> bool:
        """Whether an unforced frame is due: on the schedule (one a frame interval in the worker's
        time), or with pace_by_steps every whole number of batches that fills an interval."""
        interval = self.display_interval
        if not self.pace_by_steps or not self._iter_step_s:
            return now >= self._t_publish + interval
        if now >= self._t_publish + 2 * interval:
            return True  # the pace is stale (a stall, a slower phase): on time again
        batch = max(1, self._last_batch)
        every = max(1, int(interval / (batch * self._iter_step_s))) * batch
        # at least a quarter interval apart in the worker's time: a pace misread low cannot flood
        return (self.engine.step_count - self._published_step >= every
                and now >= self._t_publish + 0.25 * interval)

    def _promote_checkpoint(self, wait: bool = False) -> None:
        """The pending checkpoint becomes last good once its copies are done (waited for with
        wait=True) and the diagnostics of its step (launched just before it) have been read
        without a Diverged."""
        p = self._ckpt_pending
        if p is None or (not wait and not p.done):
            return
        if any(step <= p.step for step, _, _ in self._diag_pending):
            return  # its own check is not read yet
        self._ckpt_pending = None
        self._adopt(p)

    def _adopt(self, pending) -> None:
        """A checked pending checkpoint becomes last good; a failed copy keeps the previous one."""
        try:
            self.last_good = pending.result()
        except Exception as exc:
            log.exception("nagare: last-good checkpoint failed")
            self._notify("error", "last-good checkpoint not kept: " + one_line(exc))

    def _launch_diagnostics(self) -> None:
        eng = self.engine
        with eng.on_stream():
            d = eng.device_diagnostics()
            ev = eng.xp.cuda.Event(block=False, disable_timing=True)
            ev.record(eng.stream)
        self._diag_pending.append((eng.step_count, d, ev))

    def _check_diagnostics(self, wait: bool) -> None:
        """Read the launched checks whose events are done (all of them with wait); Diverged on NaN."""
        pending = self._diag_pending
        while pending:
            step, d, ev = pending[0]
            if not ev.done:
                if not wait and len(pending) < 8:
                    return
                ev.synchronize()
            pending.popleft()
            self.engine.check_finite({k: _read_float(v) for k, v in d.items()}, step)

    def _read_quantities(self, wait: bool) -> None:
        """A sample of engine.logged_quantities() for the feed (at most one per step). On the GPU
        through engine.device_quantities() where the engine has it: launched now, appended by a
        later publish once its event is done (with ``wait``: now); otherwise logged_quantities()
        once the stream is idle."""
        eng = self.engine
        if wait:
            self._collect_quantities(wait=True)  # an earlier launch first: samples stay in step order
        samples = self.quantity_feed[1]
        if samples and samples[-1].step == eng.step_count:
            return  # a forced publish at the same step (view change, slice drag): nothing new
        try:
            if self._quant_pending is None and eng.backend.is_gpu:
                with eng.on_stream():
                    dev = eng.device_quantities()
                    if dev is not None:
                        ev = eng.xp.cuda.Event(block=False, disable_timing=True)
                        ev.record(eng.stream)
                        self._quant_pending = (eng.step_count, *dev, ev)
            if self._quant_pending is not None:
                self._collect_quantities(wait)
                return
            if eng.backend.is_gpu and not self._stream_idle():
                return
            values = {str(k): float(v) for k, v in eng.logged_quantities().items()}
        except Exception as exc:
            self._quantities_failed(exc)
            return
        self._append_quantities(eng.step_count, values)

    def _collect_quantities(self, wait: bool) -> None:
        """The launched quantities into the feed once their event is done (polled with the GIL
        released when ``wait``)."""
        pending = self._quant_pending
        if pending is None:
            return
        step, values, finish, ev = pending
        if not ev.done:
            if not wait or not poll_until_done(ev, self.poll_s, stop=self._stop):
                return
        self._quant_pending = None
        try:
            out = {str(k): float(v) for k, v in finish({k: _to_host(v) for k, v in values.items()}).items()}
        except Exception as exc:
            self._quantities_failed(exc)
            return
        self._append_quantities(step, out)

    def _append_quantities(self, step: int, values: dict) -> None:
        samples = self.quantity_feed[1]
        if values and not (samples and samples[-1].step == step):
            self._q_seq += 1
            samples.append(QuantitySample(self._q_seq, step, values))

    def _quantities_failed(self, exc: Exception) -> None:
        """A broken quantity must not stop the simulation: stop asking, say so."""
        log.exception("nagare: logged_quantities failed", exc_info=exc)
        self._asks_quantities = False
        self._quant_pending = None
        self._notify("error", "quantities not shown: " + one_line(exc))

    def _start_log_row(self) -> None:
        """A timing-log row stamped with this step's simulated time. Where the time lives on the
        device (SPH's adaptive Δt on a GPU) its copy is launched now and the row is written once
        the copy's event is done (_finish_log_row): the row's step and time belong together, and
        the worker does not wait for the device."""
        eng = self.engine
        t = eng.device_time()
        if isinstance(t, int | float | np.floating):
            self.timing_log.record(quantities=self._latest_quantities(), at=(eng.step_count, float(t)))
            return
        ev = eng.xp.cuda.Event(block=False, disable_timing=True)
        ev.record(eng.stream)
        self._log_pending = (eng.step_count, t, ev)
        self._finish_log_row()

    def _finish_log_row(self) -> None:
        pending = self._log_pending
        if pending is None or not pending[2].done:
            return
        self._log_pending = None
        step, t, _ = pending
        self.timing_log.record(quantities=self._latest_quantities(), at=(step, float(_to_host(t))))

    def _latest_quantities(self) -> dict | None:
        """The newest sample's values for a timing-log row (read without waiting for the device);
        None when the engine logs none, so the log asks the engine itself."""
        if not self._asks_quantities:
            return None
        samples = self.quantity_feed[1]
        return dict(samples[-1].values) if samples else {}

    def _stream_idle(self) -> bool:
        """Wait, polling with the GIL released, until the engine's stream has run everything
        queued, so that logged_quantities()' device→host copy does not park this thread in a
        spinning wait (interop.poll_until_done). It drains the
        run-ahead: the GPU then idles for one launch latency, a few times a second. False when
        a stop request came while waiting."""
        eng = self.engine
        ev = eng.xp.cuda.Event(block=False, disable_timing=True)
        ev.record(eng.stream)
        return poll_until_done(ev, self.poll_s, stop=self._stop)

    def _record_stats(self, now: float) -> None:
        eng = self.engine
        t0, s0 = self._t_steps or (now, eng.step_count)
        dt = now - t0
        sps = (eng.step_count - s0) / dt if dt > 0 and eng.step_count >= s0 else 0.0
        if dt > 0.5 or eng.step_count < s0:
            self._t_steps = (now, eng.step_count)
            if eng.step_count >= s0 and dt > 0:
                self._sps = sps
        rep = eng.timings
        if self.timing_log is not None:
            self._finish_log_row()
            if now - self._t_log >= self.log_interval and self._log_pending is None:
                # one row per second (an hour-long session stays small), with the newest quantities
                self._start_log_row()
                self._t_log = now
        st = Stats(wall=time.time(), step=eng.step_count, steps_per_s=sps if self._sps is None else self._sps,
                   updates_per_s=rep.updates_per_s, gbytes_per_s=rep.gbytes_per_s,
                   roofline_pct=None if rep.roofline_fraction is None else 100 * rep.roofline_fraction,
                   phase_ms=dict(rep.phase_ms_per_step), selection=dict(eng.selection))
        self._stats = st
        self.history.append(st)
        while self.history and st.wall - self.history[0].wall > self.history_seconds:
            self.history.popleft()


def _owned_checkpoint(engine) -> dict:
    """engine.checkpoint() with arrays the checkpoint owns: on NumPy, asnumpy() returns the live
    state arrays themselves, which the next steps would overwrite."""
    ckpt = engine.checkpoint()
    if not engine.backend.is_gpu:  # device→host copies are new arrays already
        ckpt["arrays"] = {k: np.array(v, copy=True) for k, v in ckpt["arrays"].items()}
    return ckpt


"""The worker's GPU-side bookkeeping without a GPU: deferred NaN checks and the run-ahead bound.

A stub engine stands in for a CuPy engine: its events are fakes whose completion the test
controls, so each rule (never wait for an unfinished check, report the step the bad state was
seen at, wait only on fences older than max_lag_s) is checked exactly."""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import pytest
from nagare.app.gui.worker import SimulationWorker
from nagare.engine.contract import Engine
from nagare.engine.errors import Diverged


class FakeEvent:
    """done is what the test sets; with progress=True the "GPU" finishes the event the first time
    someone polls it while it is pending (that poll counts as a wait, as synchronize() does)."""

    def __init__(self, progress: bool = False, **kw):
        self._done = False
        self.waited = False
        self.progress = progress

    @property
    def done(self):
        if not self._done and self.progress:
            self.waited = True
            self._done = True
            return False
        return self._done

    @done.setter
    def done(self, value):
        self._done = value

    def record(self, stream=None):
        pass

    def synchronize(self):
        self.waited = True
        self._done = True


class StubGpuEngine:
    family = "stub"
    check_finite = Engine.check_finite
    sanity_bounds = Engine.sanity_bounds  # none: the stub checks finiteness only
    divergence_advice = Engine.divergence_advice

    def __init__(self):
        self.backend = SimpleNamespace(is_gpu=True)
        self.events: list[FakeEvent] = []
        self.xp = SimpleNamespace(cuda=SimpleNamespace(Event=self._event))
        self.stream = None
        self.step_count = 0
        self.values = {"mass": 1.0, "max_speed": 0.1}

    def _event(self, **kw):
        self.events.append(FakeEvent(**kw))
        return self.events[-1]

    def on_stream(self):
        return nullcontext()

    def device_diagnostics(self):
        return dict(self.values)  # host floats stand in for the device scalars

    def checkpoint(self):  # the state a checkpoint file replaces, kept until the file's is checked
        return {"meta": {"step": self.step_count}, "arrays": {}}

    def check_physical(self):  # a loaded file's state: the stub's is always within its (no) bounds
        return None


@pytest.fixture
def worker():
    w = SimulationWorker(
        SimpleNamespace(view=SimpleNamespace(field=None, slice_axis="z", particles_overlay=True)), "numpy")
    w.engine = StubGpuEngine()
    return w


def test_nan_check_is_read_only_once_its_event_is_done(worker):
    eng = worker.engine
    eng.step_count = 10
    eng.values["mass"] = math.nan
    worker._launch_diagnostics()
    eng.step_count, eng.values["mass"] = 30, 1.0
    worker._launch_diagnostics()
    worker._check_diagnostics(wait=False)  # nothing finished: no wait, no verdict
    assert not any(e.waited for e in eng.events) and len(worker._diag_pending) == 2
    eng.events[0].done = True
    with pytest.raises(Diverged) as err:
        worker._check_diagnostics(wait=False)
    assert err.value.step == 10 and "mass" in err.value.detail  # the step the NaN was seen at
    assert len(worker._diag_pending) == 1 and not eng.events[1].waited


def test_synchronous_check_drains_the_launched_ones_first(worker):
    eng = worker.engine
    worker._launch_diagnostics()
    worker._launch_diagnostics()
    worker._check_diagnostics(wait=True)
    assert all(e.waited for e in eng.events) and not worker._diag_pending


def test_unfinished_checks_are_bounded(worker):
    eng = worker.engine
    for _ in range(8):
        worker._launch_diagnostics()
    worker._check_diagnostics(wait=False)  # the GPU is 8 frames behind: wait for the oldest only
    assert eng.events[0].waited and not eng.events[1].waited and len(worker._diag_pending) == 7


def test_run_ahead_waits_only_for_fences_older_than_max_lag(worker):
    eng = worker.engine
    now = time.perf_counter()
    old, done, young = FakeEvent(progress=True), FakeEvent(progress=True), FakeEvent(progress=True)
    done.done = True
    worker._fences.extend([(done, now - 1.0), (old, now - 2 * worker.max_lag_s), (young, now)])
    worker._throttle()
    assert old.waited and not young.waited and not done.waited
    assert worker.throttle_waits == 1 and [f[0] for f in worker._fences] == [young]
    worker._fence()  # one fence per loop iteration, recorded on the engine's stream
    assert len(worker._fences) == 2 and worker._fences[-1][0] is eng.events[-1]


def test_run_ahead_is_bounded_in_count_too(worker):
    now = time.perf_counter()
    evs = [FakeEvent(progress=True) for _ in range(worker.max_fences + 3)]
    worker._fences.extend((e, now) for e in evs)
    worker._throttle()
    assert len(worker._fences) == worker.max_fences - 1 and sum(e.waited for e in evs) == 4


def test_latest_packet_is_the_newest_complete_one():
    """The worker runs ahead of the GPU: the newest packet is often still queued, and the UI must
    get the newest *complete* one instead of nothing (otherwise the display drew 0.4 frames/s;
    docs/decisions.md D19)."""
    import threading
    from collections import deque
    from types import SimpleNamespace

    from nagare.app.gui.worker import SimulationWorker

    class Ev:
        def __init__(self, done):
            self.done = done

    w = SimulationWorker.__new__(SimulationWorker)
    w._packets, w._packet_lock = deque(maxlen=SimulationWorker.packet_slots), threading.Lock()
    assert w.latest_packet() is None
    pks = [SimpleNamespace(seq=i, event=Ev(False), ready=None) for i in range(4)]
    for pk in pks:
        pk.ready = (lambda p: lambda: p.event.done)(pk)
        w._packets.append(pk)
    assert w.latest_packet() is None  # nothing complete yet
    pks[1].event.done = True
    assert w.latest_packet() is pks[1]
    pks[2].event.done = True
    assert w.latest_packet() is pks[2]
    pks[3].event.done = True
    assert w.latest_packet() is pks[3]


def test_next_packet_draws_packets_completed_together_in_turn():
    """Two packets whose snapshots complete at once are drawn one after the other (the older is not
    dropped); a backlog of more is cut to one, and a new run's frame replaces the old run's."""
    import threading
    from collections import deque
    from types import SimpleNamespace

    from nagare.app.gui.worker import SimulationWorker

    w = SimulationWorker.__new__(SimulationWorker)
    w._packets, w._packet_lock = deque(maxlen=SimulationWorker.packet_slots), threading.Lock()
    pks = [SimpleNamespace(seq=i, run=1, done=False) for i in range(6)]
    for pk in pks:
        pk.ready = (lambda p: lambda: p.done)(pk)
        w._packets.append(pk)
    assert w.next_packet(-1) is None  # nothing complete
    pks[0].done = pks[1].done = True
    assert w.next_packet(-1) is pks[0]  # both complete: the older first ...
    assert w.next_packet(0) is pks[1]  # ... and the newer at the next draw
    assert w.next_packet(1) is None
    for pk in pks[2:5]:
        pk.done = True
    assert w.next_packet(1) is pks[3]  # three behind: skip to one frame of backlog
    assert w.next_packet(3) is pks[4]
    pks[5].done, pks[5].run = True, 2
    assert w.next_packet(3) is pks[5]  # the new run's frame, not the old run's 4


def test_batches_are_cut_to_half_a_frame_interval_when_the_cap_is_within_reach():
    """Frames are published at the end of a batch: batches between half and a whole frame interval
    long publish below the cap, so they are halved; a longer batch (the step rate cannot reach the
    cap at steps_per_frame) and a short one keep steps_per_frame."""
    from types import SimpleNamespace

    from nagare.app.gui.worker import SimulationWorker

    w = SimulationWorker.__new__(SimulationWorker)
    w._preset = SimpleNamespace(run=SimpleNamespace(steps_per_frame=4))
    w.display_interval, w.recording, w._step_s, w._iter_step_s = 1 / 60, False, None, None
    assert w._batch_steps() == 4  # no step timed yet
    w._step_s = 0.0037  # 14.8 ms batches at a 16.7 ms interval
    assert w._batch_steps() == 2
    w._step_s = 0.0003  # 1.2 ms batches
    assert w._batch_steps() == 4
    w._step_s = 0.005  # 20 ms batches: the cap is out of reach at 4 steps a frame
    assert w._batch_steps() == 4
    w.recording = True  # a recording steps at most an interval a batch (3 steps), then halved
    assert w._batch_steps() == 1
    w._step_s = 0.05  # a step longer than the interval: one a batch while recording, else 4
    assert w._batch_steps() == 1
    w.recording = False
    assert w._batch_steps() == 4
    w._step_s, w._iter_step_s = 0.002, 0.0039  # launches take 2 ms a step, the GPU 3.9: the loop's pace counts
    assert w._batch_steps() == 2
    w._step_s, w._iter_step_s = 0.0005, 0.02  # a heavy GPU step: 80 ms batches, the cap out of reach ...
    w.recording = True  # ... and a recording keeps them whole (its cap is for a slow host's steps)
    assert w._batch_steps() == 4
    w._forget_pace()
    assert w._step_s is None and w._iter_step_s is None and w._batch_steps() == 4


def test_warm_up_lists_the_kernels_one_live_switch_away(fake_preset):
    from nagare.app.gui.worker import warm_up_specs
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    from tests.app import fake_engine

    class Specs(fake_engine.FakeEngine):
        def kernel_specs(self, selection=None):
            sel = selection or self.selection
            return [f"{sel['kernel']}/{sel['layout']}"]

    eng = Specs(load_preset(fake_preset(), backend="numpy"), get_backend("numpy"))
    # kernel: roll (current), slices (live, runs here), gpu-only (cannot run on NumPy); layout is not live
    assert warm_up_specs(eng) == ["slices/a"]


def _published(batch_s: float, interval: float, seconds: float, stall_at: float | None = None) -> list[float]:
    """Times a worker publishes at when each batch of steps takes ``batch_s`` (a stall of 1 s at
    ``stall_at``), with worker.publish_schedule as _publish uses it."""
    from nagare.app.gui.worker import publish_schedule

    t, last, out = 0.0, 0.0, []
    while t < seconds:
        t += batch_s + (1.0 if stall_at is not None and t < stall_at <= t + batch_s else 0.0)
        if t >= last + interval:
            out.append(t)
            last = publish_schedule(last, t, interval)
    return out


@pytest.mark.parametrize("batch_ms", [5.0, 30.0, 32.0])
def test_frames_keep_their_rate_when_a_batch_is_a_little_shorter_than_the_interval(batch_ms):
    times = _published(batch_ms * 1e-3, 1 / 30, 10.0)
    # the full 30 frames/s (publishing an interval after the last frame gave 16–20 here)
    assert 29.0 <= len(times) / 10.0 <= 30.5, len(times)
    assert min(b - a for a, b in zip(times, times[1:])) >= batch_ms * 1e-3 - 1e-12  # one per batch at most


def test_a_stall_is_not_followed_by_a_burst_and_a_forced_frame_moves_the_schedule():
    from nagare.app.gui.worker import publish_schedule

    times = _published(0.030, 1 / 30, 5.0, stall_at=2.0)
    end = next(b for a, b in zip(times, times[1:]) if b - a > 0.9)  # the first frame after the stall
    # back on the schedule: no catching up on the 30 frames the stall missed
    assert len([t for t in times if end < t <= end + 0.5]) <= 0.5 * 30 + 1
    assert 29.0 <= len([t for t in times if t > end]) / (times[-1] - end) <= 30.5
    assert publish_schedule(10.0, 10.01, 1 / 30) == 10.01  # forced 10 ms after the last frame


@pytest.mark.parametrize("poll_ms", [16.0, 15.0, 4.0])
def test_the_ui_draws_its_full_frame_rate_whatever_its_timer_phase(poll_ms):
    """The main window polls every 16 ms for a 30 frames/s cap: drawing when an interval has
    passed since the last frame drew every third tick (20.8 frames/s)."""
    from nagare.app.gui.pacing import FramePacer

    pacer, drawn, t = FramePacer(30.0, poll_ms * 1e-3), [], 0.0
    while t < 10.0:
        if pacer.due(t):
            pacer.drawn(t)
            drawn.append(t)
        t += poll_ms * 1e-3
    assert 29.5 <= len(drawn) / 10.0 <= 30.2, len(drawn)
    short = 1 / 30 - poll_ms * 1e-3 - 1e-9  # a frame sooner than this after the last is off the schedule
    assert (np.diff(drawn) < short).sum() <= 1  # one, at most, at the start
    # after a pause of the packets: back on the schedule, not a burst
    later = [t for t in np.arange(20.0, 21.0, poll_ms * 1e-3) if pacer.due(t) and (pacer.drawn(t) or True)]
    assert (np.diff(later) < short).sum() <= 1 and 29 <= len(later) <= 31


def _drawn_per_s(fps: float, poll: float, seconds: float = 10.0) -> float:
    """Frames a UI timer every ``poll`` s draws at a cap of ``fps`` when a packet is published every
    1/fps s and its event is done 0–60 % of an interval later (the GPU runs behind the worker)."""
    from nagare.app.gui.pacing import FramePacer

    rng = np.random.default_rng(7)
    ready = np.arange(0.0, seconds, 1 / fps) + rng.uniform(0, 0.6 / fps, int(np.ceil(seconds * fps)))
    pacer, last, drawn, t = FramePacer(fps, poll), -1, 0, 0.0
    while t < seconds:
        newest = int(np.searchsorted(ready, t, side="right")) - 1  # the newest packet whose event is done
        if newest > last and pacer.due(t):
            pacer.drawn(t)
            last, drawn = newest, drawn + 1
        t += poll
    return drawn / seconds


def test_the_ui_polls_often_enough_for_a_cap_of_60():
    """At a cap of 60 the window polls every 8 ms (pacing.poll_interval), not 16: a 16 ms timer
    misses a frame whenever a packet is ready just after a poll."""
    from nagare.app.gui.pacing import UI_POLL_S, poll_interval

    assert poll_interval(30.0) == UI_POLL_S and poll_interval(60.0) < 1 / 60 / 1.9
    assert _drawn_per_s(60.0, poll_interval(60.0)) >= 0.95 * 60
    assert _drawn_per_s(60.0, UI_POLL_S) < 0.95 * 60  # the 16 ms timer falls short of the cap
    assert _drawn_per_s(30.0, poll_interval(30.0)) >= 0.95 * 30


class FakePending:
    """A PendingCheckpoint whose copies finish when the test says so."""

    def __init__(self, step):
        self.step, self.done, self.waited = step, False, False

    def result(self):
        self.waited = True
        return {"meta": {"step": self.step}, "arrays": {}}


def test_a_pending_checkpoint_is_last_good_only_once_copied_and_its_own_check_passed(worker):
    eng = worker.engine
    eng.step_count = 20
    worker._launch_diagnostics()  # the check of the snapshot's own step, launched just before it
    worker._ckpt_pending = pending = FakePending(20)
    pending.done = True
    worker._promote_checkpoint()  # copied, but its check is not read: not good yet
    assert worker.last_good is None and worker._ckpt_pending is pending
    eng.events[0].done = True
    worker._check_diagnostics(wait=False)
    pending.done = False
    worker._promote_checkpoint()  # checked, copies still running: never waits
    assert worker.last_good is None and not pending.waited
    pending.done = True
    worker._promote_checkpoint()
    assert worker.last_good == {"meta": {"step": 20}, "arrays": {}} and worker._ckpt_pending is None


@pytest.mark.parametrize("bad_step,kept", [(20, False), (30, True)])
def test_divergence_keeps_a_pending_checkpoint_only_if_its_own_step_passed(worker, bad_step, kept):
    """NaN seen at the snapshot's own step: it is not good (the previous last good stays). NaN seen
    later: its check passed (checks are read in step order), so it is the newest good state."""
    eng = worker.engine
    worker.last_good = previous = {"meta": {"step": 10}, "arrays": {}}
    eng.step_count = 20
    if bad_step == 20:
        eng.values["mass"] = math.nan
    worker._launch_diagnostics()
    worker._ckpt_pending = FakePending(20)
    eng.step_count = 30
    eng.values["mass"] = math.nan
    worker._launch_diagnostics()
    for ev in eng.events:
        ev.done = True
    with pytest.raises(Diverged) as err:
        worker._check_diagnostics(wait=False)
    assert err.value.step == bad_step
    worker._fail(err.value)
    assert worker._ckpt_pending is None
    assert worker.last_good == ({"meta": {"step": 20}, "arrays": {}} if kept else previous)


def test_a_restore_drops_the_pending_snapshot_of_the_replaced_state(worker):
    worker.engine.restore = lambda ckpt: None
    worker._publish = lambda force=False: None
    worker._ckpt_pending = FakePending(50)
    worker._cmd_restore({"checkpoint": {"meta": {"step": 10}, "arrays": {}}})
    assert worker._ckpt_pending is None


def test_a_failed_checkpoint_copy_keeps_the_previous_last_good_and_says_so(worker):
    class Failing(FakePending):
        def result(self):
            raise RuntimeError("cudaErrorIllegalAddress during the copy")

    worker.last_good = previous = {"meta": {"step": 10}, "arrays": {}}
    worker._ckpt_pending = p = Failing(20)
    p.done = True
    worker._promote_checkpoint()
    assert worker.last_good is previous and worker._ckpt_pending is None
    notes = worker.drain_notices()
    assert [n.kind for n in notes] == ["error"] and "IllegalAddress" in notes[0].text


def _stub_publish(worker, monkeypatch):
    """_publish with the packet snapshot, stats and the checkpoint stubbed: returns the list of
    FakePending checkpoints begun."""
    from nagare.app.gui import worker as worker_mod

    eng = worker.engine
    eng.diagnostics = lambda: eng.check_finite(dict(eng.values), eng.step_count)
    monkeypatch.setattr(worker_mod, "snapshot", lambda *a, **k: object())
    monkeypatch.setattr(worker, "_record_stats", lambda now: None)
    monkeypatch.setattr(worker_mod, "_owned_checkpoint", lambda e: {"meta": {"step": e.step_count}, "arrays": {}})
    worker._asks_quantities = False
    begun = []

    def begin():
        begun.append(FakePending(eng.step_count))
        return begun[-1]

    eng.begin_checkpoint = begin
    return begun


def test_a_deferred_checkpoint_launches_the_check_of_its_own_step_first(worker, monkeypatch):
    """Even when the periodic check is not due, the checkpoint's step gets its own check, queued
    before the snapshot — else a NaN state could become last good once older checks are read."""
    begun = _stub_publish(worker, monkeypatch)
    eng = worker.engine
    eng.step_count = 100
    worker._t_diag = time.perf_counter() + 1e9  # the periodic check is not due
    worker._t_last_ckpt = -1e9
    worker._publish()
    assert [p.step for p in begun] == [100] and [s for s, _, _ in worker._diag_pending] == [100]
    eng.values["mass"] = math.nan  # that step's state was bad: the check says so when read
    worker._diag_pending[0] = (100, {"mass": math.nan}, worker._diag_pending[0][2])
    eng.events[-1].done = True
    begun[0].done = True
    worker._t_publish = -1e9
    eng.step_count = 110
    worker._publish()
    assert worker.last_good is None and worker.diverged and worker._ckpt_pending is None


def test_explicit_steps_settle_the_pending_checkpoint_and_take_new_ones(worker, monkeypatch):
    """Paused right after a checkpoint began, then stepped by hand (forced publishes): the pending
    one becomes last good (its check is read synchronously) and later ones are taken as due."""
    begun = _stub_publish(worker, monkeypatch)
    eng = worker.engine
    eng.step_count = 100
    worker._t_last_ckpt = -1e9
    worker._publish()  # deferred: its check and the snapshot of step 100
    assert worker._ckpt_pending is begun[0]
    eng.step_count = 101
    worker._publish(force=True)  # reads every check, waits for the copies, promotes
    assert worker.last_good == {"meta": {"step": 100}, "arrays": {}} and begun[0].waited
    worker._t_last_ckpt = -1e9
    eng.step_count = 102
    worker._publish(force=True)  # due again: taken synchronously at this checked step
    assert worker.last_good == {"meta": {"step": 102}, "arrays": {}} and worker._ckpt_pending is None


def test_restoring_after_a_divergence_does_not_read_the_diverged_runs_later_checks(worker, monkeypatch):
    _stub_publish(worker, monkeypatch)
    eng = worker.engine
    worker.last_good = {"meta": {"step": 10}, "arrays": {}}
    eng.values["mass"] = math.nan
    for s in (30, 40):  # two checks of the blowing-up run in flight
        eng.step_count = s
        worker._launch_diagnostics()
    for ev in eng.events:
        ev.done = True
    worker._t_last_ckpt = 1e18
    worker._publish()  # reads step 30: diverged
    assert worker.diverged
    eng.values["mass"] = 1.0  # the restored state is fine
    eng.restore = lambda ckpt: setattr(eng, "step_count", ckpt["meta"]["step"])
    worker.drain_notices()
    worker._cmd_restore({})
    assert worker.diverged is None and eng.step_count == 10
    assert [n.kind for n in worker.drain_notices()] == ["info"]


def _pacing_worker(batch: int, step_s: float, fps: float, pace_by_steps: bool):
    from types import SimpleNamespace

    from nagare.app.gui.worker import SimulationWorker

    w = SimulationWorker.__new__(SimulationWorker)
    w.display_interval, w.pace_by_steps = 1 / fps, pace_by_steps
    w._iter_step_s, w._last_batch, w._published_step, w._t_publish = step_s, batch, 0, 0.0
    w.engine = SimpleNamespace(step_count=0)
    return w


def test_paced_by_steps_a_frame_is_due_every_whole_number_of_batches_that_fills_an_interval():
    w = _pacing_worker(batch=2, step_s=0.004, fps=60, pace_by_steps=True)  # 8 ms batches, 16.7 ms frames
    w.engine.step_count = 2
    assert not w._publish_due(0.010)
    w.engine.step_count = 4  # two batches: 16 ms of steps
    assert w._publish_due(0.010)
    assert not w._publish_due(0.003)  # but not within a quarter interval of the last frame
    w.engine.step_count = 0
    assert w._publish_due(2 / 60)  # two intervals without a frame: due whatever the count
    from nagare.app.gui.worker import SimulationWorker

    assert SimulationWorker.pace_by_steps  # the app's default (docs/decisions.md D50)
    lbm = _pacing_worker(batch=20, step_s=0.000135, fps=30, pace_by_steps=False)
    lbm.engine.step_count = 10_000
    assert not lbm._publish_due(0.03) and lbm._publish_due(1 / 30)  # off: the schedule alone
    lbm.pace_by_steps = True
    lbm.engine.step_count = 239
    assert not lbm._publish_due(0.03)
    lbm.engine.step_count = 240  # 12 batches of 20 fill 33 ms
    assert lbm._publish_due(0.03)


@pytest.mark.parametrize("pace_by_steps", [False, True])
def test_frames_paced_by_steps_hold_equal_steps_when_the_worker_runs_in_bursts(pace_by_steps):
    """The GPU runs 4 ms steps steadily; the worker queues 2-step batches in bursts (it waits for
    the GIL while the UI draws, then catches up). Frames on the worker's schedule hold uneven step
    counts; paced by steps, every frame holds 4 steps (16 ms of the GPU's time: 62.5 frames/s)."""
    w = _pacing_worker(batch=2, step_s=0.004, fps=60, pace_by_steps=pace_by_steps)
    from nagare.app.gui.pacing import publish_schedule

    rng = np.random.default_rng(5)
    t, counts = 0.0, []
    while t < 5.0:
        # a burst: 1–4 batches queued back to back, then a stall as long as their GPU time
        burst = int(rng.integers(1, 5))
        for _i in range(burst):
            t += 0.0005
            w.engine.step_count += 2
            if w._publish_due(t):
                counts.append(w.engine.step_count - w._published_step)
                w._t_publish = publish_schedule(w._t_publish, t, w.display_interval)
                w._published_step = w.engine.step_count
        t += burst * 2 * 0.004 - burst * 0.0005
    steps = np.array(counts[1:])
    share = float(np.mean(steps == 4))
    print(f"pace_by_steps={pace_by_steps}: {share:.3f} of {steps.size} frames hold 4 steps, mean {steps.mean():.2f}")
    if pace_by_steps:  # the quarter-interval guard lets a burst's frame slip a batch now and then
        assert share >= 0.99 and steps.mean() <= 4.05, (share, steps.mean())
    else:  # the schedule in the worker's time: frames of 2, 4, 6 steps
        assert share < 0.9 and steps.mean() > 4.2, (share, steps.mean())


class RowLog:
    """Stands in for the TimingLog: keeps what record() was called with."""

    def __init__(self):
        self.rows: list[dict] = []

    def record(self, wait=False, quantities=None, at=None):
        self.rows.append({"wait": wait, "at": at})


def test_a_timing_row_waits_for_its_device_time_and_keeps_the_step_it_was_read_at(worker):
    """SPH keeps its adaptive time on the device: the row's time is copied behind the step it
    belongs to and the row is written once that copy is done, with that step — never an empty
    time cell, never the worker waiting."""
    eng = worker.engine
    eng.device_time = lambda: np.array(0.125)  # a device scalar: not a host float
    worker.timing_log = RowLog()
    eng.step_count = 5
    worker._start_log_row()
    assert worker.timing_log.rows == []  # its copy's event is not done: nothing written, no wait
    eng.step_count = 9
    worker._finish_log_row()
    assert worker.timing_log.rows == [] and not eng.events[-1].waited
    eng.events[-1].done = True
    worker._finish_log_row()
    assert worker.timing_log.rows == [{"wait": False, "at": (5, 0.125)}]
    worker._finish_log_row()
    assert len(worker.timing_log.rows) == 1  # written once


def test_a_host_time_is_stamped_at_once(worker):
    eng = worker.engine
    eng.device_time = lambda: 2.5
    worker.timing_log = RowLog()
    eng.step_count = 7
    worker._start_log_row()
    assert worker.timing_log.rows == [{"wait": False, "at": (7, 2.5)}]

"""The engine's logged quantities (a body's C_d, ...) from the worker to the HUD.

The worker reads ``engine.logged_quantities()`` a few times a second into a bounded feed; the HUD
keeps a bounded history per name and draws a "Quantities" section only when there are any. The
HUD's drawing is checked on a headless imgui context (no GL: nothing is rasterised, the calls
are recorded); the wiring in the real window runs in a fresh process (see _isolated)."""
from __future__ import annotations

import contextlib
import csv
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
from nagare.app.gui.hud import QUANTITY_SAMPLES, QuantityHistory
from nagare.app.gui.worker import QuantitySample, SimulationWorker
from nagare.engine.presets import load_preset

from tests.app.frame_check import isolated
from tests.app.waiting import wait_until

SPHERE = "amr3d-sphere-re20"  # on NumPy its cpu_overrides make a small tree: ~3 s to build, ~0.15 s a step



def _isolated(name: str) -> bool:
    """Run test ``name`` of this file in a fresh process and assert it passed; True when the caller
    is that process. A window with the imgui HUD can segfault under Xvfb/Mesa depending on which
    GL tests ran before it in the same process (tests/app/test_view3d.py, _CANVAS_ISOLATION)."""
    return isolated(__file__, name)


@pytest.fixture
def start_worker():
    made = []

    def start(preset) -> SimulationWorker:
        w = SimulationWorker(load_preset(str(preset), backend="numpy"), "numpy").start()
        made.append(w)
        wait_until(lambda: w.latest_packet() is not None)
        return w

    yield start
    for w in made:
        w.stop()
        assert not w.alive


# ---- worker ------------------------------------------------------------------------------------
def test_worker_publishes_the_sphere_force_coefficients(start_worker):
    w = start_worker(SPHERE)
    w.send("play")
    wait_until(lambda: len(w.quantities()[1]) >= 3)
    w.send("pause")
    run, samples = w.quantities()
    assert run == w.run_id
    assert all(set(s.values) == {"cd", "cl", "cs"} for s in samples)
    assert all(math.isfinite(v) for s in samples for v in s.values.values())
    steps, seqs = [s.step for s in samples], [s.seq for s in samples]
    assert steps == sorted(set(steps)) and seqs == sorted(set(seqs))  # one sample per step, in order
    assert samples[-1].values["cd"] > 0  # the flow pushes the sphere downstream


def test_worker_reads_a_few_times_a_second_and_restarts_with_the_run(start_worker, fake_preset, monkeypatch,
                                                                    fake_family):
    calls = []

    def logged(self):
        calls.append(self.step_count)
        return {"mass": float(self.step_count), "other": 1.0}

    monkeypatch.setattr(fake_family.FakeEngine, "logged_quantities", logged)
    w = start_worker(fake_preset())
    w.send("play")  # thousands of steps a second
    t0 = time.perf_counter()
    wait_until(lambda: w.engine.step_count > 500 and time.perf_counter() - t0 > 1.0)
    w.send("pause")
    dt = time.perf_counter() - t0
    run, samples = w.quantities()
    assert len(calls) <= dt / w.quantities_interval + 3, (len(calls), dt)  # not every step
    assert len(samples) >= 2 and samples[-1].values["mass"] == samples[-1].step
    wait_until(lambda: not w.running)
    s0 = w.engine.step_count
    w.send("step", n=1)  # an explicit step: read at once
    wait_until(lambda: w.quantities()[1][-1].step == s0 + 1)
    n = len(calls)
    w.send("view", field="rho")  # a forced publish at the same step asks nothing new
    wait_until(lambda: w.latest_packet().field_name == "rho")
    assert len(calls) == n
    w.send("reset")  # the engine is built again: a new run, an empty history
    wait_until(lambda: w.quantities()[0] != run)
    run2, samples2 = w.quantities()
    assert run2 == run + 1 and all(s.step < samples[-1].step for s in samples2)
    assert all(s.seq > samples[-1].seq for s in samples2)


def test_engine_without_quantities_is_never_asked(start_worker, fake_preset):
    w = start_worker(fake_preset())
    w.send("step", n=5)
    wait_until(lambda: w.engine.step_count == 5)
    assert not w._asks_quantities and w.quantities()[1] == []


def _stub_gpu_worker(polls_to_done: int, device_path: bool):
    """A worker on a stub GPU engine whose events are done after ``polls_to_done`` queries; with
    ``device_path`` its device_quantities() launches the force at the step, without it the worker
    falls back to logged_quantities(). Returns (worker, engine, log of what happened)."""
    order = []

    class Event:
        def __init__(self, **kw):
            self.polls = 0

        def record(self, stream=None):
            order.append("record")
            StubGpuEngine.last_event = self

        @property
        def done(self):
            self.polls += 1
            return self.polls > polls_to_done

    class StubGpuEngine:
        backend = SimpleNamespace(is_gpu=True)
        xp = SimpleNamespace(cuda=SimpleNamespace(Event=Event))
        stream = None
        step_count = 12
        last_event = None

        def on_stream(self):
            return contextlib.nullcontext()

        def device_quantities(self):
            if not device_path:
                return None  # no device path: logged_quantities() after the stream is idle
            order.append(("launch", self.step_count))
            force = np.array([float(self.step_count), 0.5, 0.0])
            return {"force": force}, lambda host: {"cd": host["force"][0] / 10, "cl": host["force"][1]}

        def logged_quantities(self):
            assert not device_path, "the device path never waits for the stream"
            order.append(("read", self.last_event.polls))
            return {"cd": 2.75}

    w = SimulationWorker(
        SimpleNamespace(view=SimpleNamespace(field=None, slice_axis="z", particles_overlay=True)), "numpy")
    w.engine = StubGpuEngine()
    w._asks_quantities = True
    return w, w.engine, order


def test_gpu_read_waits_for_the_stream_by_polling_first():
    """On the GPU, without a device path, the read first lets the stream run dry (an event polled,
    GIL released), so the engine's device→host copy does not spin in a synchronising wait; then one
    sample per step."""
    w, _, order = _stub_gpu_worker(polls_to_done=3, device_path=False)
    w._read_quantities(wait=False)
    w._read_quantities(wait=False)  # the same step: not asked again
    assert order == ["record", ("read", 4)]
    assert [(s.step, s.values) for s in w.quantities()[1]] == [(12, {"cd": 2.75})]


def test_gpu_quantities_are_launched_and_read_at_a_later_frame():
    """The force is launched on the stream and read once its event is done, at a later publish,
    as the sample of the step it was launched at; no second launch while one is on its way."""
    w, eng, order = _stub_gpu_worker(polls_to_done=3, device_path=True)
    w._read_quantities(wait=False)  # launched; poll 1
    assert w.quantities()[1] == [] and order == [("launch", 12), "record"]
    eng.step_count = 20
    w._read_quantities(wait=False)  # still on its way (poll 2): nothing new launched
    w._collect_quantities(wait=False)  # poll 3
    assert w.quantities()[1] == [] and order == [("launch", 12), "record"]
    w._collect_quantities(wait=False)  # done
    assert [(s.step, s.values) for s in w.quantities()[1]] == [(12, {"cd": 1.2, "cl": 0.5})]
    w._read_quantities(wait=False)
    assert order[-2:] == [("launch", 20), "record"]


def test_gpu_quantities_with_wait_are_read_at_once():
    """A forced publish (a step, a view change) waits for its own launch, by polling."""
    w, eng, order = _stub_gpu_worker(polls_to_done=3, device_path=True)
    w._read_quantities(wait=True)
    assert [(s.step, s.values) for s in w.quantities()[1]] == [(12, {"cd": 1.2, "cl": 0.5})]
    assert w._quant_pending is None


# ---- HUD ---------------------------------------------------------------------------------------
def _samples(n, start_seq=1, names=("cd", "cl", "cs")):
    return [QuantitySample(start_seq + i, 10 * i, {k: 2.7 + 1 / (i + 1) + j for j, k in enumerate(names)})
            for i in range(n)]


def test_history_stays_bounded_and_resets():
    q = QuantityHistory()
    samples = _samples(10_000)
    for i in range(0, len(samples), 37):  # as the HUD takes them: a few at a time, the feed overlapping
        q.update(1, samples[max(0, i - 50):i + 37])
    assert q.names == ["cd", "cl", "cs"]
    assert all(len(d) == QUANTITY_SAMPLES <= 500 for d in q.values.values())
    assert list(q.values["cd"]) == [s.values["cd"] for s in samples[-QUANTITY_SAMPLES:]]  # each taken once
    assert q.step == samples[-1].step
    q.update(1, [QuantitySample(20_000, 5, {"cd": 9.0})])  # a checkpoint restored: the step went back
    assert list(q.values["cd"]) == [9.0] and q.names == ["cd"]
    q.update(2, [])  # another preset or a reset: the old history goes even before new samples come
    assert q.names == [] and q.step == -1


class _Recorder:
    """Stands in for imgui's calls the quantity section makes, recording them."""

    def __init__(self, monkeypatch, imgui):
        self.headers, self.texts, self.plots = [], [], []
        header, text, plot = imgui.collapsing_header, imgui.text, imgui.plot_lines

        def collapsing_header(label, *a, **kw):
            self.headers.append(label)
            return header(label, *a, **kw)

        def text_(s):
            self.texts.append(s)
            return text(s)

        def plot_lines(label, values, **kw):
            self.plots.append((label, len(values), kw))
            return plot(label, values, **kw)

        monkeypatch.setattr(imgui, "collapsing_header", collapsing_header)
        monkeypatch.setattr(imgui, "text", text_)
        monkeypatch.setattr(imgui, "plot_lines", plot_lines)


def test_hud_shows_no_quantities_section_without_quantities(headless_hud, monkeypatch):
    from imgui_bundle import imgui

    rec = _Recorder(monkeypatch, imgui)
    headless_hud.quantity_source = lambda: (1, [])
    headless_hud.frame()
    headless_hud.frame()
    assert headless_hud.quantities.names == []
    assert "Quantities" not in rec.headers and not rec.plots


def test_hud_draws_each_quantity_with_its_value_and_plot(headless_hud, monkeypatch):
    from imgui_bundle import imgui

    rec = _Recorder(monkeypatch, imgui)
    samples = _samples(40, names=("cd", "cl", "cs", "strouhal"))
    samples[-2] = QuantitySample(samples[-2].seq, samples[-2].step, dict(samples[-2].values, cl=math.nan))
    headless_hud.quantity_source = lambda: (7, samples)
    headless_hud.frame()
    headless_hud.frame()
    assert "Quantities" in rec.headers
    last = samples[-1].values
    for label, name in [("C_d (drag)", "cd"), ("C_l (lift)", "cl"), ("C_s (side)", "cs"), ("strouhal", "strouhal")]:
        assert f"{label}: {last[name]:.4g}" in rec.texts, rec.texts
    plots = [p for p in rec.plots if p[0].startswith("##quantity-")]
    assert [p[0] for p in plots[:4]] == ["##quantity-cd", "##quantity-cl", "##quantity-cs", "##quantity-strouhal"]
    assert all(n == 40 and kw["scale_min"] < kw["scale_max"] for _, n, kw in plots)  # a NaN does not break the scale


# ---- the window and the headless run -----------------------------------------------------------
def test_window_hud_follows_the_sphere_coefficients(make_window, qtbot):
    if not _isolated("test_window_hud_follows_the_sphere_coefficients"):
        return
    w = make_window(SPHERE)
    hud = w.hud
    qtbot.waitUntil(lambda: len(hud.quantities.values.get("cd", ())) >= 2, timeout=30000)
    assert hud.error is None, hud.error
    assert hud.quantities.names == ["cd", "cl", "cs"] and hud.quantities.run == w.worker.run_id
    frames = hud.frames
    qtbot.waitUntil(lambda: hud.frames > frames, timeout=10000)  # it keeps drawing with the section
    assert hud.error is None, hud.error


def test_window_tracers_per_seed_control_changes_the_running_engine(make_window, qtbot):
    if not _isolated("test_window_tracers_per_seed_control_changes_the_running_engine"):
        return
    w = make_window(SPHERE)
    qtbot.waitUntil(lambda: w.tracer_spin.isEnabled(), timeout=30000)
    start = w.worker.engine.tracer_capacity()
    assert w.tracer_spin.value() == start
    w.tracer_spin.setValue(start + 7)  # as the arrows or Enter do
    qtbot.waitUntil(lambda: w.worker.engine.tracer_capacity() == start + 7, timeout=10000)
    qtbot.waitUntil(lambda: any("tracers per seed: " in m for m in w.messages), timeout=5000)
    steps = w.worker.engine.step_count
    qtbot.waitUntil(lambda: w.worker.engine.step_count > steps, timeout=10000)  # it runs on
    assert w.hud.error is None, w.hud.error


def test_headless_run_writes_the_coefficients_into_the_timing_log(tmp_path):
    from nagare.app.cli import main

    out = tmp_path / "t.csv"
    assert main(["run", SPHERE, "--backend", "numpy", "--steps", "8", "--timings", str(out), "--quiet"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert rows and {"cd", "cl", "cs"} <= set(rows[0])
    assert all(math.isfinite(float(r[k])) for r in rows for k in ("cd", "cl", "cs"))
    assert float(rows[-1]["cd"]) > 0


def test_a_mouse_move_over_the_scene_alone_asks_for_no_frame(headless_hud):
    """The Qt→imgui bridge asks for a redraw on a move over the HUD's window and on the move that
    leaves it (imgui clears its hover there), not for moves over the scene: a frame holds the GIL
    the simulation thread needs."""
    from types import SimpleNamespace

    hud = headless_hud
    hud.frame()  # the HUD's window placed: hud.rect
    x, y, w, h = hud.rect
    assert w > 100 and h > 100
    asked = []
    hud.canvas.update = lambda: asked.append(1)

    def move(pos):
        asked.clear()
        hud.bridge.on_mouse_move(SimpleNamespace(pos=pos, handled=False, blocked=False))
        hud.frame()
        return bool(asked)

    assert not move((x + w + 200, y + 50))  # the scene
    assert move((x + 20, y + 50))  # onto the HUD
    assert move((x + 40, y + 60))  # over it
    assert move((x + w + 200, y + 60))  # off it: one frame
    assert not move((x + w + 250, y + 80))  # the scene again
    assert hud.covers((x + 1, y + 1)) and not hud.covers((x + w + 1, y + 1))

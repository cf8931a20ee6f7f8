"""``graph = on`` without a GPU: NumPy refuses a request with the reason and lets a preset's choice fall back
to ``off``; the availability check names what a captured step cannot hold; the step the graph captures is
the one the host runs (the NumPy engine steps through it). The replay itself: tests/equivalence/
test_compact_graph_gpu.py."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
from nagare.engine import registry
from nagare.engine.backend import get_backend
from nagare.engine.compact import Engine, variants
from nagare.engine.errors import VariantUnavailable
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

NUMPY = get_backend("numpy")
OVER = ["grid.nx=24", "grid.ny=24", "physics.dt=0.02"]


def test_numpy_refuses_a_request_and_falls_back_from_a_preset(caplog):
    pre = load_preset("compact-vortex-outflow", OVER, backend="numpy")
    with pytest.raises(VariantUnavailable, match="graph=on cannot run here: needs a CUDA GPU"):
        create_engine(pre, NUMPY, variants={"graph": "on"})
    pre = load_preset("compact-vortex-outflow", OVER + ['variants.graph="on"'], backend="numpy")
    with caplog.at_level(logging.INFO, logger="nagare"):
        e = create_engine(pre, NUMPY)
    assert e.selection["graph"] == "off" and e._graph is None
    assert any("graph=on" in r.getMessage() for r in caplog.records)
    e.step(2)
    assert e.timing_extra()["graph"] == "off"


@pytest.mark.parametrize("change,needle", [
    ({"solver": "gtsv2"}, "gtsv2StridedBatch allocates its work buffer"),
    ({"solver": "cgs", "kernel": "cuda"}, "convergence on the host"),
    ({"kernel": "array", "solver": "thomas"}, "allocate temporaries"),
    ({"kernel": "cuda-autotune", "solver": "thomas"}, "auto-tuner"),
    ({"pointwise": "array"}, "pointwise = fused only"),
])
def test_the_check_names_what_a_capture_cannot_hold(change, needle):
    pre = load_preset("compact-vortex-outflow", OVER, backend="numpy")
    sel = dict(registry.default_selection("compact", "cupy"), graph="on", **change)
    assert needle in variants._graph_check("cupy", sel, pre)
    assert variants._graph_check("cupy", dict(sel, graph="off"), pre) is None
    assert variants._graph_check("cupy", dict(registry.default_selection("compact", "cupy"), graph="on"), pre) is None


def test_scalar_problems_need_no_fused_pointwise():
    pre = load_preset("compact-rotating-cone", ["grid.nx=32", "grid.ny=32"], backend="numpy")
    sel = dict(registry.default_selection("compact", "cupy"), graph="on", pointwise="array")
    assert variants._graph_check("cupy", sel, pre) is None


def test_the_captured_step_is_the_host_step():
    """_advance runs _step_once n times (the body graph.py captures): the same state as stepping one at a
    time, and the RK4 accumulation without a temporary gives NumPy's ``acc += two * k`` bit for bit."""
    pre = load_preset("compact-vortex-outflow", OVER + ['initial.kind="random"'], backend="numpy")
    a, b = create_engine(pre, NUMPY), create_engine(pre, NUMPY)
    a.step(4)
    for _ in range(4):
        b.step(1)
    np.testing.assert_array_equal(a.U, b.U)
    from nagare.engine.compact.engine import rk4_accumulate

    rng = np.random.default_rng(2)
    for dt in (np.float64, np.float32):
        acc, k = rng.standard_normal(100).astype(dt), rng.standard_normal(100).astype(dt)
        want = acc + dt(2) * k
        scratch = np.empty_like(acc)
        rk4_accumulate(np, acc, k, dt(2), scratch)
        np.testing.assert_array_equal(acc, want)


def test_the_captured_step_with_window_y_lines_is_the_host_step():
    """y-direction = window: the body graph.py captures (n steps of _step_once) leaves the state of stepping one
    at a time bit for bit, on NumPy (the window mirror on the y-lines); the GPU replay:
    tests/equivalence/test_compact_graph_gpu.py."""
    pre = load_preset("compact-vortex-outflow", OVER + ['initial.kind="random"'], backend="numpy")
    a, b = (create_engine(pre, NUMPY, variants={"y-direction": "window"}) for _ in range(2))
    assert a.ns.dy.solver.solver == "window" and a.ns.dx.solver.solver == "thomas"
    start = a.U.copy()
    a.step(4)
    for _ in range(4):
        b.step(1)
    assert not np.array_equal(a.U, start)
    np.testing.assert_array_equal(a.U, b.U)


def test_traffic_is_modelled_only_for_the_fused_gpu_path():
    from nagare.engine.compact import traffic

    pre = load_preset("compact-vortex-outflow", OVER, backend="numpy")
    e = create_engine(pre, NUMPY)
    assert traffic.step_kernels(e) is None and "kernels_per_step" not in e.timing_extra()
    # the accounting on the GPU's selection (the NumPy operators' launch counts stand in for the device's)
    fake = SimpleNamespace(selection=dict(e.selection, kernel="fused"), ns=e.ns)
    e.ns.fused = object()
    try:
        kernels = traffic.step_kernels(fake)
    finally:
        e.ns.fused = None
    names = [k.name for k in kernels]
    assert names[:2] == ["ns_euler", "∂x (u, v, T)"] and "rk4 stages" in names
    words = {k.name: k.words for k in kernels}
    # per evaluation ×4: euler reads U (4), writes u, v, T, p (4) and F, G (8)
    assert words["ns_euler"] == 4 * 16 and words["ns_combine"] == 4 * 12 and words["∂F/∂x"] == 4 * 8
    s = traffic.summary(kernels, 24 * 24, 8)
    # 4 × (euler, 2 gradient passes, viscous, 2 flux passes, combine) + 4 stages + filter (2 × (rhs + solve))
    # + the held west line saved and restored
    assert s["kernels_per_step"] == 4 * 7 + 4 + 4 + 2
    assert s["ideal_bytes_per_step"] == sum(k.words for k in kernels) * 24 * 24 * 8


def test_the_bench_lists_the_graph_cell():
    labels = [label for label, _ in Engine.bench_selections("cupy")]
    assert "graph=on" in labels


# ---- graph.py's control flow on a stand-in for CuPy's capture ------------------------------------------
class _Graph:
    def __init__(self, ops):
        self.ops = ops

    def launch(self, stream):
        for op in self.ops:
            op()


class _Stream:
    """Work issued while capturing is recorded (not run), as CUDA does; otherwise it runs at once."""

    def __init__(self):
        self.recording = None
        self.current = 0  # how many `with stream:` blocks are open (CuPy: the stream made current)

    def __enter__(self):
        self.current += 1
        return self

    def __exit__(self, *exc):
        self.current -= 1

    def begin_capture(self, mode=None):
        assert self.recording is None, "capture begun twice"
        assert self.current, "captured on a stream that is not the current one"
        self.recording = []

    def end_capture(self):
        ops, self.recording = self.recording, None
        return _Graph(ops)

    def issue(self, op):
        if self.recording is not None:
            self.recording.append(op)
        else:
            op()


class _Engine:
    """What graph.StepGraph uses of an engine: a step of three phases on a (2,) state, + 1 and × 2 each."""

    def __init__(self):
        from contextlib import contextmanager

        from nagare.engine.timing import PhaseTimer

        @contextmanager
        def using_allocator(fn):
            self.allocator = fn
            try:
                yield
            finally:
                self.allocator = None

        self.allocator = None
        self.xp = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(streamCaptureModeRelaxed=0),
                                                       using_allocator=using_allocator))
        self.stream = _Stream()
        self.timer = PhaseTimer(NUMPY)
        self.state = np.array([1.0, 2.0])
        self.scratch = np.zeros(2)
        self._untimed, self._hook = False, None
        self.warm_steps = 0

    def state_arrays(self):
        return {"s": self.state}

    def untimed(self):
        from contextlib import contextmanager

        @contextmanager
        def ctx():
            self._untimed = True
            try:
                yield
            finally:
                self._untimed = False
        return ctx()

    def phase_hook(self, hook):
        from contextlib import contextmanager

        @contextmanager
        def ctx():
            self._hook = hook
            try:
                yield
            finally:
                self._hook = None
        return ctx()

    def phase(self, name):
        from contextlib import contextmanager

        @contextmanager
        def ctx():
            if self._hook is not None:
                self._hook(name)
                yield
                self._hook(None)
            elif self._untimed:
                yield
            else:
                with self.timer.phase(name):
                    yield
        return ctx()

    def step(self):
        if self._untimed and self.stream.recording is None:
            self.warm_steps += 1
        s = self.state
        with self.phase("other"):
            self.stream.issue(lambda: s.__iadd__(1.0))
        with self.phase("update"):
            self.stream.issue(lambda: s.__imul__(2.0))
        self.stream.issue(lambda: s.__isub__(0.5))  # outside any phase


def _host_steps(state, n):
    s = np.array(state)
    for _ in range(n):
        s = (s + 1.0) * 2.0 - 0.5
    return s


def test_step_graph_replays_the_steps_the_host_would_run():
    from nagare.engine.compact import graph

    e = _Engine()
    g = graph.StepGraph(e, e.step)
    start = e.state.copy()
    total = 0
    for n in (1, graph.GRAPH_STEPS + 3, 5, 2, 1):
        g.advance(n)
        total += n
        np.testing.assert_array_equal(e.state, _host_steps(start, total))
    assert e.warm_steps == 1  # one warm-up step, its effect undone
    # calls: 1 (the first of PROFILE_EVERY: its one step profiled, no whole graph), 19 (longer than a graph: its
    # first step profiled, then 16 + 2), 5, 2, 1 — whole graphs cached by length
    assert set(g.graphs) == {1, graph.GRAPH_STEPS, 2, 5}
    # the profiled step's regions, in launch order: other, update and the untimed gaps
    assert [name for name, _ in g.segments] == ["untimed", "other", "untimed", "update", "untimed"]
    samples = e.timer.collect(wait=True)
    detail = [s.phase for s in samples if s.detail]
    steps = sum(s.steps for s in samples if s.phase == "step")
    assert detail == ["other", "update"] * 2  # two profiled steps, their phases as detail samples
    assert steps + 2 == total  # every other step in the whole-graph replays' samples


def test_an_allocation_inside_the_capture_is_refused():
    from nagare.engine.compact import graph

    e = _Engine()

    def allocating_step():
        e.step()
        if e.allocator is not None:
            e.allocator(64)

    g = graph.StepGraph(e, allocating_step)
    before = e.state.copy()
    with pytest.raises(graph.CaptureError, match="allocation of 64 bytes inside the captured"):
        g.advance(3)  # a profiled call: the per-phase step would run first if captures came after it
    assert e.stream.recording is None  # the capture was ended
    np.testing.assert_array_equal(e.state, before)  # no step ran: the engine's step count stays true

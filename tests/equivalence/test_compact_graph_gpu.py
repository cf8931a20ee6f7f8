"""``graph = on`` (engine/compact/graph.py) on the GPU: P4's Navier–Stokes step replayed as a CUDA graph
leaves exactly the state the host-launched step leaves (bit for bit: the same kernels on the same buffers
in the same order), fp64 and fp32, periodic and the NSCBC outflow preset's sides; a checkpoint resumes
bit for bit with the graph on (restores write the state in place, so the captured graphs stay valid);
the combinations that cannot be captured are refused with the reason; the bench's cells carry the step's
kernel count, its ideal bytes and per-phase times."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.compact import graph as step_graph
from nagare.engine.errors import VariantUnavailable
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

pytestmark = pytest.mark.gpu

PERIODIC = ['boundaries.west="periodic"', 'boundaries.east="periodic"', 'boundaries.south="periodic"',
            'boundaries.north="periodic"']


def _engine(n: int, precision: str, sides: list[str], graph: str, **variants):
    over = [f"grid.nx={n}", f"grid.ny={n}", f"physics.dt={0.76 / (n - 1):.3g}", 'initial.kind="random"',
            f'physics.precision="{precision}"', *sides]
    pre = load_preset("compact-vortex-outflow", over, backend="cupy")
    return create_engine(pre, get_backend("cupy"), variants={"graph": graph, **variants})


def _state(e) -> np.ndarray:
    e.synchronize()
    return e.backend.asnumpy(e.state_arrays()["U"])


# steps per call: a profiled step, whole graphs of GRAPH_STEPS and a shorter remainder, a single step
CALLS = (1, step_graph.GRAPH_STEPS + 3, 5, step_graph.PROFILE_EVERY)


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
@pytest.mark.parametrize("sides", [PERIODIC, []], ids=["periodic", "nscbc-outflow"])
@pytest.mark.parametrize("batching", ["stacked", "grouped"])
def test_graph_step_equals_the_host_launched_step_bit_for_bit(precision, sides, batching):
    n = 96 if precision == "fp64" else 64
    extra = {"batching": batching, "y-direction": "transpose"} if batching == "grouped" else {}
    off = _engine(n, precision, sides, "off", **extra)
    on = _engine(n, precision, sides, "on", **extra)
    np.testing.assert_array_equal(_state(on), _state(off))
    start = _state(off)
    for calls in range(12):  # more than PROFILE_EVERY calls: profiled and whole-graph steps both
        m = CALLS[calls % len(CALLS)]
        off.step(m)
        on.step(m)
    got, want = _state(on), _state(off)
    assert np.isfinite(want).all() and not np.array_equal(want, start)
    np.testing.assert_array_equal(got, want)
    assert on.step_count == off.step_count
    rep = on.batch_report(wait=True)
    assert "step" in rep.phase_ms_per_step and rep.ms_per_step > 0
    assert {"derivative", "other", "update", "filter"} <= set(rep.phase_ms_per_step), rep.phase_ms_per_step


def test_checkpoint_resumes_bit_for_bit_with_the_graph_on():
    """Run A: 20 steps, checkpoint, 20 more. Run B (graph on, already stepping: its graphs captured) restores
    A's checkpoint and steps 20: A's state bit for bit. Run C (graph off) from the same checkpoint: the same."""
    a = _engine(64, "fp64", [], "on")
    a.step(20)
    ckpt = a.checkpoint()
    a.step(20)
    want = _state(a)
    b = _engine(64, "fp64", [], "on")
    b.step(7)
    ptr = b.state_arrays()["U"].data.ptr
    b.restore(ckpt)
    assert b.state_arrays()["U"].data.ptr == ptr  # restored in place: the captured graphs still address it
    b.step(20)
    np.testing.assert_array_equal(_state(b), want)
    c = _engine(64, "fp64", [], "off")
    c.restore(ckpt)
    c.step(20)
    np.testing.assert_array_equal(_state(c), want)


def test_live_switches_rebuild_the_graph():
    """graph on → off → on, and another axis switched while on: every stretch matches the host-launched run."""
    ref = _engine(64, "fp64", [], "off")
    e = _engine(64, "fp64", [], "on")
    for change in ({}, {"graph": "off"}, {"graph": "on"}, {"batching": "per-variable"}, {"batching": "stacked"}):
        e.set_variant(**change)
        ref.set_variant(**{k: v for k, v in change.items() if k != "graph"})
        e.step(9)
        ref.step(9)
        np.testing.assert_array_equal(_state(e), _state(ref), err_msg=str(change))


def test_uncapturable_combinations_are_refused():
    """cuSPARSE gtsv2 (a work buffer allocated per call), the iterative solvers (host-read convergence), the
    array kernels (temporaries): refused with the reason, at creation and when switched to while graph = on."""
    with pytest.raises(VariantUnavailable, match="gtsv2"):
        _engine(32, "fp64", [], "on", solver="gtsv2", kernel="cuda")
    with pytest.raises(VariantUnavailable, match="pointwise = fused"):
        _engine(32, "fp64", [], "on", pointwise="array")
    e = _engine(32, "fp64", [], "on")
    with pytest.raises(VariantUnavailable):
        e.set_variant(solver="cgs", kernel="cuda")
    assert e.selection["solver"] == "scan" and e.selection["graph"] == "on"
    e.step(3)
    assert np.isfinite(_state(e)).all()


def test_scalar_problems_replay_too():
    """The family's other problems share the mechanism: the rotating cone (RK4, closures) and the derivative
    benchmark, graph on against off, bit for bit."""
    for name, over in (("compact-rotating-cone", ["grid.nx=64", "grid.ny=64", "physics.dt=0.002"]),
                       ("compact-derivative", ["grid.nx=64", "grid.ny=64"])):
        runs = {}
        for g in ("off", "on"):
            e = create_engine(load_preset(name, over, backend="cupy"), get_backend("cupy"), variants={"graph": g})
            e.step(21)
            e.synchronize()
            runs[g] = {k: e.backend.asnumpy(v) for k, v in e.state_arrays().items()}
        for k in runs["off"]:
            np.testing.assert_array_equal(runs["on"][k], runs["off"][k], err_msg=f"{name} {k}")


def test_bench_reports_kernels_and_the_ideal():
    """The Navier–Stokes cells with graph on: the kernel count and ideal bytes in the extras (a count that
    matches the launch accounting of the other extras), per-phase times, and the family's table."""
    from nagare.engine.bench import run_bench
    from nagare.engine.compact import Engine

    res = run_bench("compact", get_backend("cupy"), cases=["ns-vortex-256-fp64"], only=["default", "graph"],
                    min_time=0.05, warmup_steps=2)
    assert [r.label for r in res] == ["default", "graph=on"], [r.label for r in res]
    assert all(r.ok for r in res), [(r.label, r.reason) for r in res if not r.ok]
    for r in res:
        x = r.extra
        filter_rhs, held_lines = 2, 2  # the filter's right-hand sides (x, y); the held west line saved, restored
        assert x["kernels_per_step"] == (4 * (x["solve_launches_per_rate"] + x["pointwise_launches_per_rate"]) + 4
                                         + x["solve_launches_per_step"] - 4 * x["solve_launches_per_rate"]
                                         + filter_rhs + held_lines), x
        assert x["ideal_bytes_per_step"] > 0 and 0 < r.roofline_pct
    assert {"derivative", "other"} <= set(res[1].phases)
    table = Engine.bench_report(res)
    assert "step ÷ ideal" in table and "graph=on" in table
    print(table)


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
@pytest.mark.parametrize("sides", [PERIODIC, []], ids=["periodic", "nscbc-outflow"])
def test_graph_step_with_window_y_lines_equals_the_host_launched_step(precision, sides):
    """y-direction = window (the y-lines of every derivative and of the filter by the window kernel, the
    x-lines by scan): the captured step leaves the host-launched step's state bit for bit (its coefficient
    uploads happen in the warm-up step, no work array: no call is in place), and a checkpoint resumes bit for
    bit."""
    n = 96 if precision == "fp64" else 64
    off = _engine(n, precision, sides, "off", **{"y-direction": "window"})
    on = _engine(n, precision, sides, "on", **{"y-direction": "window"})
    assert on.ns.dy.solver.solver == "window" and on.ns.dx.solver.solver == "scan"
    start = _state(off)
    for calls in range(12):
        m = CALLS[calls % len(CALLS)]
        off.step(m)
        on.step(m)
    want = _state(off)
    assert np.isfinite(want).all() and not np.array_equal(want, start)
    np.testing.assert_array_equal(_state(on), want)
    ckpt = on.checkpoint()
    on.step(10)
    again = _engine(n, precision, sides, "on", **{"y-direction": "window"})
    again.step(3)
    again.restore(ckpt)
    again.step(10)
    np.testing.assert_array_equal(_state(again), _state(on))

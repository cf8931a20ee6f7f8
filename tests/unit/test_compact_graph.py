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

"""amr3d's CUDA ladder on a real GPU, beyond the registry test: the rungs agree with each other,
live switching between rungs (and so storages) keeps the state, and the graph replays the same
steps as plain launches."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

pytestmark = pytest.mark.gpu

RUNGS = ("naive", "split", "mother-leaf", "templates", "sorted", "split-apart", "uniform")


def engine(kernels, *sets, graph="off"):
    p = load_preset("amr3d-bench", ["grid.leaves=[4, 2, 2]", "initial.kind='random'", *sets], backend="cupy")
    return create_engine(p, get_backend("cupy"), variants={"kernels": kernels, "graph": graph})


@pytest.mark.parametrize("m", [9, 17])
def test_rungs_agree_on_the_gpu(m):
    out = {}
    for r in RUNGS:
        e = engine(r, f"grid.m={m}")
        e.step(20)
        out[r] = e.backend.asnumpy(e.state_arrays()["f"])
    for r in RUNGS[1:]:
        np.testing.assert_allclose(out[r], out["naive"], rtol=1e-6, atol=1e-7, err_msg=r)


def test_switching_rungs_live_keeps_the_state():
    a = engine("naive")
    b = engine("naive")
    for r in RUNGS + ("templates", "naive"):
        a.set_variant(kernels=r)
        a.step(3)
        b.step(3)
    np.testing.assert_allclose(a.backend.asnumpy(a.state_arrays()["f"]), b.backend.asnumpy(b.state_arrays()["f"]),
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kernels", ["templates", "sorted", "uniform"])
def test_graph_replays_the_same_steps(kernels):
    a, b = engine(kernels, graph="on"), engine(kernels)
    a.step(37)  # two graphs of 16, one of 4, one plain step
    b.step(37)
    np.testing.assert_array_equal(a.backend.asnumpy(a.state_arrays()["f"]), b.backend.asnumpy(b.state_arrays()["f"]))


BATCHES = (1, 1, 3, 16, 1, 2, 17, 1)  # odd replays (either buffer parity), a graph's length, its remainder


@pytest.mark.parametrize("kernels", ["templates", "uniform"])
def test_graph_replays_odd_batches_as_plain_steps(kernels):
    """One step a batch (as the tracers step) replays a graph too: the buffer roles after it
    are the plain steps', bit for bit."""
    a, b = engine(kernels, graph="on"), engine(kernels)
    for n in BATCHES:
        a.step(n)
    b.step(sum(BATCHES))
    np.testing.assert_array_equal(a.backend.asnumpy(a.state_arrays()["f"]), b.backend.asnumpy(b.state_arrays()["f"]))


@pytest.mark.parametrize("kernels", ["naive-fused", "mother-leaf"])
def test_tree_graph_replays_odd_batches_as_plain_steps(kernels):
    """On a tree of five levels (the sphere with its tracers, which step one coarse step a batch):
    graph replays of odd batches equal the plain steps bit for bit, tracers included."""
    def sphere(graph):
        p = load_preset("amr3d-sphere-re100", ["tracers.count=20"], backend="cupy")
        return create_engine(p, get_backend("cupy"), variants={"kernels": kernels, "graph": graph})

    a, b = sphere("on"), sphere("off")
    for n in BATCHES:
        a.step(n)
    b.step(sum(BATCHES))
    for key, got in a.state_arrays().items():
        np.testing.assert_array_equal(a.backend.asnumpy(got), b.backend.asnumpy(b.state_arrays()[key]), err_msg=key)


@pytest.mark.parametrize("kernels", ["naive", "uniform"])
def test_fp16_storage_follows_the_rounded_reference(kernels):
    """storage = fp16: 20 steps of the fp16 kernels equal the reference that rounds its state to
    fp16 storage after every step (the registry's fp16 tolerance), differ from fp32 by that rounding,
    and count 112 bytes a point update."""
    a = engine(kernels)
    a.set_variant(storage="fp16")
    ref = engine("reference")
    ref.set_variant(storage="fp16")
    plain = engine(kernels)
    for e in (a, ref, plain):
        e.step(20)
    got = a.backend.asnumpy(a.state_arrays()["f"])
    np.testing.assert_allclose(got, ref.backend.asnumpy(ref.state_arrays()["f"]), rtol=2e-5, atol=4e-5)
    assert np.abs(got - plain.backend.asnumpy(plain.state_arrays()["f"])).max() > 0
    assert a.bytes_per_update() == 112.0 and a.shape.f.dtype == np.float16

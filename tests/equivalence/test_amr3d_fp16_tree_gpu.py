"""fp16 storage on refined trees on a real GPU, beyond the registry test (which runs the naive
rung on every tree preset): the naive-fused rung with the CUDA graph follows the rounded
reference on the sphere's tree and the three-level tree, a checkpoint resumes bit for bit, and the
three-level benchmark tree's rate on fp16 storage against fp32 (printed; docs/amr3d.md)."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.amr3d import cases
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.backend import get_backend
from nagare.engine.presets import load_preset

pytestmark = pytest.mark.gpu
FP16 = {"kernels": "naive-fused", "storage": "fp16", "graph": "on"}


@pytest.mark.parametrize("label", ["fp32-sphere-m9", "fp32-tree3-m9", "fp32-tree2-slip-m9"])
def test_naive_fused_graph_on_fp16_follows_the_rounded_reference(label):
    """24 steps (the registry's) from its random state: within the registry's fp16 tolerance of the
    NumPy reference that rounds as the level buffers store, and apart from the fp32 kernels."""
    preset = AMR3D.equivalence_presets()[label]
    ref = AMR3D(preset, get_backend("numpy"), variants={"kernels": "reference", "storage": "fp16"})
    dev = AMR3D(preset, get_backend("cupy"), variants=FP16)
    plain = AMR3D(preset, get_backend("cupy"), variants={"kernels": "naive-fused", "graph": "on"})
    for e in (ref, dev, plain):
        e.random_state(np.random.default_rng(1234))
        e.step(AMR3D.equivalence_steps)
    got = dev.backend.asnumpy(dev.state_arrays()["f"])
    np.testing.assert_allclose(got, ref.state_arrays()["f"], rtol=2e-5, atol=4e-5)
    assert np.abs(got - plain.backend.asnumpy(plain.state_arrays()["f"])).max() > 0
    assert dev.bytes_per_update() == 112.0


def three_levels(*sets):
    return load_preset("amr3d-bench", ["grid.leaves=[4, 4, 4]", "grid.m=9", cases.THREE_LEVELS, *sets],
                       backend="cupy")


def test_fp16_tree_checkpoint_resumes_bit_for_bit():
    """The three-level tree on fp16 storage (naive-fused, graph on): a checkpoint after 6 steps,
    restored into a new engine, repeats the next 10 steps bit for bit."""
    p = three_levels()
    a = AMR3D(p, get_backend("cupy"), variants=FP16)
    a.step(6)
    ckpt = a.checkpoint()
    a.step(10)
    want = a.backend.asnumpy(a.state_arrays()["f"])
    b = AMR3D(p, get_backend("cupy"), variants=FP16)
    b.restore(ckpt)
    b.step(10)
    np.testing.assert_array_equal(b.backend.asnumpy(b.state_arrays()["f"]), want)

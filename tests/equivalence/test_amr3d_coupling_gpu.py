"""The fused level coupling on a real GPU (tree_stepper.py ``fused_coupling``; coupling.cu
amr3d_rescale_two, amr3d_interpolate_rows, amr3d_restrict_fine): bit for bit the split launches,
fp32 and fp16 storage, naive and naive-fused, with and without the CUDA graph, on the registry's
tree presets (two and three levels, walls, free slip, the sphere's links, inlet and outlet); a
checkpoint of the three-level tree resumes bit for bit; the interpolation's threads a source
position (``interp_lanes``) and the paired restrictions (``pair_restrictions``) change no bit. The
registry's amr3d cells (which run the fused coupling, the default) check it against the reference.
``sanitizer_case`` is the small run tools/gpu-check.sh's amr3d-coupling stage puts under
compute-sanitizer."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.amr3d import cases
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.backend import get_backend
from nagare.engine.presets import load_preset

pytestmark = pytest.mark.gpu
PRESETS = AMR3D.equivalence_presets()


def engine(preset, variants: dict, fused: bool, seed: int = 1234) -> AMR3D:
    e = AMR3D(preset, get_backend("cupy"), variants=variants)
    e.random_state(np.random.default_rng(seed))
    e.shape.stepper.fused_coupling = fused
    return e


def state(e: AMR3D) -> np.ndarray:
    return e.backend.asnumpy(e.state_arrays()["f"])


@pytest.mark.parametrize("label", ["fp32-tree2-m9", "fp32-tree3-m9", "fp32-tree2-slip-m9", "fp32-sphere-m9"])
@pytest.mark.parametrize("variants", [{"kernels": "naive-fused", "graph": "on"},
                                      {"kernels": "naive", "graph": "off"},
                                      {"kernels": "naive-fused", "storage": "fp16", "graph": "on"},
                                      {"kernels": "naive", "storage": "fp16", "graph": "off"}],
                         ids=["fused-graph", "naive", "fused-fp16-graph", "naive-fp16"])
def test_fused_coupling_equals_the_split_launches(label, variants):
    """The registry's steps from its random state: the fused coupling (graph as selected) and the
    split launches (graph off) give the same bits."""
    split = engine(PRESETS[label], {**variants, "graph": "off"}, fused=False)
    fused = engine(PRESETS[label], variants, fused=True)
    for e in (split, fused):
        e.step(AMR3D.equivalence_steps)
    np.testing.assert_array_equal(state(fused), state(split))


@pytest.mark.parametrize("label", ["fp32-tree3-m9", "fp32-sphere-m9"])
def test_interpolate_rows_lanes_equal_one_thread_a_position(label):
    """amr3d_interpolate_rows with 3 and 9 threads a source position (tree_stepper ``interp_lanes``)
    steps bit for bit as with one (the kernel of before) and as the split launches (the interface
    buffers it reads and writes are fp32 on either storage: fp32 storage here)."""
    from nagare.engine.amr3d.tree_stepper import INTERP_LANES

    variants = {"kernels": "naive-fused", "graph": "on"}
    got = {}
    for lanes in INTERP_LANES:
        e = engine(PRESETS[label], variants, fused=True)
        e.shape.stepper.interp_lanes = lanes
        e.step(AMR3D.equivalence_steps)
        got[lanes] = state(e)
    split = engine(PRESETS[label], {**variants, "graph": "off"}, fused=False)
    split.step(AMR3D.equivalence_steps)
    for lanes in INTERP_LANES:
        np.testing.assert_array_equal(got[lanes], state(split))


@pytest.mark.parametrize("variants", [{"kernels": "naive-fused", "graph": "on"},
                                      {"kernels": "naive-fused", "storage": "fp16", "graph": "off"}],
                         ids=["fused-graph", "fused-fp16"])
def test_paired_restrictions_equal_the_unpaired_ones(variants):
    """amr3d_restrict_two and the coarsest level's restriction carried through a run of steps
    (``pair_restrictions``) on three levels: the same bits as without them (and the split launches)."""
    label = "fp32-tree3-m9"
    got = {}
    for pairs in (True, False):
        e = engine(PRESETS[label], variants, fused=True)
        st = e.shape.stepper
        assert st._pairable
        st.pair_restrictions = pairs
        e.step(AMR3D.equivalence_steps)
        got[pairs] = state(e)
    split = engine(PRESETS[label], {**variants, "graph": "off"}, fused=False)
    split.step(AMR3D.equivalence_steps)
    np.testing.assert_array_equal(got[True], got[False])
    np.testing.assert_array_equal(got[True], state(split))


def test_fused_coupling_checkpoint_resumes_bit_for_bit():
    """The three-level tree (naive-fused, graph on, fused coupling): a checkpoint after 6 steps,
    restored into a new engine, repeats the next 10 steps bit for bit (the deferred restriction is
    done within each coarse step: nothing of it is in the state)."""
    p = load_preset("amr3d-bench", ["grid.leaves=[4, 4, 4]", "grid.m=9", cases.THREE_LEVELS], backend="cupy")
    v = {"kernels": "naive-fused", "graph": "on"}
    a = AMR3D(p, get_backend("cupy"), variants=v)
    assert a.shape.stepper.fused_coupling
    a.step(6)
    ckpt = a.checkpoint()
    a.step(10)
    want = state(a)
    b = AMR3D(p, get_backend("cupy"), variants=v)
    b.restore(ckpt)
    b.step(10)
    np.testing.assert_array_equal(state(b), want)


@pytest.mark.parametrize("leaves,levels", [("[2, 2, 2]", 2), ("[4, 2, 2]", 3)])
@pytest.mark.parametrize("storage", ["native", "fp16"])
def test_sanitizer_case(storage, leaves, levels):
    """Small trees of 9³ leaves — two levels (2×2×2 roots), and three (4×2×2 roots), whose restrictions
    pair (amr3d_restrict_two with the fine values) — a few coarse steps with the fused coupling's
    kernels launched from the host (graph off): the cases compute-sanitizer's memcheck and racecheck
    run, checked against the split launches here too."""
    p = load_preset("amr3d-bench", [f"grid.leaves={leaves}", "grid.m=9", cases.THREE_LEVELS], backend="cupy")
    v = {"kernels": "naive-fused", "storage": storage, "graph": "off"}
    split, fused = engine(p, v, fused=False), engine(p, v, fused=True)
    assert len(fused.forest.levels) == levels
    if levels == 3:
        assert fused.shape.stepper._pairable == {1: "fine"}
    for e in (split, fused):
        e.step(3)
    np.testing.assert_array_equal(state(fused), state(split))

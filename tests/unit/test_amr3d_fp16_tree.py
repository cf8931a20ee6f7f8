"""fp16 storage on refined trees (tree_stepper.py ``fp16``, coupling.cu and ladder.cu on
fp16::half_bits): the exact CUDA source through the g++ emulation (tests/unit/amr3d_emulated_cupy.py)
and the NumPy reference that rounds as the level buffers store (reference.py ``half``).

- every kernel that reads or writes a tree's level buffers gives, on fp16 storage, the fp32
  kernel's result on the same populations (half → fp32, + w), stored back rounded: bit for bit;
- the engine with fp16 storage on trees (two and three levels, walls, free slip, the sphere's
  links, inlet and outlet) follows the rounded reference within the registry's fp16 tolerance,
  the naive and naive-fused rungs bit for bit alike;
- a checkpoint resumes bit for bit (the kernels and the reference).
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from nagare.engine.amr3d import d3q27, storage
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.amr3d.tree_stepper import _scale
from nagare.engine.backend import Backend, get_backend

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")
PRESETS = AMR3D.equivalence_presets()
RTOL, ATOL = 2e-5, 4e-5  # the registry's fp16 tolerance (variants.py says why)


def device(cp) -> Backend:
    return Backend("cupy", cp, _cupy=cp)


def emulated_engine(cp, label: str, rung: str, storage_kind: str = "fp16", seed: int = 1234) -> AMR3D:
    e = AMR3D(PRESETS[label], device(cp), variants={"kernels": rung, "storage": storage_kind})
    e._roofline = 1e12  # (no copy bandwidth to measure)
    e.random_state(np.random.default_rng(seed))
    return e


def reference_engine(label: str, storage_kind: str = "fp16", seed: int = 1234) -> AMR3D:
    e = AMR3D(PRESETS[label], get_backend("numpy"), variants={"kernels": "reference", "storage": storage_kind})
    e.random_state(np.random.default_rng(seed))
    return e


@needs_gxx
@pytest.mark.parametrize("rung", ["naive", "naive-fused"])
def test_every_tree_kernel_on_fp16_storage_rounds_the_fp32_kernel(emulated_cupy, rung):
    """On the sphere's tree (two levels, interpolated bounce-back links, inlet, outlet, MRT with
    Smagorinsky's LES): each coupling kernel and the ladder, launched on fp16 level buffers, equals
    the fp32 kernel launched on the same populations, its level-buffer output rounded to fp16
    storage (storage.to_fp16) and its interface-buffer output (fp32) exact."""
    half = emulated_engine(emulated_cupy, "fp32-sphere-m9", rung).shape.stepper
    full = emulated_engine(emulated_cupy, "fp32-sphere-m9", rung, "native").shape.stepper
    assert half.fp16 and half.bufs[0][0].dtype == np.float16 and full.bufs[0][0].dtype == np.float32
    rng = np.random.default_rng(5)
    for lv in half.levels:  # the second buffer of each pair: the previous state, a little apart
        half.bufs[lv][1][...] = storage.to_fp16(np, storage.from_fp16(np, half.bufs[lv][0])
                                                * np.float32(1 + 1e-3 * rng.standard_normal()))

    def same_inputs():
        for lv in half.levels:
            for i in range(2):
                full.bufs[lv][i][...] = storage.from_fp16(np, half.bufs[lv][i])
            for name in ("fine_buf", "coarse_buf", "interp_buf", "link_buf"):
                getattr(full, name)[lv][...] = getattr(half, name)[lv]

    def level_buffers_agree(lv, i, what):
        # as half values: the same bits, but for a stored −0 (a tiny negative f − w), which the copy
        # into the fp32 twin (+ w, then − w) gives back as +0
        np.testing.assert_array_equal(half.bufs[lv][i], storage.to_fp16(np, full.bufs[lv][i]), err_msg=what)

    def interface_buffers_agree(lv, what):
        for name in ("fine_buf", "coarse_buf", "interp_buf", "link_buf"):
            np.testing.assert_array_equal(getattr(half, name)[lv], getattr(full, name)[lv], err_msg=f"{what}: {name}")

    from nagare.engine.amr3d.gpu import _no_phase

    kh, kf = half.kernels, full.kernels
    seen = set()  # the interface buffers that some level filled
    same_inputs()
    for lv in half.levels:
        c = half.coupling[lv]
        for st, k in ((half, kh), (full, kf)):
            if c.coarse_pts.size:
                k.rescale_points(st, lv, lv - 1, 0.5, *_scale(st.tau0, st.accel0, lv - 1, lv))
                k.interpolate(st, lv)
            if c.fine_pts.size:
                k.rescale_points(st, lv, lv + 1, 1.0, *_scale(st.tau0, st.accel0, lv + 1, lv))
            if c.link_i1.size:
                k.links(st, lv)
        interface_buffers_agree(lv, f"level {lv}: rescale, interpolate, links")
        seen.update(n for n in ("fine_buf", "coarse_buf", "link_buf") if np.abs(getattr(half, n)[lv]).max(initial=0))
        for st, k in ((half, kh), (full, kf)):
            k.ladder(st, lv, _no_phase)
        level_buffers_agree(lv, 1, f"level {lv}: {rung}")
        same_inputs()
        if c.n_fix and rung == "naive":
            for st, k in ((half, kh), (full, kf)):
                k.fixup(st, lv)
            level_buffers_agree(lv, 1, f"level {lv}: fix-up")
            same_inputs()
        for st, k in ((half, kh), (full, kf)):
            k.boundary(st, lv)
        level_buffers_agree(lv, 1, f"level {lv}: boundaries")
        same_inputs()
    assert seen == {"fine_buf", "coarse_buf", "link_buf"}
    lv = half.levels[0]
    assert half.coupling[lv].restrict_dst.size
    for st, k in ((half, kh), (full, kf)):
        k.restrict(st, lv, *_scale(st.tau0, st.accel0, lv + 1, lv))
    level_buffers_agree(lv, 0, "restriction")
    # the state and the gathered populations seen from outside are fp32: the stored values + w
    same_inputs()
    np.testing.assert_array_equal(half.state(), full.state())
    ids = np.arange(0, half.forest.n_leaves * half.forest.m ** 3, 37)
    np.testing.assert_array_equal(half.populations(ids), full.populations(ids))


@needs_gxx
@pytest.mark.parametrize("label,rungs", [("fp32-tree2-m9", ("naive", "naive-fused")),
                                         ("fp32-tree2-slip-m9", ("naive", "naive-fused")),
                                         # three levels: 40 s of emulation, in the slow step (the quick
                                         # run keeps every kernel on two levels, walls and free slip)
                                         pytest.param("fp32-tree3-m9", ("naive-fused",), marks=pytest.mark.slow)])
def test_fp16_tree_rungs_follow_the_rounded_reference(emulated_cupy, label, rungs):
    """Two and three levels, walls and free slip, as the registry test runs them (its steps, its
    seed): naive and naive-fused on fp16 storage (bit for bit alike) within the registry's fp16
    tolerance of the NumPy reference rounding as the buffers store, which differs from the fp32
    reference by fp16 rounding only."""
    n = AMR3D.equivalence_steps
    ref = reference_engine(label)
    ref.step(n)
    want = ref.state_arrays()["f"]
    plain = reference_engine(label, "native")
    plain.step(n)
    assert 0 < np.abs(want - plain.state_arrays()["f"]).max() < 1e-4
    first = None
    for rung in rungs:
        e = emulated_engine(emulated_cupy, label, rung)
        assert e.shape.population_bytes() == 2
        e.step(n)
        got = np.asarray(e.state_arrays()["f"])
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=rung)
        if first is None:
            first = got
        np.testing.assert_array_equal(got, first, err_msg=rung)


@needs_gxx
def test_fp16_tree_checkpoint_resumes_bit_for_bit(emulated_cupy):
    """The state arrays of a tree on fp16 storage (fp32 values: stored half + w) load back into the
    same half bits, so a resumed run repeats the original bit for bit, on the kernels and on the
    rounded reference."""
    for make in (lambda: emulated_engine(emulated_cupy, "fp32-tree2-slip-m9", "naive-fused"),
                 lambda: reference_engine("fp32-tree2-slip-m9")):
        e = make()
        e.step(2)
        saved = {k: np.array(v) for k, v in e.state_arrays().items()}
        e.step(2)
        want = np.array(e.state_arrays()["f"])
        again = make()
        again._load_state_arrays(saved)
        np.testing.assert_array_equal(np.array(again.state_arrays()["f"]), saved["f"])
        again.step(2)
        np.testing.assert_array_equal(np.array(again.state_arrays()["f"]), want)


def test_fp16_tree_refusals():
    """fp16 storage on a tree runs the reference and the naive rungs; the stepper refuses mother
    leaves, the CSM and the array kernels (which keep the engine's dtype) in one line each."""
    from nagare.engine.amr3d import interface, mesh
    from nagare.engine.amr3d.tree_stepper import NumpyKernels, TreeStepper
    from nagare.engine.timing import PhaseTimer

    forest = mesh.build_forest(PRESETS["fp32-tree2-m9"])
    with pytest.raises(ValueError, match="fp16 storage on a tree"):
        TreeStepper(np, forest, interface.build(forest), 0.62, (0.0, 0.0, 0.0), NumpyKernels(),
                    PhaseTimer(get_backend("numpy")), fp16=True)
    assert d3q27.W[d3q27.OPP].tolist() == d3q27.W.tolist()  # fix_gather's load: opposite, mirror share w
    assert all(d3q27.W[row].tolist() == d3q27.W.tolist() for row in d3q27.REFLECT)

"""lbm2d CUDA variants beyond what the registry walk checks (all gpu-marked).

The registry test (test_registry.py) already compares every registered choice with the NumPy
reference on the equivalence presets. Here: fp16 storage against the NumPy fp16 path (the same
rounding scheme, so a much tighter bound than the stated fp16-vs-fp32 tolerance), AA streaming
read back after an odd number of steps, graphs with a remainder, live switches in mid-run, open
boundaries, tracers on CuPy.
"""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.lbm2d import Engine
from nagare.engine.lbm2d.variants import FP16_ATOL, GRAPH_STEPS

pytestmark = pytest.mark.gpu

PRESETS = Engine.equivalence_presets()


def pair(label, cand, ref=None, seed=5):
    p = PRESETS[label]
    r = Engine(p, get_backend("numpy"), variants=ref or {"kernel": "reference"})
    c = Engine(p, get_backend("cupy"), variants=cand)
    for e in (r, c):
        e.random_state(np.random.default_rng(seed))
    return r, c


def f_of(e):
    return e.backend.asnumpy(e.state_arrays()["f"])


def test_fp16_cuda_matches_numpy_fp16_path():
    r, c = pair("fp32-walls-obstacle", {"kernel": "fused", "storage": "fp16"},
                {"kernel": "reference", "storage": "fp16"})
    r.step(64)
    c.step(64)
    # Same shifted-fp16 rounding on both sides; only fp32 round-off (FMA) differs, which can flip
    # an fp16 rounding now and then: far below the fp16-vs-fp32 tolerance.
    np.testing.assert_allclose(f_of(c), f_of(r), rtol=0, atol=FP16_ATOL / 4)


def test_fp16_stated_tolerance_against_fp32_over_a_longer_run():
    r, c = pair("fp32-walls-obstacle", {"kernel": "fused", "storage": "fp16"})
    r.step(256)
    c.step(256)
    err = np.abs(f_of(c) - f_of(r)).max()
    assert err < 2 * FP16_ATOL, f"fp16 storage drifted {err:.2e} from fp32 after 256 steps"


LAUNCH_MODES = [((64, 4, 1), 1), ((32, 2, 1), 2), ((128, 1, 1), "vec2"), ((64, 2, 1), "vec4"), ((32, 1, 1), "vec4"),
                ((32, 2, 1), "vec8"),
                ((32, 1, 1), "packed8"), ((64, 1, 1), "packed4"), ((32, 3, 1), "packed2"),  # fp16 only
                ((64, 1, 1), "pipe2"), ((32, 1, 1), "pipe3r5"), ((128, 1, 1), "pipe4r16")]  # fp16 only


@pytest.mark.parametrize("launch", LAUNCH_MODES, ids=lambda la: f"{la[0][0]}x{la[0][1]}n{la[1]}")
@pytest.mark.parametrize("storage", ["native", "fp16"])
def test_every_fused_launch_mode_matches(storage, launch, monkeypatch):
    """Each launch mode of the fused kernel (nodes per thread, vector width) on a grid of several
    64-node segments, FAST and mixed ones (the segment-class shortcut), against the NumPy path."""
    from nagare.engine.lbm2d import launch as lbm

    monkeypatch.setitem(lbm.FUSED_LAUNCH, storage, launch)
    monkeypatch.setattr(lbm, "PIPE_MIN_NODES", 0)  # test the pipelined kernel on a small grid too
    base = PRESETS["fp32-walls-obstacle"]
    p = base.model_copy(update={"grid": base.grid.model_copy(update={"nx": 320, "ny": 48})})
    if storage == "native" and str(launch[1]).startswith(("packed", "pipe")):  # two fp16 to a register
        with pytest.raises(ValueError, match="fp16 storage only"):
            Engine(p, get_backend("cupy"), variants={"kernel": "fused", "storage": storage}).step(1)
        return
    ref = {"kernel": "reference", "storage": storage}
    r = Engine(p, get_backend("numpy"), variants=ref)
    c = Engine(p, get_backend("cupy"), variants={"kernel": "fused", "storage": storage})
    assert lbm.fused_launch(storage, 320) == launch
    seg = c.backend.asnumpy(c.node_segment)
    assert (seg == 0).any() and (seg != 0).any()
    for e in (r, c):
        e.random_state(np.random.default_rng(9))
    r.step(64)
    c.step(64)
    tol = dict(rtol=0, atol=FP16_ATOL / 4) if storage == "fp16" else dict(rtol=1e-5)
    np.testing.assert_allclose(f_of(c), f_of(r), **tol)


@pytest.mark.parametrize("pipe", ["pipe2", "pipe3r7", "pipe2r300"])
@pytest.mark.parametrize("label", ["fp32-walls-obstacle", "fp32-trt", "fp32-channel"])
def test_pipelined_fp16_kernel_is_bit_identical_to_the_packed_one(label, pipe, monkeypatch):
    """lbm_fused_pipe only changes how the populations reach the registers (cp.async through shared
    memory, rows marched by each warp): the arithmetic is lbm_fused_packed's, so the bits must agree."""
    from nagare.engine.lbm2d import launch as lbm

    base = PRESETS[label]
    p = base.model_copy(update={"grid": base.grid.model_copy(update={"nx": 512, "ny": 37})})
    monkeypatch.setattr(lbm, "PIPE_MIN_NODES", 0)  # the pipelined kernel on a small grid
    out = []
    for launch in (((32, 1, 1), "packed8"), ((64, 1, 1), pipe)):
        monkeypatch.setitem(lbm.FUSED_LAUNCH, "fp16", launch)
        e = Engine(p, get_backend("cupy"), variants={"kernel": "fused", "storage": "fp16"})
        e.random_state(np.random.default_rng(3))
        e.step(33)
        out.append(e.backend.asnumpy(e.f))
    np.testing.assert_array_equal(out[1], out[0])
    assert np.abs(out[0].astype(np.float32)).max() > 0


@pytest.mark.parametrize("steps", [1, 2, 7, 64])
@pytest.mark.parametrize("label", ["fp32-walls-obstacle", "fp64-cavity"])
def test_aa_streaming_any_step_count(label, steps):
    r, c = pair(label, {"kernel": "fused", "streaming": "aa"})
    r.step(steps)
    c.step(steps)
    np.testing.assert_allclose(f_of(c), f_of(r), rtol=1e-5)


@pytest.mark.parametrize("variants", [{"kernel": "fused", "graph": "on"},
                                      {"kernel": "two-kernel", "graph": "on"},
                                      {"kernel": "fused", "graph": "on", "streaming": "aa"},
                                      {"kernel": "fused", "graph": "on", "storage": "fp16"}])
def test_graph_with_remainder_steps(variants):
    r, c = pair("fp32-walls-obstacle", variants,
                {"kernel": "reference", "storage": variants.get("storage", "native")})
    n = GRAPH_STEPS + 40
    r.step(2 * n + 3)
    c.step(3)  # odd: the cached graph for the swapped buffers is a different one
    c.step(n)  # one full graph and a remainder graph
    c.step(n)  # replays from the cache
    tol = dict(rtol=0, atol=FP16_ATOL / 4) if variants.get("storage") == "fp16" else dict(rtol=1e-5)
    np.testing.assert_allclose(f_of(c), f_of(r), **tol)


def test_open_boundaries_fused_and_two_kernel():
    for k in ("fused", "two-kernel"):
        r, c = pair("fp32-channel", {"kernel": k})
        r.step(100)
        c.step(100)
        np.testing.assert_allclose(f_of(c), f_of(r), rtol=1e-5, err_msg=k)


def test_live_switches_keep_the_trajectory():
    r, c = pair("fp32-walls-obstacle", {"kernel": "fused"})
    plan = [{"kernel": "two-kernel"}, {"kernel": "fused", "streaming": "aa"}, {"graph": "on"},
            {"streaming": "two-lattice", "graph": "off"}, {"kernel": "reference"}, {"kernel": "fused"}]
    for change in plan:
        r.step(21)
        c.step(21)
        c.set_variant(**change)
    r.step(21)
    c.step(21)
    np.testing.assert_allclose(f_of(c), f_of(r), rtol=1e-5)


def test_cylinder_with_tracers_runs_on_cupy():
    from nagare.engine.presets import load_preset

    p = load_preset("lbm2d-cylinder", ["grid.nx=512", "grid.ny=192", "obstacle.diameter=24", "tracers.count=100000"],
                    backend="cupy")
    e = Engine(p, get_backend("cupy"))
    e.step(200)
    d = e.diagnostics()
    assert 0.05 < d["max_speed"] < 0.3
    pos = e.backend.asnumpy(e.fields()["tracers"].positions)
    assert pos.shape == (100000, 2) and np.isfinite(pos).all()


@pytest.mark.parametrize("storage", ["native", "fp16"])
def test_tracer_and_velocity_kernels_match_the_array_path(storage):
    """tracers.cu on the GPU against the array path run on the same CuPy arrays (FMA contraction
    on the device: round-off, not bits)."""
    import copy

    import cupy as cp
    from nagare.engine.presets import load_preset

    p = load_preset("lbm2d-cylinder", ["grid.nx=512", "grid.ny=192", "obstacle.diameter=24", "tracers.count=50000",
                                       "tracers.rate=3000"], backend="cupy")
    e = Engine(p, get_backend("cupy"), variants={"storage": storage})
    e.step(100)
    with e.on_stream():
        rho, ux, uy = e.macroscopic()  # the fused pass
        rho_ref, ux_ref, uy_ref = e._macroscopic_arrays()
        np.testing.assert_allclose(cp.asnumpy(rho), cp.asnumpy(rho_ref), rtol=1e-6)
        np.testing.assert_allclose(cp.asnumpy(ux), cp.asnumpy(ux_ref), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(cp.asnumpy(uy), cp.asnumpy(uy_ref), rtol=1e-6, atol=1e-9)
        ref = copy.copy(e.tracers)
        ref.pos, ref.age = e.tracers.pos.copy(), e.tracers.age.copy()
        for _ in range(3):
            e.tracers.advance(ux, uy, 2.0)       # the kernel
            ref._advance_array(ux, uy, 2.0)      # the array path
        got, want = cp.asnumpy(e.tracers.pos), cp.asnumpy(ref.pos)
    assert (e.tracers.released, e.tracers.cursor) == (ref.released, ref.cursor)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(cp.asnumpy(e.tracers.age), cp.asnumpy(ref.age))


@pytest.mark.parametrize("storage", ["native", "fp16"])
@pytest.mark.parametrize("label", ["fp32-walls-obstacle", "fp64-cavity", "fp32-channel"])
def test_one_pass_vorticity_equals_the_array_path(label, storage):
    """The display's vorticity kernel (lbm_vorticity) gives the bits of the moments pass followed by
    reference.vorticity (periodic wrap, 0 on solid nodes)."""
    from nagare.engine.lbm2d import outputs, reference

    if storage == "fp16" and "fp64" in label:
        pytest.skip("fp16 storage is an fp32 option")
    _, c = pair(label, {"kernel": "fused", "storage": storage})
    c.step(37)
    assert c.stepper.device_moments
    got = outputs.field(c, "vorticity").data
    _, ux, uy = outputs.moments(c, with_rho=False)
    want = c.xp.where(c.solid, 0, reference.vorticity(c.xp, ux, uy))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(c.backend.asnumpy(got), c.backend.asnumpy(want))
    assert float(abs(want).max()) > 0

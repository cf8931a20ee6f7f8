"""CUDA SPH against the NumPy reference: every search × layout × list layout × kernel, 2D and 3D,
fp64 to round-off and fp32 to fp32 round-off; the Verlet out-of-memory fallback."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.sph import Engine, Preset

pytestmark = pytest.mark.gpu

TANK2D = {"engine": "sph", "description": "gpu equivalence",
          "geometry": {"kind": "hydrostatic2d", "column_width": 0.3, "column_height": 0.2,
                       "tank_length": 0.3, "tank_height": 0.25}, "particles": {"dp": 0.02}}
DAM3D = {"engine": "sph", "description": "gpu equivalence 3d",
         "geometry": {"kind": "dambreak3d", "column_width": 0.2, "column_height": 0.15, "tank_length": 0.5,
                      "tank_width": 0.2, "tank_height": 0.2, "obstacle": [0.3, 0.06, 0.06, 0.06]},
         "particles": {"dp": 0.02, "boundary_layers": 2}}


def _preset(base, precision, kernel="wendland", scheme="verlet"):
    return Preset.model_validate({**base, "physics": {"precision": precision, "kernel": kernel},
                                  "time": {"scheme": scheme}})


def _run(preset, backend, variants, steps, seed=1234):
    e = Engine(preset, get_backend(backend), variants=variants)
    e.random_state(np.random.default_rng(seed))
    e.step(steps)
    return e, {k: e.backend.asnumpy(v).astype(np.float64) for k, v in e.state_arrays().items()}


COMBOS = list(itertools.product(["cell-full", "cell-half", "verlet"], ["soa", "aos", "float4"],
                                ["warp-interleaved", "per-particle"]))


@pytest.mark.parametrize("search,layout,vlayout", COMBOS)
@pytest.mark.parametrize("geom", ["tank2d", "dam3d"])
def test_gpu_fp64_matches_numpy(search, layout, vlayout, geom):
    if search != "verlet" and vlayout == "per-particle":
        pytest.skip("list layout only matters for the Verlet search")
    preset = _preset(TANK2D if geom == "tank2d" else DAM3D, "fp64")
    steps = 100 if geom == "tank2d" else 40
    _, want = _run(preset, "numpy", {"search": "cell-full"}, steps)
    e, got = _run(preset, "cupy", {"search": search, "layout": layout, "verlet_layout": vlayout}, steps)
    for k in want:  # same tolerances as the registry (measured round-off ×1000, see engine.py)
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=k)
    if search == "verlet":
        x = e.timings.extra
        assert x["rebuilds"] >= 1 and 0 <= x["idle_thread_share"] < 1 and x["mean_list_length"] > 0


@pytest.mark.parametrize("kernel,scheme", [("cubic", "verlet"), ("wendland", "symplectic")])
def test_gpu_kernel_and_scheme_options(kernel, scheme):
    preset = _preset(TANK2D, "fp64", kernel, scheme)
    _, want = _run(preset, "numpy", {"search": "cell-full"}, 60)
    _, got = _run(preset, "cupy", {"search": "verlet", "layout": "float4"}, 60)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("layout", ["soa", "aos", "float4"])
def test_gpu_fp32_matches_numpy_fp32(layout):
    """fp32 on both sides: differences are fp32 round-off (ε ≈ 6e-8) grown over 100 steps of a
    settling tank; the bounds are ~100 ε relative on ρ and positions, 1e-5 m/s on speeds ~0.04."""
    preset = _preset(TANK2D, "fp32")
    _, want = _run(preset, "numpy", {"search": "cell-full"}, 100)
    _, got = _run(preset, "cupy", {"search": "verlet", "layout": layout}, 100)
    np.testing.assert_allclose(got["pos"], want["pos"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["rho"], want["rho"], rtol=1e-5, atol=0)
    np.testing.assert_allclose(got["vel"], want["vel"], rtol=0, atol=1e-5)


def test_verlet_out_of_memory_falls_back_to_cell_search(monkeypatch):
    import cupy
    from nagare.engine.sph.gpu import GpuSPH

    def no_memory(self, size):
        raise cupy.cuda.memory.OutOfMemoryError(size * 4, 0, 0)

    monkeypatch.setattr(GpuSPH, "_allocate_list", no_memory)
    preset = _preset(TANK2D, "fp64")
    _, want = _run(preset, "numpy", {"search": "cell-full"}, 30)
    e, got = _run(preset, "cupy", {"search": "verlet"}, 30)
    assert e.stats.get("verlet_oom_fallbacks", 0) == 30  # every step tried, none crashed
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("geom,steps", [("tank2d", 100), ("dam3d", 40)])
def test_verlet_late_rebuilds_stay_exact(monkeypatch, geom, steps):
    """The host never decides a rebuild after the first build: the interaction must see on the
    device that the lists went stale (max travel > Δh/2) and search the build's cells with the
    widened reach instead. The state must still equal the NumPy reference to round-off, and the
    device-side Δt and time must equal the reference's."""
    from nagare.engine.sph.gpu import GpuSPH

    monkeypatch.setattr(GpuSPH, "_rebuild_due", lambda self: False)
    preset = _preset(TANK2D if geom == "tank2d" else DAM3D, "fp64")
    ref, want = _run(preset, "numpy", {"search": "cell-full"}, steps)
    e, got = _run(preset, "cupy", {"search": "verlet"}, steps)
    assert e.gpu.stale_launches(wait=True) > 0  # the fallback really ran
    # the HUD's figure: the newest count that has reached the host without a sync
    assert e.timings.extra["verlet_late_interactions"] == e.gpu.stale_launches(wait=True)
    assert e.stats["rebuilds"] == 1
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=k)
    np.testing.assert_allclose(e.time, ref.time, rtol=1e-12)
    np.testing.assert_allclose(e.dt, ref.dt, rtol=1e-11)


@pytest.mark.parametrize("search", ["cell-full", "verlet"])
def test_gpu_time_and_dt_on_device_match_numpy(search):
    preset = _preset(TANK2D, "fp64", scheme="symplectic")
    ref, want = _run(preset, "numpy", {"search": "cell-full"}, 30)
    e, got = _run(preset, "cupy", {"search": search}, 30)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=k)
    np.testing.assert_allclose(e.time, ref.time, rtol=1e-12)
    np.testing.assert_allclose(e.dt, ref.dt, rtol=1e-11)


FAST = list(itertools.product(["cell-full", "verlet"], ["soa", "aos", "float4"]))
_REF: dict = {}


def _reference(geom: str, precision: str, steps: int, kernel: str = "wendland", scheme: str = "verlet"):
    """The NumPy reference state, computed once per module for the fast-pair tests (they share
    it; the 3D one takes seconds on the host)."""
    key = (geom, precision, steps, kernel, scheme)
    if key not in _REF:
        preset = _preset(TANK2D if geom == "tank2d" else DAM3D, precision, kernel, scheme)
        _REF[key] = _run(preset, "numpy", {"search": "cell-full"}, steps)[1]
    return _REF[key]


@pytest.mark.parametrize("search,layout", FAST)
@pytest.mark.parametrize("geom", ["tank2d", "dam3d"])
def test_gpu_fast_pair_fp64_matches_numpy(search, layout, geom):
    """pair = fast in fp64 keeps sqrt and exact reciprocals: only the order of products and the
    Fourtakas term's exp2/log2 (≤ 2 ulp of 1 vs pow's 1) differ, so the registry's tolerances hold."""
    preset = _preset(TANK2D if geom == "tank2d" else DAM3D, "fp64")
    steps = 100 if geom == "tank2d" else 40
    want = _reference(geom, "fp64", steps)
    _, got = _run(preset, "cupy", {"search": search, "layout": layout, "pair": "fast"}, steps)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("kernel,scheme", [("cubic", "verlet"), ("wendland", "symplectic")])
def test_gpu_fast_pair_kernel_and_scheme_options(kernel, scheme):
    preset = _preset(TANK2D, "fp64", kernel, scheme)
    want = _reference("tank2d", "fp64", 60, kernel, scheme)
    _, got = _run(preset, "cupy", {"search": "verlet", "layout": "float4", "pair": "fast"}, 60)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("layout", ["soa", "aos", "float4"])
def test_gpu_fast_pair_fp32_matches_numpy_fp32(layout):
    """fp32 with the SFU forms (rsqrt, rcp ≤ 2 ulp): the same bounds as the exact pair's fp32 test."""
    preset = _preset(TANK2D, "fp32")
    want = _reference("tank2d", "fp32", 100)
    _, got = _run(preset, "cupy", {"search": "verlet", "layout": layout, "pair": "fast"}, 100)
    np.testing.assert_allclose(got["pos"], want["pos"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["rho"], want["rho"], rtol=1e-5, atol=0)
    np.testing.assert_allclose(got["vel"], want["vel"], rtol=0, atol=1e-5)


def test_gpu_fast_pair_late_rebuilds_stay_exact(monkeypatch):
    """The stale-list fallback of sph_interact_verlet_fast (filters on: the cell search meets j == i and
    wall–wall candidates) against the reference, as test_verlet_late_rebuilds_stay_exact."""
    from nagare.engine.sph.gpu import GpuSPH

    monkeypatch.setattr(GpuSPH, "_rebuild_due", lambda self: False)
    preset = _preset(DAM3D, "fp64")
    want = _reference("dam3d", "fp64", 40)
    e, got = _run(preset, "cupy", {"search": "verlet", "layout": "float4", "pair": "fast"}, 40)
    assert e.gpu.stale_launches(wait=True) > 0
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=k)


def test_gpu_fast_pair_sanitizer_case():
    """A few steps of the 3D dam break with the fast pair on float4 Verlet lists: the small case
    tools/gpu-check.sh sph-fast runs under compute-sanitizer memcheck and racecheck."""
    preset = _preset(DAM3D, "fp32")
    e, got = _run(preset, "cupy", {"search": "verlet", "layout": "float4", "pair": "fast"}, 3)
    assert all(np.all(np.isfinite(v)) for v in got.values())
    assert e.stats["rebuilds"] >= 1


SHAPES = ["fast-u2", "fast-u4", "fast-lb12"]


@pytest.mark.parametrize("pair", SHAPES)
@pytest.mark.parametrize("geom", ["tank2d", "dam3d"])
def test_gpu_fast_shapes_fp64_match_numpy(pair, geom):
    """The fast pair's list-walk shapes (gpu.py PAIR_SHAPE) sum the fast pair's terms in its order:
    the registry's fp64 tolerances; fast-u2 on both list layouts (the walk is the same code for
    both strides, which the CPU test of verlet_walk_fast covers)."""
    preset = _preset(TANK2D if geom == "tank2d" else DAM3D, "fp64")
    steps = 100 if geom == "tank2d" else 40
    want = _reference(geom, "fp64", steps)
    for vlayout in ("warp-interleaved", "per-particle")[:2 if pair == "fast-u2" else 1]:
        _, got = _run(preset, "cupy", {"search": "verlet", "layout": "float4", "verlet_layout": vlayout,
                                       "pair": pair}, steps)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=f"{k} {vlayout}")


@pytest.mark.parametrize("pair", SHAPES)
def test_gpu_fast_shapes_fp32_match_numpy_fp32(pair):
    """fp32: the same bounds as the exact and fast pairs' fp32 tests."""
    preset = _preset(TANK2D, "fp32")
    want = _reference("tank2d", "fp32", 100)
    _, got = _run(preset, "cupy", {"search": "verlet", "layout": "float4", "pair": pair}, 100)
    np.testing.assert_allclose(got["pos"], want["pos"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["rho"], want["rho"], rtol=1e-5, atol=0)
    np.testing.assert_allclose(got["vel"], want["vel"], rtol=0, atol=1e-5)


def _lists(g) -> tuple:
    """The built Verlet lists of a GpuSPH as (counts, every list's entries end to end), whatever
    their layout and build."""
    counts, base, lst = g.counts.get(), g.base.get(), g.list.get()
    if g.interleaved:
        idx = [lst[base[i >> 5] + (i & 31) + 32 * np.arange(c)] for i, c in enumerate(counts)]
    else:
        idx = [lst[base[i] + np.arange(c)] for i, c in enumerate(counts)]
    return counts, np.concatenate(idx)


def _built(precision: str, variants: dict):
    e = Engine(_preset(DAM3D, precision), get_backend("cupy"), variants={"search": "verlet", "layout": "float4",
                                                                         **variants})
    e.random_state(np.random.default_rng(1234))
    e.step(1)
    return e


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_gpu_unrolled_list_build_writes_the_same_lists(precision):
    """pair = fast builds the lists with the candidates' positions loaded 4 at a time (gpu.py
    BUILD_UNROLL), exact one at a time: from one state, the same counts and the same lists, entry
    for entry (the candidates reach the test in the same order). Both in two passes (count, fill)."""
    want = _lists(_built(precision, {"pair": "exact", "verlet_build": "two-pass"}).gpu)
    got = _lists(_built(precision, {"pair": "fast", "verlet_build": "two-pass"}).gpu)
    assert want[0].sum() > 0
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("precision,vlayout", [("fp32", "warp-interleaved"), ("fp32", "per-particle"),
                                               ("fp64", "warp-interleaved")])
def test_gpu_one_pass_build_writes_the_same_lists(precision, vlayout):
    """verlet_build = one-pass (sph_verlet_fill_cap): the two-pass build's counts and lists, entry for
    entry; its first build starts at cap 0, so it has run the overflow path (cap grown, the search run
    again) already. Then a rebuild with cap forced below the longest list: the same lists again."""
    want = _lists(_built(precision, {"verlet_layout": vlayout, "verlet_build": "two-pass"}).gpu)
    e = _built(precision, {"verlet_layout": vlayout, "verlet_build": "one-pass"})
    g = e.gpu
    got = _lists(g)
    assert want[0].sum() > 0 and g.cap >= want[0].max()
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    g.cap = int(want[0].max()) // 2
    assert g._build_lists(e.rc + e.vlist.skin)
    assert g.cap >= want[0].max()
    got = _lists(g)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("pair", ["fast", "fast-u2"])
def test_gpu_one_pass_build_fp64_matches_numpy(pair):
    """The one-pass build over a 40-step 3D dam break (rebuilds as the flow moves): the registry's fp64
    tolerances against the NumPy reference, and the late-rebuild fallback never needed."""
    preset = _preset(DAM3D, "fp64")
    want = _reference("dam3d", "fp64", 40)
    e, got = _run(preset, "cupy", {"search": "verlet", "layout": "float4", "pair": pair,
                                   "verlet_build": "one-pass"}, 40)
    assert e.stats["rebuilds"] >= 2
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("pair,build", [("fast-u2", "two-pass"), ("fast-u4", "two-pass"), ("fast-lb12", "two-pass"),
                                        ("fast-u4", "one-pass")])
def test_gpu_fast_shapes_sanitizer_case(pair, build):
    """A few steps of the 3D dam break with each list-walk shape (and the unrolled builds): the small
    cases tools/gpu-check.sh sph-fast2 runs under compute-sanitizer memcheck and racecheck."""
    preset = _preset(DAM3D, "fp32")
    e, got = _run(preset, "cupy", {"search": "verlet", "layout": "float4", "pair": pair, "verlet_build": build}, 3)
    assert all(np.all(np.isfinite(v)) for v in got.values())
    assert e.stats["rebuilds"] >= 1

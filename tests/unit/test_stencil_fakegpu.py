"""The device loop engines' Python glue, driven exactly as on a GPU but with CuPy replaced by a fake
whose kernels run the generated CUDA through the CPU emulation (tests/unit/fake_cupy.py)."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from nagare.engine.autotune import TuneCache
from nagare.engine.backend import Backend
from nagare.engine.stencil import Loop, loops
from nagare.engine.stencil.library import diffusion7

from tests.unit import cuda_emulator, fake_cupy

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ to emulate the kernels")


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    """The fake device's compiled kernels, shared by the module's tests (fake_cupy caches them by content)."""
    return tmp_path_factory.mktemp("fake_gpu_kernels")


@pytest.fixture
def fcp(emu_dir, tmp_path, monkeypatch):
    cp = fake_cupy.make(emu_dir)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setenv("NAGARE_CACHE_DIR", str(tmp_path / "cache"))
    loops._compiled.cache_clear()  # never mix fake kernels with real ones
    yield cp
    loops._compiled.cache_clear()


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_device_loop_matches_host(fcp, boundary, rng):
    shape = (6, 10, 37)
    f = rng.random(shape).astype(np.float32)
    want, got = f.copy(), f.copy()
    Loop(diffusion7, shape, np.float32, boundary=boundary)(f=f, fn=want, r=0.1)
    loop = Loop(diffusion7, shape, np.float32, boundary=boundary, engine="device", xp=fcp)
    loop(f=f, fn=got, r=0.1)
    np.testing.assert_array_equal(got, want)
    interior = 37 if boundary == "periodic" else 35
    launched = [k for k in fcp.kernels if k.launches]  # one module, one kernel per unroll + the plain one
    assert [k.name.rsplit("_", 1)[1] for k in fcp.kernels] == ["u1", "u2", "u4", "u8", "plain", "tile", "vec2",
                                                                "vec4"]
    assert len(launched) == 1 and launched[0].name.endswith("_u2")  # z-march 2 runs the 2-plane unroll
    assert launched[0].launches == [((-(-interior // 128), 10 if boundary == "periodic" else 8,
                                      3 if boundary == "periodic" else 2), (128, 1, 1))]
    assert loop.state() == {"engine": "device", "stencil": "diffusion7", "config": {"bx": 128, "by": 1, "zmarch": 2},
                            "unroll": 2}


def run_until_settled(loop, host, f, max_steps=400):
    """Step the autotuned loop and the host loop side by side until the tuner is done; the state
    reached must be bit-identical to the host's."""
    d, dn, h, hn = f.copy(), np.zeros_like(f), f.copy(), np.zeros_like(f)
    for _ in range(max_steps):
        loop(f=d, fn=dn, r=0.1)
        host(f=h, fn=hn, r=0.1)
        d, dn, h, hn = dn, d, hn, h
        if loop.tuner.done:
            break
    np.testing.assert_array_equal(d, h)


def test_autotune_loop_settles_on_the_fastest_and_never_changes_results(fcp, rng, tmp_path):
    shape = (8, 8, 64)
    cache = TuneCache(tmp_path / "t.json")
    loop = Loop(diffusion7, shape, np.float32, engine="device-autotune", xp=fcp, tune_cache=cache,
                tune={"repeats": 1, "strategy": "exhaustive"})  # (auto is descent on a space this large)
    host = Loop(diffusion7, shape, np.float32)
    f = rng.random(shape).astype(np.float32)
    run_until_settled(loop, host, f)
    st = loop.state()
    # Three shapes: 161 z-marching + 32 plain + 56 vec candidates of 630 (bx, by, zmarch, shape) points.
    assert st["status"] == "settled" and st["measured"] == 249 and st["invalid"] == 630 - 249
    assert st["best"]["bx"] == 32 and st["best"]["zmarch"] == 4  # the fake cost's minimum
    assert st["batch"] == 1  # probed: a fake launch "takes" milliseconds, so one call per measurement
    # probe (2) + one warm-up per kernel (4 unrolls + plain + vec4) + one measurement per candidate + run-off (4 × 4)
    assert len(loop.tuner.tuning_calls) == 2 + 6 + 249 + 16
    vec4 = next(k for k in fcp.kernels if k.name.endswith("_vec4"))
    assert len(vec4.launches) >= 56 and not any(k.launches for k in fcp.kernels if k.name.endswith(("_tile", "_vec2")))
    assert cache.load()[loop.tuner.key]["config"] == st["best"]
    assert loop.tuner.key.startswith("Fake GPU|stencil:diffusion7:")


def test_diffusion_engine_on_the_fake_gpu_matches_numpy(fcp, rng):
    from nagare.engine.backend import get_backend
    from nagare.engine.diffusion3d import Engine, Preset

    preset = Preset.model_validate({"engine": "diffusion3d", "description": "t", "grid": {"nx": 20, "ny": 6, "nz": 5},
                                    "boundaries": {"kind": "fixed"}, "initial": {"kind": "random"}})
    gpu = Backend("cupy", fcp, _cupy=fcp)
    ref = Engine(preset, get_backend("numpy"), variants={"kernel": "array"})
    ref.step(7)
    for kernel in ("cuda", "cuda-autotune"):
        e = Engine(preset, gpu, variants={"kernel": kernel})
        e._roofline = 1e12
        e.step(7)
        np.testing.assert_array_equal(e.f, ref.f, err_msg=kernel)
        extra = e.timings.extra
        if kernel == "cuda-autotune":
            assert extra["autotune"]["calls"] == 7 and extra["autotune"]["engine"] == "device-autotune"
        else:
            assert extra["launch"]["config"] == {"bx": 128, "by": 1, "zmarch": 2}
    e.set_variant(kernel="stencil-host")
    e.step(3)
    ref.step(3)
    np.testing.assert_array_equal(e.f, ref.f)
    assert "autotune" not in e.timings.extra


def test_wave2d_engine_on_the_fake_gpu_matches_the_array_reference(fcp):
    from nagare.engine.backend import get_backend
    from nagare.engine.wave2d import Engine, Preset

    for bc in ("periodic", "fixed"):
        preset = Preset.model_validate({"engine": "wave2d", "description": "t", "grid": {"nx": 19, "ny": 12},
                                        "boundaries": {"kind": bc}, "initial": {"kind": "random"}})
        ref = Engine(preset, get_backend("numpy"), variants={"kernel": "array"})
        ref.step(9)
        for kernel in ("cuda", "cuda-autotune"):
            e = Engine(preset, Backend("cupy", fcp, _cupy=fcp), variants={"kernel": kernel})
            e.step(9)
            for k, v in ref.state_arrays().items():
                np.testing.assert_array_equal(e.state_arrays()[k], v, err_msg=f"{bc} {kernel} {k}")


@pytest.mark.slow  # the whole exhaustive space (249 candidates), both tuners and the run-off
def test_stencil_benchmark_runs_end_to_end_on_the_fake_gpu(fcp, monkeypatch):
    from nagare.engine import backend, device
    from nagare.engine.stencil import bench

    gpu = Backend("cupy", fcp, _cupy=fcp)
    monkeypatch.setattr(backend, "get_backend", lambda name="auto": gpu)
    monkeypatch.setattr(device, "copy_bandwidth", lambda be, refresh=False: 1e9)
    monkeypatch.setattr(backend, "device_info", lambda be: backend.DeviceInfo(backend="cupy", name="Fake GPU"))
    result = bench.bench_stencil([(8, 4, 16)], batches=1, runoff_rounds=2)
    row = result["rows"][0]
    assert row["mesh"] == "8x4x16" and len(row["exhaustive_table_ms"]) == 249  # 161 march + 32 plain + 56 vec
    assert row["candidates"] == 249 and result["space"] == {"size": 630, "shapes": ["march", "plain", "vec"],
                                                            "valid": 249}
    assert set(row["best_by_shape"]) == {"march", "plain", "vec"} and "32,1,4,plain" in row["exhaustive_table_ms"]
    assert row["best_by_shape"]["vec"]["unroll"] == "vec4" and row["best_by_shape"]["vec"]["label"].startswith("vec (")
    assert "amortise" not in row  # only meshes of ≥ 2²⁴ points
    # The fake cost is lowest at bx = 32, zmarch = 4 (any by): both the search and the tuners find it.
    assert row["best"]["threads"][0] == 32 and row["best"]["zmarch"] == 4
    for live in row["autotune"]:
        assert live["settled"] and live["pick"]["bx"] == 32 and live["pick"]["zmarch"] == 4, live
        assert live["pick_vs_best"] == pytest.approx(1.0) and live["pick_vs_best_table"] == pytest.approx(1.0)
    # The run-off re-measured the exhaustive top 3, the picks and the fixed configuration.
    assert "128,1,2" in row["runoff_ms"] and len(row["runoff_ms"]) >= 4
    assert row["autotune"][1]["measured"] < row["autotune"][0]["measured"]  # descent measures fewer
    assert "| 8x4x16 | march | (32," in bench.format_table(result)


def test_amortisation_run_compares_fresh_tuning_with_fixed_and_best(fcp):
    from nagare.engine.stencil import bench

    shape = (8, 4, 32)
    f = np.random.default_rng(1).random(shape).astype(np.float32)
    fn = np.zeros_like(f)
    a = bench._amortise(diffusion7, shape, f, fn, np.float32(0.1), fcp, {"bx": 32, "by": 1, "zmarch": 4}, steps=400)
    # Fake device costs per launch: fixed (128,1,1)/2 = 4.5, best (32,·)/4 = 1.
    assert a["fixed_ms"] == pytest.approx(400 * 4.5) and a["best_ms"] == pytest.approx(400 * 1.0)
    assert a["settled"] and a["pick"]["bx"] == 32 and a["pick"]["zmarch"] == 4
    assert a["best_ms"] < a["tuned_ms"] < a["fixed_ms"] and a["amortised"]
    assert a["overhead_steps"] == pytest.approx((a["tuned_ms"] - a["best_ms"]) / 1.0)


def test_autotune_picks_the_plain_shape_when_it_is_fastest(emu_dir, tmp_path, monkeypatch, rng):
    """The tuner chooses among both kernel shapes by measurement only: with a fake cost that makes
    plain blocks of bz = 2 the cheapest, it settles on one of them, and results stay bit-identical."""
    cp = fake_cupy.make(emu_dir, cost=lambda block, zmarch: 0.5 if len(block) > 2 and block[2] == 2 else 2.0)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setenv("NAGARE_CACHE_DIR", str(tmp_path / "cache"))
    loops._compiled.cache_clear()
    try:
        shape = (9, 6, 40)
        loop = Loop(diffusion7, shape, np.float32, engine="device-autotune", xp=cp, tune_cache=None,
                    tune={"repeats": 1})
        host = Loop(diffusion7, shape, np.float32)
        f = rng.random(shape).astype(np.float32)
        run_until_settled(loop, host, f)
        best = loop.tuner.best
        assert loop.tuner.done and best["shape"] == "plain" and best["zmarch"] == 2, best
        plain = next(k for k in cp.kernels if k.name.endswith("_plain"))
        assert plain.launches and all(b[2] in (1, 2, 4) for _, b in plain.launches)
        fixed = Loop(diffusion7, shape, np.float32, engine="device", xp=cp, block=(32, 4), zmarch=2,
                     shape_kind="plain")
        got = np.zeros_like(f)
        fixed(f=f, fn=got, r=0.1)
        want = np.zeros_like(f)
        host(f=f, fn=want, r=0.1)
        np.testing.assert_array_equal(got, want)
        assert fixed.state()["config"] == {"bx": 32, "by": 4, "zmarch": 2, "shape": "plain"}
        assert plain.launches[-1] == ((2, 2, 5), (32, 4, 2))  # nx 40 / 32, ny 6 / 4, nz 9 / 2
    finally:
        loops._compiled.cache_clear()


# ---- the vec shape through the loop engines (CPU emulation of the generated vector kernels) ----------------
@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_device_loop_runs_the_vec_shape(fcp, boundary, rng):
    """``shape_kind="vec"`` runs the widest vector kernel the grid allows (nx % 4 == 0: vec4; nx % 4 == 2:
    vec2) over whole rows in x, V points per thread, bit-identical to the host engine."""
    for nx, variant in ((264, "vec4"), (70, "vec2")):
        shape = (9, 6, nx)
        f = rng.random(shape).astype(np.float32)
        want, got = f.copy(), f.copy()
        Loop(diffusion7, shape, np.float32, boundary=boundary)(f=f, fn=want, r=0.1)
        loop = Loop(diffusion7, shape, np.float32, boundary=boundary, engine="device", xp=fcp, block=(64, 2),
                    zmarch=4, shape_kind="vec")
        loop(f=f, fn=got, r=0.1)
        np.testing.assert_array_equal(got, want)
        k = next(k for k in fcp.kernels if k.name.endswith("_" + variant) and k.launches)
        lo = 0 if boundary == "periodic" else 1
        width = int(variant[3:])
        assert k.launches[-1] == ((-(-nx // (width * 64)), -(-(6 - 2 * lo) // 2), -(-(9 - 2 * lo) // 4)), (64, 2, 1))
        assert loop.state()["unroll"] == variant and loop.state()["config"]["shape"] == "vec"


def test_vec_launch_refuses_what_it_cannot_run_with_the_reason(fcp, rng):
    shape = (4, 4, 64)
    f = rng.random(shape).astype(np.float32)
    loop = Loop(diffusion7, shape, np.float32, engine="device", xp=fcp)
    with pytest.raises(ValueError, match="vec4 shape: bx = 48 is not a multiple of 32"):
        loop.run_with({"bx": 48, "by": 1, "zmarch": 4, "shape": "vec4"}, f=f, fn=np.zeros_like(f), r=0.1)
    buf = np.zeros(f.size + 1, np.float32)
    shifted = buf[1:].reshape(shape)  # C-contiguous, 4 bytes off a 16-byte boundary
    with pytest.raises(ValueError, match=r"vec4 shape: array 'fn' at 0x[0-9a-f]+ is not 16-byte aligned"):
        loop.run_with({"bx": 32, "by": 1, "zmarch": 4, "shape": "vec"}, f=f, fn=shifted, r=0.1)
    odd = Loop(diffusion7, (4, 4, 37), np.float32, engine="device", xp=fcp)
    g = rng.random((4, 4, 37)).astype(np.float32)
    with pytest.raises(ValueError, match="nx = 37 is not a multiple of V = 4"):
        odd.run_with({"bx": 32, "by": 1, "zmarch": 4, "shape": "vec"}, f=g, fn=np.zeros_like(g), r=0.1)
    # The tuner's space leaves the shape out on such a grid, with the reason.
    tuned = Loop(diffusion7, (4, 4, 37), np.float32, engine="device-autotune", xp=fcp, tune_cache=None,
                 tune={"repeats": 1})
    reasons = [r for k, r in tuned.tuner.invalid.items() if k[3] == "vec"]
    assert len(reasons) == 6 * 5 * 7 and all("not a multiple of V" in r or "not in" in r or "threads per block" in r
                                       for r in reasons)
    assert sum("nx = 37" in r for r in reasons) == 56 + 4  # + the 4 of 128 × 16 threads (first reason found)


@pytest.mark.slow  # tunes over the whole space, vector shapes included
def test_autotune_picks_the_vec_shape_when_it_is_fastest(emu_dir, tmp_path, monkeypatch, rng):
    """With a fake cost that makes the vec kernel at (32, 8) / 4 the cheapest launch, the tuner settles on
    it (it competes with march and plain on measurement only), and every tuning step stayed exact."""
    def cost(block, zmarch, name):
        return 0.5 if name.endswith("_vec4") and block[:2] == (32, 8) and int(zmarch) == 4 else 2.0

    cp = fake_cupy.make(emu_dir, cost=cost)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setenv("NAGARE_CACHE_DIR", str(tmp_path / "cache"))
    loops._compiled.cache_clear()
    try:
        shape = (10, 16, 136)
        # A single cheap point among equal ones: only the exhaustive search is sure to find it.
        loop = Loop(diffusion7, shape, np.float32, engine="device-autotune", xp=cp, tune_cache=None,
                    tune={"repeats": 1, "strategy": "exhaustive"})
        run_until_settled(loop, Loop(diffusion7, shape, np.float32), rng.random(shape).astype(np.float32))
        assert loop.tuner.done and loop.tuner.best == {"bx": 32, "by": 8, "zmarch": 4, "shape": "vec"}
        assert loop.tuner.state()["measured"] == 249
    finally:
        loops._compiled.cache_clear()


def test_cuda_vec_kernel_choice_on_the_fake_gpu_matches_numpy(fcp):
    """The registry's cuda-vec choice (diffusion3d): the vec shape at its fixed launch, against the array
    reference over several steps, both boundary kinds; unavailable with the reason where nx % 2 != 0."""
    from nagare.engine import registry
    from nagare.engine.backend import get_backend
    from nagare.engine.diffusion3d import Engine, Preset

    for kind, grid in (("periodic", {"nx": 40, "ny": 12, "nz": 9}), ("fixed", {"nx": 36, "ny": 9, "nz": 7})):
        preset = Preset.model_validate({"engine": "diffusion3d", "description": "t", "grid": grid,
                                        "boundaries": {"kind": kind}, "initial": {"kind": "random"}})
        ref = Engine(preset, get_backend("numpy"), variants={"kernel": "array"})
        ref.step(5)
        e = Engine(preset, Backend("cupy", fcp, _cupy=fcp), variants={"kernel": "cuda-vec"})
        e._roofline = 1e12
        e.step(5)
        np.testing.assert_array_equal(e.f, ref.f, err_msg=kind)
        assert e.timings.extra["launch"] == {"engine": "device", "stencil": "diffusion7", "unroll": "vec4",
                                             "config": {"bx": 32, "by": 8, "zmarch": 4, "shape": "vec"}}
    odd = Preset.model_validate({"engine": "diffusion3d", "description": "t", "grid": {"nx": 33, "ny": 8, "nz": 8}})
    choice = registry.axes("diffusion3d")["kernel"].choices["cuda-vec"]
    assert "nx = 33 is not a multiple of V = 4" in registry.unavailable_reason(choice, "cupy", {}, odd)
    assert registry.unavailable_reason(choice, "cupy", {}, preset) is None
    assert registry.unavailable_reason(choice, "numpy", {}, preset) == "needs a CUDA GPU (CuPy backend)"

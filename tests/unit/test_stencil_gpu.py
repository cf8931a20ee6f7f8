"""Generated CUDA and the live auto-tuner on a GPU (all gpu-marked; skipped without CUDA)."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.autotune import ALL_STENCIL_SHAPES, TuneCache, stencil_space
from nagare.engine.backend import get_backend
from nagare.engine.stencil import Loop
from nagare.engine.stencil.library import diffusion7, wave2d

from tests.unit.test_stencil import mixed
from tests.unit.test_stencil_emulated import halo2, wide4, zonly, zwide

pytestmark = pytest.mark.gpu


def _run(st, engine, host_arrays, params, boundary, **loop_kw):
    """One sweep with ``engine``; returns the outputs as host arrays."""
    cp = pytest.importorskip("cupy")
    xp = np if engine == "host" else cp
    arrays = {k: xp.asarray(v.copy()) for k, v in host_arrays.items()}
    first = host_arrays[st.inputs[0]]
    loop = Loop(st, first.shape, first.dtype, boundary=boundary, engine=engine, xp=xp, **loop_kw)
    loop(**arrays, **params)
    return {o: cp.asnumpy(arrays[o]) if xp is cp else arrays[o] for o in st.outputs}


CASES = [
    (diffusion7, (13, 18, 37), {"r": 0.1}),
    (wave2d, (45, 70), {"c2": 0.3}),
    (mixed, (9, 11, 21), {"s": 0.3, "t": 1.7}),
]


@pytest.mark.parametrize("engine", ["device", "device-autotune"])
@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("st,shape,params", CASES, ids=[c[0].name for c in CASES])
def test_device_loop_engines_are_bit_identical_to_host(st, shape, params, dtype, boundary, engine, rng, tmp_path):
    """Generated CUDA is compiled without FMA contraction: the same roundings as NumPy."""
    arrays = {n: (rng.random(shape) + 0.5).astype(dtype) for n in st.inputs}
    arrays.update({n: np.full(shape, -3.0, dtype) for n in st.outputs})
    want = _run(st, "host", arrays, params, boundary)
    kw = {"tune_cache": TuneCache(tmp_path / "t.json")} if engine == "device-autotune" else {}
    got = _run(st, engine, arrays, params, boundary, **kw)
    for o in st.outputs:
        np.testing.assert_array_equal(got[o], want[o], err_msg=f"{st.name} output {o}")


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_every_launch_candidate_gives_bit_identical_output(boundary, rng):
    """Tuning never changes results: all valid launch configurations of the tuner's space with every
    kernel shape (P2's z-marching ones, plain 3D blocks, vec, and the 2.5D shared-memory tiles that the
    default space leaves out) agree exactly, with the host too. nx = 44: vec4 runs (11 vectors, one
    partial warp), and no block width above 4 divides it."""
    cp = pytest.importorskip("cupy")
    shape = (19, 20, 44)
    f = cp.asarray(rng.random(shape).astype(np.float32))
    loop = Loop(diffusion7, shape, np.float32, boundary=boundary, engine="device", xp=cp)
    host = cp.asnumpy(f).copy()
    Loop(diffusion7, shape, np.float32, boundary=boundary)(f=cp.asnumpy(f), fn=host, r=0.1)
    space = stencil_space(shapes=ALL_STENCIL_SHAPES)
    reference = None
    tried = 0
    for key in space.all_keys():
        cfg = space.config(key)
        if space.invalid_reason(cfg):
            continue
        fn = cp.full(shape, np.nan, np.float32)
        if boundary == "fixed":
            fn[...] = f
        loop.run_with(cfg, f=f, fn=fn, r=0.1)
        out = cp.asnumpy(fn)
        assert np.isfinite(out).all(), f"{cfg} left points unwritten"
        if reference is None:
            reference = out
        else:
            np.testing.assert_array_equal(out, reference, err_msg=str(cfg))
        tried += 1
    np.testing.assert_array_equal(reference, host)
    assert tried == 161 + 32 + 36 + 56  # march + plain + tile + vec (tests/unit/test_stencil_emulated.py counts)


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_unrolled_kernel_is_bit_identical_to_host(boundary, dtype, rng):
    """Each compiled unroll, with march lengths below, at and off multiples of it (remainder planes,
    periodic wrap at both z-ends), on a grid whose x size is not a multiple of the block."""
    cp = pytest.importorskip("cupy")
    shape = (45, 20, 37)
    h = (rng.random(shape) + 0.5).astype(dtype)
    want = np.full(shape, -3.0, dtype)
    Loop(diffusion7, shape, dtype, boundary=boundary)(f=h, fn=want, r=0.1)
    f = cp.asarray(h)
    loop = Loop(diffusion7, shape, dtype, boundary=boundary, engine="device", xp=cp)
    assert sorted(k for k in loop.kernels if isinstance(k, int)) == [1, 2, 4, 8]
    for u in (1, 2, 4, 8):
        for z in (1, 3, 8, 13, 64):
            fn = cp.full(shape, -3.0, dtype)
            loop.run_with({"bx": 32, "by": 4, "zmarch": z, "unroll": u}, f=f, fn=fn, r=0.1)
            np.testing.assert_array_equal(cp.asnumpy(fn), want, err_msg=f"unroll {u} zmarch {z}")


# The vec shape: several stencils (x-halo 1, 2 = V of vec2, 4 = V of vec4; two inputs/outputs; queues and
# gapped z-rows; no x-neighbours), fp32/fp64, both boundaries, launches with one or several warps per row,
# idle lanes (rows of 66 / 68 / 10 vectors) and marches shorter / longer than the grid.
VEC_CASES = [
    (diffusion7, {"r": 0.1}),
    (mixed, {"s": 0.3, "t": 1.7}),
    (halo2, {"c": 0.3}),
    (zwide, {"c": 0.3}),
    (wide4, {"a": 0.3}),
    (zonly, {}),
]
VEC_LAUNCHES = ((32, 1, 1), (32, 8, 4), (64, 4, 8), (128, 2, 3), (64, 16, 32), (32, 4, 64))


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("st,params", VEC_CASES, ids=[c[0].name for c in VEC_CASES])
def test_vec_shape_is_bit_identical_to_host(st, params, dtype, boundary, rng):
    cp = pytest.importorskip("cupy")
    from nagare.engine.stencil.codegen import vec_widths

    for width in vec_widths(st):
        for nx in ((264, 40) if width == 4 else (136, 70)):
            shape = (21, 18, nx)
            host = {n: (rng.random(shape) + 0.5).astype(dtype) for n in st.inputs}
            want = {n: np.full(shape, -3.0, dtype) for n in st.outputs}
            Loop(st, shape, dtype, boundary=boundary)(**host, **want, **params)
            dev = {n: cp.asarray(v) for n, v in host.items()}
            loop = Loop(st, shape, dtype, boundary=boundary, engine="device", xp=cp)
            ran = 0
            for bx, by, zm in VEC_LAUNCHES:
                out = {n: cp.full(shape, -3.0, dtype) for n in st.outputs}
                cfg = {"bx": bx, "by": by, "zmarch": zm, "shape": f"vec{width}"}
                try:
                    loop.run_with(cfg, **dev, **out, **params)
                except ValueError as exc:  # 1024 threads of a register-heavy kernel: refused with the reason
                    assert bx * by == 1024 and "this kernel's limit" in str(exc), exc
                    continue
                ran += 1
                for n in st.outputs:
                    np.testing.assert_array_equal(cp.asnumpy(out[n]), want[n],
                                                  err_msg=f"{st.name} vec{width} nx {nx} ({bx},{by})/{zm} {n}")
            assert ran >= len(VEC_LAUNCHES) - 1


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_vec_shape_at_512_wide_rows_and_its_launch_checks(boundary, rng):
    """The issue's shape of row (nx = 512: four full warps of float4) at the prototype's best launches,
    the device engine's ``shape_kind="vec"``, and the launch refusing a misaligned array with the reason."""
    cp = pytest.importorskip("cupy")
    shape = (24, 64, 512)
    h = rng.random(shape).astype(np.float32)
    want = np.full(shape, -3.0, np.float32)
    Loop(diffusion7, shape, np.float32, boundary=boundary)(f=h, fn=want, r=0.1)
    f = cp.asarray(h)
    for block, zm in (((32, 8), 4), ((32, 4), 8), ((64, 4), 8), ((128, 8), 16)):
        loop = Loop(diffusion7, shape, np.float32, boundary=boundary, engine="device", xp=cp, block=block,
                    zmarch=zm, shape_kind="vec")
        fn = cp.full(shape, -3.0, np.float32)
        loop(f=f, fn=fn, r=0.1)
        np.testing.assert_array_equal(cp.asnumpy(fn), want, err_msg=f"{block}/{zm}")
        assert loop.state()["unroll"] == "vec4"
    shifted = cp.zeros(h.size + 1, np.float32)[1:].reshape(shape)
    with pytest.raises(ValueError, match="is not 16-byte aligned"):
        loop(f=f, fn=shifted, r=0.1)


def test_event_timer_hold_keeps_the_stream_busy():
    cp = pytest.importorskip("cupy")
    from nagare.engine.autotune import EventTimer

    t = EventTimer(cp)
    t.hold(0.1)  # compile and load the spin kernel
    token = t.start()
    t.hold(2.0)
    ms = t.wait(t.stop(token))
    assert 1.9 <= ms < 50.0, ms


def test_autotune_settles_on_live_calls_persists_and_restarts_tuned(rng, tmp_path):
    cp = pytest.importorskip("cupy")
    shape = (24, 32, 64)
    cache = TuneCache(tmp_path / "autotune.json")
    space = stencil_space(bx=(16, 32, 64), by=(1, 2, 4), zmarch=(1, 4))
    f = cp.asarray(rng.random(shape).astype(np.float32))
    fn = cp.zeros_like(f)
    loop = Loop(diffusion7, shape, np.float32, engine="device-autotune", xp=cp, tune_cache=cache,
                tune={"space": space, "repeats": 2})
    valid = [k for k in space.all_keys() if not space.invalid_reason(space.config(k))]
    assert len(valid) == space.size - 2  # 16×1 threads: less than a warp
    host = Loop(diffusion7, shape, np.float32)
    h = cp.asnumpy(f)
    hn = np.zeros_like(h)
    seen = set()
    for _ in range(100000):
        loop(f=f, fn=fn, r=0.1)
        seen.add(tuple(loop.last_config.values()))
        f, fn = fn, f
        host(f=h, fn=hn, r=0.1)
        h, hn = hn, h
        if loop.tuner.done:
            break
    st = loop.state()
    assert st["status"] == "settled", st
    assert st["measured"] == len(valid) and st["best"] is not None and st["best_ms"] > 0
    assert len(seen) == len(valid)  # every candidate really ran on a live call
    # A launch-bound size: measurements are batches of several live calls (sized by the probe).
    assert st["batch"] > 1 and loop.tuner.hold_ms_total > 0
    np.testing.assert_array_equal(cp.asnumpy(f), h)  # and the run's answer is unchanged
    entry = next(iter(cache.load().values()))
    assert entry["config"] == st["best"]
    again = Loop(diffusion7, shape, np.float32, engine="device-autotune", xp=cp, tune_cache=cache,
                 tune={"space": space})
    assert again.state()["status"] == "cached" and again.state()["best"] == st["best"]


def test_engine_timings_expose_the_tuner_state():
    from nagare.engine.diffusion3d import Engine, Preset

    preset = Preset.model_validate({"engine": "diffusion3d", "description": "t", "grid": {"nx": 32, "ny": 32,
                                                                                         "nz": 32}})
    e = Engine(preset, get_backend("cupy"), variants={"kernel": "cuda-autotune"})
    e.step(20)
    e.batch_report(wait=True)
    extra = e.timings.extra["autotune"]
    assert extra["engine"] == "device-autotune" and extra["space"] == 630
    assert extra["calls"] == 20 and extra["status"] in ("tuning", "waiting", "settled", "cached")
    e.set_variant(kernel="cuda")
    e.step(2)
    assert e.timings.extra["launch"]["config"] == {"bx": 128, "by": 1, "zmarch": 2}

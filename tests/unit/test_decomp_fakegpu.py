"""Decomposed stencil families through the framework's generated CUDA, run on the CPU: CuPy
replaced by tests/unit/fake_cupy.py (its kernels are the generated source compiled as C++ with the
CUDA built-ins emulated). The slab views, the thin boundary launches of overlap mode and the
vec kernel's alignment on padded slabs go through the same Python glue as on a GPU."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from nagare.engine.backend import Backend, get_backend
from nagare.engine.families import create_engine
from nagare.engine.stencil import loops

from tests.unit import cuda_emulator, fake_cupy

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ to emulate the kernels")


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    """The fake device's compiled kernels, shared by the module's tests (fake_cupy caches them by content)."""
    return tmp_path_factory.mktemp("fake_gpu_kernels")


@pytest.fixture
def fcp(emu_dir, tmp_path, monkeypatch):
    cp = fake_cupy.make(emu_dir)
    cp.take = np.take
    cp.array = fake_cupy._aligned(np.array)  # SameDeviceTransport.put: aligned as CuPy's pool
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setenv("NAGARE_CACHE_DIR", str(tmp_path / "cache"))
    loops._compiled.cache_clear()
    yield cp
    loops._compiled.cache_clear()


def test_decomposed_diffusion3d_on_the_fake_gpu_matches_the_whole_grid(fcp):
    from nagare.engine.diffusion3d import Engine, Preset

    gpu = Backend("cupy", fcp, _cupy=fcp)
    for kind, grid in (("periodic", {"nx": 8, "ny": 6, "nz": 9}), ("fixed", {"nx": 8, "ny": 5, "nz": 11})):
        preset = Preset.model_validate({"engine": "diffusion3d", "description": "t", "grid": grid,
                                        "boundaries": {"kind": kind}, "initial": {"kind": "random"}})
        ref = Engine(preset, get_backend("numpy"), variants={"kernel": "array"})
        ref.step(4)
        for kernel, parts, overlap in (("cuda", 3, "on"), ("cuda-vec", 2, "on"), ("cuda", 2, "off")):
            e = create_engine(preset, gpu, variants={"kernel": kernel}, parts=parts, overlap=overlap)
            e._roofline = 1e12
            e.step(4)
            np.testing.assert_array_equal(np.asarray(e.state_arrays()["f"]), ref.f,
                                          err_msg=f"{kind} {kernel} N={parts} overlap={overlap}")
            assert e.timings.extra["decomp"]["parts"] == parts
        launched = {k.name.rsplit("_", 1)[1] for k in fcp.kernels if k.launches}
        assert "vec4" in launched and launched & {"u1", "u2"}  # the generated kernels ran, vec4 included


def test_decomposed_wave2d_on_the_fake_gpu_matches_the_whole_grid(fcp):
    from nagare.engine.wave2d import Engine, Preset

    gpu = Backend("cupy", fcp, _cupy=fcp)
    preset = Preset.model_validate({"engine": "wave2d", "description": "t", "grid": {"nx": 13, "ny": 11},
                                    "boundaries": {"kind": "periodic"}, "initial": {"kind": "random"}})
    ref = Engine(preset, get_backend("numpy"), variants={"kernel": "array"})
    ref.step(5)
    e = create_engine(preset, gpu, variants={"kernel": "cuda"}, parts=3, overlap="on")
    e._roofline = 1e12
    e.step(5)
    for k, v in ref.state_arrays().items():
        np.testing.assert_array_equal(np.asarray(e.state_arrays()[k]), v, err_msg=k)


def test_prepared_launches_are_used_and_rebound_after_a_restore(fcp):
    """On CuPy each region list's launches are prepared once per buffer rotation (host time per
    step is what limits one process driving several GPUs): the steps after the first go through
    the prepared closures, and a restore (scatter: new buffers) drops them, so the next steps read
    the restored state, not freed buffers."""
    from nagare.engine.diffusion3d import Engine, Preset

    gpu = Backend("cupy", fcp, _cupy=fcp)
    preset = Preset.model_validate({"engine": "diffusion3d", "description": "t", "grid": {"nx": 8, "ny": 6, "nz": 9},
                                    "boundaries": {"kind": "periodic"}, "initial": {"kind": "random"}})
    ref = Engine(preset, get_backend("numpy"), variants={"kernel": "array"})
    e = create_engine(preset, gpu, variants={"kernel": "cuda"}, parts=3, overlap="on")
    e._roofline = 1e12
    start = e.checkpoint()
    e.step(3)
    ready = e.adapter._ready
    # boundary and interior lists of 3 parts, in both buffer rotations (the third step reuses one)
    assert len(ready) == 2 * 3 * 2, sorted(k[:2] for k in ready)
    e.restore(start)
    assert not e.adapter._ready  # the restore scattered new buffers: nothing bound to the old ones
    e.step(4)
    ref.step(4)
    np.testing.assert_array_equal(np.asarray(e.state_arrays()["f"]), ref.f)


@pytest.fixture
def fcp_lbm(emu_dir, tmp_path, monkeypatch):
    """The fake CuPy with the NumPy functions lbm2d's engine uses beside its kernels; lbm2d.cu's
    modules are not compiled with --fmad=false (their emulation is compared with itself and with
    the NumPy reference, which the host's FMA-free arithmetic matches)."""
    cp = fake_cupy.make(emu_dir, cost=lambda block, zmarch: 1.0, fmad_off=False)
    for name in dir(np):
        if not name.startswith("_") and not hasattr(cp, name):
            setattr(cp, name, getattr(np, name))
    cp.array = fake_cupy._aligned(np.array)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setenv("NAGARE_CACHE_DIR", str(tmp_path / "cache"))
    yield cp


@pytest.mark.parametrize("label", ["fp32-walls-obstacle", "fp32-channel"])
@pytest.mark.parametrize("selection,parts", [({"kernel": "fused"}, 3), ({"kernel": "fused", "streaming": "aa"}, 3),
                                             ({"kernel": "two-kernel"}, 2),
                                             ({"kernel": "fused", "storage": "fp16"}, 2)])
def test_decomposed_lbm2d_cuda_overlap_splits_the_step_and_keeps_the_bits(fcp_lbm, selection, parts, label):
    """lbm2d's CUDA steppers decomposed with overlap on: each slab's step runs as row-range launches
    (edge rows, then the interior beside the halo copies; lbm2d.cu's ROWS instances) and the state
    equals the undecomposed CUDA run bit for bit, overlap off and on, walls and an obstacle included
    (an odd step count: AA ends in its Q layout)."""
    from nagare.engine.lbm2d import Engine

    gpu = Backend("cupy", fcp_lbm, _cupy=fcp_lbm)
    p = Engine.equivalence_presets()[label]  # walls and an obstacle; a channel's inlet and outlet
    if selection.get("streaming") == "aa" and p.open_boundaries:
        pytest.skip("AA streaming does not implement inlet/outlet boundaries")

    def run(**kw):
        before = sum(len(k.launches) for k in fcp_lbm.kernels)
        e = create_engine(p, gpu, variants=selection, **kw)
        e._roofline = 1e12
        e.random_state(np.random.default_rng(3))
        e.step(5)
        return e, np.asarray(e.state_arrays()["f"]), sum(len(k.launches) for k in fcp_lbm.kernels) - before

    whole, want, _ = run()
    assert not whole.stepper.launch.rows  # the undecomposed engine keeps the whole-grid kernels
    launches = {}
    for overlap in ("off", "on"):
        e, got, launches[overlap] = run(parts=parts, overlap=overlap)
        np.testing.assert_array_equal(got, want, err_msg=f"{selection} N={parts} overlap={overlap}")
        assert all(st.launch.rows for st in e.adapter.steppers)
        assert e.adapter.describe()["overlap_split"]
    # overlap on: each slab's step is three launches of its kernels (two edge rows, the interior)
    # where overlap off is one whole-slab launch
    assert launches["on"] == 3 * launches["off"], launches
    # The fake GPU runs every copy the moment it is started; on a GPU it runs beside the interior
    # update. Deferring the copies until after the interior must give the same bits: they touch
    # nothing the interior update reads or writes (engine/lbm2d/decomp_adapter.py's argument).
    e = create_engine(p, gpu, variants=selection, parts=parts, overlap="on")
    e._roofline = 1e12
    tr = e.adapter.transport
    start = tr.start

    def deferred(arrays, copies, overlap=False):
        return type("Deferred", (), {"wait": lambda self: start(arrays, copies).wait()})()

    tr.start = deferred
    e.random_state(np.random.default_rng(3))
    e.step(5)
    np.testing.assert_array_equal(np.asarray(e.state_arrays()["f"]), want, err_msg="copies after the interior")


def test_decomposed_lbm2d_kernel_specs_name_the_slabs_modules(fcp_lbm):
    """Warm-up (cuda.precompile of engine.kernel_specs) must compile what the decomposed steppers load:
    every slab's ROWS module (one per distinct slab size and launch mode), besides the whole-grid one."""
    from nagare.engine.lbm2d import Engine

    gpu = Backend("cupy", fcp_lbm, _cupy=fcp_lbm)
    p = Engine.equivalence_presets()["fp32-walls-obstacle"]  # ny = 40: slabs of 14, 13, 13 rows (+ ghosts)
    for selection in ({"kernel": "fused"}, {"kernel": "two-kernel"}, {"kernel": "fused", "storage": "fp16"}):
        e = create_engine(p, gpu, variants=selection, parts=3)
        e.step(1)  # the adapter and its steppers exist
        specs = e.kernel_specs()
        used = {st.launch.spec for st in e.adapter.steppers}
        assert used <= set(specs), selection
        assert all(st.launch.rows for st in e.adapter.steppers)
        assert Engine(p, gpu, variants=selection).kernel_specs()[0] in specs  # the whole-grid module too

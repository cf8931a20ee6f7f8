"""Decomposed stencil families through the framework's generated CUDA, run on the CPU: CuPy
replaced by tests/unit/fake_cupy.py (its kernels are the generated source compiled as C++ with the
CUDA built-ins emulated). The slab views, the thin boundary launches of overlap mode and the
vec kernel's alignment on padded slabs go through the same Python glue as on a GPU."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from nagare.engine.backend import Backend, get_backend
from nagare.engine.stencil import loops

from tests.unit import cuda_emulator, fake_cupy

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ to emulate the kernels")


@pytest.fixture
def fcp(tmp_path, monkeypatch):
    cp = fake_cupy.make(tmp_path)
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
            e = Engine(preset, gpu, variants={"kernel": kernel}, parts=parts, overlap=overlap)
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
    e = Engine(preset, gpu, variants={"kernel": "cuda"}, parts=3, overlap="on")
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
    e = Engine(preset, gpu, variants={"kernel": "cuda"}, parts=3, overlap="on")
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

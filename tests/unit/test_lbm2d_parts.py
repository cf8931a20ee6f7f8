"""lbm2d split by job (launch, storage, steppers, outputs, cases), the shared KernelSpec of
engine/cuda.py and the registry's typed axes, all without a GPU."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import types

import numpy as np
import pytest
from nagare.engine import cuda, registry
from nagare.engine.backend import get_backend
from nagare.engine.families import FAMILIES, engine_class
from nagare.engine.lbm2d import Engine, cases, launch, outputs, steppers, variants
from nagare.engine.lbm2d import temporal_blocking as tb
from nagare.engine.presets import load_preset

from nagare import shaders

PRESETS = Engine.equivalence_presets()


def same_field(a, b, name):
    assert type(a) is type(b), name
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, dict):
            assert x.keys() == y.keys(), (name, f.name)
            for k in x:
                np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]), err_msg=f"{name}.{f.name}.{k}")
        elif hasattr(x, "shape"):
            assert x.dtype == y.dtype, (name, f.name)
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"{name}.{f.name}")
        else:
            assert x == y, (name, f.name)


def engines():
    for label, p in PRESETS.items():
        for storage in ("native", "fp16"):
            if storage == "fp16" and p.physics.precision != "fp32":
                continue
            yield f"{label}-{storage}", p, {"storage": storage}
    p = load_preset("lbm2d-cylinder", ["grid.nx=96", "grid.ny=48", "obstacle.diameter=10", "tracers.count=300"],
                    backend="numpy")
    yield "cylinder-tracers", p, {}


@pytest.mark.parametrize("label,preset,sel", list(engines()), ids=lambda v: v if isinstance(v, str) else "")
def test_one_field_equals_that_field_of_fields_bit_for_bit(label, preset, sel):
    e = Engine(preset, get_backend("numpy"), variants=sel)
    e.random_state(np.random.default_rng(4))
    e.step(5)
    every = e.fields()
    assert e.field_names() == list(every)
    assert ("tracers" in every) == (e.tracers is not None)
    for name, f in every.items():
        same_field(e.field(name), f, name)
    with pytest.raises(KeyError):
        e.field("no-such-field")


def test_field_computes_only_what_it_needs(monkeypatch):
    e = Engine(PRESETS["fp32-walls-obstacle"], get_backend("numpy"))
    calls = []
    real = outputs.moments
    monkeypatch.setattr(outputs, "moments", lambda eng, with_rho=True: calls.append(with_rho) or real(eng, with_rho))
    e.field("mask")
    assert calls == []
    for name in ("speed", "vorticity", "ux", "uy"):
        e.field(name)
    assert calls == [False] * 4  # one moments pass each, without ρ
    calls.clear()
    e.field("rho")
    assert calls == [True]
    calls.clear()
    e.fields()
    assert calls == [True]  # every field from one pass


def test_registry_axes_declare_their_parsers():
    sel = {"kernel": "srtb", "ts": "8", "tr": "2", "tile": "32x8", "storage": "native", "other": "kept"}
    assert registry.typed("lbm2d", sel) == {"kernel": "srtb", "ts": 8, "tr": 2, "tile": (32, 8),
                                            "storage": "native", "other": "kept"}
    axes = registry.axes("lbm2d")
    assert axes["ts"].typed("16") == 16 and axes["tile"].typed("192x128") == (192, 128)
    assert axes["kernel"].typed("fused") == "fused"  # str by default
    assert registry.typed("lbm2d", {"ts": 4, "tile": (16, 8)}) == {"ts": 4, "tile": (16, 8)}  # idempotent
    with pytest.raises(ValueError, match="tile must look like"):
        registry.typed("lbm2d", {"tile": "32by8"})
    for ax in axes.values():  # every registered choice parses
        for choice in ax.choices:
            ax.typed(choice)


# Every family registers through its own variants.py.
VARIANTS_MODULE_FAMILIES = tuple(sorted(FAMILIES))


def test_every_family_registers_through_its_variants_module():
    for family in VARIANTS_MODULE_FAMILIES:
        engine_class(family)
        mod = sys.modules[f"nagare.engine.{family}.variants"]
        assert mod.FAMILY == family and callable(mod.register)
        assert registry.axes(family)


def test_temporal_blocking_reasons_come_from_the_module(monkeypatch):
    assert not hasattr(variants, "temporal_blocking_module")
    p = PRESETS["fp32-walls-obstacle"]
    sel = dict(registry.default_selection("lbm2d", "cupy"), kernel="stb", ts="4", tr="0", tile="16x16")
    assert variants.check_kernel("cupy", sel, p) is None
    monkeypatch.setattr(tb, "unavailable_reason", lambda s, pr: "from temporal_blocking")
    assert variants.check_kernel("cupy", sel, p) == "from temporal_blocking"


def test_an_import_error_of_temporal_blocking_surfaces():
    """A broken temporal_blocking.py is an error at import, not a silent "not built yet"."""
    code = """
import importlib.abc, sys
class Broken(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "nagare.engine.lbm2d.temporal_blocking":
            raise ImportError("broken on purpose")
sys.meta_path.insert(0, Broken())
try:
    import nagare.engine.lbm2d
except ImportError as exc:
    print("raised:", exc)
else:
    print("imported")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "raised: broken on purpose" in out.stdout, out.stdout + out.stderr


# ---- KernelSpec --------------------------------------------------------------------------------
def test_template_spells_instances():
    assert cuda.template("lbm_fused", "float", "unsigned short", False, 4) == \
        "lbm_fused<float, unsigned short, false, 4>"
    assert cuda.template("k", np.dtype(np.float64), np.float32, True) == "k<double, float, true>"
    assert cuda.template("sph_cell_starts") == "sph_cell_starts"


def test_kernel_spec_is_a_normalised_hashable_key():
    a = cuda.KernelSpec("cuda/lbm2d/lbm2d.cu", ["k<float>"], ["--maxrregcount=80"], {"SEG": 64, "FLAG": None})
    b = cuda.KernelSpec("cuda/lbm2d/lbm2d.cu", ("k<float>",), ("--maxrregcount=80",), (("SEG", "64"), ("FLAG", None)))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a.nvrtc_options == cuda.DEFAULT_OPTIONS + ("--maxrregcount=80", "-DSEG=64", "-DFLAG")
    assert a.code == shaders.source("cuda/lbm2d/lbm2d.cu")
    two = cuda.KernelSpec(("cuda/lbm2d/d2q9.cuh", "cuda/lbm2d/lbm2d.cu"))
    assert two.code == shaders.source("cuda/lbm2d/d2q9.cuh") + "\n" + shaders.source("cuda/lbm2d/lbm2d.cu")


class _Built(list):
    """The fake's compiled modules, plus the fake current device."""


@pytest.fixture
def fake_cupy(monkeypatch):
    """Records every RawModule the specs build (what CuPy's cache keys on)."""
    built = _Built()

    class RawModule:
        def __init__(self, code, options, name_expressions):
            self.args = (code, tuple(options), name_expressions)
            built.append(self)
            if "does-not-compile" in (name_expressions or []):
                self.fail = True

        def compile(self):
            if getattr(self, "fail", False):
                raise RuntimeError("NVRTC error: nope\nmore")

        def get_function(self, name):
            return ("kernel", name, self, built.device.id)

    device = types.SimpleNamespace(id=0)
    runtime = types.SimpleNamespace(getDevice=lambda: device.id)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(RawModule=RawModule,
                                                                   cuda=types.SimpleNamespace(runtime=runtime)))
    built.device = device
    cuda._compiled.cache_clear()
    cuda._function.cache_clear()
    yield built
    cuda._compiled.cache_clear()
    cuda._function.cache_clear()


def test_compile_is_cached_and_keeps_the_old_nvrtc_arguments(fake_cupy):
    rel, exprs, opts = "cuda/lbm2d/tracers.cu", ("tracer_advance<float>", "tracer_advance<double>"), ("-lineinfo",)
    k = cuda.kernel(rel, "tracer_advance<double>", exprs, opts)  # the old entry point
    spec = cuda.KernelSpec(rel, exprs, opts)
    assert spec.function("tracer_advance<double>") is k and spec.compile() is k[2]
    assert spec.function() == ("kernel", "tracer_advance<float>", k[2], 0)
    assert cuda.module(rel, exprs, opts) is k[2]
    assert [m.args for m in fake_cupy] == [(shaders.source(rel), cuda.DEFAULT_OPTIONS + opts, list(exprs))]
    cuda.KernelSpec("cuda/diffusion3d/diffusion7.cu").compile()
    assert fake_cupy[-1].args[2] is None  # no name expressions: None, as before


def test_functions_are_looked_up_once_per_device(fake_cupy):
    """A CUDA Function is bound to the device current at lookup: one process driving several GPUs
    (engine/decomp) must get each device's own, from one NVRTC compile."""
    spec = cuda.KernelSpec("cuda/lbm2d/tracers.cu", ("tracer_advance<float>",))
    on0 = spec.function()
    fake_cupy.device.id = 1
    on1 = spec.function()
    assert on0[3] == 0 and on1[3] == 1 and spec.function() is on1
    fake_cupy.device.id = 0
    assert spec.function() is on0
    assert len(fake_cupy) == 1  # compiled once


def test_precompile_finishes_when_a_worker_dies(fake_cupy, monkeypatch, caplog):
    """A killed worker (NVRTC out of host memory) breaks the pool: the specs without a result are
    compiled in this process instead, and the run says so in one line."""
    import concurrent.futures
    from concurrent.futures.process import BrokenProcessPool

    class DyingPool:
        def __init__(self, *a, **k):
            self.calls = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, spec):
            fut = concurrent.futures.Future()
            self.calls += 1
            if self.calls == 1:
                fut.set_result(fn(spec))  # the first finishes, then the pool breaks
            else:
                fut.set_exception(BrokenProcessPool("a child process terminated abruptly"))
            return fut

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", DyingPool)
    specs = [cuda.KernelSpec("cuda/lbm2d/tracers.cu", (f"tracer_advance<{t}>",)) for t in ("float", "double")]
    bad = cuda.KernelSpec("cuda/lbm2d/tracers.cu", ("does-not-compile",))
    with caplog.at_level("WARNING", logger="nagare"):
        failed = cuda.precompile([*specs, bad], jobs=4)
    assert failed == [(bad, "RuntimeError: NVRTC error: nope")]
    assert len(fake_cupy) == 3  # every spec compiled once, the two left after the break here
    assert "compile worker died" in caplog.text


def test_precompile_reports_failures_once_per_spec(fake_cupy):
    good = cuda.KernelSpec("cuda/lbm2d/tracers.cu", ("tracer_advance<float>",))
    bad = cuda.KernelSpec("cuda/lbm2d/tracers.cu", ("does-not-compile",))
    failed = cuda.precompile([good, bad, good], jobs=1)
    assert failed == [(bad, "RuntimeError: NVRTC error: nope")]
    assert len(fake_cupy) == 2


def test_single_step_module_names_and_options_are_unchanged():
    big = load_preset("lbm2d-poiseuille", ["grid.nx=4096", "grid.ny=4096"], backend=None)
    ss = launch.single_step(big, "native", 9.0)
    assert ss.spec.source == "cuda/lbm2d/lbm2d.cu" and ss.spec.options == ("--maxrregcount=80",)
    assert ss.spec.name_expressions == (
        "lbm_stream<float, float, false>", "lbm_collide<float, float, false, false>",
        "lbm_fused_vec<float, float, false, 4, false>", "lbm_fused_aa<float, float, false, true, false>",
        "lbm_fused_aa<float, float, false, false, false>", "lbm_open_boundaries<float, float, false>")
    assert (ss.fused_block, ss.fused_dims, ss.dims) == ((64, 1, 1), (16, 4096, 1), (64, 1024, 1))
    fp16 = launch.single_step(big, "fp16", 9.0)
    assert fp16.names["fused"] == "lbm_fused_pipe<false, 2, unsigned int, false>"
    assert fp16.spec.options == ("--prec-div=false",)
    assert fp16.names["stream"] == "lbm_stream<float, unsigned short, false>"
    assert (fp16.fused_dims, fp16.fused_smem, [int(v) for v in fp16.fused_extra]) == \
        ((8, 1366, 1), 2 * 2 * launch.PIPE_STAGE_BYTES, [3])  # 2 warps x 256 columns, 3-row runs
    assert launch.single_step(big, "fp16", 7.5).names["fused"] == "lbm_fused_packed<false, 8, false>"
    trt64 = PRESETS["fp64-cavity"].model_copy(update={"physics": PRESETS["fp32-trt"].physics.model_copy(
        update={"precision": "fp64"})})
    ss = launch.single_step(trt64, "native", 9.0)  # nx = 37: not a multiple of 4, lbm_fused one node a thread
    assert ss.names["fused"] == "lbm_fused<double, double, true, 1, false>" and ss.spec.options == ()


def test_row_range_module_is_its_own_compilation_with_grids_per_row_count():
    """A decomposed slab's stepper builds the ROWS instances (lbm2d.cu): the same kernels with the
    row range live, a separate module (its own cache entry), and grids sized to a range's rows."""
    big = load_preset("lbm2d-poiseuille", ["grid.nx=4096", "grid.ny=4096"], backend=None)
    whole, rows = launch.single_step(big, "native", 9.0), launch.single_step(big, "native", 9.0, rows=True)
    assert not whole.rows and rows.rows and rows.spec != whole.spec
    assert rows.names["fused"] == "lbm_fused_vec<float, float, false, 4, true>"
    assert all(n.endswith(", true>") for n in rows.names.values())
    assert rows.dims_for(4096) == rows.dims and rows.fused_dims_for(4096) == rows.fused_dims
    assert rows.dims_for(1) == (64, 1, 1) and rows.dims_for(5) == (64, 2, 1)  # BLOCK is 64 × 4
    assert rows.fused_dims_for(3) == (16, 3, 1)  # one row of warps a block
    pipe = launch.single_step(big, "fp16", 9.0, rows=True)
    assert pipe.names["fused"] == "lbm_fused_pipe<false, 2, unsigned int, true>"
    assert pipe.fused_dims_for(1) == (8, 1, 1) and pipe.fused_dims_for(7) == (8, 3, 1)  # 3-row runs


def test_temporal_blocking_spec():
    spec = tb.kernel_spec({"kernel": "srtb-ws", "ts": "8", "tr": "2", "tile": "16x8"}, np.float32)
    assert spec == cuda.KernelSpec(tb.CUDA_SOURCE, ("lbm2d_tb<float, float, 8, 2, 16, 8, true>",))
    spec = tb.kernel_spec({"kernel": "wavefront", "ts": 4, "tr": 0, "tile": "128x96"}, np.float64)
    assert spec == cuda.KernelSpec(tb.WAVE_SOURCE, ("lbm2d_wave<double, double, 4, 128, 96>",))


def test_every_kernel_choice_has_a_stepper_and_its_specs():
    p = load_preset("lbm2d-poiseuille", ["tracers.count=10"], backend=None)
    base = registry.default_selection("lbm2d", "cupy")
    for kernel in registry.axes("lbm2d")["kernel"].choices:
        sel = dict(base, kernel=kernel, **({"ts": "4", "tr": "2"} if kernel.startswith("srtb") else {}))
        cls = steppers.stepper_class(sel)
        specs = cls.all_kernel_specs(p, sel, 9.0)
        if kernel == "reference":
            assert cls is steppers.ReferenceStepper and specs == []
            continue
        assert specs[-2:] == [steppers.VELOCITY_SPEC, steppers.TRACER_SPEC]
        assert specs[0].name_expressions
    aa = dict(base, kernel="fused", streaming="aa")
    assert steppers.VELOCITY_SPEC not in steppers.stepper_class(aa).all_kernel_specs(p, aa, 9.0)


def test_kernel_specs_hook_is_empty_without_a_gpu():
    for family in VARIANTS_MODULE_FAMILIES:
        cls = engine_class(family)
        e = cls(next(iter(cls.equivalence_presets().values())), get_backend("numpy"))
        assert e.kernel_specs() == []


def test_bench_precompile_hands_the_temporal_blocking_specs_to_cuda_precompile(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(cuda, "precompile", lambda specs, jobs: seen.append((list(specs), jobs)) or [])
    preset = load_preset(cases.PRESET, [], backend=None)
    base = registry.default_selection("lbm2d", "cupy")
    sels = [dict(base, **s) for _, s in cases.bench_selections("cupy")]
    Engine.bench_spec().precompile(sels, preset, 4)
    (specs, jobs), = seen
    runnable = [s for s in sels
                if s["kernel"] in variants.TEMPORAL_BLOCKING and tb.unavailable_reason(s, preset) is None]
    assert jobs == 4 and specs == [tb.kernel_spec(s, np.float32) for s in runnable] and len(specs) > 20
    assert f"precompiled {len(specs)} of {len(specs)}" in capsys.readouterr().out

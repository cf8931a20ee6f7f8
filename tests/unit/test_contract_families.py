"""The engine contract, walked over every registered family on the NumPy backend: each family
implements the whole contract, and what the contract promises (fields by name, checkpoints,
bench description, variants) holds for each, not only for the family it was first written for."""
from __future__ import annotations

import math

import numpy as np
import pytest
from nagare.engine import fields as field_types
from nagare.engine.backend import get_backend
from nagare.engine.benchspec import BenchSpec
from nagare.engine.contract import Engine
from nagare.engine.errors import CheckpointError
from nagare.engine.families import FAMILIES, create_engine, engine_class, family_module

FIELD_TYPES = (field_types.Grid2D, field_types.Grid3D, field_types.Particles, field_types.Boxes,
               field_types.Profile1D)


def first_engine(family):
    cls = engine_class(family)
    label, preset = next(iter(cls.equivalence_presets().items()))
    return create_engine(preset, get_backend("numpy"))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_implements_the_whole_contract(family):
    cls = engine_class(family)
    assert issubclass(cls, Engine)
    assert cls.family == family
    assert not cls.__abstractmethods__, f"{family} leaves {sorted(cls.__abstractmethods__)} abstract"
    assert family_module(family).Preset is cls.Preset
    spec = cls.bench_spec()
    assert isinstance(spec, BenchSpec)
    assert spec.preset, f"{family} declares no bench preset"
    for backend in ("numpy", "cupy"):
        cases = spec.cases(backend)
        assert cases and all(isinstance(label, str) and isinstance(ov, list) for label, ov in cases)
    assert spec.batch >= 1


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fields_by_name_match_fields(family):
    eng = first_engine(family)
    eng.step(2)
    every = eng.fields()
    assert eng.field_names() == list(every)
    for name, f in every.items():
        assert isinstance(f, FIELD_TYPES), f"{family}.{name} is a {type(f).__name__}"
        one = eng.field(name)
        assert type(one) is type(f)
    with pytest.raises(KeyError):
        eng.field("no-such-field")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_checkpoint_restore_continue_is_bit_identical(family):
    a = first_engine(family)
    a.step(3)
    ckpt = a.checkpoint()
    a.step(4)
    b = first_engine(family)
    b.restore(ckpt)
    assert b.step_count == 3
    b.step(4)
    assert (a.step_count, a.time) == (b.step_count, b.time)
    for name, arr in a.state_arrays().items():
        np.testing.assert_array_equal(np.asarray(b.state_arrays()[name]), np.asarray(arr), err_msg=name)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_restore_refuses_a_state_that_does_not_fit(family):
    eng = first_engine(family)
    arrays = eng.checkpoint()["arrays"]
    name = next(iter(arrays))
    with pytest.raises(CheckpointError, match=name):
        eng.check_restorable({k: v for k, v in arrays.items() if k != name})
    with pytest.raises(CheckpointError, match="shape"):
        eng.check_restorable(dict(arrays, **{name: np.zeros((1,) + arrays[name].shape, arrays[name].dtype)}))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_diagnostics_and_variants_and_timings(family):
    eng = first_engine(family)
    eng.step(2)
    d = eng.diagnostics()
    assert d and all(math.isfinite(v) for v in d.values())
    v = eng.variants
    assert set(v) == set(eng.selection)
    for axis, info in v.items():
        assert info["current"] == eng.selection[axis]
        assert info["current"] in info["choices"]
        assert info["choices"][info["current"]] is None, f"{axis}: the running choice says it cannot run"
    rep = eng.batch_report(wait=True)
    assert rep.steps == 2
    assert eng.updates_per_step > 0 and eng.bytes_per_update() > 0


def test_a_family_missing_a_method_is_refused_where_it_is_defined():
    with pytest.raises(TypeError, match=r"'toy'.*does not implement.*fields"):
        class Incomplete(Engine):  # noqa: F841 - defining it is the test
            family = "toy"

            def _allocate(self): ...
            def _initialise(self): ...
            def _advance(self, n): return 0.0
            def state_arrays(self): return {}
            def _load_state_arrays(self, arrays): ...
            def device_diagnostics(self): return {}
            def random_state(self, rng): ...
            @property
            def updates_per_step(self): return 1.0
            def bytes_per_update(self): return 1.0
            @classmethod
            def equivalence_presets(cls): return {}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_restore_refuses_an_array_the_engine_does_not_have(family):
    """audit D13: an unknown state array is refused, named, not silently ignored."""
    eng = first_engine(family)
    eng.step(2)
    ckpt = eng.checkpoint()
    bad = {"meta": ckpt["meta"], "arrays": {**ckpt["arrays"], "extra": np.zeros(3), "zz/other": np.ones(2)}}
    with pytest.raises(CheckpointError, match=r"holds state arrays 'extra', 'zz/other' that this .* engine does not "
                                              r"have") as info:
        first_engine(family).restore(bad)
    assert "\n" not in str(info.value)
    other = first_engine(family)
    other.restore(ckpt)
    assert other.step_count == 2


@pytest.mark.parametrize("family", sorted(f for f in FAMILIES if engine_class(f).constant_dt))
@pytest.mark.parametrize("time", [1e300, 0.0, "off by 1e-6"])
def test_restore_refuses_a_time_that_is_not_step_times_dt(family, time):
    """audit D13: where every step advances the same Δt, meta.time must be meta.step × Δt."""
    eng = first_engine(family)
    eng.step(4)
    ckpt = eng.checkpoint()
    assert ckpt["meta"]["time"] == 4 * eng.dt
    t = ckpt["meta"]["time"] * (1 + 1e-6) if time == "off by 1e-6" else time
    bad = {"meta": {**ckpt["meta"], "time": t}, "arrays": ckpt["arrays"]}
    with pytest.raises(CheckpointError, match=r"meta.time = .* does not match meta.step × Δt = 4 × "):
        first_engine(family).restore(bad)
    first_engine(family).restore(ckpt)  # the real one still restores


@pytest.mark.parametrize("fixed", [False, True])
def test_sph_restore_refuses_a_clock_that_cannot_be(fixed):
    """SPH's Δt adapts (no meta.step × Δt to compare with): a clock that is zero after steps, or
    nonzero before any, is refused; with time.dt_fixed the time must be meta.step × Δt."""
    from nagare.engine.presets import load_preset
    from nagare.engine.sph.engine import SPH

    p = load_preset("sph-dambreak2d", ["time.dt_fixed=1e-5"] if fixed else [], backend="numpy")
    eng = SPH(p, get_backend("numpy"))
    eng.step(3)
    ckpt = eng.checkpoint()
    bad_times = [0.0, ckpt["meta"]["time"] * (1 + 1e-6)] if fixed else [0.0]
    for t in bad_times:
        bad = {"meta": {**ckpt["meta"], "time": t}, "arrays": ckpt["arrays"]}
        with pytest.raises(CheckpointError, match=r"meta.time = .*(does not match|at meta.step = 3)"):
            SPH(p, get_backend("numpy")).restore(bad)
    fresh = SPH(p, get_backend("numpy")).checkpoint()
    bad = {"meta": {**fresh["meta"], "time": 0.5}, "arrays": fresh["arrays"]}
    with pytest.raises(CheckpointError, match=r"meta.time = 0.5 (does not match|at meta.step = 0)"):
        SPH(p, get_backend("numpy")).restore(bad)
    SPH(p, get_backend("numpy")).restore(ckpt)  # the real one still restores

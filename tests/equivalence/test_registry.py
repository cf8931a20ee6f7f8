"""One test walks the whole variant registry: every registered choice of every family, on every
backend it runs on, must match its reference (NumPy backend) from the same random valid state.

A new variant is tested the moment it is registered. Choices that need CUDA are marked `gpu`.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from nagare.engine import registry
from nagare.engine.backend import get_backend
from nagare.engine.errors import VariantUnavailable
from nagare.engine.families import FAMILIES, create_engine, engine_class, load_all

load_all()


def _resolved(family: str, preset, backend: str, requested: dict) -> tuple | None:
    """The selection an engine built with ``requested`` runs (defaults, the preset's, the request);
    None when it cannot run here (the test says why)."""
    try:
        sel = registry.resolve_selection(family, backend, preset, preset.variants, requested)
    except VariantUnavailable:
        return None
    return tuple(sorted(sel.items()))


def _cases():
    # On NumPy several choices can resolve to the same engine on both sides (amr3d's kernels=reference,
    # storage=native and graph=off are all the one NumPy engine): the first such cell runs in the quick
    # run, its repeats with `-m slow`.
    seen = set()
    for choice in registry.all_choices():
        cls = engine_class(choice.family)
        for preset_label, preset in cls.equivalence_presets().items():
            for backend in sorted(choice.backends):
                marks = [pytest.mark.gpu] if backend == "cupy" else []
                selection = {choice.axis: choice.name, **cls.equivalence_companions(choice.axis, choice.name)}
                cand = _resolved(choice.family, preset, backend, selection)
                ref = _resolved(choice.family, preset, "numpy", choice.reference or selection)
                key = (choice.family, preset_label, backend, cand, ref)
                if backend == "numpy" and cand is not None and ref is not None and key in seen:
                    marks.append(pytest.mark.slow)
                seen.add(key)
                yield pytest.param(choice, preset_label, backend, marks=marks,
                                   id=f"{choice.family}-{choice.axis}={choice.name}-{preset_label}-{backend}")


def _frozen(arrays) -> dict:
    out = {}
    for k, v in arrays.items():
        a = np.array(v, copy=True)
        a.flags.writeable = False
        out[k] = a
    return out


def _reference_run(family: str, preset_label: str, ref_items: tuple, seed: int):
    """The reference's state before and after ``equivalence_steps`` from the random state of
    ``seed`` (NumPy backend): the same for every choice whose reference resolves to the same engine,
    so computed once per (family, preset, resolved selection) rather than once per cell."""
    preset = engine_class(family).equivalence_presets()[preset_label]
    resolved = _resolved(family, preset, "numpy", dict(ref_items))
    return _run_resolved(family, preset_label, resolved if resolved is not None else ref_items, seed)


@functools.cache
def _run_resolved(family: str, preset_label: str, selection: tuple, seed: int):
    cls = engine_class(family)
    ref = create_engine(cls.equivalence_presets()[preset_label], get_backend("numpy"), variants=dict(selection))
    ref.random_state(np.random.default_rng(seed))
    start = _frozen(ref.state_arrays())
    ref.step(cls.equivalence_steps)
    return start, _frozen(ref.state_arrays())


@pytest.mark.parametrize("choice,preset_label,backend", list(_cases()))
def test_variant_matches_reference(choice, preset_label, backend):
    cls = engine_class(choice.family)
    preset = cls.equivalence_presets()[preset_label]
    selection = {choice.axis: choice.name, **cls.equivalence_companions(choice.axis, choice.name)}
    full = dict(registry.default_selection(choice.family, backend), **selection)
    reasons = [registry.unavailable_reason(registry.axes(choice.family)[a].choices[c], backend, full, preset)
               for a, c in selection.items()]
    reason = "; ".join(dict.fromkeys(r for r in reasons if r))
    if reason:
        pytest.skip(f"{choice.axis}={choice.name} unavailable for {preset_label}: {reason}")
    ref_sel = choice.reference or selection
    seed = 1234
    start, want = _reference_run(choice.family, preset_label, tuple(sorted(ref_sel.items())), seed)
    cand = create_engine(preset, get_backend(backend), variants=selection)
    cand.random_state(np.random.default_rng(seed))
    # The candidate starts from exactly the reference's state.
    for k, v in start.items():
        np.testing.assert_array_equal(cand.backend.asnumpy(cand.state_arrays()[k]), v)
    n = cls.equivalence_steps
    cand.step(n)
    got = {k: cand.backend.asnumpy(v) for k, v in cand.state_arrays().items()}
    assert got.keys() == want.keys()
    for k in want:
        assert np.isfinite(want[k]).all(), f"reference state {k} not finite: the test state is invalid"
        np.testing.assert_allclose(got[k], want[k], rtol=choice.rtol, atol=choice.atol,
                                   err_msg=f"{choice.family} {choice.axis}={choice.name} ({preset_label}, {backend}) "
                                           f"state '{k}' after {n} steps")
    # And the state actually changed: a variant that does nothing must not pass.
    moved = any(not np.array_equal(v, want[k]) for k, v in start.items())
    assert moved, "the reference did not change the state; the equivalence test would be vacuous"


def test_every_family_registers_a_reference():
    for fam in FAMILIES:
        refs = [c for c in registry.all_choices() if c.family == fam and (c.reference is None or
                c.reference == {c.axis: c.name})]
        assert refs, f"family {fam} has no reference choice"

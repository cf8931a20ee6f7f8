"""SPH keeps its time step by step, so the batching cannot round it differently.

Engine.step adds the time a batch advanced, t + (Δt₁ + … + Δtₙ), which rounds differently from
the step-by-step sum when the batch more than doubles t: with a fixed Δt this happens for a few
percent of batchings, and the piston moves with t. SPH.step lets _advance keep the sum itself.
"""
from __future__ import annotations

import numpy as np
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

# a fixed Δt and batches for which t + (Σ batch) ≠ the running sum (found by search)
DT = 0.00010992511247407851
BATCHES = (6, 2, 9, 3)


def _engine():
    p = load_preset("sph-piston2d", ["particles.dp=0.04", f"time.dt_fixed={DT!r}"], backend="numpy")
    return create_engine(p, get_backend("numpy"))


def test_sph_time_and_piston_do_not_depend_on_the_batching():
    one = _engine()
    one.step(sum(BATCHES))
    many = _engine()
    for n in BATCHES:
        many.step(n)
    running = 0.0
    for _ in range(sum(BATCHES)):
        running += DT
    assert one.time == running and many.time == running, (one.time, many.time, running)
    for k, v in one.state_arrays().items():
        np.testing.assert_array_equal(np.asarray(many.state_arrays()[k]), np.asarray(v), err_msg=k)

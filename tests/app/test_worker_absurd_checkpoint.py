"""The app's worker loads a checkpoint file only when its state is physical (issue 40): a finite but
absurd one (every population 1e30) is refused in one line and the run that was loaded stays, its
state untouched; a sane one loads. No window, no display."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.waiting import wait_until

SMALL = ["grid.n=32"]



@pytest.fixture
def cavity_worker():
    from nagare.app.gui.worker import SimulationWorker
    from nagare.engine.presets import load_preset

    w = SimulationWorker(load_preset("lbm2d-cavity", SMALL, backend="numpy"), "numpy").start()
    wait_until(lambda: w.latest_packet() is not None)
    yield w
    w.stop()


def _checkpoint(steps, absurd):
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset("lbm2d-cavity", SMALL, backend="numpy"), get_backend("numpy"))
    e.step(steps)
    ckpt = e.checkpoint()
    if absurd:
        ckpt["arrays"] = {k: np.full_like(v, 1e30) if np.issubdtype(v.dtype, np.floating) else v
                          for k, v in ckpt["arrays"].items()}
    return ckpt


def _notices(w, kind, timeout=20.0):
    got = []
    wait_until(lambda: got.extend(n for n in w.drain_notices() if n.kind == kind) or got, timeout)
    return got


def test_an_absurd_checkpoint_is_refused_and_the_run_stays(cavity_worker):
    w = cavity_worker
    w.send("step", n=7)
    wait_until(lambda: w.engine.step_count == 7)
    before = {k: np.array(v, copy=True) for k, v in w.engine.state_arrays().items()}
    w.drain_notices()
    w.send("restore", checkpoint=_checkpoint(3, absurd=True))
    errors = _notices(w, "error")
    assert "is not physical (max_density" in errors[0].text and "\n" not in errors[0].text, errors[0].text
    assert w.engine.step_count == 7
    for k, v in w.engine.state_arrays().items():
        np.testing.assert_array_equal(np.asarray(v), before[k], err_msg=k)


def test_a_sane_checkpoint_loads(cavity_worker):
    w = cavity_worker
    w.send("step", n=7)
    wait_until(lambda: w.engine.step_count == 7)
    w.drain_notices()
    w.send("restore", checkpoint=_checkpoint(3, absurd=False))
    assert any("restored to step 3" in n.text for n in _notices(w, "info"))
    assert w.engine.step_count == 3

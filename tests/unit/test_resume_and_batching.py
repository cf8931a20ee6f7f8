"""Every preset of every family (NumPy, its CPU size shrunk further where a preset is large):

- N steps straight equal N/2 steps, a checkpoint written to disk and read back into a fresh engine,
  and N/2 more — bit for bit, every state array (tracers, particles, their rings and clocks);
- step(N) equals N × step(1) bit for bit: how the app batches steps (its frame rate) never
  changes the physics.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.checkpoint import load_checkpoint, save_checkpoint
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset, preset_names

# Sizes that keep each preset's NumPy run to a fraction of a second (physics and features kept:
# tracers, obstacles, moving boundaries, walls, refinement).
SHRINK = {
    "lbm2d": ["grid.nx=96", "grid.ny=48"],
    "diffusion3d": ["grid.nx=24", "grid.ny=24", "grid.nz=24"],
    "wave2d": ["grid.nx=64", "grid.ny=64"],
}
# Presets whose features a quicker preset of the family already carries through both tests, run with
# `-m slow`: amr3d-sphere-re20 keeps a body with tracers, amr3d-vortex-adapt the MRT collision and a
# regrid inside the run; the Ahmed and STL bodies differ from the sphere only in how the mask is built
# (at construction, not in the state a checkpoint carries), and re100 only in its Reynolds number.
SLOW = {"amr3d-ahmed", "amr3d-stl", "amr3d-sphere-re100"}
STEPS = 10  # 5 + 5: the checkpoint falls mid tracer substep (lbm2d-cylinder: tracers.every = 2)
BATCHES = (3, 1, 4, 2)  # irregular batches, as a frame rate that varies gives


def _presets():
    out = []
    for name in preset_names():
        p = load_preset(name, backend="numpy")
        over = [o for o in SHRINK.get(p.engine, [])]
        try:
            p = load_preset(name, over, backend="numpy")
        except Exception:
            over = []  # a preset whose grid is given another way keeps its CPU size
        marks = [pytest.mark.slow] if name in SLOW else []
        out.append(pytest.param(name, tuple(over), id=name, marks=marks))
    return out


def _engine(name, over):
    return create_engine(load_preset(name, over, backend="numpy"), get_backend("numpy"))


def _state(e):
    """Every state array, and the step and physical time (a checkpoint's meta, bit for bit too)."""
    out = {k: np.array(e.backend.asnumpy(v)) for k, v in e.state_arrays().items()}
    out["meta: step"] = np.array(e.step_count)
    out["meta: time"] = np.array(e.time)
    return out


@functools.cache
def _straight(name, over) -> dict:
    """The state after ``STEPS`` steps in one call: both tests compare against it, so it is run
    once per preset."""
    e = _engine(name, over)
    e.step(STEPS)
    return _state(e)


def _assert_same(a: dict, b: dict, what: str):
    assert a.keys() == b.keys(), what
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=f"{what}: state '{k}'")


@pytest.mark.parametrize("name,over", _presets())
def test_resume_from_a_checkpoint_is_bit_for_bit(name, over, tmp_path):
    half = _engine(name, over)
    half.step(STEPS // 2)
    path = tmp_path / "c.npz"
    save_checkpoint(half.checkpoint(), path)
    resumed = _engine(name, over)
    resumed.restore(load_checkpoint(path))
    resumed.step(STEPS - STEPS // 2)
    _assert_same(_state(resumed), _straight(name, over), f"{name}: {STEPS // 2} + checkpoint + {STEPS - STEPS // 2}")


@pytest.mark.parametrize("name,over", _presets())
def test_batching_does_not_change_the_physics(name, over):
    many = _engine(name, over)
    for _ in range(STEPS):
        many.step(1)
    _assert_same(_state(many), _straight(name, over), f"{name}: step({STEPS}) vs {STEPS} × step(1)")
    mixed = _engine(name, over)
    for n in BATCHES:
        mixed.step(n)
    _assert_same(_state(mixed), _straight(name, over), f"{name}: step({STEPS}) vs batches {BATCHES}")

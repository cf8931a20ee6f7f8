"""The fused tracer step (engine/amr3d/tracer_kernels.py, shaders/cuda/amr3d/tracers.cu) through the
CPU emulation of CuPy (tests/unit/amr3d_emulated_cupy.py: the module's exact source compiled by g++
with -ffp-contract=off, as the device compiles it with --fmad=false): bit for bit the array code of
tracers.py — every state array, parked NaNs included — on a two-level tree with a body and a walled
side, over enough steps that the release ring wraps; batch- and checkpoint-independent; two launches
a coarse step and no array code. On the emulation the array code runs on NumPy, so it is the NumPy
reference itself that the kernels are compared with."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from nagare.engine.amr3d import interface, reference, tracer_kernels, tracers
from nagare.engine.amr3d.tracers import Tracers
from nagare.engine.amr3d.tree_stepper import NumpyKernels, TreeStepper
from nagare.engine.backend import get_backend
from nagare.engine.timing import PhaseTimer

from tests.unit.test_amr3d_tracers import three_levels
from tests.unit.test_amr3d_tree_stepper import flow_state

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")

STATE = ("pos", "age", "alive", "trail", "step", "cursor")
CENTRE = np.array([8.0, 8.0, 8.0])
# The NumPy-sized sphere (24 × 16 × 16 level-0 units, levels 0 and 1, outflow at x = 24) at twice the
# preset's speed. Seeds: on the stagnation line and beside it just clear of the sphere (their tracers
# reach the half-way wall and are parked), one near the outlet (its tracers leave), one in the free
# stream. 4 slots a seed, a release every 4 steps: the ring wraps every 16 steps.
SPHERE = ["grid.m=9", "refine=[]", "flow.velocity=[0.1, 0.0, 0.0]",
          "body=[{kind='sphere', center=[8.0, 8.0, 8.0], diameter=2.0, level=1, band=0.5}]",
          "tracers.count=4", "tracers.seeds=[[6.98, 8.0, 8.0], [7.2, 8.5, 8.5], [23.3, 4.0, 12.0], [6.0, 12.0, 3.0]]",
          "tracers.release_every=4", "tracers.trail_length=3", "tracers.trail_every=2"]


def assert_same_bits(a: Tracers, b: Tracers, msg="") -> None:
    for k in STATE:
        x, y = np.asarray(getattr(a, k)), np.asarray(getattr(b, k))
        assert x.dtype == y.dtype and x.shape == y.shape, k
        if x.dtype.kind == "f":  # NaN payloads too
            x, y = x.view(f"u{x.dtype.itemsize}"), y.view(f"u{y.dtype.itemsize}")
        np.testing.assert_array_equal(x, y, err_msg=f"{k} {msg}")


def launches(tr: Tracers, storage) -> dict:
    spec = tracer_kernels.kernel_spec(tr.dtype, storage)
    return {name: spec.function(name).launches for name in spec.name_expressions}


def sphere_engine(cp, fused: bool = True):
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import Backend
    from nagare.engine.presets import load_preset

    p = load_preset("amr3d-sphere-re20", SPHERE, backend="numpy")
    e = AMR3D(p, Backend("cupy", cp, _cupy=cp), variants={"kernels": "naive", "graph": "off"})
    e._roofline = 1e12  # (no copy bandwidth to measure)
    e._tracers.use_kernels = fused
    return e


# The two engine runs below (~20 s of emulated kernels) run in the slow step; the quick one keeps the
# three-level stepper's fused tracers in every dtype and storage, and the GPU suite runs the engine itself.
@pytest.mark.slow
def test_engine_fused_tracers_are_the_array_code_bit_for_bit(emulated_cupy):
    """The sphere on the emulated GPU, fused against array-code tracers (the same fluid bits, the
    ladder and coupling kernels): every state array equal after every one of 36 coarse steps, while
    tracers are parked at the sphere's half-way wall and beyond the outlet and the ring wraps twice;
    the fused engine launches exactly the two tracer kernels a step, the other none."""
    fused, ref = sphere_engine(emulated_cupy), sphere_engine(emulated_cupy, fused=False)
    assert fused.shape.stepper.levels == [0, 1] and fused._tracers.solid is not None
    assert not fused._tracers.lookup.periodic[0]  # walled in x: inlet and outlet
    parked = {"solid": 0, "outlet": 0}
    for step in range(36):
        before = np.asarray(ref._tracers.pos).copy()
        alive = np.asarray(ref._tracers.alive).copy()
        count = launches(fused._tracers, fused.dtype) if step else None
        fused.step(1)
        if step:
            assert {k: v - count[k] for k, v in launches(fused._tracers, fused.dtype).items()} == \
                {"amr3d_tracer_begin<float, float>": 1, "amr3d_tracer_finish<float, float>": 1}
        ref.step(1)
        assert_same_bits(fused._tracers, ref._tracers, f"after step {step + 1}")
        for i in np.flatnonzero(alive & ~np.asarray(ref._tracers.alive)):  # parked (and not released again)
            if before[i, 0] > 23.0:
                parked["outlet"] += 1
            else:
                assert np.linalg.norm(before[i] - CENTRE) < 1.25  # within half a level-1 node of the wall
                parked["solid"] += 1
    assert parked["solid"] >= 4 and parked["outlet"] >= 4, parked
    assert int(fused._tracers.step[0]) == 36 and int(fused._tracers.cursor[0]) == 1  # 9 releases, ring of 4
    assert ref._tracers._fused is None  # (the array-code engine never made the kernels)
    # one level-address table per parity of the coarse level's buffer pair, uploaded once each
    assert len(fused._tracers._fused._tables) == 2
    assert "--fmad=false" in tracer_kernels.kernel_spec(fused.dtype, fused.dtype).compile().options
    np.testing.assert_array_equal(np.asarray(fused.state_arrays()["f"]), np.asarray(ref.state_arrays()["f"]))


@pytest.mark.slow
def test_engine_fused_tracers_batch_and_resume_bit_for_bit(emulated_cupy, monkeypatch):
    """step(N) = N × step(1) and a checkpoint resumes bit for bit on the fused path, which never
    runs the array code's velocity (patched to fail)."""
    def forbidden(*a, **k):
        raise AssertionError("the array code ran on the fused path")

    monkeypatch.setattr(tracers, "velocity_from_populations", forbidden)
    one, batched = sphere_engine(emulated_cupy), sphere_engine(emulated_cupy)
    for _ in range(20):
        one.step(1)
    for n in (3, 1, 9):
        batched.step(n)
    ck = batched.checkpoint()
    batched.step(7)
    assert_same_bits(batched._tracers, one._tracers)
    resumed = sphere_engine(emulated_cupy)
    resumed.restore(ck)
    resumed.step(2)
    resumed.step(5)
    for k, v in one.state_arrays().items():
        np.testing.assert_array_equal(np.asarray(resumed.state_arrays()[k]), np.asarray(v), err_msg=k)
    assert int(one._tracers.alive.sum()) > 0


@pytest.mark.parametrize("pos_dtype,storage,mother_leaves", [
    (np.float32, np.float32, False), (np.float64, np.float64, False), (np.float32, np.float64, False),
    (np.float64, np.float32, False), (np.float32, np.float32, True), (np.float64, np.float64, True)])
def test_fused_tracers_on_a_three_level_stepper_every_dtype(emulated_cupy, pos_dtype, storage, mother_leaves):
    """Tracers.begin/finish with the stepper's level buffers (a TreeStepper of three levels holding a
    smooth flow, walled in y, a solid ball) against the array code, for positions and buffers in
    float32 and float64 (the kernels' templates), on leaves of m³ and on mother leaves (the kernels
    find each node through the level buffers' map): the same bits after every step, the ring wrapped,
    tracers parked at the walls and in the ball. The flow is frozen and the step long (dt = 20), so
    the tracers cross the tree."""
    from nagare.engine.amr3d import mothers

    forest = three_levels((True, False, True), at=(12.0, 12.0, 8.0))
    cpl = mothers.coupling(forest, mothers.layout(forest)) if mother_leaves else interface.build(forest)
    st = TreeStepper(emulated_cupy, forest, cpl, 0.6, (0.0, 0.0, 0.0), NumpyKernels(),
                     PhaseTimer(get_backend("numpy")), dtype=storage)
    assert st.mapped is mother_leaves
    st.set_state(flow_state(forest, reference.Physics(0.6, (0.0, 0.0, 0.0)), seed=3).astype(storage),
                 synchronised=False)
    assert st.levels == [0, 1, 2]

    def ball(x):
        return np.linalg.norm(x - np.array([12.0, 12.0, 8.0]), axis=-1) < 1.6

    # two near the walls y = 0 and y = 24 (their tracers leave), one beside the ball (its tracers enter it)
    seeds = [[3.0, 1.0, 5.0], [12.0, 13.9, 8.0], [20.0, 22.5, 3.0], [12.0, 9.5, 8.0], [1.0, 13.0, 15.0]]
    made = [Tracers(emulated_cupy, forest, seeds, capacity=3, release_every=2, solid=ball, dtype=pos_dtype,
                    trail_length=3, trail_every=2, kernels=k) for k in (True, False)]
    parked = {"wall": 0, "ball": 0}
    for step in range(24):
        before, alive = np.asarray(made[1].pos).copy(), np.asarray(made[1].alive).copy()
        for tr in made:
            tr.begin(st.populations, st.level_buffers)
            tr.finish(st.populations, 20.0, st.level_buffers)
        assert_same_bits(*made, f"after step {step + 1}")
        for i in np.flatnonzero(alive & ~np.asarray(made[1].alive)):
            parked["ball" if np.linalg.norm(before[i] - [12.0, 12.0, 8.0]) < 2.0 else "wall"] += 1
    assert made[0]._fused is not None and made[1]._fused is None
    assert sum(launches(made[0], storage).values()) == 48
    assert parked["wall"] >= 4 and parked["ball"] >= 4, parked
    assert int(made[0].cursor[0]) == 0 and int(made[0].step[0]) == 24  # 12 releases, ring of 3


def test_the_array_code_stays_where_the_kernels_do_not_apply(emulated_cupy):
    """NumPy tracers, tracers without the stepper's level buffers (the reference stepper) and
    tracers switched off take the array code; a finish must get the level buffers its begin took."""
    forest = three_levels()
    assert not Tracers(np, forest, [[3.0, 3.0, 3.0]], 2).use_kernels
    tr = Tracers(emulated_cupy, forest, [[3.0, 3.0, 3.0]], 2)
    assert tr.use_kernels
    f = np.zeros((27, forest.n_leaves * forest.m**3), np.float32)
    f[0] = 1.0
    tr.begin(lambda ids: f[:, ids])  # no level buffers: the array code
    tr.finish(lambda ids: f[:, ids], 1.0)
    assert tr._fused is None and int(tr.step[0]) == 1
    st = TreeStepper(emulated_cupy, forest, interface.build(forest), 0.6, (0.0, 0.0, 0.0), NumpyKernels(),
                     PhaseTimer(get_backend("numpy")), dtype=np.float32)
    tr.begin(st.populations, st.level_buffers)
    with pytest.raises(RuntimeError, match="level buffers"):
        tr.finish(st.populations, 1.0)

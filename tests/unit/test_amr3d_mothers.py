"""P0's mother leaves on a tree (mothers.py): each level's leaves stored in their parents as blocks
of (2m−1)³ points, provisional points where a sibling is refined, filled from the finer level.
The per-level ladder on that storage (NumpyKernels: the one-level reference through the mothers'
neighbour table, plus the fix-up) is checked against the reference step (reference.py) in fp64
on trees with two and three levels, mothers with and without provisional points on every level
(level 0's roots grouped 2 × 2 × 2 where they can be), periodic, walled and free-slip sides. The
CUDA kernels on the same storage run on the emulated CuPy (g++) through the engine, and on the GPU
through the registry test (presets fp32-tree2/tree3/tree2-slip)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from nagare.engine.amr3d import mothers, reference, tables
from nagare.engine.amr3d.tree import Forest, refine
from nagare.engine.amr3d.tree_stepper import NumpyKernels, TreeStepper

from tests.unit.test_amr3d_tree_stepper import (
    M,
    assert_gpu_tree_stepper_equals_numpy_kernels,
    flow_state,
    three_levels,
    timer,
)


def _refine_child(f: Forest, level: int, block) -> Forest:
    return refine(f, [int(np.nonzero((f.level == level) & np.all(f.block == block, axis=1))[0][0])])


def nested(periodic=(True, True, True)) -> Forest:
    """2×2×2 roots, root 0 refined, its far child refined again: on a periodic box the balance
    refines every root, so level 1 is mothers with a refined sibling (provisional points)."""
    return _refine_child(refine(Forest.uniform((2, 2, 2), 0, M, 2, periodic=periodic), [0]), 1, (1, 1, 1))


def root_group(periodic=(True, True, True), max_level: int = 1) -> Forest:
    """4×2×2 roots, root 0 refined: level 0's mothers are root groups, one with provisional points."""
    return refine(Forest.uniform((4, 2, 2), 0, M, max_level, periodic=periodic), [0])


def deep_roots(periodic=(False, True, True)) -> Forest:
    """Three levels on 4×2×2 roots: mothers on every level."""
    return _refine_child(root_group(periodic, 2), 1, (1, 1, 1))


CASES = [  # (forest, periodic, interp, accel, free-slip sides)
    (nested, (True, True, True), "quadratic", (0.0, 0.0, 0.0), ()),
    (nested, (False, True, True), "linear", (0.0, 2e-5, 0.0), ()),
    (three_levels, (True, False, True), "linear", (1e-5, 0.0, 0.0), ()),  # level 0: one root per axis → leaves
    (root_group, (True, True, True), "quadratic", (1e-5, 0.0, 0.0), ()),
    (root_group, (False, True, True), "quadratic", (0.0, 0.0, 0.0), ()),
    (deep_roots, (True, False, False), "quadratic", (2e-5, 0.0, 0.0), ("y-", "z+")),
]


def mother_stepper(forest, phys, interp, slip, dtype=np.float64, **kw):
    cpl = mothers.coupling(forest, mothers.layout(forest), interp, slip)
    return TreeStepper(np, forest, cpl, phys.tau0, phys.accel0, NumpyKernels(), timer(), dtype=dtype, **kw), cpl


@pytest.mark.parametrize("forest_fn,periodic,interp,accel,slip", CASES)
def test_mother_leaves_on_a_tree_step_like_the_reference(forest_fn, periodic, interp, accel, slip):
    forest = forest_fn(periodic)
    phys = reference.Physics(0.57, accel)
    f0 = flow_state(forest, phys)
    ref = reference.Stepper(np, forest, phys, f0.copy(), tables.build(forest, interp, slip=slip))
    st, cpl = mother_stepper(forest, phys, interp, slip)
    assert any(c.leaf_map is not None for c in cpl.values())
    st.set_state(f0.copy(), synchronised=False)
    np.testing.assert_allclose(st.state(), ref.f, rtol=0, atol=1e-15)
    for _ in range(3):
        ref.step(2)
        st.advance(2)
        # round-off only (the same tolerance as the per-level ladder on leaves of m³)
        np.testing.assert_allclose(st.state(), ref.f, rtol=0, atol=2e-14)
    assert np.abs(st.state() - f0).max() > 1e-4  # it moved


def test_the_provisional_fill_is_what_keeps_it_exact():
    """Without the fine values written into the provisional points, the points next to a refined
    sibling read stale provisional values: the same run then leaves the reference."""
    forest = nested()
    phys = reference.Physics(0.57, (0.0, 0.0, 0.0))
    f0 = flow_state(forest, phys)
    ref = reference.Stepper(np, forest, phys, f0.copy(), tables.build(forest))
    st, cpl = mother_stepper(forest, phys, "quadratic", ())
    c = cpl[1]
    assert c.n_prov > 0 and c.n_fix == 0  # every read on level 1 served by the mother blocks
    st.set_state(f0.copy(), synchronised=False)
    keep = c.restrict_dst.size - c.n_prov
    dev = st.kernels.dev[1]
    dev["restrict_dst"], dev["restrict_src"] = dev["restrict_dst"][:keep], dev["restrict_src"][:keep]
    c.n_prov = 0
    for _ in range(2):
        ref.step(2)
        st.advance(2)
    assert np.abs(st.state() - ref.f).max() > 1e-6


@pytest.mark.parametrize("forest_fn", [nested, root_group, deep_roots])
def test_the_mother_storage_converts_losslessly(forest_fn):
    """A synchronised state into mother leaves and back: the same bits (siblings' shared nodes are
    one point of the mother, equal in every synchronised state)."""
    forest = forest_fn()
    phys = reference.Physics(0.57, (0.0, 0.0, 0.0))
    ref = reference.Stepper(np, forest, phys, flow_state(forest, phys), tables.build(forest))
    ref.step(1)
    st, _ = mother_stepper(forest, phys, "quadratic", ())
    st.set_state(ref.f.copy(), synchronised=True)
    np.testing.assert_array_equal(st.state(), ref.f)
    for lv in forest.levels:
        assert np.isfinite(st.bufs[lv][0]).all()  # the provisional points are filled too


def test_p0_benchmark_box_as_a_tree_has_p0s_point_counts():
    """512 leaves of 17³ on one level (P0's Table 2) are 64 mother leaves of 33³ (Table 3):
    2,515,456 → 2,299,968 points, 787,456 → 393,344 shell points."""
    forest = Forest.uniform((4, 4, 4), 1, 17, 1, periodic=(True, True, True))
    lay = mothers.layout(forest)
    n = mothers.point_counts(forest, lay)
    assert (n["leaf_points"], n["leaf_shell"]) == (2_515_456, 787_456)
    assert (n["mother_points"], n["mother_shell"], n["provisional"]) == (2_299_968, 393_344, 0)
    assert lay[1].n == 64 and 0 not in lay


def test_level_zero_groups_roots_only_when_even():
    assert 0 not in mothers.layout(three_levels((True, True, True)))  # 1 × 1 × 4 roots
    assert "roots [3, 2, 2]" in mothers.level_zero_reason(refine(Forest.uniform((3, 2, 2), 0, M, 1), [0]))
    lay = mothers.layout(root_group())
    assert lay[0].n == 2 and int((~lay[0].real()).sum()) == (M - 1) ** 3  # root 0's inside, less its shared faces


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")
@pytest.mark.parametrize("name", ["fp32-tree3-m9", pytest.param("fp32-sphere-m9", marks=pytest.mark.slow)])
def test_engine_runs_the_cuda_rungs_on_mother_leaves_of_a_tree(emulated_cupy, name):
    """The engine on the emulated CuPy, on the registry's three-level tree (level 0's roots grouped,
    walls normal to y) and its sphere flow (MRT + Smagorinsky, inlet, outflow, interpolated
    bounce-back): mother-leaf, templates and sorted run P0's CUDA kernels on mother leaves,
    switched live from and to leaves of m³, and follow the reference (the registry's tolerance)."""
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import Backend
    from nagare.engine.families import create_engine

    p = AMR3D.equivalence_presets()[name]

    def make():
        e = create_engine(p, Backend("cupy", emulated_cupy, _cupy=emulated_cupy))
        e.random_state(np.random.default_rng(3))
        return e

    a, ref = make(), make()
    ref.set_variant(kernels="reference")
    for rung, mapped in (("mother-leaf", True), ("templates", True), ("naive", False), ("sorted", True)):
        a.set_variant(kernels=rung)
        assert a.shape.stepper.mapped is mapped
        a.step(2)
        ref.step(2)
        np.testing.assert_allclose(a.state_arrays()["f"], ref.state_arrays()["f"], rtol=2e-5, atol=2e-6, err_msg=rung)
    # P0 counts the stored points: the mothers' (provisional ones included) on their sub-steps
    assert a.updates_per_step != make().updates_per_step


def test_only_the_csm_refuses_mother_leaves_in_one_line():
    from nagare.engine.amr3d import variants
    from nagare.engine.amr3d.engine import AMR3D

    P = AMR3D.equivalence_presets()
    reason = variants.tree_mothers_reason(P["fp32-tree2-csm-m9"])
    assert reason is not None and "csm" in reason and "\n" not in reason
    for name in ("fp32-sphere-m9", "fp32-tree2-slip-m9", "fp32-tree3-m9"):
        assert variants.tree_mothers_reason(P[name]) is None


@pytest.mark.gpu
@pytest.mark.parametrize("rung,graph", [("split", False), ("templates", False), ("sorted", True)])
@pytest.mark.parametrize("forest_fn", [nested, deep_roots])
def test_gpu_rungs_on_mother_leaves_follow_the_array_code(forest_fn, rung, graph):
    """The CUDA kernels (CupyKernels) on a tree's mother leaves against NumpyKernels on the same
    storage in fp32: 3 × 2 coarse steps, the registry's fp32 tolerance."""
    walled = forest_fn is deep_roots  # x periodic, y and z walled, free slip on y− and z+
    forest = forest_fn((True, False, False)) if walled else forest_fn()
    slip = ("y-", "z+") if walled else ()
    phys = reference.Physics(0.57, (1e-5, 0.0, -1e-5))
    assert_gpu_tree_stepper_equals_numpy_kernels(forest, phys, rung, graph,
                                                 coupling=mothers.coupling(forest, mothers.layout(forest),
                                                                           "quadratic", slip))


def test_random_balanced_trees_on_mother_leaves_step_like_the_reference():
    """Random refine sequences on random root grids, periodicity and free-slip sides (every tree
    2:1 balanced by tree.refine): the mother storage follows the reference to round-off on each."""
    rng = np.random.default_rng(20261126)
    sides = ("x-", "x+", "y-", "y+", "z-", "z+")
    for _ in range(8):
        roots = tuple(int(r) for r in rng.integers(1, 4, 3))
        periodic = tuple(bool(b) for b in rng.integers(0, 2, 3))
        forest = Forest.uniform(roots, 0, M, 2, periodic=periodic)
        for _ in range(int(rng.integers(1, 4))):
            open_ = np.flatnonzero(forest.level < forest.max_level)
            forest = refine(forest, rng.choice(open_, size=min(len(open_), int(rng.integers(1, 3))), replace=False))
        slip = tuple(s for i, s in enumerate(sides) if not periodic[i // 2] and rng.random() < 0.5)
        phys = reference.Physics(0.57, tuple(float(a) for a in rng.choice([0.0, 1e-5, -2e-5], 3)))
        interp = str(rng.choice(["linear", "quadratic"]))
        f0 = flow_state(forest, phys)
        ref = reference.Stepper(np, forest, phys, f0.copy(), tables.build(forest, interp, slip=slip))
        st, _ = mother_stepper(forest, phys, interp, slip)
        st.set_state(f0.copy(), synchronised=False)
        ref.step(2)
        st.advance(2)
        np.testing.assert_allclose(st.state(), ref.f, rtol=0, atol=2e-14,
                                   err_msg=f"roots {roots}, periodic {periodic}, slip {slip}, levels {forest.levels}")


@pytest.mark.slow  # the emulated kernels over a regridding tree: a minute and a half of CPU
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")
def test_an_adaptive_tree_regrids_on_mother_leaves(emulated_cupy):
    """The regrid criterion reads the leaves' points out of the mother storage (not the mothers'
    blocks), so an adaptive tree on mother leaves refines and coarsens as on leaves of m³."""
    from nagare.engine.backend import Backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    p = load_preset("amr3d-vortex-adapt", ["grid.leaves=[4, 4, 1]", "grid.m=9", "initial.center=[14.0, 16.0, 4.0]",
                                           "variants.kernels=naive"])
    a, b = (create_engine(p, Backend("cupy", emulated_cupy, _cupy=emulated_cupy)) for _ in range(2))
    a.set_variant(kernels="mother-leaf")
    assert a.shape.stepper.mapped
    a.step(2)
    b.step(2)
    np.testing.assert_allclose(a.regrid_criterion(), b.regrid_criterion(), rtol=1e-4, atol=1e-7)
    a.regrid()
    b.regrid()
    np.testing.assert_array_equal(a.forest.level, b.forest.level)
    assert a.shape.stepper.mapped  # rebuilt on the new tree, still on mother leaves
    a.step(2)
    b.step(2)
    np.testing.assert_allclose(a.state_arrays()["f"], b.state_arrays()["f"], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("nlev,interp,wall", [(2, "quadratic", "halfway"), (3, "linear", "interpolated"),
                                               (3, "quadratic", "interpolated")])
def test_a_flow_on_mother_leaves_steps_like_the_reference(nlev, interp, wall):
    """A sphere on the finest level, a velocity inlet and an outflow (tests/unit/test_amr3d_flows.py's
    trees), the boundary lists and the interpolated bounce-back links moved into mother storage
    (mothers.boundaries): the state and the momentum-exchange force follow the reference in fp64."""
    from tests.unit.test_amr3d_flows import sphere_flow

    forest, bnd, tau0, ref = sphere_flow(nlev, interp, wall)
    lay = mothers.layout(forest)
    cpl = mothers.coupling(forest, lay, interp, (), bnd.solid, bnd.near(), bnd.links())
    st = TreeStepper(np, forest, cpl, tau0, (0.0, 0.0, 0.0), NumpyKernels(), timer(), dtype=np.float64,
                     bnd=mothers.boundaries(bnd, lay))
    assert st.mapped
    st.set_state(ref.f.copy())
    for _ in range(3):
        ref.step(2)
        st.advance(2)
        np.testing.assert_allclose(st.state(), ref.f, rtol=0, atol=2e-14)
    np.testing.assert_allclose(st.body_force(), ref.body_force(), rtol=1e-12, atol=1e-15)
    assert np.abs(ref.body_force()[0]) > 1e-3


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")
def test_a_checkpoint_on_mother_leaves_resumes_bit_for_bit(emulated_cupy):
    """A checkpoint holds the leaves' points; the provisional points are refilled from the finer
    level on restore exactly as the step fills them, so 2 + checkpoint + restore + 2 steps give the
    bits of 4 straight steps (the emulated CUDA kernels, the registry's three-level tree)."""
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import Backend
    from nagare.engine.families import create_engine

    p = AMR3D.equivalence_presets()["fp32-tree3-m9"]

    def make():
        e = create_engine(p, Backend("cupy", emulated_cupy, _cupy=emulated_cupy))
        e.random_state(np.random.default_rng(5))
        e.set_variant(kernels="mother-leaf")
        return e

    a, b = make(), make()
    a.step(4)
    b.step(2)
    ckpt = b.checkpoint()
    c = make()
    c.restore(ckpt)
    assert c.shape.stepper.mapped
    c.step(2)
    np.testing.assert_array_equal(c.state_arrays()["f"], a.state_arrays()["f"])

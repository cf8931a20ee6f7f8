"""The GPU's way of stepping a tree — P0's ladder on per-level leaf grids, joined by interface
buffers and a fix-up of the interface points (tree_stepper.py, interface.py) — written with array
code (NumpyKernels) and checked against the reference step (reference.py) in fp64 on trees with
two and three levels, periodic and walled, both interpolation stencils, with a body force.
The CUDA kernels of the same orchestration are checked against the reference on the GPU by the
registry test (tests/equivalence/test_registry.py, presets fp32-tree2/tree3)."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.amr3d import interface, reference, tables
from nagare.engine.amr3d.tree import Forest, refine
from nagare.engine.amr3d.tree_stepper import NumpyKernels, TreeStepper
from nagare.engine.backend import get_backend
from nagare.engine.timing import PhaseTimer

M = 9


def two_levels(periodic=(True, True, True)) -> Forest:
    return refine(Forest.uniform((3, 2, 2), 0, M, 1, periodic=periodic), [0])


def three_levels(periodic=(True, True, True)) -> Forest:
    """1×1×4 roots: root 1 refined, then its child next to root 2, which balance spreads."""
    f = refine(Forest.uniform((1, 1, 4), 0, M, 2, periodic=periodic), [1])
    child = int(np.nonzero((f.level == 1) & np.all(f.block == (0, 0, 3), axis=1))[0][0])
    return refine(f, [child])


def flow_state(forest: Forest, phys: reference.Physics, seed: int = 0):
    """A smooth flow (periodic modes of the domain) with its Chapman–Enskog non-equilibrium part."""
    rng = np.random.default_rng(seed)
    X = reference.point_coordinates(forest)
    L = forest.domain / float(1 << forest.max_level)
    u = np.zeros((3, forest.n_leaves, M, M, M))
    grad = np.zeros((forest.n_leaves, M, M, M, 3, 3))
    for c in range(3):
        k = 2 * np.pi * rng.integers(1, 3, size=3) / L
        ph = rng.uniform(0, 2 * np.pi)
        arg = X @ k + ph
        u[c] = 0.02 * np.sin(arg)
        grad[..., :, c] = 0.02 * np.cos(arg)[..., None] * k
    rho = 1 + 0.01 * np.cos(X @ (2 * np.pi / L) + 0.3)
    return reference.init_state(np, forest, phys, rho, u, grad)


def assert_gpu_tree_stepper_equals_numpy_kernels(forest: Forest, phys: reference.Physics, rung: str,
                                                 graph: bool = False, coupling=None, **stepper_kw) -> None:
    """TreeStepper with the CUDA kernels (CupyKernels ``rung``) against the NumpyKernels
    orchestration in fp32: 3 × 2 coarse steps from flow_state, within the registry's fp32 tolerance.
    ``stepper_kw`` (collision=…, bnd=…) go to both; the interface tables follow ``bnd``'s free-slip
    sides; ``coupling``: another storage's (mothers.coupling), else interface.build's. On a stream of
    its own, made current: CUDA graphs (``graph``) cannot capture the legacy default stream, and the
    ladder launches on the current stream."""
    cp = pytest.importorskip("cupy")
    from nagare.engine.amr3d.tree_stepper import CupyKernels

    bnd = stepper_kw.get("bnd")
    cpl = coupling if coupling is not None else interface.build(forest, slip=bnd.slip if bnd is not None else ())
    f0 = flow_state(forest, phys).astype(np.float32)
    host = TreeStepper(np, forest, cpl, phys.tau0, phys.accel0, NumpyKernels(), PhaseTimer(get_backend("numpy")),
                       dtype=np.float32, **stepper_kw)
    stream = cp.cuda.Stream(non_blocking=False)
    with stream:
        dev = TreeStepper(cp, forest, cpl, phys.tau0, phys.accel0, CupyKernels(rung, stream),
                          PhaseTimer(get_backend("numpy")), dtype=np.float32, **stepper_kw)  # (host-timed)
        host.set_state(f0.copy(), synchronised=False)
        dev.set_state(f0.copy(), synchronised=False)
        for _ in range(3):
            host.advance(2)
            dev.advance(2, graph=graph)
            stream.synchronize()
            np.testing.assert_allclose(cp.asnumpy(dev.state()), host.state(), rtol=2e-5, atol=2e-6)


def timer():
    return PhaseTimer(get_backend("numpy"))


@pytest.mark.parametrize("forest_fn,periodic,interp,accel", [
    (two_levels, (True, True, True), "quadratic", (0.0, 0.0, 0.0)),
    (two_levels, (True, False, True), "linear", (1e-5, 0.0, -2e-5)),
    (three_levels, (True, True, True), "quadratic", (0.0, 2e-5, 0.0)),
    (three_levels, (False, True, True), "linear", (0.0, 0.0, 0.0)),
])
def test_per_level_ladder_with_fixup_equals_the_reference(forest_fn, periodic, interp, accel):
    forest = forest_fn(periodic)
    phys = reference.Physics(0.57, accel)
    f0 = flow_state(forest, phys)
    ref = reference.Stepper(np, forest, phys, f0.copy(), tables.build(forest, interp))
    st = TreeStepper(np, forest, interface.build(forest, interp), phys.tau0, phys.accel0, NumpyKernels(), timer(),
                     dtype=np.float64)
    st.set_state(f0.copy(), synchronised=False)
    # the same synchronised start (the reference also equalises same-level copies, which this
    # smooth state has equal up to the round-off of sin at x = 0 and x = L)
    np.testing.assert_allclose(st.state(), ref.f, rtol=0, atol=1e-15)
    for _ in range(3):
        ref.step(2)
        st.advance(2)
        # round-off only: the two collide in a different operation order (leafgrid vs d3q27)
        np.testing.assert_allclose(st.state(), ref.f, rtol=0, atol=2e-14)
    assert np.abs(st.state() - f0).max() > 1e-4  # it moved


@pytest.mark.parametrize("forest_fn,periodic", [(two_levels, (True, True, True)), (three_levels, (True, False, True))])
def test_interface_restriction_covers_every_fine_owned_node(forest_fn, periodic):
    """The restriction pairs found among the interface points are all of the reference's."""
    forest = forest_fn(periodic)
    full = tables.build(forest)
    cpl = interface.build(forest)
    m3 = M**3
    for lv in forest.levels:
        lt, c = full.level[lv], cpl[lv]
        want = set(zip((lt.restrict_dst - lt.lo * m3).tolist(), lt.restrict_src.tolist()))
        fine_lo = forest.level_slice(lv + 1).start * m3 if lv + 1 in forest.levels else 0
        got = set(zip(c.restrict_dst.tolist(), (c.restrict_src + fine_lo).tolist()))
        assert got == want, f"level {lv}"


def test_interface_points_are_exactly_those_with_a_source_off_the_level():
    """A shell point is an interface point iff one of its sources is finer, coarser or a wall."""
    forest = three_levels((True, False, True))
    full = tables.build(forest)
    cpl = interface.build(forest)
    m3 = M**3
    for lv in forest.levels:
        lt, c = full.level[lv], cpl[lv]
        N = forest.n_leaves * m3
        off = set()
        for dst in (lt.fine_dst, lt.coarse_dst):
            off |= set((dst % (lt.n * m3)).tolist())
        q_dst, p_dst = np.divmod(lt.direct_dst, lt.n * m3)
        q_src, p_src = np.divmod(lt.direct_src, N)
        wall = q_src != q_dst
        off |= set(p_dst[wall].tolist())
        # fix-up points ⊇ points with an off-level source (the rest may have same-level sources the
        # ladder reads through another copy of the node, which is exact too)
        assert off <= set(c.fix_pts.tolist()), f"level {lv}"
        assert len(off) > 0


def test_timing_phases_count_one_step_per_coarse_step():
    forest = three_levels()
    phys = reference.Physics(0.57)
    t = timer()
    st = TreeStepper(np, forest, interface.build(forest), phys.tau0, phys.accel0, NumpyKernels(), t, dtype=np.float64)
    st.set_state(flow_state(forest, phys), synchronised=False)
    st.advance(3)
    samples = t.collect(wait=True)
    per = {}
    for s in samples:
        per[s.phase] = per.get(s.phase, 0) + s.steps
    assert per == {"step": 3, "coupling": 3}


def test_graph_batches_are_powers_of_two_at_most_graph_steps():
    """A batch of n steps replays graphs of 1, 2, 4, 8 or 16 steps (so a stepper holds at most five
    lengths, each for both buffer roles), the largest first, summing to n."""
    from nagare.engine.amr3d.gpu import GRAPH_STEPS, graph_batch

    for n in range(1, 80):
        parts, left = [], n
        while left:
            parts.append(graph_batch(left))
            left -= parts[-1]
        assert sum(parts) == n and parts == sorted(parts, reverse=True)
        assert set(parts) <= {1, 2, 4, 8, GRAPH_STEPS} and parts.count(1) <= 1

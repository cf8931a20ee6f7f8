"""amr3d octree on the host: 2:1 balance (face, edge, corner), exact tiling, symmetric neighbour
tables and node tables after random refine/coarsen sequences (hypothesis), and the state
transfer's conservation claims (docs/amr3d.md §"State transfer")."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nagare.engine.amr3d import reference, transfer
from nagare.engine.amr3d.tree import OFFSETS, SELF_SLOT, Forest, coarsen, is_balanced, refine, slot

M = 9
MAX_LEVEL = 3


# ---- independent brute-force checks (no use of the tree's own lookup) ---------------------------
def boxes(forest: Forest):
    return forest.origin, forest.origin + forest.extent[:, None]


def touching_pairs(forest: Forest):
    """All (i, j), i < j, whose closed boxes intersect, periodic axes wrapped."""
    lo, hi = boxes(forest)
    D = forest.domain
    touch = np.ones((forest.n_leaves, forest.n_leaves), bool)
    for d in range(3):
        a0, a1 = lo[:, None, d], hi[:, None, d]
        b0, b1 = lo[None, :, d], hi[None, :, d]
        ax = (a0 <= b1) & (b0 <= a1)
        if forest.periodic[d]:
            ax |= (a0 <= b1 + D[d]) & (b0 + D[d] <= a1)
            ax |= (a0 + D[d] <= b1) & (b0 <= a1 + D[d])
        touch &= ax
    i, j = np.nonzero(np.triu(touch, 1))
    return i, j


def assert_tiles_once(forest: Forest):
    n = forest.blocks_per_axis(forest.max_level)
    count = np.zeros((n[2], n[1], n[0]), np.int64)
    for lv, b in zip(forest.level, forest.block):
        s = 1 << (forest.max_level - int(lv))
        x0, y0, z0 = (int(v) * s for v in b)
        count[z0:z0 + s, y0:y0 + s, x0:x0 + s] += 1
    np.testing.assert_array_equal(count, 1)


def assert_balanced_brute(forest: Forest):
    i, j = touching_pairs(forest)
    diff = np.abs(forest.level[i] - forest.level[j])
    assert diff.size == 0 or diff.max() <= 1, "2:1 balance violated between touching leaves"


def assert_neighbours_symmetric(forest: Forest):
    nb, nodes = forest.neighbours, forest.nodes
    for a in range(forest.n_leaves):
        assert nb.leaf[a, SELF_SLOT] == a and nb.dlevel[a, SELF_SLOT] == 0
        for s in range(27):
            if s == SELF_SLOT:
                continue
            d = OFFSETS[s]
            back = slot(*(-d))
            if nb.outside[a, s]:
                assert nb.node[a, s] == -1
                continue
            dl = nb.dlevel[a, s]
            if dl == 0:
                b = nb.leaf[a, s]
                assert nb.leaf[b, back] == a and nb.dlevel[b, back] == 0
            elif dl == -1:
                b = nb.leaf[a, s]
                assert forest.level[b] == forest.level[a] - 1
                parent = nodes.parent[nodes.leaf_node[a]]
                # seen from b, a's parent lies across the contact's own kind: the axes where a sits on
                # its parent's side facing d (a leaf on the face interior of b is b's face neighbour)
                c = forest.block[a] & 1
                facing = ((d == 1) & (c == 1)) | ((d == -1) & (c == 0))
                back_c = slot(*np.where(facing, -d, 0))
                assert nb.dlevel[b, back_c] == 1 and nb.node[b, back_c] == parent
                np.testing.assert_array_equal(nb.part[a, s], (forest.block[a] + d) & 1)
            else:
                node = nb.node[a, s]
                assert node >= 0 and nodes.leaf[node] == -1 and nodes.level[node] == forest.level[a]
                kids = nodes.leaf[nodes.children[node]]
                facing = [k for k, c in zip(kids, np.array([(x, y, z) for z in (0, 1) for y in (0, 1)
                                                            for x in (0, 1)]))
                          if np.all((d == 0) | ((d == 1) & (c == 0)) | ((d == -1) & (c == 1)))]
                assert facing and all(k >= 0 for k in facing), "finer neighbour must be leaves (balance)"
                for k in facing:
                    assert nb.leaf[k, back] == a and nb.dlevel[k, back] == -1


def assert_nodes_consistent(forest: Forest):
    nodes = forest.nodes
    for n_id in range(len(nodes.level)):
        p = nodes.parent[n_id]
        if nodes.level[n_id] == 0:
            assert p == -1
        else:
            assert n_id in nodes.children[p]
        if nodes.leaf[n_id] >= 0:
            assert np.all(nodes.children[n_id] == -1)
        else:
            assert np.all(nodes.children[n_id] >= 0)
    np.testing.assert_array_equal(nodes.leaf[nodes.leaf_node], np.arange(forest.n_leaves))


ops = st.lists(st.tuples(st.sampled_from(["refine", "coarsen"]), st.floats(0, 0.999)), min_size=1, max_size=7)
roots_st = st.sampled_from([(1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 1)])
periodic_st = st.tuples(st.booleans(), st.booleans(), st.booleans())


def apply_ops(forest, seq):
    for op, x in seq:
        leaf = int(x * forest.n_leaves)
        if op == "refine":
            if forest.level[leaf] < forest.max_level:
                forest = refine(forest, [leaf])
        else:
            forest = coarsen(forest, [leaf])
    return forest


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(roots=roots_st, periodic=periodic_st, seq=ops)
def test_random_refine_coarsen_keeps_invariants(roots, periodic, seq):
    forest = apply_ops(Forest.uniform(roots, 0, M, MAX_LEVEL, periodic), seq)
    assert is_balanced(forest)
    assert_tiles_once(forest)
    assert_balanced_brute(forest)
    assert_neighbours_symmetric(forest)
    assert_nodes_consistent(forest)
    # leaves of one level are one contiguous slice
    for lv in forest.levels:
        sl = forest.level_slice(lv)
        assert np.all(forest.level[sl] == lv)


def test_balance_reaches_edges_and_corners():
    """A level-3 leaf in a corner forces refinement of leaves that touch it only by an edge or a
    corner (a face-only balance would leave them)."""
    f = Forest.uniform((2, 2, 2), 0, M, MAX_LEVEL)
    f = refine(f, [0])
    f = refine(f, [int(np.nonzero((f.level == 1) & np.all(f.block == 1, axis=1))[0][0])])
    f = refine(f, [int(np.nonzero((f.level == 2) & np.all(f.block == 3, axis=1))[0][0])])
    assert_balanced_brute(f)
    # the root diagonally opposite across the (1,1,1) corner of root 0 is touched only by a corner
    corner_root = f.cover(0, np.array([[1, 1, 1]]))[1][0]
    assert corner_root == -1, "the corner-only neighbour root must have been refined"
    nb = f.neighbours
    kinds = {int(np.abs(OFFSETS[s]).sum()) for a in range(f.n_leaves) for s in range(27) if nb.dlevel[a, s] != 0}
    assert kinds == {1, 2, 3}  # level jumps across faces, edges and corners


def test_coarsen_refuses_unbalancing_and_non_families():
    closed = (False, False, False)
    f = refine(Forest.uniform((2, 1, 1), 0, M, MAX_LEVEL, closed), [0, 1])  # both roots → level 1

    def at(forest, lv, blk):
        return int(np.nonzero((forest.level == lv) & np.all(forest.block == blk, axis=1))[0][0])

    f2 = refine(f, [at(f, 1, (1, 0, 0))])  # root 0's child next to root 1 → level 2
    assert is_balanced(f2) and f2.levels == [1, 2]
    # merging root 1's family would put level 0 against level 2: refused
    assert coarsen(f2, [at(f2, 1, (2, 0, 0))]).n_leaves == f2.n_leaves
    # root 0's children are not all leaves: refused
    assert coarsen(f2, [at(f2, 1, (0, 0, 0))]).n_leaves == f2.n_leaves
    # the level-2 family merges and gives back f
    back = coarsen(f2, [at(f2, 2, (2, 0, 0))])
    np.testing.assert_array_equal(back.level, f.level)
    np.testing.assert_array_equal(back.block, f.block)


def test_refine_beyond_max_level_is_refused():
    f = Forest.uniform((1, 1, 1), 1, M, 1)
    with pytest.raises(ValueError, match="max_level"):
        refine(f, [0])


def test_m_must_be_power_of_two_plus_one():
    with pytest.raises(ValueError, match="2\\^n \\+ 1"):
        Forest.uniform((1, 1, 1), 0, 10, 0)


# ---- state transfer -------------------------------------------------------------------------------
def smooth_state(forest: Forest, tau0=0.7):
    X = reference.point_coordinates(forest)
    D = forest.domain / float(1 << forest.max_level)
    k = 2 * np.pi / D
    rho = 1 + 0.01 * np.sin(k[0] * X[..., 0] + 0.3) * np.cos(k[2] * X[..., 2])
    u = np.stack([0.03 * np.sin(k[2] * X[..., 2]), 0.02 * np.cos(k[0] * X[..., 0]), 0.01 * np.sin(k[1] * X[..., 1])])
    grad = np.zeros(X.shape[:-1] + (3, 3))
    grad[..., 2, 0] = 0.03 * k[2] * np.cos(k[2] * X[..., 2])
    return reference.init_state(np, forest, reference.Physics(tau0), rho, u, grad)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(roots=roots_st, seq=ops, pick=st.floats(0, 0.999))
def test_prolongation_conserves_mass_and_restriction_undoes_it(roots, seq, pick):
    periodic = (True, True, True)
    old = apply_ops(Forest.uniform(roots, 0, M, 2, periodic), [(o, x) for o, x in seq])
    leaf = int(pick * old.n_leaves)
    if old.level[leaf] >= old.max_level:
        return
    new = refine(old, [leaf])
    f_old = smooth_state(old)
    f_new = transfer.transfer(old, new, f_old, 0.7)
    # exact up to round-off: the trapezoidal rule integrates the trilinear prolongation exactly
    np.testing.assert_allclose(reference.mass(np, new, f_new), reference.mass(np, old, f_old), rtol=1e-13)
    # injection at coincident nodes + the inverse rescaling gives the old state back
    back = transfer.transfer(new, old, f_new, 0.7)
    np.testing.assert_allclose(back, f_old, rtol=0, atol=1e-14)


def test_transfer_rescales_non_equilibrium_part():
    """Refining a leaf carries the non-equilibrium part over with α = 2^(s−t)(τ_t − 1)/(τ_s − 1):
    the prolonged state equals init_state on the new tree (which builds f^neq per level)."""
    old = Forest.uniform((1, 1, 2), 0, M, 1)
    new = refine(old, [0])

    def state(forest):
        # uniform u with a prescribed constant gradient in f^neq: interpolation is exact, so any
        # difference is the level rescaling
        shape = (forest.n_leaves, M, M, M)
        u = np.zeros((3,) + shape)
        u[0] = 0.02
        grad = np.zeros(shape + (3, 3))
        grad[..., 2, 0] = 0.001
        return reference.init_state(np, forest, reference.Physics(0.7), np.ones(shape), u, grad)

    f_new = transfer.transfer(old, new, state(old), 0.7)
    np.testing.assert_allclose(f_new, state(new), rtol=0, atol=2e-16)
    assert np.abs(state(new) - state(old)[:, :1]).max() > 1e-6  # the rescaling did something


@pytest.mark.parametrize("periodic", [(False, True, True), (True, True, True), (False, False, False)])
def test_containing_is_the_lowest_leaf_whose_closed_box_holds_the_point(periodic):
    """Forest.containing against its definition, leaf by leaf: for points inside blocks, on faces,
    edges and corners (of every level's blocks), on the domain's sides and beyond a walled one, the
    lowest-numbered leaf of the level whose closed box contains the point (periodic axes wrap)."""
    f = Forest.uniform((3, 2, 2), level=1, m=5, max_level=3, periodic=periodic)
    f = refine(f, np.arange(0, f.n_leaves, 4))
    f = refine(f, np.flatnonzero(f.level == 2)[::3])
    rng = np.random.default_rng(8)
    D = f.domain
    pts = rng.integers(-2, D + 3, (3000, 3))
    for lv, every in ((1, 2), (2, 3), (3, 5)):  # snapped to block corners, faces and edges
        size = int(f.block_size(lv))
        pts[::every] -= pts[::every] % size
        pts[1::every * 2, 0] += rng.integers(1, size, pts[1::every * 2].shape[0])  # off the x faces
    pts[:6] = [[0, 0, 0], D, [D[0], 0, 0], [0, D[1], 5], [-4, 3, 3], [D[0] + 4, 3, 3]]
    size_of = {lv: int(f.block_size(lv)) for lv in f.levels}
    for lv in f.levels:
        got = f.containing(lv, pts)
        want = np.full(len(pts), -1, np.int64)
        for leaf in np.flatnonzero(f.level == lv)[::-1]:  # descending: the lowest hit is written last
            off = pts - f.origin[leaf]
            inside = np.ones(len(pts), bool)
            for d in range(3):
                o = off[:, d] % D[d] if periodic[d] else off[:, d]
                inside &= (o >= 0) & (o <= size_of[lv])
            want[inside] = leaf
        np.testing.assert_array_equal(got, want, err_msg=f"level {lv}")
        assert (want >= 0).sum() > 100  # the points do hit leaves of the level

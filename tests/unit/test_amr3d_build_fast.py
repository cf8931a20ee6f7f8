"""The host build of the octree's coupling tables without sorting where it need not (a dense block
lookup in the tree, mark arrays for bounded point ids, hashed row uniqueness for the interpolation
stencils): the same tables as the sorting versions (an 18.6 s build of amr3d-sphere-re20's tree
became 5.0 s on one core; docs/amr3d-flows.md)."""
from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
from nagare.engine.amr3d import distinct_rows, interface, tables
from nagare.engine.amr3d.tree import Forest, refine


def _rows_equivalent(key, first, inv):
    np.testing.assert_array_equal(key[first][inv], key)  # every row is its group's first
    assert len(np.unique(key[first], axis=0)) == len(first)  # the groups are distinct rows


@pytest.mark.parametrize("cols", [1, 6, 54])
def test_unique_rows_groups_exactly_the_equal_rows(cols):
    rng = np.random.default_rng(cols)
    key = rng.integers(-3, 3, (5000, cols)).astype(np.int64)
    key[::7] = key[3]  # many repeats of one row
    first, inv = distinct_rows.unique_rows(key)
    _rows_equivalent(key, first, inv)
    want_rows, want_inv = np.unique(key, axis=0, return_inverse=True)
    # the same order as np.unique: the GPU's interpolated buffer follows it (coalesced gathers)
    np.testing.assert_array_equal(key[first], want_rows)
    np.testing.assert_array_equal(inv, want_inv.reshape(-1))


def test_unique_rows_falls_back_on_a_hash_collision(monkeypatch):
    ones = types.SimpleNamespace(integers=lambda lo, hi, n, dtype: np.ones(n, dtype))
    monkeypatch.setattr(distinct_rows.np.random, "default_rng", lambda seed: ones)
    key = np.array([[1, 0], [0, 1], [1, 0]], np.int64)  # equal hashes (row sums) with all multipliers 1
    first, inv = distinct_rows.unique_rows(key)
    _rows_equivalent(key, first, inv)
    assert len(first) == 2


@pytest.mark.parametrize("span", [50, 10 ** 9])
def test_uniq_equals_numpy_unique(span):
    ids = np.random.default_rng(span).integers(0, span, (3000, 27))
    u, inv = tables._uniq(ids)
    want_u, want_inv = np.unique(ids, return_inverse=True)
    np.testing.assert_array_equal(u, want_u)
    np.testing.assert_array_equal(inv, want_inv.reshape(ids.shape))


def test_dense_block_lookup_equals_the_sorted_search(monkeypatch):
    f = Forest.uniform((3, 2, 2), level=1, m=9, max_level=3, periodic=(False, True, True))
    f = refine(f, np.arange(0, f.n_leaves, 5))
    rng = np.random.default_rng(3)
    pts = rng.integers(0, f.domain, (4000, 3))
    pts[::3] -= pts[::3] % int(f.block_size(2))  # many points on block faces and corners
    dense = {lv: f.containing(lv, pts) for lv in f.levels}
    monkeypatch.setattr(Forest, "_DENSE_LIMIT", 0)  # the searchsorted path
    g = Forest(f.roots, f.m, f.max_level, f.periodic, f.level, f.block)
    for lv in f.levels:
        np.testing.assert_array_equal(g.containing(lv, pts), dense[lv])
        assert (dense[lv] >= 0).any()


def test_point_tables_do_not_depend_on_the_chunking(monkeypatch):
    """The interface points classified in parallel chunks give the tables of one pass."""

    forest = refine(refine(Forest.uniform((2, 2, 1), 0, 9, 2), [0]), [3])
    for lv in forest.levels:
        leaves, ijk = interface.fixup_points(forest, lv)
        monkeypatch.setattr(tables, "POINTS_PER_TASK", 10 ** 9)
        one = tables.point_tables(forest, lv, leaves, ijk)
        monkeypatch.setattr(tables, "POINTS_PER_TASK", 1)
        monkeypatch.setattr(tables, "_WORKERS", 7)
        many = tables.point_tables(forest, lv, leaves, ijk)
        for f in dataclasses.fields(one):
            a, b = getattr(one, f.name), getattr(many, f.name)
            if isinstance(a, np.ndarray):
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b, err_msg=f.name)
            else:
                assert a == b


def test_the_byte_string_order_is_numpy_uniques_order():
    """unique_rows sorts its distinct rows as byte strings: the lexicographic order of the values,
    negative and extreme ones (weights enter as their float64 bits, negative as int64) included."""
    rng = np.random.default_rng(5)
    ext = np.array([np.iinfo(np.int64).min, -1, 0, 1, np.iinfo(np.int64).max], np.int64)
    for cols in (1, 3, 54):
        rows = np.concatenate([rng.choice(ext, (300, cols)), rng.integers(-2**62, 2**62, (300, cols)),
                               rng.integers(-2, 2, (300, cols))])
        rows = np.unique(rows, axis=0)[rng.permutation(len(np.unique(rows, axis=0)))]
        np.testing.assert_array_equal(distinct_rows._lexicographic_order(rows), np.lexsort(rows.T[::-1]))


@pytest.mark.parametrize("interp", ["linear", "quadratic"])
def test_the_stencil_built_per_distinct_offset_is_the_row_by_row_one(interp):
    """Coarse reads keep (leaf, offset) keys; their stencils, built once per distinct key, are the
    ones built row by row."""
    rng = np.random.default_rng(3)
    for m in (9, 17):
        forest = refine(Forest.uniform((2, 2, 1), 0, m, 2), [1])
        h = int(forest.spacing_of(2))
        off = rng.integers(0, 2 * (m - 1) + 1, (4000, 3))[rng.integers(0, 4000, 20000)]
        leaf = rng.integers(0, 3, len(off))  # the first three level-1 leaves
        pts, wts, row = tables._coarse_stencils(forest, 2, tables._position_key(leaf, off, 2 * (m - 1)), interp)
        want_pts, want_wts = tables._stencil_rows(m, off * h, 2 * h, interp)
        lo = forest.level_slice(1).start
        for got, want in ((pts[row], (lo + leaf[:, None]) * m ** 3 + want_pts), (wts[row], want_wts)):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)

"""The coupling builders' shortcuts give the tables of the general path, bit for bit, over a run of
regridded trees (refine, coarsen, walls, free slip, a one-root periodic axis, a sphere with an inlet
and an outflow): reads inside the own leaf classified without the tree lookups
(tables._own_leaf_reads), the tree lookups done once per (leaf, position class)
(tables._containing_near) and the other reads classified once per such group
(tables._other_reads_grouped), and the coarse stencils built and grouped once per distinct source
position (compact point tables) instead of once per read."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from nagare.engine.amr3d import boundaries, d3q27, distinct_rows, interface, tables
from nagare.engine.amr3d.tree import Forest, coarsen, refine

from tests.unit.test_amr3d_flows import sphere_tree


def _regrids(periodic, roots=(2, 2, 1)):
    """A run of trees as regrids make them: refine, refine deeper, coarsen a family, refine elsewhere."""
    f = Forest.uniform(roots, 0, 9, 2, periodic)
    f = refine(f, [0])
    yield f
    f = refine(f, [f.n_leaves - 1])
    yield f
    yield (f := coarsen(f, [f.n_leaves - 1]))
    yield refine(f, [1, 2])


def _cases():
    for tree in _regrids((True, True, True)):  # one root in z: the wrap moves offsets of D
        yield "periodic", tree, {}
    for tree in _regrids((False, True, False), roots=(2, 1, 2)):
        yield "walls", tree, {}
    for tree in _regrids((False, False, True)):
        yield "slip", tree, {"slip": ("y-", "y+", "x-")}
    forest0, body = sphere_tree(3)
    for tree in (forest0, refine(forest0, [0, 1])):
        for wall, slip in (("halfway", ()), ("interpolated", ("y-",))):
            forest = Forest(tree.roots, tree.m, tree.max_level, (False, False, True), tree.level, tree.block)
            bnd = boundaries.build(forest, [body], "x-", "x+", (0.04, 0.0, 0.0), wall, slip=slip)
            yield "sphere", forest, {"solid": bnd.solid, "near": bnd.near(), "links": bnd.links(), "slip": bnd.slip}


CASES = list(_cases())


def _assert_same(a, b, what):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, (what, f.name)
            np.testing.assert_array_equal(x, y, err_msg=f"{what}: {f.name}")
        else:
            assert x == y, (what, f.name)


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_own_leaf_shortcut_gives_the_general_paths_tables(i, monkeypatch):
    _, forest, kw = CASES[i]
    fast_cpl = interface.build(forest, "quadratic", **kw)
    ref_kw = {k: v for k, v in kw.items() if k != "links"}
    fast_ref = tables.build(forest, "quadratic", **ref_kw)
    monkeypatch.setattr(tables, "_own_leaf_reads", lambda forest, ijk, pos, c, h: np.zeros((len(ijk), len(c)), bool))
    slow_cpl = interface.build(forest.replace(forest.level, forest.block), "quadratic", **kw)
    slow_ref = tables.build(forest.replace(forest.level, forest.block), "quadratic", **ref_kw)
    assert fast_cpl.keys() == slow_cpl.keys()
    for lv in fast_cpl:
        _assert_same(fast_cpl[lv], slow_cpl[lv], f"coupling level {lv}")
        _assert_same(fast_ref.level[lv], slow_ref.level[lv], f"reference tables level {lv}")


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
@pytest.mark.parametrize("interp", ["linear", "quadratic"])
def test_compact_tables_are_the_per_read_ones(i, interp):
    """Compact point tables expand to the per-read ones, and the coupling's interpolated buffer is
    the distinct rows of the per-read stencils (unique_rows over every read, as it was built)."""
    _, forest, kw = CASES[i]
    cpl = interface.build(forest, interp, **kw)
    for lv in forest.levels:
        leaves, ijk = interface.fixup_points(forest, lv, kw.get("near"))
        args = (forest, lv, leaves, ijk, interp, kw.get("solid"), kw.get("slip", ()))
        full, comp = tables.point_tables(*args), tables.point_tables(*args, compact=True)
        assert full.coarse_row is None
        order = np.argsort(comp.direct_dst)
        np.testing.assert_array_equal(comp.direct_dst[order], full.direct_dst)
        np.testing.assert_array_equal(comp.direct_src[order], full.direct_src)
        for name in ("fine_dst", "fine_q", "fine_slot", "fine_pts", "coarse_dst", "coarse_q", "coarse_pts",
                     "restrict_dst", "restrict_src", "dup_dst", "dup_src"):
            np.testing.assert_array_equal(getattr(comp, name), getattr(full, name), err_msg=name)
        np.testing.assert_array_equal(comp.coarse_slot[comp.coarse_row], full.coarse_slot)
        np.testing.assert_array_equal(comp.coarse_w[comp.coarse_row], full.coarse_w)
        c = cpl[lv]
        if not full.coarse_dst.size:
            assert c.interp_slot.shape[0] == 0
            continue
        first, inv = distinct_rows.unique_rows(np.concatenate([full.coarse_slot, full.coarse_w.view(np.int64)], axis=1))
        np.testing.assert_array_equal(c.interp_slot, full.coarse_slot[first])
        np.testing.assert_array_equal(c.interp_w, full.coarse_w[first])
        want = -1 - (d3q27.Q * full.fine_pts.size + full.coarse_q * len(first) + inv)
        np.testing.assert_array_equal(c.desc.reshape(-1)[full.coarse_dst], want)


@pytest.mark.parametrize("i", [0, len(CASES) - 1], ids=["periodic", "sphere"])
def test_levels_built_on_threads_are_the_serial_ones(i, monkeypatch):
    _, forest, kw = CASES[i]
    monkeypatch.setattr(tables, "_WORKERS", 1)
    serial = interface.build(forest, "quadratic", **kw)
    monkeypatch.setattr(tables, "_WORKERS", 4)
    monkeypatch.setattr(tables, "POINTS_PER_TASK", 64)
    threaded = interface.build(forest.replace(forest.level, forest.block), "quadratic", **kw)
    assert list(threaded) == list(serial)
    for lv in serial:
        _assert_same(threaded[lv], serial[lv], f"coupling level {lv}")


def _containing_per_point(forest, lv, leaves, cls, points, where=None):
    """The general path's lookup: Forest.containing for every point."""
    out = np.full(len(points), -1, np.int64)
    sel = np.ones(len(points), bool) if where is None else where
    if sel.any():
        out[sel] = forest.containing(lv, points[sel])
    return out


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_lookups_per_position_class_give_the_general_paths_tables(i, monkeypatch):
    """Reads classified per (leaf, position class) and the owners looked up per class: the tables of
    the per-read classification with a lookup for every point."""
    _, forest, kw = CASES[i]
    fast_cpl = interface.build(forest, "quadratic", **kw)
    ref_kw = {k: v for k, v in kw.items() if k != "links"}
    fast_ref = tables.build(forest, "quadratic", **ref_kw)
    monkeypatch.setattr(tables, "_containing_near", _containing_per_point)
    monkeypatch.setattr(tables, "_other_reads", tables._other_reads_per_read)
    slow_cpl = interface.build(forest.replace(forest.level, forest.block), "quadratic", **kw)
    slow_ref = tables.build(forest.replace(forest.level, forest.block), "quadratic", **ref_kw)
    assert fast_cpl.keys() == slow_cpl.keys()
    for lv in fast_cpl:
        _assert_same(fast_cpl[lv], slow_cpl[lv], f"coupling level {lv}")
        _assert_same(fast_ref.level[lv], slow_ref.level[lv], f"reference tables level {lv}")


def _near_trees():
    for m in (3, 5, 9):
        for periodic, roots in (((True, True, True), (2, 2, 1)), ((False, True, False), (2, 1, 2))):
            f = refine(Forest.uniform(roots, 0, m, 2, periodic), [0])
            yield f"m{m}-{'p' if periodic[0] else 'w'}", refine(f, [f.n_leaves - 1, 1])


@pytest.mark.parametrize("name,forest", list(_near_trees()))
def test_containing_near_is_containing_for_every_position_class(name, forest):
    """Every position −1 … m per axis around every leaf, looked up in the levels l − 1 … l + 1: the
    per-class lookup gives Forest.containing's leaf (the lowest-numbered that has the point)."""
    m = forest.m
    r = np.arange(-1, m + 1)
    ld = np.stack(np.meshgrid(r, r, r, indexing="ij"), axis=-1).reshape(-1, 3)
    for lv in forest.levels:
        sl = forest.level_slice(lv)
        leaves = np.repeat(np.arange(sl.start, sl.stop), len(ld))
        pos = forest.origin[leaves] + np.tile(ld, (sl.stop - sl.start, 1)) * int(forest.spacing_of(lv))
        pw, inside = forest.wrap_points(pos)
        cls = tables._position_class(m, np.tile(ld, (sl.stop - sl.start, 1)))
        for target in (lv - 1, lv, lv + 1):
            if not 0 <= target <= forest.max_level:
                continue
            got = tables._containing_near(forest, target, leaves, cls, pw, inside)
            want = np.where(inside, forest.containing(target, pw), -1)
            np.testing.assert_array_equal(got, want, err_msg=f"{name}: level {lv} → {target}")
            if target == lv:
                assert (got[inside] >= 0).any()

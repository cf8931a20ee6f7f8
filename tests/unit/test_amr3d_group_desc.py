"""The coupling's descriptors written per (leaf, position class) group (group_desc.py) are those of
the general path (tables.point_tables, then scattered), bit for bit, over runs of regridded trees:
refine, coarsen, walls, a one-root periodic axis, leaves of 3, 5 and 9 points a side, both stencils."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from nagare.engine.amr3d import distinct_rows, group_desc, interface, tables
from nagare.engine.amr3d.tree import Forest, coarsen, refine


def _regrids(periodic, roots, m):
    """A run of trees as regrids make them: refine, refine deeper, coarsen a family, refine elsewhere."""
    f = refine(Forest.uniform(roots, 0, m, 2, periodic), [0])
    yield f
    f = refine(f, [f.n_leaves - 1])
    yield f
    yield (f := coarsen(f, [f.n_leaves - 1]))
    yield refine(f, [1, 2])


def _cases():
    for m in (3, 5, 9):
        for name, periodic, roots in (("periodic", (True, True, True), (2, 2, 1)),
                                      ("walls", (False, True, False), (2, 1, 2)),
                                      ("mixed", (False, False, True), (2, 2, 1))):
            for k, tree in enumerate(_regrids(periodic, roots, m)):
                yield f"{name}-m{m}-{k}", tree


CASES = list(_cases())


def _assert_same(a, b, what):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, (what, f.name)
            np.testing.assert_array_equal(x, y, err_msg=f"{what}: {f.name}")
        else:
            assert x == y, (what, f.name)


@pytest.mark.parametrize("interp", ["quadratic", "linear"])
@pytest.mark.parametrize("name,forest", CASES, ids=[c[0] for c in CASES])
def test_group_descriptors_are_the_general_paths(name, forest, interp, monkeypatch):
    grouped = interface.build(forest, interp)
    monkeypatch.setattr(interface, "_by_groups", lambda solid, link, slip: False)
    general = interface.build(forest.replace(forest.level, forest.block), interp)
    assert grouped.keys() == general.keys()
    for lv in grouped:
        _assert_same(grouped[lv], general[lv], f"{name} level {lv}")


@pytest.mark.parametrize("m", [3, 5, 9, 17])
def test_class_members_lie_in_their_classes(m):
    """Each canonical member is in its class, for every class a read of a leaf of m³ can fall in."""
    members = group_desc._class_members(m)
    cls = np.arange(tables.POSITION_CLASSES)
    reached = np.unique(group_desc._class_of_reads(m))
    np.testing.assert_array_equal(tables._position_class(m, members[reached]), cls[reached])
    assert members.min() >= -1 and members.max() <= m


@pytest.mark.parametrize("fallback", [False, True])
def test_all_levels_at_once_are_each_levels_own(fallback, monkeypatch):
    """group_desc.level_descriptors over every level (one set of passes, as a device build takes
    them) gives each level's own descriptors call, array for array; also through the host grouping
    of the stencil rows (unique_rows) that a failed distinct_order falls back to."""
    if fallback:
        monkeypatch.setattr(distinct_rows, "distinct_order", lambda xp, rows, lead: None)
    for interp in ("quadratic", "linear"):
        for name, forest in CASES:
            points = {lv: interface.fixup_points(forest, lv) for lv in forest.levels}
            together = group_desc.level_descriptors(forest, points, interp)
            assert list(together) == list(forest.levels)
            for lv in forest.levels:
                alone = group_desc.descriptors(forest, lv, *points[lv], interp)
                for what, x, y in zip(("desc", "fine_pts", "coarse_pts", "interp_slot", "interp_w"),
                                      together[lv], alone):
                    assert x.dtype == y.dtype and x.shape == y.shape, (name, lv, what)
                    np.testing.assert_array_equal(x, y, err_msg=f"{name} {interp} level {lv}: {what}")


def _device_cases():
    for name, forest in CASES:
        if "-m5-" in name or "-m9-1" in name:
            yield name, forest


@pytest.mark.parametrize("interp", ["quadratic", "linear"])
@pytest.mark.parametrize("name,forest", list(_device_cases()), ids=[c[0] for c in _device_cases()])
def test_the_device_branch_gives_numpys_tables(name, forest, interp, tmp_path, monkeypatch):
    """interface.build(xp=) with a module other than NumPy (the emulated CuPy: NumPy's functions
    behind CuPy's names) takes the device branch — CuPy's lexsort for the tied stencil rows, the
    copies back to the host — and gives NumPy's tables; its device time is reported."""
    from tests.unit import amr3d_emulated_cupy

    xp = amr3d_emulated_cupy.make(tmp_path)
    timing = {}
    with monkeypatch.context() as mp:  # the stencils' leading columns order them: no fallback taken
        mp.setattr(distinct_rows, "unique_rows", None)
        dev = interface.build(forest, interp, xp=xp, timing=timing)
    host_timing = {}
    ref = interface.build(forest.replace(forest.level, forest.block), interp, timing=host_timing)
    assert dev.keys() == ref.keys()
    for lv in ref:
        _assert_same(dev[lv], ref[lv], f"{name} level {lv}")
    assert timing["device_s"] > 0 and host_timing == {}


@pytest.mark.parametrize("lead", [[0], [0, 1, 2], [0, 1, 2, 3, 6, 9, 18], [5]])
def test_distinct_order_is_numpys_or_none(lead, tmp_path):
    """distinct_rows.distinct_order: np.unique's order of distinct rows where the leading columns
    guessed are a prefix (ties sorted as whole rows), np.unique's order or None (never another
    order) where they are not, None where two rows are equal; on NumPy and through the device
    branch."""
    from tests.unit import amr3d_emulated_cupy

    rng = np.random.default_rng(len(lead))
    rows = rng.integers(-2, 3, (3000, 27)).astype(np.int64)
    rows[:, 20:] = rng.integers(-(2 ** 62), 2 ** 62, (3000, 7))  # weight-like bits, both signs
    _, first = np.unique(rows, axis=0, return_index=True)
    rows = rows[np.sort(first)]
    want = np.lexsort(rows.T[::-1])
    prefix = lead == list(range(len(lead)))
    for xp in (np, amr3d_emulated_cupy.make(tmp_path)):
        got = distinct_rows.distinct_order(xp, rows, lead)
        if prefix or got is not None:
            np.testing.assert_array_equal(got, want)
        dup = np.concatenate([rows, rows[:1]])
        assert distinct_rows.distinct_order(xp, dup, lead) is None


def _vortex_adapt_regrid():
    """The new tree of one regrid of amr3d-vortex-adapt at its GPU size (tools/amr3d_regrid_profile.py)."""
    from nagare.engine.amr3d import cases
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    p = load_preset("amr3d-vortex-adapt", backend="cupy")
    e = AMR3D(p, get_backend("numpy"))
    c = list(p.initial.center)
    c[0] += 12.0
    moved = p.model_copy(update={"initial": p.initial.model_copy(update={"center": c})})
    e.shape.set_leaves(cases.initial_tree_state(moved, e.forest))
    return e.shape._plan(e.regrid_criterion()).forest, p.physics.interp


@pytest.mark.gpu
def test_cupy_build_gives_numpys_tables():
    """interface.build(xp=cupy) on the GPU: NumPy's tables bit for bit, over the regridded trees
    above and one regrid of amr3d-vortex-adapt at 17³ (116 → 130 leaves)."""
    import cupy

    trees = [(name, forest, interp) for name, forest in CASES for interp in ("quadratic", "linear")]
    trees.append(("vortex-adapt", *_vortex_adapt_regrid()))
    for name, forest, interp in trees:
        timing = {}
        dev = interface.build(forest, interp, xp=cupy, timing=timing)
        ref = interface.build(forest.replace(forest.level, forest.block), interp)
        assert dev.keys() == ref.keys()
        for lv in ref:
            _assert_same(dev[lv], ref[lv], f"{name} {interp} level {lv}")
        assert timing["device_s"] > 0

"""The coupling's descriptors written per (leaf, position class) group (group_desc.py) are those of
the general path (tables.point_tables, then scattered), bit for bit, over runs of regridded trees:
refine, coarsen, walls, a one-root periodic axis, leaves of 3, 5 and 9 points a side, both stencils."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from nagare.engine.amr3d import group_desc, interface, tables
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

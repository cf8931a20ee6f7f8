"""What a 2D view's axes are labelled with comes from the engine's fields: their length units and
the coordinates of their first cell (compact's domains start at x0, not 0), and for a 3D grid's
slice the two axes left in it. The app reads these; no family is special-cased there."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.app.fieldkinds.grids import snapshot_grid
from nagare.app.packets import SnapshotContext, ViewRequest, length_units
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.fields import Grid2D, Grid3D
from nagare.engine.presets import load_preset


def _engine(name, *overrides):
    return create_engine(load_preset(name, overrides=overrides, backend="numpy"), get_backend("numpy"))


def _context(engine, view):
    common = {"seq": 1, "step": 0, "time": 0.0, "field_name": view.field, "backend": "numpy", "fields": ()}
    return SnapshotContext(engine, view, None, common)


def test_compact_grids_carry_their_domain_origin_and_units():
    e = _engine("compact-rotating-cone")
    g = e.preset.grid
    h = e.preset.spacing("x")
    f = e.fields()["phi"]
    assert isinstance(f, Grid2D) and f.length_units == "–"
    # the centre of drawn cell (i, j), origin + (i + ½)·h, is the grid point (x0 + i·h, y0 + j·h)
    np.testing.assert_allclose(np.asarray(f.origin) + 0.5 * h, [g.x0, g.y0])
    ns = _engine("compact-vortex-outflow")
    assert {f.length_units for f in ns.fields().values()} == {"l"}  # ρ∞ = c∞ = l = 1


def test_compact_profiles_say_what_x_is_in():
    e = _engine("compact-advection1d")
    assert e.fields()["phi"].length_units == "–"


def test_other_families_keep_cells_unless_they_declare_units():
    e = _engine("lbm2d-cavity", "grid.n=32")
    name = next(n for n, f in e.fields().items() if isinstance(f, Grid2D))
    pk = snapshot_grid(e.fields()[name], _context(e, ViewRequest(field=name)))
    assert pk.length_units is None and length_units(pk) == "cells" and pk.origin == (0.0, 0.0)


@pytest.mark.parametrize("axis,names", [("z", ("x", "y")), ("y", ("x", "z")), ("x", ("y", "z"))])
def test_a_slice_names_the_two_axes_left_in_it(axis, names):
    e = _engine("diffusion3d", "grid.nx=12", "grid.ny=10", "grid.nz=8")
    f = e.fields()["f"]
    assert isinstance(f, Grid3D)
    pk = snapshot_grid(f, _context(e, ViewRequest(field="f", mode="slice", slice_axis=axis)))
    assert pk.kind == "grid3d" and pk.axis_names == names


def test_the_cone_is_drawn_on_phi_s_own_range_so_its_apex_shows():
    """The automatic range (0.5–99.5 percentiles) cut the cone's apex: φ max 0.96 showed as a
    plateau at 0.68. The preset fixes [view] range = [0, 1]: app and `--frames --legend` alike."""
    from nagare.app.fieldkinds.grids import grid_range

    e = _engine("compact-rotating-cone", "grid.nx=64", "grid.ny=64")
    assert e.preset.view.range == (0.0, 1.0)
    f = e.fields()["phi"]
    data = np.asarray(f.data)
    assert grid_range(f, data, e.preset.view) == (0.0, 1.0)
    assert data.max() > 0.9  # the apex inside the range, not above it

"""lbm2d's tracers in the fields' coordinates: the grids draw node i as the cell [i, i+1) (Grid2D, the
view, the exports, the probes), the tracers move with node centres at integers (tracers.py) and the
engine recycles one whose nearest node is solid. A tracer it keeps must be drawn in a fluid cell."""
from __future__ import annotations

import numpy as np
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset


def _engine():
    preset = load_preset("lbm2d-cylinder", ["grid.nx=120", "grid.ny=48", "obstacle.diameter=12",
                                            "tracers.count=4000"], backend="numpy")
    return create_engine(preset, get_backend("numpy"))


def test_a_tracer_beside_the_obstacle_is_drawn_in_the_fluid_cell_the_engine_keeps_it_in():
    eng = _engine()
    solid = np.asarray(eng.field("speed").mask)
    ny, nx = solid.shape
    # fluid nodes with a solid neighbour on one side, and a tracer 0.3 of a spacing from the node's
    # centre towards that neighbour: its nearest node is the fluid one, so the engine keeps it
    points = []
    for dy, dx in ((0, -1), (0, 1), (-1, 0), (1, 0)):
        jj, ii = np.nonzero(~solid[1:-1, 1:-1])
        jj, ii = jj + 1, ii + 1
        beside = solid[jj + dy, ii + dx]
        points.append(np.stack([ii[beside] + 0.3 * dx, jj[beside] + 0.3 * dy], axis=1))
    pts = np.concatenate(points).astype(np.float32)
    assert len(pts) > 20
    tr = eng.tracers
    tr.pos[: len(pts)] = pts
    tr.age[: len(pts)] = 1.0
    assert not solid[np.rint(pts[:, 1]).astype(int), np.rint(pts[:, 0]).astype(int)].any()  # the engine's rule
    shown = np.asarray(eng.field("tracers").positions, np.float64)[: len(pts)]
    cells = solid[np.floor(shown[:, 1]).astype(int), np.floor(shown[:, 0]).astype(int)]
    assert not cells.any(), f"{int(cells.sum())} of {len(pts)} tracers drawn inside the obstacle's cells"
    np.testing.assert_allclose(shown, pts + 0.5)


def test_the_tracers_bounds_are_the_nodes_centres_in_the_fields_coordinates():
    eng = _engine()
    ny, nx = np.asarray(eng.field("speed").mask).shape
    lo, hi = (np.asarray(b, np.float64) for b in eng.field("tracers").bounds)
    np.testing.assert_allclose(lo, [0.5, 0.5])
    np.testing.assert_allclose(hi, [nx - 0.5, ny - 0.5])

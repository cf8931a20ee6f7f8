"""The automatic colour range is symmetric about 0 only where the colour map is a diverging one;
the View dock's component control only beside a vector field. The walk saw lbm2d-poiseuille's ux
(> 0 everywhere) on viridis with ±0.00253: half the map unused."""
from __future__ import annotations

import numpy as np
from nagare.app import colormaps


def test_view_range_is_symmetric_for_diverging_maps_only():
    for name in ("rdbu", "coolwarm"):
        assert colormaps.view_range(0.5, 2.0, name, True) == (-2.0, 2.0)
        assert colormaps.view_range(-3.0, 1.0, name, True) == (-3.0, 3.0)
        assert colormaps.view_range(0.5, 2.0, name, False) == (0.5, 2.0)  # a field that does not ask
    for name in ("viridis", "inferno", "magma", "plasma", "gray", "turbo"):
        assert colormaps.view_range(0.5, 2.0, name, True) == (0.5, 2.0)
    assert set(colormaps.DIVERGING) <= set(colormaps.NAMES)


def test_headless_colour_map_of_a_one_signed_field_uses_the_whole_sequential_map():
    data = np.tile(np.linspace(1.0, 2.0, 200), (10, 1))
    rgb = colormaps.apply(data, "viridis", symmetric=True)
    lut = (colormaps.lut("viridis") * 255 + 0.5).astype(np.uint8)
    # the lowest value gets viridis' first colour, not its middle (a −2..2 range)
    np.testing.assert_allclose(rgb[0, 0], lut[0], atol=1)
    np.testing.assert_allclose(rgb[0, -1], lut[-1], atol=1)
    rgb = colormaps.apply(data, "rdbu", symmetric=True)
    lut = (colormaps.lut("rdbu") * 255 + 0.5).astype(np.uint8)
    np.testing.assert_allclose(rgb[0, -1], lut[-1], atol=1)  # 2 is the top of −2..2
    assert np.abs(rgb[0, 0].astype(int) - lut[0].astype(int)).max() > 40  # 1 is not the bottom


def test_window_range_follows_the_colour_map_and_component_hides_for_scalars(make_window, qtbot):
    w = make_window("lbm2d-poiseuille", hud=False)
    w.worker.send("step", n=40)
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.shown.step >= 40, timeout=30000)
    w.worker.send("pause")
    qtbot.waitUntil(lambda: w.canvas.current_range is not None and w.canvas.shown is not None
                    and w.canvas.current_range != (0.0, 1.0), timeout=10000)
    pk = w.canvas.shown
    assert pk.field_name == "ux" and pk.symmetric and not pk.vector
    lo, hi = w.canvas.current_range
    data = np.asarray(pk.data)
    assert data.min() >= 0.0 and hi > 0  # the flow runs one way
    assert lo >= 0.0 and lo < hi, (lo, hi)  # viridis: the data's range, not ±hi
    w.cmap_combo.setCurrentText("rdbu")
    qtbot.waitUntil(lambda: w.canvas.current_range[0] < 0, timeout=10000)
    lo2, hi2 = w.canvas.current_range
    assert lo2 == -hi2 and hi2 >= hi
    w.cmap_combo.setCurrentText("viridis")
    qtbot.waitUntil(lambda: w.canvas.current_range[0] >= 0, timeout=10000)
    assert not w.view_form.isRowVisible(w.component_combo)  # ux is a scalar

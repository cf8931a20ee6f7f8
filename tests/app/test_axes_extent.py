"""The 2D axes label the field's extent (the domain) and nothing beyond it, and show the domain's
end labels where they fit (moved inward at the strip's end): compact-rotating-cone in a tall view
labelled y out to ±3 and never showed x = 1.0.

The canvas cases draw each preset's real first packet (NumPy engine) in a tall and a wide canvas.
Label boxes are measured the way VisPy sizes text (ticks.text_size)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import isolated

pytestmark = pytest.mark.gui


# ---- the label layout (no canvas) -----------------------------------------------------------------
def test_a_label_sticking_out_of_the_strip_moves_inward_and_one_that_then_touches_its_neighbour_goes():
    from nagare.app.gui.axes2d import fit_labels

    # a strip 200 px long: ticks at 0, 100 and 200 with 30 px labels; the end ones stick out by 15
    keep, centres = fit_labels([0.0, 100.0, 200.0], [30.0, 30.0, 30.0], 200.0)
    np.testing.assert_array_equal(keep, [True, True, True])
    np.testing.assert_allclose(centres, [15.0, 100.0, 185.0])
    # the last tick 35 px from its neighbour (their labels 5 px apart): moved 15 px inward it would
    # touch it, so it goes (not the neighbour, which sits on its own tick)
    keep, centres = fit_labels([120.0, 165.0, 200.0], [30.0, 30.0, 30.0], 200.0)
    np.testing.assert_array_equal(keep, [True, True, False])
    # a label longer than the strip: never drawn
    keep, _ = fit_labels([10.0], [50.0], 40.0)
    np.testing.assert_array_equal(keep, [False])


def test_domain_ends_that_are_no_round_tick_are_labelled_and_crowded_round_ticks_make_way():
    from nagare.app.gui.axes2d import TICK_PT, with_ends
    from nagare.app.gui.ticks import fmt_end, nice_ticks

    # lbm2d-cylinder's 96 cells over 300 px: 0 … 80 in twenties, 96 added beside 80
    values, texts = nice_ticks(0.0, 96.0, 300, TICK_PT, 96, along="y", spacing_em=4.0)
    assert texts[-1] == "80"
    v, t = with_ends(values, texts, 0.0, 96.0, (True, True), 300, 96, "y", None)
    assert t == [*texts, "96"] and v[-1] == 96.0
    # wave2d's 256 cells: 250 is too near the end's label and makes way for it
    values, texts = nice_ticks(0.0, 256.0, 430, TICK_PT, 96, along="x", spacing_em=4.0)
    assert texts[-1] == "250"
    v, t = with_ends(values, texts, 0.0, 256.0, (True, True), 430, 96, "x", None)
    assert t[-1] == "256" and "250" not in t and t[0] == "0"
    # an end that is a round tick already is not written twice; a view edge (no end) gets nothing
    values, texts = nice_ticks(-1.0, 1.0, 400, TICK_PT, 96, along="x", spacing_em=4.0)
    assert with_ends(values, texts, -1.0, 1.0, (True, True), 400, 96, "x", None) == (values, texts)
    assert with_ends(values, texts, -1.0, 0.93, (False, False), 400, 96, "x", None) == (values, texts)
    assert (fmt_end(96.0, 20.0, False), fmt_end(1 / 3, 0.1, False), fmt_end(2.2, 0.5, False)) == ("96", "0.333", "2.2")


# ---- each preset's axes in a canvas ---------------------------------------------------------------
def _first_packet(preset: str):
    from nagare.app.gui.worker import ViewRequest, snapshot
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    p = load_preset(preset, backend="numpy")
    eng = create_engine(p, get_backend("numpy"))
    return snapshot(eng, ViewRequest(field=p.view.field), 1, {})


def _labels_fit(strip, dpi: float) -> None:
    """Every label lies inside its strip and no two touch."""
    from nagare.app.gui.axes2d import TICK_PT
    from nagare.app.gui.ticks import overlaps, text_size

    along = 1 if strip.vertical else 0
    sizes = np.array([text_size(t, TICK_PT, dpi)[along] for t in strip.texts])
    c = np.asarray(strip.label_positions, np.float64)
    end = strip.size[along]
    assert np.all(c - sizes / 2 >= -1e-9) and np.all(c + sizes / 2 <= end + 1e-9), (strip.texts, c, end)
    assert not overlaps(c, sizes, 4.0 - 1e-9), (strip.texts, c)


# preset → its domain (what the labels read) and the end labels that must show
DOMAINS = {
    "compact-rotating-cone": ((-1.0, 1.0), (-1.0, 1.0), ("-1.0", "1.0"), ("-1.0", "1.0")),
    "lbm2d-cylinder": ((0.0, 240.0), (0.0, 96.0), ("0", "240"), ("0", "96")),
    "wave2d": ((0.0, 256.0), (0.0, 256.0), ("0", "256"), ("0", "256")),
}


def test_each_presets_ticks_lie_in_its_domain_and_its_end_labels_show_in_tall_and_wide_views(make_canvas):
    name = "test_each_presets_ticks_lie_in_its_domain_and_its_end_labels_show_in_tall_and_wide_views"
    if not isolated(__file__, name, timeout=300):
        return
    from tests.app.test_axes_legend import _tick_pixels_match_world

    for preset, ((x0, x1), (y0, y1), x_ends, y_ends) in DOMAINS.items():
        pk = _first_packet(preset)
        for w, h in ((560, 1100), (1200, 420)):  # tall: the domain is a band across the view; wide: beside it
            c = make_canvas(w, h)
            c.show_packet(pk)
            c.draw_now(finish=True)
            assert c.axes.visible, preset
            ox, oy = pk.origin
            _tick_pixels_match_world(c, c.axes.x, False, ox)
            _tick_pixels_match_world(c, c.axes.y, True, oy)
            for strip, (lo, hi), ends in ((c.axes.x, (x0, x1), x_ends), (c.axes.y, (y0, y1), y_ends)):
                vals = np.asarray(strip.values)
                assert vals.min() >= lo - 1e-9 and vals.max() <= hi + 1e-9, (preset, (w, h), strip.texts)
                assert strip.texts[0] == ends[0] and strip.texts[-1] == ends[1], (preset, (w, h), strip.texts)
                _labels_fit(strip, c.dpi)
            # the y axis line runs along the domain only: its ends are the domain's, in the strip's px
            seg = np.asarray(c.axes.y.lines._pos)[:2, 1]
            fh = c.view.size[1]
            tr = c.view.scene.node_transform(c.view)
            want = sorted(fh - tr.map([0.0, v - oy])[1] for v in (y0, y1))
            np.testing.assert_allclose(sorted(seg), want, atol=1.0)
            if h > w:  # the tall view shows far more than the domain: the strip beyond it stays bare
                assert want[1] - want[0] < 0.8 * fh
            # the strips stand at the domain's edges where the view shows margin beside it, not at the
            # view's edges a band away from the field
            vx, vy = c.view.pos
            bottom = vy + tr.map([0.0, y0 - oy])[1]  # canvas px (y down) of the domain's lower edge
            left = vx + tr.map([x0 - ox, 0.0])[0]
            np.testing.assert_allclose(c.axes.x.view.pos[1], min(bottom, vy + fh), atol=1.0)
            np.testing.assert_allclose(c.axes.y.view.pos[0] + c.axes.y.size[0], max(left, vx), atol=1.0)
            if h > w:  # the axis line is drawn right under the field
                frame = c.grab()
                row = int(round(bottom))
                right = vx + tr.map([x1 - ox, 0.0])[0]
                line = frame[row - 1:row + 2, int(left) + 2:int(right) - 2].max(axis=(0, 2))
                assert (line > 150).mean() > 0.9, (preset, row, bottom)


"""The HUD's charts are drawn against limits that contain the data of the same frame.

On a slow run (amr3d on NumPy: about one published frame a second) every HUD frame brings a new
timing sample; with implot's auto-fit the charts showed the previous frame's limits and the newest
values ran off the plot. Checked on a headless imgui context (tests/app/conftest.py: headless_hud)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from nagare.app.gui.hud import PHASE_PLOT_ID
from nagare.app.gui.plot_limits import FLAT_PAD, VALUE_MARGIN, data_limits, round_ticks
from nagare.app.gui.worker import Stats


def _stats(wall, phase_ms, mups):
    return Stats(wall=wall, step=int(wall * 4), steps_per_s=1.0, updates_per_s=mups * 1e6, gbytes_per_s=0.05,
                 roofline_pct=0.5, phase_ms=phase_ms, selection={})


def test_data_limits_cover_every_finite_point_of_every_series():
    x = np.array([-6.0, -3.0, 0.0])
    pad = VALUE_MARGIN * (1500.0 - 4.0)  # the value axis' margin: no line drawn on the plot's frame
    assert data_limits(x, [np.array([1500.0, 1400.0, 1050.0]), np.array([np.nan, 4.0, 5.0])]) == pytest.approx(
        (-6.0, 0.0, 4.0 - pad, 1500.0 + pad))


def test_data_limits_skip_points_without_a_value_and_pad_a_flat_series():
    x = np.array([-2.0, -1.0, 0.0])
    # the x of a point with no finite value does not widen the x axis
    assert data_limits(x, [np.array([np.nan, 3.0, 3.0])]) == (-1.0, 0.0, 3.0 - FLAT_PAD, 3.0 + FLAT_PAD)
    assert data_limits(np.array([0.0]), [np.array([2.0])]) == (-FLAT_PAD, FLAT_PAD, 2.0 - FLAT_PAD, 2.0 + FLAT_PAD)
    assert data_limits(x, [np.full(3, np.nan)]) is None
    assert data_limits(x, []) is None


def test_hud_charts_contain_the_new_samples_in_the_frame_that_draws_them(headless_hud, monkeypatch):
    implot = pytest.importorskip("imgui_bundle").implot
    drawn = []  # (plot label, limits in force, x, y) for every line drawn
    plot_line, begin_plot = implot.plot_line, implot.begin_plot
    current = {}

    def begin(label, *a, **kw):
        current["label"] = label
        return begin_plot(label, *a, **kw)

    def line(label, x, y, *a, **kw):
        lim = implot.get_plot_limits()  # the limits this frame draws with
        drawn.append((current["label"], (lim.x.min, lim.x.max, lim.y.min, lim.y.max), np.array(x), np.array(y)))
        return plot_line(label, x, y, *a, **kw)

    monkeypatch.setattr(implot, "begin_plot", begin)
    monkeypatch.setattr(implot, "plot_line", line)
    history = [_stats(0.0, {"step": 1050.0, "tracers": 4.0}, 0.27)]
    headless_hud.model = lambda: (list(history), {}, "running")
    # one sample more each frame, slower and slower: the newest is always outside the last frame's fit
    for wall, ms in ((2.5, 1400.0), (5.0, 1900.0), (7.5, 2600.0)):
        history.append(_stats(wall, {"step": ms, "tracers": 3.0}, 0.27 * 1050.0 / ms))
        drawn.clear()
        headless_hud.frame()
        assert {label for label, *_ in drawn} == {PHASE_PLOT_ID, "throughput, M updates/s"}
        for label, (x0, x1, y0, y1), x, y in drawn:
            ok = np.isfinite(y)
            assert x0 <= x[ok].min() and x[ok].max() <= x1, (label, (x0, x1), x)
            assert y0 <= y[ok].min() and y[ok].max() <= y1, (label, (y0, y1), y)
        (_, ms_lim, *_), (_, mups_lim, *_) = drawn[0], drawn[-1]
        ms_span, mups_span = ms - 3.0, 0.27 - 0.27 * 1050.0 / ms
        # the newest (slowest) step is the top of the chart but for the margin, not above it
        assert math.isclose(ms_lim[3], ms + VALUE_MARGIN * ms_span)
        assert math.isclose(mups_lim[2], 0.27 * 1050.0 / ms - VALUE_MARGIN * mups_span)  # its throughput the bottom


@pytest.mark.parametrize("y,alone", [
    ([np.nan, np.nan, 4.0], True),          # one sample with phases in the window: a line draws nothing
    ([2.0, np.nan, 3.0, np.nan], True),     # samples apart between gaps
    ([], True),
    ([2.0, 3.0, np.nan], False),            # two neighbours: a segment
])
def test_a_series_without_two_neighbouring_samples_is_drawn_with_markers(y, alone):
    from nagare.app.gui.plot_limits import draws_no_segment

    assert draws_no_segment(y) is alone


@pytest.mark.parametrize("lo, hi, most", [(-19.6, 0.0, 5), (-19.6, 0.0, 7), (-6.2, 0.0, 5), (-1.3, 0.0, 5),
                                          (-0.4, 0.0, 5), (-120.0, 0.0, 5), (2.5, 7.5, 3), (-1e-3, 0.0, 4)])
def test_round_ticks_are_few_round_and_inside(lo, hi, most):
    ticks = round_ticks(lo, hi, most)
    assert 2 <= len(ticks) <= most and all(lo <= v <= hi for v in ticks)
    steps = np.diff(ticks)
    np.testing.assert_allclose(steps, steps[0], rtol=1e-9)
    mantissa = steps[0] / 10.0 ** np.floor(np.log10(steps[0]))
    assert min(abs(mantissa - m) for m in (1.0, 2.0, 5.0)) < 1e-9, steps[0]
    np.testing.assert_allclose(np.round(np.asarray(ticks) / steps[0]), np.asarray(ticks) / steps[0], atol=1e-9)
    assert round_ticks(lo, lo, most) == [] and round_ticks(lo, hi, 0) == []


def test_the_time_axes_have_few_ticks_so_their_labels_keep_apart(headless_hud, monkeypatch):
    """A 20-s history in the 320-px plots: implot's ticks every 2 s ran their labels together
    ("-18-16-14…"); the HUD sets at most PHASE_PLOT_TICKS / THROUGHPUT_PLOT_TICKS round ones."""
    from nagare.app.gui.hud import PHASE_PLOT_TICKS, THROUGHPUT_PLOT_TICKS

    implot = pytest.importorskip("imgui_bundle").implot
    set_ticks = []
    real = implot.setup_axis_ticks
    monkeypatch.setattr(implot, "setup_axis_ticks", lambda axis, values, *a, **kw: (
        set_ticks.append((axis, list(values))), real(axis, values, *a, **kw))[1])
    history = [_stats(w, {"step": 10.0 + w}, 1.0) for w in np.arange(0.0, 20.5, 0.5)]
    headless_hud.model = lambda: (list(history), {}, "running")
    headless_hud.frame()
    assert [axis for axis, _ in set_ticks] == [implot.ImAxis_.x1] * 2
    (_, phase), (_, mups) = set_ticks
    assert 2 <= len(phase) <= PHASE_PLOT_TICKS and 2 <= len(mups) <= THROUGHPUT_PLOT_TICKS
    assert phase[-1] == 0.0 and phase[0] >= -20.0  # the newest sample at 0, the window's oldest ≥ -20 s

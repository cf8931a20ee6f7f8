"""Axis limits of the HUD's implot charts, fitted to the data of the frame that draws them.

implot's ``AxisFlags_.auto_fit`` fits an axis to the data plotted in a frame only at that frame's
``end_plot``: what the frame shows is the previous frame's fit. The HUD is drawn when the canvas
draws, once per published frame, and on a slow run (amr3d or 3D SPH on NumPy: about one frame a
second) every such frame brings a new timing sample and shifts the time axis, so the charts always
showed the data against the limits of the frame before: the newest values ran outside the plot and
were clipped. Limits set with ``Cond_.always`` before the first ``plot_*`` call hold in the same frame.
The value axis keeps a margin, so a line at the top or bottom of the data is not drawn on the frame.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# implot's fit of a constant series: the value ± 0.5 (a span of zero has no scale)
FLAT_PAD = 0.5
# the value axis' margin above and below the data, as a share of its span: the slowest phase's line
# on the plot's frame at the top and the fastest's on the bottom were hard to see
VALUE_MARGIN = 0.05


def _span(lo: float, hi: float, margin: float = 0.0) -> tuple[float, float]:
    if hi > lo:
        pad = margin * (hi - lo)
        return float(lo) - pad, float(hi) + pad
    return float(lo) - FLAT_PAD, float(hi) + FLAT_PAD


def data_limits(x, ys: Sequence) -> tuple[float, float, float, float] | None:
    """(x_min, x_max, y_min, y_max) over the finite points of the series ``ys`` (each paired with
    ``x``), the y range widened by VALUE_MARGIN each side; None when there is no finite point
    (implot's own limits are kept)."""
    x = np.asarray(x, np.float64)
    keep_x, keep_y = [], []
    for y in ys:
        y = np.asarray(y, np.float64)
        ok = np.isfinite(x) & np.isfinite(y)
        keep_x.append(x[ok])
        keep_y.append(y[ok])
    xs = np.concatenate(keep_x) if keep_x else np.empty(0)
    yv = np.concatenate(keep_y) if keep_y else np.empty(0)
    if xs.size == 0:
        return None
    return (*_span(xs.min(), xs.max()), *_span(yv.min(), yv.max(), VALUE_MARGIN))


def round_ticks(lo: float, hi: float, most: int) -> list[float]:
    """At most ``most`` ticks at the multiples of a round step (1, 2 or 5 × 10^k) inside lo..hi.
    implot's own choice for a 20-s time axis in the HUD's 320-px plots was a tick every 2 s, whose
    labels ("-18-16-14…") ran into each other."""
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo or most < 1:
        return []
    raw = (hi - lo) / most
    power = 10.0 ** np.floor(np.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    first = np.ceil(lo / step - 1e-9) * step
    ticks = first + step * np.arange(int(np.floor((hi - first) / step + 1e-9)) + 1)
    return [float(f"{v:.12g}") + 0.0 for v in np.round(ticks / step) * step]  # + 0.0: no "-0"


def setup_fitted_axes(implot, x_label: str, y_label: str, x, ys: Sequence, x_ticks: int | None = None) -> None:
    """``implot.setup_axes`` with limits that contain every finite point of ``ys`` over ``x``, in
    this frame. Call it between ``begin_plot`` and the first ``plot_*`` (``implot``: the module,
    passed in: imgui-bundle is loaded only once the HUD is drawn). ``x_ticks``: at most this many
    round ticks on the x axis (:func:`round_ticks`), so their labels keep apart in a narrow plot."""
    implot.setup_axes(x_label, y_label)
    limits = data_limits(x, ys)
    if limits is not None:
        implot.setup_axes_limits(*limits, implot.Cond_.always)
        ticks = round_ticks(limits[0], limits[1], x_ticks) if x_ticks else []
        if len(ticks) >= 2:
            implot.setup_axis_ticks(implot.ImAxis_.x1, ticks)


def draws_no_segment(y) -> bool:
    """Whether a line through ``y`` draws nothing: no two neighbouring points are both finite (one
    timing sample in the window, or samples apart between gaps, as on a slow run whose phases
    arrive every few seconds). Such a series is drawn with markers instead."""
    ok = np.isfinite(np.asarray(y, np.float64))
    return not bool(np.any(ok[1:] & ok[:-1]))


def plot_series(implot, label: str, x, y) -> None:
    """``implot.plot_line``, with a marker at each point where the line alone would show nothing."""
    if draws_no_segment(y):
        spec = implot.Spec()
        spec.marker = implot.Marker_.circle
        spec.marker_size = 3.0
        implot.plot_line(label, x, y, spec)
    else:
        implot.plot_line(label, x, y)

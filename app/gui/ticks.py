"""Tick values and labels for the colour bar and the 2D axes, chosen so that no two labels overlap.

A tick step is a "nice" number (1, 2 or 5 × 10^k) and the smallest one whose labels, laid out
along the axis at their pixel positions, keep at least a gap between neighbours: the labels are
measured (:func:`text_size`) before a step is accepted, so long labels (``-1.25e-05``) get a
coarser step than short ones. Labels carry the decimals the step needs, so neighbours never read
the same (a range of 1.0000 .. 1.0001 gives 1.00002, 1.00004, …, not five times "1").

VisPy sizes text in points: a glyph is ``font_pt / 72 × dpi`` logical pixels high, so the layout
is computed for the canvas's dpi (a 150-dpi screen draws 8-pt text 17 px high, not 11).
"""
from __future__ import annotations

import math

import numpy as np

NICE = (1.0, 2.0, 5.0)  # 2.5 would give 0.0125-style labels: longer, harder to read
CHAR_EM = 0.62  # advance of a digit, minus sign or letter of VisPy's OpenSans, in em (at most ~0.6)


def axis_title(name: str, units: str | None) -> str:
    """An axis' title: its name with the units in brackets, when it has units."""
    return f"{name} [{units}]" if units else name


def text_size(text: str, font_pt: float, dpi: float) -> tuple[float, float]:
    """(width, height) in logical px of one line of ``text`` as VisPy draws it (an upper estimate:
    widths from the widest glyphs, height one em)."""
    em = font_pt / 72.0 * dpi
    lines = str(text).split("\n") or [""]
    return CHAR_EM * em * max(len(s) for s in lines), em * len(lines)


def fmt_step(v: float, step: float, scientific: bool | None = None) -> str:
    """``v`` with the decimals a tick ``step`` needs (so neighbouring ticks read differently);
    ``scientific``: the notation of the whole axis (None: decided by ``v`` alone)."""
    v = float(v)
    if abs(v) < 0.5 * step:
        return "0"
    big = max(abs(v), step)
    if scientific is None:
        scientific = big >= 1e5 or big < 1e-3
    k = int(math.floor(math.log10(step) + 1e-9))
    extra = 0 if _whole(step / 10.0 ** k) else 1  # 2.5 × 10^k needs one digit more than 2 × 10^k
    if scientific:  # as many significant digits as the step resolves
        digits = max(0, int(math.floor(math.log10(big) + 1e-9)) - k + extra)
        return f"{v:.{min(digits, 6)}e}"
    return f"{v:.{max(0, -k + extra)}f}"


def fmt_end(v: float, step: float, scientific: bool) -> str:
    """A domain's end that is no tick (96 cells on an axis of 0, 20, … 80): the decimals the tick
    ``step`` shows and two more, trailing zeros dropped ("96", "0.333", "2.2")."""
    if scientific:
        return fmt_any(v)
    digits = max(0, -int(math.floor(math.log10(step) + 1e-9)) + 2)
    s = f"{float(v):.{digits}f}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s == "-0" else s


def _whole(x: float) -> bool:
    return abs(x - round(x)) < 1e-6


def _steps(span: float):
    """Nice steps from well below ``span`` upwards."""
    k = int(math.floor(math.log10(span))) - 3
    while True:
        for m in NICE:
            yield m * 10.0 ** k
        k += 1


def nice_ticks(lo: float, hi: float, length_px: float, font_pt: float, dpi: float, along: str = "y",
               gap_px: float = 4.0, avoid: tuple[float, ...] = (), spacing_em: float = 3.0,
               max_width_px: float | None = None) -> tuple[list[float], list[str]]:
    """Tick values in [lo, hi] and their labels for an axis ``length_px`` long (``along`` = "x": the
    labels sit side by side, so their widths must fit; "y": they are stacked, so their heights).

    Neighbouring ticks are at least ``spacing_em`` em apart (beyond what keeps their labels apart:
    an axis of every possible tick is unreadable); a step whose labels are wider than
    ``max_width_px`` (the colour bar's column) is passed over for a coarser one, which needs fewer
    decimals. ``avoid``: values already labelled (the colour bar's range ends): a tick whose label
    would touch theirs is left out. Returns ([], []) when not even one label fits."""
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo or length_px <= 0:
        return [], []
    scale = length_px / (hi - lo)  # px per unit
    em = font_pt / 72.0 * dpi
    biggest = max(abs(lo), abs(hi))
    scientific = biggest >= 1e5 or biggest < 1e-3  # one notation for the whole axis

    def extent(label: str) -> float:
        w, h = text_size(label, font_pt, dpi)
        return w if along == "x" else h

    avoid_labels = [(a, fmt_any(a)) for a in avoid]
    for step in _steps(hi - lo):
        if step > 10 * (hi - lo):  # not even one label fits
            return [], []
        if step * scale < max(extent("0") + gap_px, spacing_em * em):
            continue
        first = math.ceil(lo / step - 1e-9)
        n = int(math.floor(hi / step + 1e-9)) - first + 1
        if n > 1000:
            continue
        values = [(first + i) * step for i in range(max(n, 0))]
        labels = [fmt_step(v, step, scientific) for v in values]
        if not values:
            return [], []
        if max(extent(s) for s in labels) > length_px:
            continue
        if max_width_px is not None and max(text_size(s, font_pt, dpi)[0] for s in labels) > max_width_px:
            continue
        # neighbours: half of each label on either side of its tick, plus the gap
        half = [extent(s) / 2 for s in labels]
        if any(step * scale < half[i] + half[i + 1] + gap_px for i in range(len(values) - 1)):
            continue
        # an end label keeps half the tick spacing clear too (a tick just inside it reads as clutter)
        keep = [i for i, v in enumerate(values)
                if all(abs(v - a) * scale >= max(half[i] + extent(s) / 2 + gap_px, spacing_em * em / 2)
                       for a, s in avoid_labels)]
        return [values[i] for i in keep], [labels[i] for i in keep]
    return [], []  # pragma: no cover  (_steps is endless: the loop returns)


def with_ends(values: list[float], texts: list[str], lo: float, hi: float, ends: tuple[bool, bool],
              length_px: float, font_pt: float, dpi: float, along: str, max_w: float | None,
              gap_px: float = 4.0, spacing_em: float = 3.0) -> tuple[list[float], list[str]]:
    """The ticks ``values``/``texts`` (from :func:`nice_ticks`) over lo..hi (``length_px`` long) with
    the domain's ends added where ``ends`` says lo or hi is one and no tick is there already (96 on a
    y axis of 0 … 80): the extent is read off the axis. A round tick too near an end's label makes
    way for it, as the colour bar's range ends do. The window's axes (axes2d) and the headless
    frames' (nagare.app.frames) both label their domains this way."""
    if not any(ends):
        return values, texts
    scale = length_px / (hi - lo)
    em = font_pt / 72 * dpi
    step = values[1] - values[0] if len(values) > 1 else hi - lo
    biggest = max(abs(lo), abs(hi))
    scientific = biggest >= 1e5 or biggest < 1e-3  # the notation nice_ticks chose for the axis

    def extent(t: str) -> float:
        return text_size(t, font_pt, dpi)[0 if along == "x" else 1]

    ticks = list(zip(values, texts))
    for end, on in zip((lo, hi), ends):
        if not on or any(abs(v - end) <= 1e-6 * step for v, _ in ticks):
            continue  # not the domain's end, or a round tick there already
        label = fmt_end(end, step, scientific)
        if max_w is not None and text_size(label, font_pt, dpi)[0] > max_w:
            continue
        room = extent(label) / 2
        ticks = [(v, t) for v, t in ticks
                 if abs(v - end) * scale >= max(room + extent(t) / 2 + gap_px, spacing_em * em / 2)]
        ticks.append((end, label))
    ticks.sort()
    return [v for v, _ in ticks], [t for _, t in ticks]


def fmt_any(v: float) -> str:
    """A value on its own (a range end): three significant digits."""
    v = float(v)
    if v == 0:
        return "0"
    a = abs(v)
    return f"{v:.3g}" if 1e-3 <= a < 1e5 else f"{v:.2e}"


def overlaps(positions, sizes, gap_px: float = 0.0) -> bool:
    """Whether any two labels centred at ``positions`` (px along the axis) with extents ``sizes``
    along it overlap (closer than ``gap_px``)."""
    order = np.argsort(np.asarray(positions, np.float64))
    p = np.asarray(positions, np.float64)[order]
    s = np.asarray(sizes, np.float64)[order]
    return bool(np.any(np.diff(p) < (s[:-1] + s[1:]) / 2 + gap_px))

"""The colour bar beside the field: the colormap's LUT as a vertical gradient (the same 256-entry
table the field is drawn with), the field's label and units, and the current range with nice ticks
between its ends; below it a legend when the view has one (octree leaf levels, a 1-D profile's
curves).

It is a VisPy ViewBox of its own (pixel units, y up) in a column the canvas keeps to the right of
the field, so it never covers the field, and it is in every frame the canvas renders (PNG and MP4
exports too, unless the window turns that off).

Text is sized in points (VisPy: ``pt / 72 × dpi`` px), so every row, margin and the column's width
are computed from the canvas's dpi: on a high-dpi screen the same 8-pt labels are taller and wider,
and a layout in fixed pixels would let tick labels run into each other and push the legend's last
row over the canvas's edge.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from nagare.app import colormaps
from vispy import scene
from vispy.color import Colormap
from vispy.visuals.transforms import STTransform

from .laid_out_text import LaidOutText
from .ticks import fmt_any, nice_ticks, text_size

WIDTH = 100  # logical px of the column at ordinary dpi (wider where the text is larger: width())
BAR_W = 18
X0 = 10  # left margin of the bar and the legend swatches
TICK_PT, TITLE_PT, LEGEND_PT = 8, 9, 8
MARGIN = 4  # px kept free at the column's edges
WIDEST_TICK = "-8.88e-88"  # the longest label the ticks write (scientific, three digits)
fmt = fmt_any  # a range end as written at the bar's ends (tests and callers use this name)


@dataclass
class LegendEntry:
    text: str
    rgba: tuple
    swatch: str = "box"  # "box" (a filled square: octree levels) or "line" (a curve's colour)


@dataclass
class Legend:
    title: str
    entries: list[LegendEntry] = field(default_factory=list)
    levels: list[int] | None = None  # an octree level legend: the levels it lists


def level_legend(levels, colours) -> Legend:
    return Legend("leaf level", [LegendEntry(f"level {lev}", tuple(c)) for lev, c in zip(levels, colours)],
                  [int(lev) for lev in levels])


def range_labels(lo: float, hi: float) -> tuple[str, str]:
    """The range ends with as many significant digits as it takes for each to read within 1 % of
    the range of its value (0.99999 .. 1.00001 is not "1" .. "1", nor "0.99999" .. "1")."""
    span = abs(float(hi) - float(lo))
    for digits in range(3, 13):
        a, b = (fmt_any(v) if digits == 3 else f"{float(v):.{digits}g}" for v in (lo, hi))
        if a != b and abs(float(a) - lo) <= 0.01 * span and abs(float(b) - hi) <= 0.01 * span:
            return a, b
    return f"{float(lo):.12g}", f"{float(hi):.12g}"


class ColorBar:
    def __init__(self, parent):
        self.view = scene.widgets.ViewBox(parent=parent, border_width=0, bgcolor=(0.1, 0.1, 0.12, 1))
        self.view.camera = scene.PanZoomCamera(aspect=None)
        self.view.camera.interactive = False
        self.image = scene.visuals.Image(np.linspace(0, 1, 256, dtype=np.float32)[:, None], texture_format="r32f",
                                         cmap=Colormap(colormaps.lut("viridis")), clim=(0, 1),
                                         interpolation="nearest", parent=self.view.scene)
        self.title = LaidOutText("", color="white", font_size=TITLE_PT, anchor_x="center", anchor_y="center",
                                 parent=self.view.scene)
        # the labels follow an automatic range, most frames: their strings' layouts are kept
        self.ticks = LaidOutText("", color=(0.9, 0.9, 0.9, 1), font_size=TICK_PT, anchor_x="left",
                                 anchor_y="center", parent=self.view.scene)
        self.tick_marks = scene.visuals.Line(connect="segments", color=(0.9, 0.9, 0.9, 1), parent=self.view.scene)
        self.legend_swatches = scene.visuals.Mesh(parent=self.view.scene)
        self.legend_text = LaidOutText("", color="white", font_size=LEGEND_PT, anchor_x="left",
                                       anchor_y="center", parent=self.view.scene)
        self.legend_swatches.visible = self.legend_text.visible = False
        self.size = (WIDTH, 100)
        self.dpi = 96.0
        self.range = (0.0, 1.0)
        self.label = ""
        self.cmap = "viridis"
        self.legend: Legend | None = None
        self.bar_rect = (0, 0, 0, 0)  # x, y (from the top), w, h in the bar's view, logical px
        self.tick_pos = np.zeros((0, 2))  # where the tick labels are centred (y up), logical px
        self._tick_labels: list[str] | None = None  # what self.ticks shows (set again only on a change)
        self._title_state: tuple | None = None  # (text, pos) of self.title
        # (bottom, height, column width) of the bar as last placed; None: placed without a bar
        self._bar_geometry: tuple[float, float, float] | None = None
        self._legend_state: tuple | None = None  # (legend, height, dpi) the legend is laid out for
        self._legend_height = 0.0
        self.legend_rows: list[float] = []  # centre heights (y up) of the legend's rows, title first
        self._show_bar = True

    @property
    def show_bar(self) -> bool:
        """Whether the colour ramp, its ticks and title are shown (a ranged field); the legend alone
        otherwise. A change re-places the column: ``set`` keeps its layout while its range and label
        stay, so a kind switch with the same range would leave the bar as it was."""
        return self._show_bar

    @show_bar.setter
    def show_bar(self, on: bool) -> None:
        on = bool(on)
        if on != self._show_bar:
            self._show_bar = on
            self._place()

    @property
    def visible(self) -> bool:
        return self.view.visible

    @visible.setter
    def visible(self, on: bool) -> None:
        self.view.visible = on

    @property
    def levels(self) -> list[int] | None:
        """The octree levels the legend lists (None: no level legend)."""
        return None if self.legend is None else self.legend.levels

    def width(self, dpi: float | None = None) -> int:
        """Logical px the column needs at ``dpi``: the widest tick label and legend row must fit."""
        dpi = self.dpi if dpi is None else dpi
        need = X0 + BAR_W + 6 + text_size(WIDEST_TICK, TICK_PT, dpi)[0] + MARGIN
        if self.legend is not None:
            for e in self.legend.entries:
                need = max(need, X0 + self._swatch_w(dpi) + 6 + text_size(e.text, LEGEND_PT, dpi)[0] + MARGIN)
        return max(WIDTH, int(math.ceil(need)))

    def set_colormap(self, name: str) -> None:
        self.cmap = name
        self.image.cmap = Colormap(colormaps.lut(name))

    def set(self, lo: float, hi: float, label: str, units: str) -> None:
        text = label + (f" [{units}]" if units else "")
        if (lo, hi) == self.range and text == self.label:
            return
        relabelled = text != self.label
        self.range, self.label = (lo, hi), text
        if relabelled or not self.show_bar or self._bar_geometry is None:
            self._place()
        else:  # a new range alone (an automatic one moves most frames): only the ticks move
            self._place_ticks(*self._bar_geometry)

    def set_legend(self, legend: Legend | None) -> None:
        if legend == self.legend:
            return
        self.legend = legend
        self._place()

    def set_levels(self, levels: list[int] | None, colours=None) -> None:
        self.set_legend(None if not levels else level_legend(levels, colours))

    def resize(self, w: float, h: float, dpi: float | None = None) -> None:
        self.size = (w, h)
        if dpi is not None:
            self.dpi = float(dpi)
        self.view.camera.rect = (0, 0, max(w, 1), max(h, 1))
        self._place()

    @staticmethod
    def _em(pt: float, dpi: float) -> float:
        return pt / 72.0 * dpi

    def _swatch_w(self, dpi: float) -> float:
        return max(12.0, 1.2 * self._em(LEGEND_PT, dpi))

    # ---- layout (logical px, y up) ---------------------------------------------------------------
    def _place(self) -> None:
        w, h = self.size
        dpi = self.dpi
        legend_top = self._place_legend(w, h)
        em_title, em_tick = self._em(TITLE_PT, dpi), self._em(TICK_PT, dpi)
        self.image.visible = self.ticks.visible = self.tick_marks.visible = self.show_bar
        if not self.show_bar:
            self.title.text = ""
            self._title_state = self._tick_labels = self._bar_geometry = None
            self.tick_pos = np.zeros((0, 2))
            return
        chars = max(4, int((w - 2 * MARGIN) / text_size("0", TITLE_PT, dpi)[0]))
        title = _wrap(self.label, chars)
        lines = title.count("\n") + 1 if title else 0
        title_h = 1.25 * em_title * lines + (MARGIN if lines else 0)
        # Text and transforms are set only when they change: a VisPy Text lays its glyphs out again
        # whenever its text is set, and a new transform object rebuilds (recompiles) the visual's
        # shader program. With an automatic range the bar is placed again every frame, and doing
        # both each time cost the UI thread ~9 ms a frame (and the GL context a program link).
        title_state = (title, (w / 2, h - MARGIN - title_h / 2))
        if title_state != self._title_state:
            self._title_state = title_state
            self.title.text, self.title.pos = title_state
        # the end labels are centred on the bar's ends: half a label of room beyond each end
        half = em_tick / 2 + 2
        bottom = legend_top + MARGIN + half
        top = h - MARGIN - title_h - half
        bar_h = max(top - bottom, 8.0)
        if isinstance(self.image.transform, STTransform):
            self.image.transform.scale = (BAR_W, bar_h / 256)  # uniforms only: the program stays
            self.image.transform.translate = (X0, bottom)
        else:
            self.image.transform = STTransform(scale=(BAR_W, bar_h / 256), translate=(X0, bottom))
        self.bar_rect = (X0, int(round(h - (bottom + bar_h))), BAR_W, int(round(bar_h)))
        self._bar_geometry = (bottom, bar_h, w)
        self._place_ticks(bottom, bar_h, w)

    def _place_ticks(self, bottom: float, bar_h: float, w: float) -> None:
        lo, hi = self.range
        dpi = self.dpi
        lx = X0 + BAR_W + 6
        lo_s, hi_s = range_labels(lo, hi)
        em = self._em(TICK_PT, dpi)
        if bar_h >= em + 4:  # both ends fit apart: the range as given, nice values between
            values, labels = nice_ticks(lo, hi, bar_h, TICK_PT, dpi, along="y", avoid=(lo, hi), spacing_em=6.0,
                                        max_width_px=w - lx - MARGIN) if hi > lo else ([], [])
            values, labels = [lo, *values, hi], [lo_s, *labels, hi_s]
        else:  # a bar shorter than two labels: only its top value
            values, labels = [hi], [hi_s]
        t = np.array([(v - lo) / (hi - lo) if hi > lo else 1.0 for v in values])
        ys = bottom + np.clip(t, 0.0, 1.0) * bar_h
        tick_pos = np.stack([np.full(len(ys), lx), ys], axis=1)
        if list(labels) == self._tick_labels and np.array_equal(tick_pos, self.tick_pos):
            return
        self._tick_labels = list(labels)
        self.ticks.text = labels
        self.tick_pos = tick_pos
        self.ticks.pos = self.tick_pos
        left, right = np.full(len(ys), X0 + BAR_W), np.full(len(ys), X0 + BAR_W + 4)
        segs = np.stack([np.stack([left, ys], 1), np.stack([right, ys], 1)], axis=1).reshape(-1, 2)
        self.tick_marks.set_data(segs.astype(np.float32))

    def _place_legend(self, w: float, h: float) -> float:
        """Lay the legend out from the column's bottom up; returns the height it takes.

        Only when the legend, the column's height or the dpi changed: new swatch data makes VisPy's
        Mesh choose its colour source again, which rebuilds (recompiles) its shader program, and new
        text lays every row out again (the bar is placed again whenever its label changes)."""
        lg = self.legend
        on = lg is not None and bool(lg.entries)
        state = (lg, h, self.dpi)
        if state == self._legend_state:
            return self._legend_height
        self._legend_state, self._legend_height = state, 0.0
        self.legend_swatches.visible = self.legend_text.visible = on
        self.legend_rows = []
        if not on:
            return 0.0
        em = self._em(LEGEND_PT, self.dpi)
        texts = ([lg.title] if lg.title else []) + [e.text for e in lg.entries]
        n = len(texts)
        # a row is a label and a gap; rows squeeze (never below one em) before the column runs out
        pitch = max(16.0, 1.45 * em)
        pitch = max(min(pitch, (h - 2 * MARGIN) / n), 1.05 * em)
        ys = [MARGIN + pitch * (n - 1 - i) + pitch / 2 for i in range(n)]
        self.legend_rows = ys
        sw = self._swatch_w(self.dpi)
        verts, cols, pos = [], [], []
        if lg.title:
            pos.append((X0, ys[0]))
        for e, y in zip(lg.entries, ys[n - len(lg.entries):]):
            half_h = min(0.45 * em, pitch / 2 - 1) if e.swatch == "box" else 1.5
            a, b = (X0, y - half_h), (X0 + sw, y + half_h)
            verts.append(np.array([a, (b[0], a[1]), b, a, b, (a[0], b[1])], np.float32))
            cols += [tuple(e.rgba)] * 6
            pos.append((X0 + sw + 6, y))
        v = np.concatenate(verts)
        self.legend_swatches.set_data(vertices=v, faces=np.arange(len(v), dtype=np.uint32).reshape(-1, 3),
                                      vertex_colors=np.array(cols, np.float32))
        self.legend_text.text = texts
        self.legend_text.pos = np.array(pos, np.float32)
        self._legend_height = MARGIN + pitch * n
        return self._legend_height


def _wrap(text: str, width: int) -> str:
    """Break a long title into lines of about ``width`` characters (the column is narrow)."""
    words, lines, cur = text.split(), [], ""
    for word in words:
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}".strip()
    if cur:
        lines.append(cur)
    return "\n".join(lines[:3])

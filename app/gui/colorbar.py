"""The colour bar beside the field: the colormap's LUT as a vertical gradient (the same 256-entry
table the field is drawn with), the field's label and units, and the current range with three
ticks between; below it, when octree leaves are drawn, a legend of their level colours.

It is a VisPy ViewBox of its own (pixel units, y up) in a column the canvas keeps to the right of
the field, so it never covers the field, and it is in every frame the canvas renders (PNG and MP4
exports too, unless the window turns that off).
"""
from __future__ import annotations

import numpy as np
from nagare.app import colormaps
from vispy import scene
from vispy.color import Colormap
from vispy.visuals.transforms import STTransform

WIDTH = 100  # logical px of the column
BAR_W = 18
TICKS = 5  # values written beside the bar: lo, three between, hi


def fmt(v: float) -> str:
    v = float(v)
    if v == 0:
        return "0"
    a = abs(v)
    return f"{v:.3g}" if 1e-3 <= a < 1e5 else f"{v:.2e}"


class ColorBar:
    def __init__(self, parent):
        self.view = scene.widgets.ViewBox(parent=parent, border_width=0, bgcolor=(0.1, 0.1, 0.12, 1))
        self.view.camera = scene.PanZoomCamera(aspect=None)
        self.view.camera.interactive = False
        self.image = scene.visuals.Image(np.linspace(0, 1, 256, dtype=np.float32)[:, None], texture_format="r32f",
                                         cmap=Colormap(colormaps.lut("viridis")), clim=(0, 1),
                                         interpolation="nearest", parent=self.view.scene)
        self.title = scene.visuals.Text("", color="white", font_size=9, anchor_x="center", anchor_y="center",
                                        parent=self.view.scene)
        self.ticks = scene.visuals.Text("", color=(0.9, 0.9, 0.9, 1), font_size=8, anchor_x="left",
                                        anchor_y="center", parent=self.view.scene)
        self.tick_marks = scene.visuals.Line(connect="segments", color=(0.9, 0.9, 0.9, 1), parent=self.view.scene)
        self.legend_swatches = scene.visuals.Mesh(parent=self.view.scene)
        self.legend_text = scene.visuals.Text("", color="white", font_size=8, anchor_x="left", anchor_y="center",
                                              parent=self.view.scene)
        self.legend_swatches.visible = self.legend_text.visible = False
        self.size = (WIDTH, 100)
        self.range = (0.0, 1.0)
        self.label = ""
        self.cmap = "viridis"
        self.levels: list[int] | None = None
        self.bar_rect = (0, 0, 0, 0)  # x, y (from the top), w, h in the bar's view, logical px
        self.show_bar = True

    @property
    def visible(self) -> bool:
        return self.view.visible

    @visible.setter
    def visible(self, on: bool) -> None:
        self.view.visible = on

    def set_colormap(self, name: str) -> None:
        self.cmap = name
        self.image.cmap = Colormap(colormaps.lut(name))

    def set(self, lo: float, hi: float, label: str, units: str) -> None:
        text = label + (f" [{units}]" if units else "")
        if (lo, hi) == self.range and text == self.label:
            return
        self.range, self.label = (lo, hi), text
        self._place()

    def set_levels(self, levels: list[int] | None, colours=None) -> None:
        if levels == self.levels:
            return
        self.levels = levels
        self._colours = colours
        self._place()

    def resize(self, w: float, h: float) -> None:
        self.size = (w, h)
        self.view.camera.rect = (0, 0, max(w, 1), max(h, 1))
        self._place()

    def _place(self) -> None:
        w, h = self.size
        legend_h = 0 if not self.levels else 16 * (len(self.levels) + 1) + 8
        top = h - 34  # room for the title
        bottom = 14 + legend_h
        bar_h = max(top - bottom, 8)
        x0 = 10
        self.image.visible = self.ticks.visible = self.tick_marks.visible = self.show_bar
        self.image.transform = STTransform(scale=(BAR_W, bar_h / 256), translate=(x0, bottom))
        self.bar_rect = (x0, h - (bottom + bar_h), BAR_W, bar_h)
        self.title.text = _wrap(self.label, 14) if self.show_bar else ""
        self.title.pos = (w / 2, h - 16)
        lo, hi = self.range
        ys = bottom + np.linspace(0, bar_h, TICKS)
        self.ticks.text = [fmt(lo + (hi - lo) * t) for t in np.linspace(0, 1, TICKS)]
        self.ticks.pos = np.stack([np.full(TICKS, x0 + BAR_W + 6), ys], axis=1)
        left, right = np.full(TICKS, x0 + BAR_W), np.full(TICKS, x0 + BAR_W + 4)
        segs = np.stack([np.stack([left, ys], 1), np.stack([right, ys], 1)], axis=1).reshape(-1, 2)
        self.tick_marks.set_data(segs.astype(np.float32))
        on = bool(self.levels)
        self.legend_swatches.visible = self.legend_text.visible = on
        if on:
            verts, cols, texts, pos = [], [], ["leaf level"], [(x0, 8 + 16 * len(self.levels))]
            for i, lev in enumerate(self.levels):
                y = 8 + 16 * (len(self.levels) - 1 - i)
                a, b = (x0, y - 5), (x0 + 12, y + 5)
                sq = np.array([a, (b[0], a[1]), b, a, b, (a[0], b[1])], np.float32)
                verts.append(sq)
                cols += [self._colours[i]] * 6
                texts.append(f"level {lev}")
                pos.append((x0 + 18, y))
            v = np.concatenate(verts)
            self.legend_swatches.set_data(vertices=v, faces=np.arange(len(v), dtype=np.uint32).reshape(-1, 3),
                                          vertex_colors=np.array(cols, np.float32))
            self.legend_text.text = texts
            self.legend_text.pos = np.array(pos, np.float32)


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

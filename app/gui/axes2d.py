"""Axes of the 2D views: an x axis under the field and a y (or value) axis left of it, with tick
labels and titles that carry units ("x [cells]", "y [m]", "φ").

Every 2D kind gets them the same way: its Drawer says what the axes are (:meth:`Drawer.axes
<nagare.app.gui.drawer.Drawer.axes>` returns an :class:`AxesSpec`, None for the 3D views, which
draw their own box axes), the canvas keeps a strip left of and one under the field for them
(:meth:`FieldCanvas.relayout`), and before every draw the ticks follow what the pan/zoom camera
shows, so they stay right while the user pans and zooms. Ticks, labels and the axis line cover the
field's extent (the domain, :attr:`AxesSpec.extent`) only: a view taller than the domain leaves the
strip beside the empty part bare. A label that would stick out of its strip's end (the domain's end
label at the field's edge) is moved inward to fit, unless it would then touch its neighbour.

Tick values and labels come from :mod:`.ticks` (nice steps, labels that never overlap). The strips
are ViewBoxes in pixel units (like the colour bar), so nothing here is scaled by the camera.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from vispy import scene

from .laid_out_text import LaidOutText
from .ticks import nice_ticks, text_size
from .ticks import with_ends as ticks_with_ends

TICK_PT, TITLE_PT = 8, 9
TICK_LEN = 5
LABEL_CHARS = 8  # the left strip fits tick labels this long ("-1.0e-05"); longer steps are passed over
COLOUR = (0.85, 0.85, 0.88, 1)
GAP_PX = 4.0  # the least room between two tick labels (as nice_ticks keeps it)
SPACING_EM = 4.0  # the least distance between neighbouring ticks, in em of the tick labels


@dataclass(frozen=True)
class AxesSpec:
    """What a 2D view's axes show: their titles (with units), the offset of the world
    coordinates the labels add (a grid drawn from 0 whose first cell is at x0 labels x0) and the
    field's extent along x and y in world coordinates (before the offset): ticks only there. None
    along an axis: no bound (a profile's values)."""

    x_title: str
    y_title: str
    origin: tuple[float, float] = (0.0, 0.0)
    extent: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None)


def strip_sizes(dpi: float) -> tuple[int, int]:
    """(width of the left strip, height of the bottom strip) in logical px at ``dpi``."""
    em_t, em_title = TICK_PT / 72 * dpi, TITLE_PT / 72 * dpi
    label_w = text_size("0" * LABEL_CHARS, TICK_PT, dpi)[0]
    left = 4 + 1.3 * em_title + 4 + label_w + 4 + TICK_LEN
    bottom = TICK_LEN + 3 + em_t + 5 + 1.3 * em_title + 2
    return int(math.ceil(left)), int(math.ceil(bottom))


class _Strip:
    """One axis: a pixel-unit ViewBox with the axis line and tick marks, tick labels and a title."""

    def __init__(self, parent, vertical: bool):
        self.vertical = vertical
        # no background of its own: the strip shows the canvas' clear colour, which is what its
        # background was painted in (nothing else draws there), and a background is a draw a frame
        self.view = scene.widgets.ViewBox(parent=parent, border_width=0)
        self.view.camera = scene.PanZoomCamera(aspect=None)
        self.view.camera.interactive = False
        self.lines = scene.visuals.Line(connect="segments", color=COLOUR, parent=self.view.scene)
        self.labels = LaidOutText("", color=COLOUR, font_size=TICK_PT, parent=self.view.scene,
                                  anchor_x="right" if vertical else "center",
                                  # under the axis: VisPy's anchors are for y down, the strip's y is up
                                  anchor_y="center" if vertical else "bottom")
        self.title = LaidOutText("", color="white", font_size=TITLE_PT, parent=self.view.scene,
                                 anchor_x="center", anchor_y="center", rotation=-90.0 if vertical else 0.0)
        self.size = (1, 1)
        self.values: list[float] = []
        self.texts: list[str] = []
        self.positions = np.zeros(0)  # px of each tick along the axis (strip coordinates)
        self.label_positions = np.zeros(0)  # px of each label's centre (an end label moved inward to fit)

    def place(self, pos, size) -> None:
        self.view.pos, self.view.size = pos, size
        self.size = (max(size[0], 1), max(size[1], 1))
        self.view.camera.rect = (0, 0, *self.size)

    def draw(self, lo: float, hi: float, offset_px: float, length_px: float, title: str, dpi: float,
             title_px: float, ends: tuple[bool, bool] = (False, False)) -> None:
        """Ticks for world values lo..hi along ``length_px`` px that start ``offset_px`` into the strip
        (nothing when ``length_px`` ≤ 0: the domain is out of view); the title centred ``title_px``
        along the strip. ``ends``: lo, hi are the domain's ends (labelled where they fit)."""
        w, h = self.size
        along = "y" if self.vertical else "x"
        max_w = (w - 4 - 1.3 * TITLE_PT / 72 * dpi - 4 - TICK_LEN) if self.vertical else None
        values, texts = [], []
        if length_px > 0 and hi > lo:
            values, texts = nice_ticks(lo, hi, length_px, TICK_PT, dpi, along=along, spacing_em=SPACING_EM,
                                       max_width_px=max_w)
            values, texts = with_ends(values, texts, lo, hi, ends, length_px, dpi, along, max_w)
        pos = offset_px + (np.asarray(values, np.float64) - lo) / (hi - lo) * length_px
        sizes = np.array([text_size(t, TICK_PT, dpi)[0 if along == "x" else 1] for t in texts])
        keep, centres = fit_labels(pos, sizes, h if self.vertical else w)
        self.values = [v for v, k in zip(values, keep) if k]
        self.texts = [t for t, k in zip(texts, keep) if k]
        self.positions = pos[keep]
        self.label_positions = centres[keep]
        segs = []
        if self.vertical:  # axis line along the strip's right edge, ticks pointing left
            x = w - 0.5
            if length_px > 0:
                segs = [[(x, offset_px), (x, offset_px + length_px)]]
            segs += [[(x, p), (x - TICK_LEN, p)] for p in self.positions]
            label_pos = [(x - TICK_LEN - 3, p) for p in self.label_positions]
            self.title.pos = (4 + 0.65 * TITLE_PT / 72 * dpi, title_px)
        else:  # axis line along the strip's top edge, ticks pointing down
            y = h - 0.5
            if length_px > 0:
                segs = [[(offset_px, y), (offset_px + length_px, y)]]
            segs += [[(p, y), (p, y - TICK_LEN)] for p in self.positions]
            label_pos = [(p, y - TICK_LEN - 3) for p in self.label_positions]
            self.title.pos = (title_px, 2 + 0.65 * TITLE_PT / 72 * dpi)
        self.lines.visible = bool(segs)
        self.lines.set_data(np.array(segs or [[(0.0, 0.0), (0.0, 0.0)]], np.float32).reshape(-1, 2))
        self.labels.text = self.texts if self.texts else [""]
        self.labels.pos = np.array(label_pos or [(0.0, 0.0)], np.float32)
        self.title.text = title


def fit_labels(pos, sizes, end: float, gap_px: float = GAP_PX) -> tuple[np.ndarray, np.ndarray]:
    """Which tick labels a strip ``end`` px long shows, and their centres: a label that would stick
    out of either end (an end tick at the field's edge) moves inward until it fits; one that then
    comes closer than ``gap_px`` to its neighbour's label, or is longer than the strip, is left
    out (of two that touch, the one moved further). ``pos``: the ticks (px, ascending); ``sizes``:
    the labels' extents along the strip."""
    pos = np.asarray(pos, np.float64)
    half = np.asarray(sizes, np.float64) / 2
    centres = np.clip(pos, half, end - half) if len(pos) else pos.copy()
    keep = 2 * half <= end
    moved = np.abs(centres - pos)
    prev = None
    for i in range(len(pos)):
        if not keep[i]:
            continue
        if prev is not None and centres[i] - half[i] < centres[prev] + half[prev] + gap_px:
            drop = i if moved[i] >= moved[prev] else prev
            keep[drop] = False
            if drop == i:
                continue
        prev = i
    return keep, centres


def with_ends(values: list[float], texts: list[str], lo: float, hi: float, ends: tuple[bool, bool],
              length_px: float, dpi: float, along: str, max_w: float | None) -> tuple[list[float], list[str]]:
    """The ticks ``values``/``texts`` over lo..hi (``length_px`` long) with the domain's ends added
    where ``ends`` says lo or hi is one (ticks.with_ends, at this strip's font and spacing)."""
    return ticks_with_ends(values, texts, lo, hi, ends, length_px, TICK_PT, dpi, along, max_w, GAP_PX, SPACING_EM)


def _within(lo: float, hi: float, bound: tuple[float, float] | None) -> tuple[float, float]:
    """lo..hi cut to ``bound`` (None: not cut); empty (lo ≥ hi) when they do not meet."""
    if bound is None:
        return lo, hi
    return max(lo, float(bound[0])), min(hi, float(bound[1]))


class Axes2D:
    """The two axis strips of the canvas (hidden while no 2D kind is shown or axes are off)."""

    def __init__(self, parent):
        self.x = _Strip(parent, vertical=False)
        self.y = _Strip(parent, vertical=True)
        self.spec: AxesSpec | None = None
        self._key = None
        self._field = None  # (x, y, w, h, left strip's width, bottom strip's height) of the last place()
        self.visible = False

    @property
    def visible(self) -> bool:
        return self._visible

    @visible.setter
    def visible(self, on: bool) -> None:
        self._visible = bool(on)
        self.x.view.visible = self.y.view.visible = self._visible
        self._key = None

    def place(self, field_pos, field_size, dpi: float) -> None:
        """Strips beside a field view at ``field_pos`` (logical px, y down) of ``field_size``: the
        left one as tall as the field, the bottom one from the left strip's edge to the field's right.
        :meth:`update` moves them in to the domain's edges where the view shows margin beside it."""
        lw, bh = strip_sizes(dpi)
        (fx, fy), (fw, fh) = field_pos, field_size
        self._field = (float(fx), float(fy), float(fw), float(fh), lw, bh)
        self.y.place((fx - lw, fy), (lw, fh))
        self.x.place((fx - lw, fy + fh), (fw + lw, bh))
        self._key = None

    def _hug_domain(self, tr) -> None:
        """The x axis right under the domain's lower edge, the y axis right beside its left edge,
        where those edges lie inside the view (a domain wider than the view's shape leaves bands above
        and below it: an axis at the view's bottom would stand apart from the field by a band);
        at the view's edges otherwise (zoomed in, or the edge panned out of view). Only the strips'
        positions move: the ticks along them keep their coordinates."""
        if self.spec is None or self._field is None:
            return
        fx, fy, fw, fh, lw, _bh = self._field
        ex, ey = self.spec.extent
        dy = dx = 0.0
        if ey is not None:
            edge = float(tr.map(np.array([[0.0, float(ey[0])]]))[0, 1])  # view px, y down
            if 0.0 < edge < fh:
                dy = edge - fh
        if ex is not None:
            edge = float(tr.map(np.array([[float(ex[0]), 0.0]]))[0, 0])
            if 0.0 < edge < fw:
                dx = edge
        self.x.view.pos = (fx - lw, fy + fh + dy)
        self.y.view.pos = (fx - lw + dx, fy)

    def update(self, view, dpi: float) -> None:
        """Ticks for what ``view`` (the field's ViewBox, pan/zoom camera) shows now."""
        if not self._visible or self.spec is None:
            return
        fw, fh = view.size
        tr = view.scene.node_transform(view)  # world → the view's own pixels (y down)
        (x0, y_top), (x1, y_bottom) = tr.imap(np.array([[0.0, 0.0], [fw, fh]], np.float64))[:, :2]
        ox, oy = self.spec.origin
        key = (round(x0, 9), round(x1, 9), round(y_top, 9), round(y_bottom, 9), fw, fh, dpi, self.spec)
        if key == self._key:
            return
        self._key = key
        self._hug_domain(tr)
        lw = self.y.size[0]
        ex, ey = self.spec.extent
        if x1 > x0:
            # along the strip, which starts under the left strip: px of world x
            a, b = _within(x0, x1, ex)
            pa, pb = (lw + (v - x0) / (x1 - x0) * fw for v in (a, b))
            self.x.draw(a + ox, b + ox, pa, pb - pa, self.spec.x_title, dpi, lw + fw / 2, _ends(a, b, ex))
        lo, hi = sorted((y_bottom, y_top))
        if hi > lo:
            # the strip's y is up from its bottom: world lo at the field's bottom edge
            a, b = _within(lo, hi, ey)
            pa, pb = ((v - lo) / (hi - lo) * fh for v in (a, b))
            self.y.draw(a + oy, b + oy, pa, pb - pa, self.spec.y_title, dpi, fh / 2, _ends(a, b, ey))


def _ends(a: float, b: float, bound: tuple[float, float] | None) -> tuple[bool, bool]:
    """Whether a, b (cut by _within) are the domain's own ends, not the view's edges."""
    if bound is None:
        return False, False
    return a == float(bound[0]), b == float(bound[1])

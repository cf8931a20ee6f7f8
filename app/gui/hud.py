"""The imgui HUD drawn inside the VisPy canvas, on top of the scene.

imgui-bundle has no Qt backend, so this module has the two halves of one:

- :class:`QtImguiBridge`: VisPy canvas events (which carry Qt's mouse and wheel input) → imgui's
  IO queue (``add_mouse_pos_event`` / ``add_mouse_button_event`` / ``add_mouse_wheel_event``).
  When imgui wants the mouse (the pointer is over a HUD window), the event is blocked so the
  camera does not pan/zoom underneath the HUD.
- rendering with imgui-bundle's pure-Python OpenGL renderer (PyOpenGL) after VisPy has drawn, in
  the same GL context (it saves and restores the GL state it touches).

Content: implot charts of per-phase ms/step and of throughput over the last N seconds, a
roofline gauge (% of the measured copy bandwidth), the engine's logged quantities (a body's drag
coefficient, ...: the current value and a plot of the last QUANTITY_SAMPLES readings; only when
the engine has any), and quick toggles for every variant axis (unavailable choices disabled, the
reason as tooltip). F1 shows/hides it (window.py).

Docking: the HUD is pinned to the canvas' top-left corner, WIDTH logical pixels wide and as tall
as its content, and the canvas lays the field out right of it or under it, whichever shows the
field larger (FieldCanvas.relayout asks :meth:`Hud.footprint`, dock.field_origin chooses), so it
never covers the field. Collapsing it (the arrow of its title bar) leaves only the title bar: the
field then takes the whole width below that strip.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from nagare.engine.errors import one_line

from .hud_fonts import load_fonts, spelled
from .plot_limits import plot_series, setup_fitted_axes
from .text_wrap import wrap_lines

log = logging.getLogger("nagare")

_BUTTONS = {1: 0, 2: 1, 3: 2}  # VisPy: 1 left, 2 right, 3 middle → imgui 0 left, 1 right, 2 middle
PHASE_PLOT_ID = "##ms by phase"  # the phase chart's id; its title is drawn above it (Hud._draw)


class QtImguiBridge:
    """Feeds a VisPy/Qt canvas' mouse input to an imgui context."""

    def __init__(self, canvas, hud: Hud):
        self.hud = hud
        self._over = False  # the pointer was over the HUD's window at the last move
        ev = canvas.events
        ev.mouse_move.connect(self.on_mouse_move, position="first")
        ev.mouse_press.connect(self.on_mouse_press, position="first")
        ev.mouse_release.connect(self.on_mouse_release, position="first")
        ev.mouse_wheel.connect(self.on_mouse_wheel, position="first")

    def _io(self):
        if not self.hud.visible or self.hud.ctx is None:
            return None
        # imgui-bundle: deferred as in _ensure (≈0.5 s, only once the HUD is drawn)
        from imgui_bundle import imgui

        imgui.set_current_context(self.hud.ctx)
        return imgui.get_io()

    def _pos(self, io, event):
        x, y = event.pos[:2]
        io.add_mouse_pos_event(float(x), float(y))

    def _capture(self, io, event, redraw: bool = True):
        if io.want_capture_mouse:
            event.handled = True
            event.blocked = True
        if redraw:
            self.hud.canvas.update()

    def on_mouse_move(self, event):
        io = self._io()
        if io is not None:
            self._pos(io, event)
            # A frame for imgui only where it can show something new: the pointer over the HUD's
            # window or just off it (hover highlights, tooltips), or a drag imgui holds. A move
            # over the scene alone redraws nothing: a redraw holds the GIL the simulation needs,
            # and the camera, probes and slice drags ask for their own frames when they change.
            over = self.hud.covers(event.pos)
            self._capture(io, event, redraw=over or self._over or io.want_capture_mouse)
            self._over = over

    def on_mouse_press(self, event):
        io = self._io()
        if io is not None and event.button in _BUTTONS:
            self._pos(io, event)
            io.add_mouse_button_event(_BUTTONS[event.button], True)
            self._capture(io, event)

    def on_mouse_release(self, event):
        io = self._io()
        if io is not None and event.button in _BUTTONS:
            self._pos(io, event)
            io.add_mouse_button_event(_BUTTONS[event.button], False)
            self._capture(io, event)

    def on_mouse_wheel(self, event):
        io = self._io()
        if io is not None:
            dx, dy = event.delta[:2]
            io.add_mouse_wheel_event(float(dx), float(dy))
            self._capture(io, event)


WIDTH = 340  # logical px of the docked HUD column
TITLE_H = 22  # ... and of its title strip when collapsed (measured after the first frame)
# the time axes' ticks at most (plot_limits.round_ticks): ~40 px a label in the phase plot (its
# legend outside takes ~80 px of the 320) and in the throughput plot
PHASE_PLOT_TICKS, THROUGHPUT_PLOT_TICKS = 5, 7

# other names: as they are
QUANTITY_LABELS = {"cd": "C_d (drag)", "cl": "C_l (lift)", "cs": "C_s (side)", "l2_error": "RMS error vs exact"}
QUANTITY_SAMPLES = 500  # readings kept per quantity (the worker reads a few a second: minutes of history)


class QuantityHistory:
    """The HUD's record of the engine's logged quantities: per name, a bounded deque of its last
    ``maxlen`` values (the app may run for hours: memory stays ``maxlen`` floats per name).

    Fed from the worker's (run id, samples) feed; a new run id (another preset, a reset) or a
    step that went back (a checkpoint restored) starts a new history."""

    def __init__(self, maxlen: int = QUANTITY_SAMPLES):
        self.maxlen = maxlen
        self.values: dict[str, deque[float]] = {}  # name → values, oldest first, in order of appearance
        self.run: int | None = None
        self.seq = 0  # the newest sample taken (samples' seq increase over the worker's life)
        self.step = -1  # ... and its step

    @property
    def names(self) -> list[str]:
        return list(self.values)

    def clear(self) -> None:
        self.values.clear()
        self.step = -1

    def push(self, step: int, values: dict[str, float]) -> None:
        if step < self.step:
            self.clear()
        self.step = step
        for name, v in values.items():
            self.values.setdefault(name, deque(maxlen=self.maxlen)).append(float(v))

    def update(self, run: int, samples: Sequence) -> None:
        """Take the samples (QuantitySample: seq, step, values) not taken yet."""
        if run != self.run:
            self.clear()
            self.run = run
        for s in samples:
            if s.seq > self.seq:
                self.seq = s.seq
                self.push(s.step, s.values)


def choice_tooltip(info: dict, choice: str) -> str:
    """A variant choice's tooltip (the Variants dock and the HUD's quick toggles): its doc, why it
    is unavailable, or which other choices it switches with it."""
    doc = info.get("docs", {}).get(choice, "")
    lines = [f"{choice}: {doc}" if doc else choice]
    reason = info["choices"].get(choice)
    comp = info.get("companions", {}).get(choice)
    if reason:
        lines.append(f"unavailable: {reason}")
    elif comp:  # runs with other choices it needs: the worker switches them together
        lines.append("also switches " + ", ".join(f"{k} to {v}" for k, v in comp.items()))
    return "\n".join(lines)


def quantity_label(name: str) -> str:
    return QUANTITY_LABELS.get(name, name)


class Hud:
    """State + drawing of the HUD. ``model()`` returns (history, variants, status_text)."""

    def __init__(self, canvas, model: Callable, on_variant: Callable[[str, str], None],
                 history_seconds: float = 20.0):
        self.canvas = canvas
        self.model = model
        self.on_variant = on_variant
        self.history_seconds = history_seconds
        self.visible = True
        self.ctx = None
        self.renderer = None
        self.frames = 0
        self.error: str | None = None
        self._t_last = time.perf_counter()
        self.collapsed = False
        self.title_h = TITLE_H
        self.rect = (0.0, 0.0, 0.0, 0.0)  # the HUD window as drawn: x, y, w, h (logical px)
        self.height: float | None = None  # the expanded window's height as last drawn (its content's)
        self._content_h: float | None = None  # the expanded window's content height, last frame
        self.extra: Callable | None = None  # draws more content (the probe's profile plot)
        # () → (run id, samples): the worker's logged quantities (SimulationWorker.quantities);
        # set by the window once its worker exists
        self.quantity_source: Callable | None = None
        self.quantities = QuantityHistory()
        self._want_collapsed: bool | None = None
        self.toggle_rows_fit = True  # every quick toggle drawn inside the HUD's width (the last frame)
        self.status_shown = ""  # the status line of the last frame drawn
        self.bridge = QtImguiBridge(canvas, self)

    def set_collapsed(self, on: bool) -> None:
        """Collapse (or expand) the HUD from the next frame on, as its title-bar arrow does."""
        self._want_collapsed = on
        self.canvas.update()

    def covers(self, pos) -> bool:
        """Whether the canvas point ``pos`` (logical px) lies on the HUD's window as last drawn."""
        x, y, w, h = self.rect
        return x <= pos[0] < x + w and y <= pos[1] < y + h

    def footprint(self) -> tuple[float, float] | None:
        """(w, h) in logical px of the docked HUD at the canvas' top-left corner, which the field must
        keep clear of (dock.field_origin puts it right of that or under it): the title strip when
        collapsed, else the window as tall as its content was last drawn (the full height before the
        first frame measured it). None: no HUD (it could not start)."""
        if self.error is not None:
            return None
        if self.collapsed:
            return WIDTH, self.title_h
        return WIDTH, self.height if self.height is not None else float(self.canvas.size[1])

    def _ensure(self) -> bool:
        if self.error is not None:
            return False
        if self.ctx is not None:
            return True
        try:
            # imgui-bundle (≈0.5 s) loads when the HUD is first drawn: a window without it never pays
            from imgui_bundle import imgui, implot

            from .hud_gl import LeanRenderer

            self.ctx = imgui.create_context()
            imgui.set_current_context(self.ctx)
            self.plot_ctx = implot.create_context()
            implot.set_current_context(self.plot_ctx)
            io = imgui.get_io()
            io.set_ini_filename("")  # no imgui.ini littering the user's folder
            load_fonts(io)  # ∞, ², Greek, "·" (hud_fonts.py)
            imgui.style_colors_dark()
            self.renderer = LeanRenderer()
        except Exception as exc:  # missing PyOpenGL, GL too old: the app runs without the HUD
            self.error = f"HUD unavailable ({type(exc).__name__}: {exc})"
            log.warning("nagare: %s", self.error)
            self.canvas.relayout()  # the field takes the room the HUD held (footprint: None from now on)
            return False
        return True

    def render(self, physical_size, pixel_scale: float = 1.0, gl_known: dict | None = None) -> None:
        """One HUD frame over what is drawn; ``gl_known``: GL state the caller knows GL has now
        (the canvas' state filter's record: hud_gl.py asks GL only for the rest)."""
        if not self._ensure():
            return
        # imgui-bundle: deferred as in _ensure (≈0.5 s, only once the HUD is drawn)
        from imgui_bundle import imgui, implot

        imgui.set_current_context(self.ctx)
        implot.set_current_context(self.plot_ctx)
        io = imgui.get_io()
        w, h = physical_size
        io.display_size = (w / pixel_scale, h / pixel_scale)
        io.display_framebuffer_scale = (pixel_scale, pixel_scale)
        now = time.perf_counter()
        io.delta_time = max(now - self._t_last, 1e-4)
        self._t_last = now
        imgui.new_frame()
        try:
            self._draw()
        finally:
            imgui.render()
        try:
            self.renderer.render(imgui.get_draw_data(), gl_known)
        except Exception as exc:
            if getattr(self.renderer, "lean", False):
                # the lean renderer's own GL entry points or state record failed on this GL:
                # imgui-bundle's renderer from the next frame on, said once
                from .hud_gl import StockRenderer

                log.warning("nagare: the HUD's GL renderer failed (%s); imgui-bundle's renderer from now on",
                            one_line(exc))
                self.renderer = StockRenderer()
                return
            raise
        self.frames += 1

    # ---- content -----------------------------------------------------------------------
    def _draw(self) -> None:
        # imgui-bundle: deferred as in _ensure (≈0.5 s, only once the HUD is drawn)
        from imgui_bundle import imgui, implot

        history, variants, status = self.model()
        if self.quantity_source is not None:  # taken even when collapsed: no gaps when it opens again
            self.quantities.update(*self.quantity_source())
        io = imgui.get_io()
        # docked: pinned to the top-left corner, a fixed width (the field is laid out right of it or under it)
        imgui.set_next_window_pos((0, 0), imgui.Cond_.always)
        # as tall as the last frame's content, at most the canvas (a scroll bar then), the whole
        # height before the first frame measured it: the field may take the room under a short HUD
        # (dock.field_origin). Not imgui's auto-fit (size 0), which hides a window's first frame.
        full = max(float(io.display_size[1]), 1.0)
        tall = full if self._content_h is None else min(self._content_h, full)
        imgui.set_next_window_size((WIDTH, tall), imgui.Cond_.always)
        imgui.set_next_window_bg_alpha(0.9)
        if self._want_collapsed is not None:
            imgui.set_next_window_collapsed(self._want_collapsed, imgui.Cond_.always)
            self._want_collapsed = None
        flags = imgui.WindowFlags_.no_move | imgui.WindowFlags_.no_resize | imgui.WindowFlags_.no_saved_settings
        expanded = imgui.begin("nagare  (F1 hides)", None, flags)[0]
        collapsed = imgui.is_window_collapsed()
        pos, size = imgui.get_window_pos(), imgui.get_window_size()
        self.rect = (pos.x, pos.y, size.x, size.y)
        title_h = imgui.get_frame_height()
        height = None if collapsed else float(size.y)
        if (collapsed != self.collapsed or (collapsed and abs(title_h - self.title_h) > 0.5)
                or (height is not None and (self.height is None or abs(height - self.height) > 0.5))):
            self.collapsed, self.title_h = collapsed, title_h
            if height is not None:
                self.height = height
            self.canvas.relayout()  # takes effect from the next frame
        if not expanded:
            imgui.end()
            return
        self.status_shown = status = spelled(status)  # what the HUD's status line reads (tests)
        imgui.text(status)
        last = history[-1] if history else None
        frac = (last.roofline_pct or 0.0) / 100 if last else 0.0
        imgui.text("roofline (measured copy bandwidth)")
        imgui.progress_bar(min(max(frac, 0.0), 1.0), (320, 0),
                           f"{100 * frac:.1f} %  ({last.gbytes_per_s:.2f} GB/s)" if last else "no timings yet")
        if history:
            t_now = history[-1].wall
            t = np.array([s.wall - t_now for s in history], np.float64)
            keep = t >= -self.history_seconds
            t = t[keep]
            hist = [s for s, k in zip(history, keep) if k]
            phases = sorted({p for s in hist for p in s.phase_ms})
            # the legend outside the lines, right of them, one row a phase: the plot grows with the
            # phases (inside, 5+ phases ran past the plot's bottom and covered the lines)
            height = max(130, 44 + 15 * len(phases))
            # the title above the plot, not in it: implot centres a title over the plot area, which
            # the legend outside narrows until the title is cut ("last 20")
            imgui.text(f"ms / step by phase, last {self.history_seconds:.0f} s")
            if implot.begin_plot(PHASE_PLOT_ID, (320, height)):
                implot.setup_legend(implot.Location_.north_east, implot.LegendFlags_.outside)
                ys = [np.array([s.phase_ms.get(p, np.nan) for s in hist], np.float64) for p in phases]
                setup_fitted_axes(implot, "", "", t, ys, x_ticks=PHASE_PLOT_TICKS)
                for p, y in zip(phases, ys):
                    plot_series(implot, p, t, y)
                implot.end_plot()
            if implot.begin_plot("throughput, M updates/s", (320, 110), implot.Flags_.no_legend):
                y = np.array([s.updates_per_s / 1e6 for s in hist], np.float64)
                setup_fitted_axes(implot, "", "", t, [y], x_ticks=THROUGHPUT_PLOT_TICKS)
                plot_series(implot, "MUPS", t, y)
                implot.end_plot()
        self._draw_quantities()
        if variants and imgui.collapsing_header("variants (quick toggles)"):
            style = imgui.get_style()
            right = imgui.get_cursor_screen_pos().x + imgui.get_content_region_avail().x  # the rows' right edge
            self.toggle_rows_fit = True
            for axis, info in variants.items():
                imgui.text(axis)
                if imgui.is_item_hovered():
                    imgui.set_tooltip(spelled(wrap_lines(f"{axis}: {info.get('doc', '')}")))
                for choice, reason in info["choices"].items():
                    # a choice that does not fit beside the last one starts a new line (one row of
                    # radio buttons ran past the HUD's right edge, cut off)
                    width = imgui.get_frame_height() + style.item_inner_spacing.x + imgui.calc_text_size(choice).x
                    if imgui.get_item_rect_max().x + style.item_spacing.x + width <= right:
                        imgui.same_line()
                    if reason:
                        imgui.begin_disabled()
                    clicked = imgui.radio_button(f"{choice}##{axis}", info["current"] == choice)
                    if reason:
                        imgui.end_disabled()
                    if imgui.is_item_hovered(imgui.HoveredFlags_.allow_when_disabled):
                        imgui.set_tooltip(spelled(wrap_lines(choice_tooltip(info, choice))))
                    self.toggle_rows_fit &= imgui.get_item_rect_max().x <= right + 0.5
                    if clicked and not reason and info["current"] != choice:
                        self.on_variant(axis, choice)
        if self.extra is not None:
            self.extra()
        style = imgui.get_style()
        # the content's height: where the next item would go (window coordinates: the scrolled-off part
        # included), less its spacing, plus the padding
        self._content_h = imgui.get_cursor_pos_y() - style.item_spacing.y + style.window_padding.y
        imgui.end()

    def _draw_quantities(self) -> None:
        """The "Quantities" section: per quantity its label, current value (4 significant digits)
        and a line plot of its history. Nothing when the engine logs none."""
        # imgui-bundle: deferred as in _ensure (≈0.5 s, only once the HUD is drawn)
        from imgui_bundle import imgui

        q = self.quantities
        if not q.values or not imgui.collapsing_header("Quantities", imgui.TreeNodeFlags_.default_open):
            return
        imgui.text(f"step {q.step}, last {len(next(iter(q.values.values())))} readings")
        for name, hist in q.values.items():
            y = np.fromiter(hist, np.float32, len(hist))
            imgui.text(spelled(f"{quantity_label(name)}: {y[-1]:.4g}"))
            scale = quantity_scale(y)
            if scale is None:
                continue
            y = np.clip(np.where(np.isfinite(y), y, scale.lo), scale.lo, scale.hi)  # NaN (diverged): the bottom
            # the overlay gives the plot's scale (plot_lines draws no axes)
            imgui.plot_lines(f"##quantity-{name}", y, scale_min=scale.lo, scale_max=scale.hi, graph_size=(320, 44),
                             overlay_text=scale.label)
            if scale.off_scale:
                imgui.text(scale.off_scale)


class QuantityScale(NamedTuple):
    lo: float  # the plot's scale (the data's range with a margin)
    hi: float
    label: str  # the range of the data the scale shows, with digits enough to tell its ends apart
    off_scale: str  # "" or what of the older readings lies outside the scale


def distinct_range(vmin: float, vmax: float, digits: int = 4) -> str:
    """"vmin .. vmax" with the fewest significant digits (≥ ``digits``) that make two different
    ends read differently: a step from 141.99 to 142 read "142 .. 142" at 4 digits."""
    for n in range(digits, 10):
        a, b = f"{vmin:.{n}g}", f"{vmax:.{n}g}"
        if a != b or vmin == vmax:
            break
    return f"{a} .. {b}"


def quantity_scale(y: np.ndarray) -> QuantityScale | None:
    """The scale of a quantity's plot (oldest reading first); None when no reading is finite.

    The scale covers every finite reading, unless the oldest quarter holds an excursion (an
    impulsive start's C_d of 85 at step 1, 1.1 later) that would squeeze the newer three quarters
    into less than a quarter of the plot: then it covers the newer readings only, and
    ``off_scale`` says how many older ones lie outside it and how far."""
    finite = y[np.isfinite(y)]
    if finite.size == 0:
        return None
    vmin, vmax = float(finite.min()), float(finite.max())
    off = ""
    if len(y) >= 8:
        recent = y[len(y) // 4:]
        recent = recent[np.isfinite(recent)]
        if recent.size:
            rmin, rmax = float(recent.min()), float(recent.max())
            if rmax > rmin and (rmax - rmin) < 0.25 * (vmax - vmin):
                older = y[:len(y) // 4]
                older = older[np.isfinite(older)]
                n_out = int(np.count_nonzero((older < rmin) | (older > rmax)))
                off = f"{n_out} older off scale (all readings: {distinct_range(vmin, vmax)})"
                vmin, vmax = rmin, rmax
    pad = 0.05 * (vmax - vmin) or max(abs(vmax) * 1e-3, 1e-12)  # a constant quantity: a flat line mid-plot
    return QuantityScale(vmin - pad, vmax + pad, distinct_range(vmin, vmax), off)

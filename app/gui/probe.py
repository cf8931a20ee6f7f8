"""Probes on a 2D field (or a 3D grid's 2D slice): a click reads the value of the cell under the
pointer; Shift+drag draws a line whose profile (the cell values along it, sampled at
``SAMPLES`` points) the HUD plots live. Both follow every new packet; Esc clears them.

Values come from the packet on screen: on NumPy they are host arrays already; on CuPy the few
cells are gathered on a private stream (the packet's event is done) and copied back — never the
whole field.
"""
from __future__ import annotations

import numpy as np
from vispy import scene

SAMPLES = 200
KINDS = ("grid2d", "grid3d")  # packet kinds whose data is one 2D array of cells
CLICK_PX = 4  # a press and release closer than this is a click (else the camera's drag)


def _modifiers(event) -> set[str]:
    return {getattr(m, "name", str(m)).lower() for m in (event.modifiers or ())}


class Probes:
    def __init__(self, canvas, hud=None, message=None):
        self.canvas = canvas
        self.hud = hud
        self.message = message or (lambda text: None)
        self.point: tuple[float, float] | None = None  # world (x, y) of the point probe
        self.line: tuple[np.ndarray, np.ndarray] | None = None  # world endpoints
        self.value: float | None = None
        self.cell: tuple[int, int] | None = None  # (i, j): column, row of the probed cell
        self.profile: np.ndarray | None = None  # values along the line
        self.distance: np.ndarray | None = None  # world distance from the line's start
        self._press = None
        self._dragging = False
        view = canvas.view
        self.marker = scene.visuals.Markers(pos=np.zeros((1, 2), np.float32), parent=view.scene)
        self.marker.order = 10
        self.label = scene.visuals.Text("", color="white", font_size=9, anchor_x="left", anchor_y="bottom",
                                        parent=view.scene)
        self.label.order = 11
        self.segment = scene.visuals.Line(color=(1, 1, 1, 0.9), width=2, parent=view.scene)
        self.segment.order = 10
        for v in (self.marker, self.label, self.segment):
            v.visible = False
            v.set_gl_state("translucent", depth_test=False)
        ev = canvas.events
        ev.mouse_press.connect(self.on_press, position="first")
        ev.mouse_move.connect(self.on_move, position="first")
        ev.mouse_release.connect(self.on_release, position="first")
        canvas.probe = self
        if hud is not None:
            hud.extra = self.draw_hud

    # ---- geometry ------------------------------------------------------------------------
    def _active(self) -> bool:
        pk = self.canvas.shown
        return pk is not None and pk.kind in KINDS

    def _in_view(self, pos) -> bool:
        (x, y), (w, h) = self.canvas.view.pos, self.canvas.view.size
        return x <= pos[0] < x + w and y <= pos[1] < y + h

    def to_world(self, pos) -> np.ndarray:
        """Canvas pixel (logical, y down) → world (x, y) of the 2D view."""
        tr = self.canvas.scene.node_transform(self.canvas.view.scene)
        return np.asarray(tr.map([pos[0], pos[1]])[:2], np.float64)

    def cells(self, pts: np.ndarray, pk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """World points → (column i, row j, inside) of the packet's cells."""
        ny, nx = pk.data.shape
        ij = np.floor(np.asarray(pts, np.float64) / pk.spacing).astype(np.int64)
        inside = (ij[:, 0] >= 0) & (ij[:, 0] < nx) & (ij[:, 1] >= 0) & (ij[:, 1] < ny)
        return np.clip(ij[:, 0], 0, nx - 1), np.clip(ij[:, 1], 0, ny - 1), inside

    def sample(self, pk, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Values of cells (i, j) of the packet as host float64."""
        data = pk.data
        if pk.backend == "cupy" and not isinstance(data, np.ndarray):
            import cupy

            from .canvas import _copy_stream

            with _copy_stream():
                picked = data[cupy.asarray(j), cupy.asarray(i)]
                return picked.get(stream=_copy_stream()).astype(np.float64)
        return np.asarray(data)[j, i].astype(np.float64)

    # ---- probes --------------------------------------------------------------------------
    def set_point(self, world) -> None:
        self.point = tuple(float(v) for v in world)
        self.on_packet(self.canvas.shown)

    def set_line(self, a, b) -> None:
        self.line = (np.asarray(a, np.float64), np.asarray(b, np.float64))
        self.on_packet(self.canvas.shown)

    def clear(self) -> None:
        self.point = self.line = None
        self.value = self.cell = self.profile = self.distance = None
        for v in (self.marker, self.label, self.segment):
            v.visible = False
        self.canvas.update()

    def on_packet(self, pk) -> None:
        """Read the probes again from a new packet (called by the canvas after each upload)."""
        if pk is None or pk.kind not in KINDS:
            for v in (self.marker, self.label, self.segment):
                v.visible = False
            return
        units = f" {pk.units}" if pk.units else ""
        if self.point is not None:
            i, j, inside = self.cells(np.array([self.point]), pk)
            if inside[0]:
                self.cell = (int(i[0]), int(j[0]))
                self.value = float(self.sample(pk, i, j)[0])
                text = f"{self.value:.4g}{units}"
                self.marker.set_data(np.array([self.point], np.float32), size=9, face_color=(1, 1, 1, 0.0),
                                     edge_color=(1, 1, 1, 1), edge_width=2)
                self.label.text = f"  {text}"
                self.label.pos = np.array([self.point], np.float32)
                self.marker.visible = self.label.visible = True
            else:
                self.value, self.cell = None, None
                self.marker.visible = self.label.visible = False
        if self.line is not None:
            a, b = self.line
            t = np.linspace(0.0, 1.0, SAMPLES)
            pts = a[None] + t[:, None] * (b - a)[None]
            i, j, inside = self.cells(pts, pk)
            vals = self.sample(pk, i, j)
            vals[~inside] = np.nan
            self.profile = vals
            self.distance = t * float(np.linalg.norm(b - a))
            self.segment.set_data(np.array([a, b], np.float32))
            self.segment.visible = True

    # ---- mouse -----------------------------------------------------------------------------
    def _block(self, event) -> None:
        event.handled = True
        event.blocked = True

    def on_press(self, event):
        if event.button != 1 or not self._active() or not self._in_view(event.pos):
            self._press = None
            return
        self._press = (np.asarray(event.pos[:2], np.float64), "shift" in _modifiers(event))
        self._dragging = False
        if self._press[1]:
            self._block(event)  # Shift+drag draws the line: the camera must not pan

    def on_move(self, event):
        if self._press is None or not self._press[1]:
            return
        start, _ = self._press
        pos = np.asarray(event.pos[:2], np.float64)
        if np.linalg.norm(pos - start) >= CLICK_PX:
            self._dragging = True
            self.set_line(self.to_world(start), self.to_world(pos))
        self._block(event)

    def on_release(self, event):
        if self._press is None:
            return
        start, shift = self._press
        self._press = None
        pos = np.asarray(event.pos[:2], np.float64)
        if shift:
            if self._dragging:
                self.set_line(self.to_world(start), self.to_world(pos))
                self.message(f"line probe: {SAMPLES} samples, see the HUD's profile plot")
            self._block(event)
        elif np.linalg.norm(pos - start) < CLICK_PX:
            self.set_point(self.to_world(pos))
            if self.value is not None:
                pk = self.canvas.shown
                self.message(f"probe cell {self.cell}: {pk.label or pk.field_name} = {self.value:.6g}"
                             + (f" {pk.units}" if pk.units else ""))

    # ---- the HUD's profile plot ----------------------------------------------------------------
    def draw_hud(self) -> None:
        if self.profile is None and self.value is None:
            return
        from imgui_bundle import imgui, implot

        imgui.separator()
        if self.value is not None:
            imgui.text(f"probe {self.cell}: {self.value:.5g}")
        if self.profile is None:
            return
        fit = implot.AxisFlags_.auto_fit
        if implot.begin_plot("line probe profile", (320, 150), implot.Flags_.no_legend):
            implot.setup_axes("distance", "", fit, fit)
            ok = np.isfinite(self.profile)
            implot.plot_line("profile", np.ascontiguousarray(self.distance[ok]), np.ascontiguousarray(self.profile[ok]))
            implot.end_plot()

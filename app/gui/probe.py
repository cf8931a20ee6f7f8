"""Probes on a grid field: a click reads the value of the cell under the pointer; Shift+drag draws
a line whose profile (the cell values along it, sampled at ``SAMPLES`` points) the HUD plots live.
Both follow every new packet; Esc clears them.

What "under the pointer" means depends on the view, so the packet kind names a *pick geometry*
(:func:`register_geometry`): a 2D field (``grid2d``, or a 3D grid's single slice ``grid3d``) maps
the pixel through the pan/zoom camera (:class:`FlatGeometry`); the 3D grid view (``volume3d``)
casts a ray through the pixel against its slice planes (``slice_drag.SlicePlaneGeometry``,
registered by ``view3d.register_drawers``). Everything else is the same for every geometry: probes
are world points (2 or 3 coordinates, the field's world units: cell × spacing), the packet's
``data`` is the n-D array of cells they index (:func:`world_to_cells`), and the readout names the
position and the value with their units.

Values come from the packet on screen: on NumPy they are host arrays already; on CuPy the few
cells are gathered on a private stream (the packet's event is done) and copied back — never the
whole field.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from nagare.app.packets import length_units
from vispy import scene

from .drawer import copy_stream, host
from .laid_out_text import LaidOutText
from .plot_limits import setup_fitted_axes

SAMPLES = 200
CLICK_PX = 4  # a press and release closer than this is a click (else the camera's drag)


def _modifiers(event) -> set[str]:
    return {getattr(m, "name", str(m)).lower() for m in (event.modifiers or ())}


# ---- pick geometries ---------------------------------------------------------------------------
@dataclass
class Anchor:
    """Where a press landed: the world point and what a line drawn from it stays on (``plane``:
    (scene axis, coordinate) of a 3D slice plane; None on a 2D field)."""

    point: np.ndarray
    plane: tuple[int, float] | None = None


class FlatGeometry:
    """A 2D field under the pan/zoom camera: a pixel is one world point (x, y)."""

    @staticmethod
    def to_world(canvas, pos) -> np.ndarray:
        """Canvas pixel (logical, y down) → world (x, y) of the 2D view."""
        tr = canvas.scene.node_transform(canvas.view.scene)
        return np.asarray(tr.map([pos[0], pos[1]])[:2], np.float64)

    def pick(self, canvas, pos) -> Anchor | None:
        return Anchor(self.to_world(canvas, pos))

    def drag_end(self, canvas, pos, anchor: Anchor) -> np.ndarray | None:
        return self.to_world(canvas, pos)


GEOMETRIES: dict[str, object] = {}


def register_geometry(kind: str, geometry) -> None:
    """Probe packets of ``kind`` through ``geometry``: an object with ``pick(canvas, pos) -> Anchor |
    None`` (the press; None: nothing to probe there) and ``drag_end(canvas, pos, anchor) -> world
    point | None`` (the far end of a line drawn from the anchor). The packet's ``data`` must be the
    grid of cells (n-D, C order, last axis x) that the world points index."""
    GEOMETRIES[kind] = geometry


register_geometry("grid2d", FlatGeometry())
register_geometry("grid3d", FlatGeometry())


def world_to_cells(pts, shape, spacing: float) -> tuple[np.ndarray, np.ndarray]:
    """World points (m, d) → (cell indices (m, d) in x, y[, z] order, clipped; inside (m,)) of a
    C-order grid of ``shape`` (d axes, the last one x) whose cell i covers [i, i+1)·spacing."""
    pts = np.atleast_2d(np.asarray(pts, np.float64))
    n = np.asarray(shape[::-1], np.int64)  # (nx, ny[, nz])
    ij = np.floor(pts / spacing).astype(np.int64)
    inside = np.all((ij >= 0) & (ij < n), axis=1)
    return np.clip(ij, 0, n - 1), inside


def _fmt_point(p) -> str:
    return "(" + ", ".join(f"{float(v):.4g}" for v in p) + ")"


def shown_point(point, pk) -> np.ndarray:
    """A probe's world point as the axes label it: a 2D field's origin added (Grid2D.origin)."""
    p = np.asarray(point, np.float64)
    origin = getattr(pk, "origin", None) if pk is not None else None
    return p + np.asarray(origin, np.float64) if origin is not None and len(p) == 2 else p


class Probes:
    def __init__(self, canvas, hud=None, message=None):
        self.canvas = canvas
        self.hud = hud
        self.message = message or (lambda text: None)
        self.point: tuple[float, ...] | None = None  # world point of the point probe ((x, y) or (x, y, z))
        self.line: tuple[np.ndarray, np.ndarray] | None = None  # world endpoints
        self.value: float | None = None
        self.cell: tuple[int, ...] | None = None  # (i, j[, k]) of the probed cell: x index first
        self.profile: np.ndarray | None = None  # values along the line
        self.distance: np.ndarray | None = None  # world distance from the line's start
        self._press = None  # (pixel, shift, anchor)
        self._dragging = False
        view = canvas.view
        self.marker = scene.visuals.Markers(pos=np.zeros((1, 2), np.float32), parent=view.scene)
        self.marker.order = 10
        self.label = LaidOutText("", color="white", font_size=9, anchor_x="left", anchor_y="bottom",
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
    def geometry(self, pk=None):
        """The pick geometry of the packet on screen (None: its kind has no probes)."""
        pk = self.canvas.shown if pk is None else pk
        return None if pk is None else GEOMETRIES.get(pk.kind)

    def _active(self) -> bool:
        return self.geometry() is not None

    def _in_view(self, pos) -> bool:
        (x, y), (w, h) = self.canvas.view.pos, self.canvas.view.size
        return x <= pos[0] < x + w and y <= pos[1] < y + h

    def to_world(self, pos) -> np.ndarray:
        """Canvas pixel (logical, y down) → world (x, y) of the 2D view."""
        return FlatGeometry.to_world(self.canvas, pos)

    def cells(self, pts: np.ndarray, pk) -> tuple[np.ndarray, ...]:
        """World points → (column i, row j[, layer k], inside) of the packet's cells."""
        ij, inside = world_to_cells(pts, pk.data.shape, pk.spacing)
        return (*ij.T, inside)

    def sample(self, pk, *idx: np.ndarray) -> np.ndarray:
        """Values of cells (i, j[, k]) (x index first) of the packet as host float64."""
        where = tuple(idx[::-1])  # C order: data[k, j, i]
        data = pk.data
        if pk.backend == "cupy" and not isinstance(data, np.ndarray):
            import cupy  # optional dependency: only a CuPy packet comes here

            with copy_stream():
                picked = data[tuple(cupy.asarray(a) for a in where)]
                return host(picked, "cupy", "probe").astype(np.float64)  # counted: a probe's read is host bytes
        return np.asarray(data)[where].astype(np.float64)

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

    def readout(self, pk=None) -> str:
        """The point probe as one line: position with units, field, value with units."""
        pk = self.canvas.shown if pk is None else pk
        if self.value is None or pk is None:
            return ""
        lu = length_units(pk)
        units = f" {pk.units}" if pk.units else ""
        return (f"probe at {_fmt_point(shown_point(self.point, pk))}{' ' + lu if lu else ''} (cell {self.cell}): "
                f"{pk.label or pk.field_name} = {self.value:.6g}{units}")

    def on_packet(self, pk) -> None:
        """Read the probes again from a new packet (called by the canvas after each upload)."""
        if pk is None or self.geometry(pk) is None:
            for v in (self.marker, self.label, self.segment):
                v.visible = False
            return
        ndim = pk.data.ndim
        if any(p is not None and len(p) != ndim for p in (self.point, self.line and self.line[0])):
            self.clear()  # probes of a 2D field do not carry over to a 3D one (or back)
            return
        units = f" {pk.units}" if pk.units else ""
        if self.point is not None:
            *idx, inside = self.cells(np.array([self.point]), pk)
            if inside[0]:
                self.cell = tuple(int(a[0]) for a in idx)
                self.value = float(self.sample(pk, *idx)[0])
                self.marker.set_data(np.array([self.point], np.float32), size=9, face_color=(1, 1, 1, 0.0),
                                     edge_color=(1, 1, 1, 1), edge_width=2)
                self.label.text = f"  {self.value:.4g}{units}"
                self.label.pos = np.array([self.point], np.float32)
                self.marker.visible = self.label.visible = True
            else:
                self.value, self.cell = None, None
                self.marker.visible = self.label.visible = False
        if self.line is not None:
            a, b = self.line
            t = np.linspace(0.0, 1.0, SAMPLES)
            pts = a[None] + t[:, None] * (b - a)[None]
            *idx, inside = self.cells(pts, pk)
            vals = self.sample(pk, *idx)
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
        self._press = None
        geo = self.geometry()
        if event.button != 1 or geo is None or not self._in_view(event.pos):
            return
        pos = np.asarray(event.pos[:2], np.float64)
        shift = "shift" in _modifiers(event)
        anchor = geo.pick(self.canvas, pos) if shift else None
        if shift and anchor is None:
            return  # a 3D press beside every plane: Shift+drag is the camera's (pan)
        self._press = (pos, shift, anchor)
        self._dragging = False
        if shift:
            self._block(event)  # Shift+drag draws the line: the camera must not pan

    def _drag_line(self, pos) -> None:
        start, _, anchor = self._press
        end = self.geometry().drag_end(self.canvas, pos, anchor)
        if end is not None:
            self.set_line(anchor.point, end)

    def on_move(self, event):
        if self._press is None or not self._press[1]:
            return
        start = self._press[0]
        pos = np.asarray(event.pos[:2], np.float64)
        if np.linalg.norm(pos - start) >= CLICK_PX:
            self._dragging = True
            self._drag_line(pos)
        self._block(event)

    def on_release(self, event):
        if self._press is None:
            return
        start, shift, _ = self._press
        pos = np.asarray(event.pos[:2], np.float64)
        if shift:
            if self._dragging:
                self._drag_line(pos)
                self.message(f"line probe: {SAMPLES} samples, see the HUD's profile plot")
            self._press = None
            self._block(event)
            return
        self._press = None
        geo = self.geometry()
        if geo is None or np.linalg.norm(pos - start) >= CLICK_PX:
            return
        anchor = geo.pick(self.canvas, pos)
        if anchor is None:
            return  # a click beside every slice plane
        self.set_point(anchor.point)
        if self.value is not None:
            self.message(self.readout())

    # ---- the HUD's profile plot ----------------------------------------------------------------
    def draw_hud(self) -> None:
        if self.profile is None and self.value is None:
            return
        # imgui-bundle (≈0.5 s) loads when a probe's plot is first drawn (with the HUD)
        from imgui_bundle import imgui, implot

        imgui.separator()
        if self.value is not None:
            pk = self.canvas.shown
            units = f" {pk.units}" if pk is not None and pk.units else ""
            imgui.text(f"probe {_fmt_point(shown_point(self.point, pk))}: {self.value:.5g}{units}")
        if self.profile is None:
            return
        if implot.begin_plot("line probe profile", (320, 150), implot.Flags_.no_legend):
            ok = np.isfinite(self.profile)
            distance, profile = np.ascontiguousarray(self.distance[ok]), np.ascontiguousarray(self.profile[ok])
            setup_fitted_axes(implot, "distance", "", distance, [profile])  # the profile changes every frame
            implot.plot_line("profile", distance, profile)
            implot.end_plot()

"""The mouse on the 3D grid view's slice planes: dragging a plane along its normal, and the pick
geometry that lets the probes (:mod:`.probe`) read points and lines on the planes.

Mouse, on a ``volume3d`` packet in the 3D view:

- left-drag starting on a slice plane moves that plane along its normal (the nearest plane under
  the pointer; the motion is projected onto the normal's direction on screen, so the plane follows
  the pointer); the view dock's slider follows;
- left-drag starting beside every plane orbits the camera, as before; Ctrl+left-drag orbits
  wherever it starts (over the planes too);
- a click on a plane reads the value there, Shift+drag on a plane draws a line probe on it (the
  probes, through :class:`SlicePlaneGeometry`); Shift+drag beside the planes pans the camera.

The geometry is :mod:`.slice_pick` (pure NumPy); this module only reads the camera's matrix and the
plane state from the canvas and writes the new fraction back (``canvas.set_view3d``).
"""
from __future__ import annotations

import numpy as np
from vispy import scene

from . import slice_pick as sp
from .probe import CLICK_PX, Anchor, _modifiers

ORBIT_DEG_PER_PX = 0.5  # VisPy's turntable: half a degree per pixel


def scene_matrix(canvas) -> np.ndarray:
    """The 4×4 row-vector map world (the view's scene) → canvas logical pixels (slice_pick's M)."""
    tr = canvas.view.scene.node_transform(canvas.scene)
    return np.asarray(tr.map(np.eye(4)), np.float64)


def _volume(canvas):
    """(shape, spacing) of the 3D grid on screen, or None when the 3D view is not showing one."""
    pk = canvas.shown
    if pk is None or pk.kind != "volume3d" or not isinstance(canvas.view.camera, scene.TurntableCamera):
        return None
    return tuple(pk.data.shape), float(pk.spacing)


def pick(canvas, pos):
    """The plane under canvas pixel ``pos``: (PlaneRect, world point), or None."""
    vol = _volume(canvas)
    if vol is None:
        return None
    rects = sp.plane_rects(canvas.view3d.active_planes(), *vol)
    if not rects:
        return None
    origin, direction = sp.pixel_ray(scene_matrix(canvas), pos)
    hit = sp.pick_plane(origin, direction, rects)
    return None if hit is None else (hit[0], hit[2])


class SlicePlaneGeometry:
    """Probe geometry of the 3D grid view (``volume3d``): a pixel reads the nearest slice plane
    under it; a line stays on the plane it started on."""

    def pick(self, canvas, pos) -> Anchor | None:
        hit = pick(canvas, pos)
        if hit is None:
            return None
        rect, point = hit
        return Anchor(point, (rect.axis, rect.coord))

    def drag_end(self, canvas, pos, anchor: Anchor):
        if anchor.plane is None or _volume(canvas) is None:
            return None
        origin, direction = sp.pixel_ray(scene_matrix(canvas), pos)
        hit = sp.ray_plane(origin, direction, *anchor.plane)
        return None if hit is None or hit[0] < 0 else hit[1]


class SliceDrag:
    """Moves slice planes with the mouse (see the module docstring); ``moved(axis, frac)`` is called
    after every change (the window keeps its sliders in sync with it)."""

    def __init__(self, canvas, moved=None):
        self.canvas = canvas
        self.moved = moved or (lambda axis, frac: None)
        self._grab = None  # dict: the plane pressed on and the drag's constants
        self._orbit = None  # (press pixel, azimuth, elevation)
        self.dragging: str | None = None  # the axis name while a plane follows the mouse
        ev = canvas.events
        ev.mouse_press.connect(self.on_press, position="first")
        ev.mouse_move.connect(self.on_move, position="first")
        ev.mouse_release.connect(self.on_release, position="first")

    def _in_view(self, pos) -> bool:
        (x, y), (w, h) = self.canvas.view.pos, self.canvas.view.size
        return x <= pos[0] < x + w and y <= pos[1] < y + h

    @staticmethod
    def _block(event) -> None:
        event.handled = True
        event.blocked = True

    def on_press(self, event):
        self._grab = self._orbit = None
        self.dragging = None
        if event.button != 1 or not self._in_view(event.pos) or _volume(self.canvas) is None:
            return
        pos = np.asarray(event.pos[:2], np.float64)
        mods = _modifiers(event)
        if mods == {"control"}:
            cam = self.canvas.view.camera
            self._orbit = (pos, cam.azimuth, cam.elevation)
            return
        if mods:
            return  # Shift: the probes' line, or the camera's pan
        hit = pick(self.canvas, pos)
        if hit is None:
            return  # beside every plane: the camera orbits
        rect, point = hit
        shape, spacing = _volume(self.canvas)
        n = shape[::-1][rect.axis]
        self._grab = {"axis": rect.name, "frac": float(self.canvas.view3d.planes[rect.name][1]), "n": n,
                      "spacing": spacing, "press": pos,
                      "screen": sp.normal_screen_dir(scene_matrix(self.canvas), point, rect.axis)}
        # not blocked: a press and release without motion is the probes' click

    def on_move(self, event):
        pos = np.asarray(event.pos[:2], np.float64)
        if self._orbit is not None:
            start, az, el = self._orbit
            d = pos - start
            cam = self.canvas.view.camera
            cam.azimuth = az - d[0] * ORBIT_DEG_PER_PX
            cam.elevation = el + d[1] * ORBIT_DEG_PER_PX
            self._block(event)
            return
        g = self._grab
        if g is None:
            return
        d = pos - g["press"]
        self._block(event)  # the camera stays put while the plane is held
        if self.dragging is None and np.linalg.norm(d) < CLICK_PX:
            return
        self.dragging = g["axis"]
        self.drag_to(g, d)

    def drag_to(self, g: dict, dpx) -> float:
        """Put the grabbed plane where a motion of ``dpx`` pixels since the press takes it."""
        dist = sp.drag_distance(g["screen"], dpx)
        frac = sp.drag_fraction(g["frac"], dist, g["n"], g["spacing"])
        axis = g["axis"]
        if frac != self.canvas.view3d.planes[axis][1]:
            self.canvas.set_view3d(planes={axis: [True, frac]})
            self.moved(axis, frac)
        return frac

    def on_release(self, event):
        # the release is where the drag ends (moves in between may have been coalesced)
        g = self._grab
        if g is not None:
            d = np.asarray(event.pos[:2], np.float64) - g["press"]
            if self.dragging is not None or np.linalg.norm(d) >= CLICK_PX:
                self.drag_to(g, d)
        # not blocked: the camera and the scene see the release (the probes take it for a click
        # only if it is within CLICK_PX of the press, as after any other drag)
        self._grab = self._orbit = None
        self.dragging = None

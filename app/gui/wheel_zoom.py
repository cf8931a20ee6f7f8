"""The mouse wheel zooms about the point under the pointer, in 2D and 3D.

2D: VisPy's pan/zoom camera already scales its rectangle about the point under the pointer.
3D: VisPy's turntable scales about its centre (the box centre after framing), so zooming in pushed
an off-centre body out of view. Here a wheel notch over the 3D view scales by the same factor
(1.1 a notch) and moves the centre so that the point under the pointer, on the plane through the
centre facing the camera, stays under the pointer: a point at offset ``p - c`` from the centre is
drawn at ``(p - c) / scale``, so with the scale multiplied by ``s`` the centre becomes
``p + s (c - p)``.
"""
from __future__ import annotations

import numpy as np
from vispy import scene

from . import slice_pick as sp

WHEEL_STEP = 1.1  # scale factor a wheel notch, as VisPy's turntable


def zoom_centre(M, centre, px, s: float) -> np.ndarray | None:
    """The turntable centre after scaling by ``s`` about the world point drawn at canvas pixel
    ``px`` (on the plane through ``centre`` facing the camera); None where no such point exists.
    ``M`` is the world → canvas pixel matrix (slice_pick's)."""
    c = np.asarray(centre, np.float64)
    c_px = sp.project(M, c[None])[0]
    try:
        o, d = sp.pixel_ray(M, px)
        _, d0 = sp.pixel_ray(M, c_px)  # the viewing direction at the centre: the plane's normal
    except ValueError:
        return None
    denom = float(d @ d0)
    if abs(denom) < 1e-12:
        return None
    p = o + d * float((c - o) @ d0) / denom
    return p + s * (c - p)


class WheelZoom:
    """Zooms the 3D view's turntable about the pointer (2D: VisPy's camera does it already)."""

    def __init__(self, canvas):
        self.canvas = canvas
        # before the camera sees the wheel; the HUD's bridge takes events over the HUD, which lies
        # outside the view, so a wheel over the HUD never reaches this
        canvas.events.mouse_wheel.connect(self.on_wheel, position="first")

    def _in_view(self, pos) -> bool:
        (x, y), (w, h) = self.canvas.view.pos, self.canvas.view.size
        return x <= pos[0] < x + w and y <= pos[1] < y + h

    def on_wheel(self, event) -> None:
        cam = self.canvas.view.camera
        if event.handled or not isinstance(cam, scene.TurntableCamera) or not self._in_view(event.pos):
            return
        s = WHEEL_STEP ** -float(event.delta[1])
        tr = self.canvas.view.scene.node_transform(self.canvas.scene)
        M = np.asarray(tr.map(np.eye(4)), np.float64)
        centre = zoom_centre(M, cam.center, event.pos[:2], s)
        if centre is None:
            return  # the camera's own zoom about its centre
        cam.center = tuple(float(v) for v in centre)
        cam.scale_factor = cam.scale_factor * s
        event.handled = True
        event.blocked = True  # the camera must not zoom a second time
        self.canvas.update()

"""The canvas drawer of 1-D profiles (packet kind "profile1d", nagare.app.fieldkinds.profiles): the
computed values as an amber line over the exact solution in blue, pan/zoom camera framing both."""
from __future__ import annotations

import numpy as np
from vispy import scene

from ..fieldkinds import register
from ..fieldkinds.profiles import profile_range
from .canvas import Drawer, host

DATA_COLOUR, EXACT_COLOUR = (0.94, 0.78, 0.31, 1.0), (0.47, 0.67, 1.0, 0.9)


class ProfileDrawer(Drawer):
    visuals = ("profile_exact", "profile_data")
    label = "host (line)"

    def setup(self, canvas) -> None:
        if "profile_data" not in canvas.visuals:
            canvas.add_visual("profile_exact", scene.visuals.Line(color=EXACT_COLOUR, width=2, antialias=True))
            canvas.add_visual("profile_data", scene.visuals.Line(color=DATA_COLOUR, width=2, antialias=True))

    @staticmethod
    def _xy(pk):
        x = np.asarray(host(pk.positions, pk.backend), np.float32)
        y = np.asarray(host(pk.data, pk.backend), np.float32)
        ex = None if pk.payload is None else np.asarray(host(pk.payload, pk.backend), np.float32)
        return x, y, ex

    def upload(self, canvas, pk) -> None:
        x, y, ex = self._xy(pk)
        canvas.visuals["profile_data"].set_data(np.column_stack([x, y]))
        line = canvas.visuals["profile_exact"]
        line.visible = ex is not None
        if ex is not None:
            line.set_data(np.column_stack([x, ex]))

    def fit(self, canvas, pk) -> None:
        x, y, ex = self._xy(pk)
        lo, hi = profile_range(y, ex)
        canvas.view.camera.set_range(x=(float(x.min()), float(x.max())), y=(lo, hi), margin=0.05)


register("draw", "profile1d", ProfileDrawer())

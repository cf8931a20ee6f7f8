"""The canvas drawer of 1-D profiles (packet kind "profile1d", nagare.app.fieldkinds.profiles): the
computed values as an amber line over the exact solution in blue, pan/zoom camera framing both,
axes (x with its units, the value) and a legend naming the two curves in the colour bar's column.

The computed line is opaque and on top; the exact one is a wider, dimmer band under it (the widths
and colours are the headless frames', fieldkinds.profiles): where the two agree (most of a
good run) the amber runs inside the blue band, where they part both show, and the numerical
solution is never covered (an opaque exact line five px wide dominated it)."""
from __future__ import annotations

import numpy as np
from vispy import scene

from ..fieldkinds import register
from ..fieldkinds.profiles import DATA_RGB, DATA_WIDTH, EXACT_ON_BG, EXACT_WIDTH, profile_range
from .axes2d import AxesSpec
from .colorbar import Legend, LegendEntry
from .drawer import Drawer, host
from .ticks import axis_title

DATA_COLOUR = (*(c / 255 for c in DATA_RGB), 1.0)
EXACT_COLOUR = (*(c / 255 for c in EXACT_ON_BG), 1.0)  # the headless frames' translucent band, blended


class ProfileDrawer(Drawer):
    visuals = ("profile_exact", "profile_data")
    label = "host (line)"
    aspect = None  # a line plot: x and the values scale apart (an error of 1e-5 over x in [0, 1])

    def setup(self, canvas) -> None:
        if "profile_data" not in canvas.visuals:
            exact = scene.visuals.Line(color=EXACT_COLOUR, width=EXACT_WIDTH, method="agg")
            data = scene.visuals.Line(color=DATA_COLOUR, width=DATA_WIDTH, method="gl", antialias=True)
            for order, line in enumerate((exact, data)):
                # both lie in z = 0: without the depth test the later (computed) line is drawn over
                line.set_gl_state("translucent", depth_test=False)
                line.order = order
            canvas.add_visual("profile_exact", exact)
            canvas.add_visual("profile_data", data)

    @staticmethod
    def _xy(pk):
        x = np.asarray(host(pk.positions, pk.backend, "profile"), np.float32)
        y = np.asarray(host(pk.data, pk.backend, "profile"), np.float32)
        ex = None if pk.payload is None else np.asarray(host(pk.payload, pk.backend, "profile"), np.float32)
        return x, y, ex

    def upload(self, canvas, pk) -> None:
        x, y, ex = self._xy(pk)
        canvas.visuals["profile_data"].set_data(np.column_stack([x, y]))
        line = canvas.visuals["profile_exact"]
        line.visible = ex is not None
        if ex is not None:
            line.set_data(np.column_stack([x, ex]))
        canvas.legend = legend(pk)

    def fit(self, canvas, pk) -> None:
        x, y, ex = self._xy(pk)
        lo, hi = profile_range(y, ex)
        canvas.view.camera.set_range(x=(float(x.min()), float(x.max())), y=(lo, hi), margin=0.05)

    def axes(self, pk) -> AxesSpec:
        # x is the engine's own coordinate: no unit unless the profile declares one (not "cells")
        # ticks along x only where the profile has points; its values are not bounded
        x = np.asarray(host(pk.positions, pk.backend, "profile"), np.float64)
        extent = ((float(x.min()), float(x.max())) if len(x) else None), None
        return AxesSpec(axis_title("x", pk.length_units), axis_title(pk.label or pk.field_name, pk.units),
                        extent=extent)


def legend(pk) -> Legend:
    """The curves on screen: the computed values and, when the engine knows it, the exact solution
    at the same time."""
    name = pk.label or pk.field_name
    entries = [LegendEntry(f"{name} computed", DATA_COLOUR, "line")]
    if pk.payload is not None:
        entries.append(LegendEntry(f"{name} exact", EXACT_COLOUR, "line"))
    return Legend("", entries)


register("draw", "profile1d", ProfileDrawer())

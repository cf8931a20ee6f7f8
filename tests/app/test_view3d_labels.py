"""The 3D views' axis labels lie outside the box on screen, inside the view and apart from each
other, whatever the camera; the outline is depth tested. The walk saw "y 32" (the axis end of a
y axis running into the picture) over the middle of the data and "z 0.52 m" on its own axis line."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from nagare.app.gui import view3d


def _view(elevation: float, azimuth: float, size, box_lo, box_hi, fill: float = 0.86):
    """A stand-in for a VisPy view: an orbit camera's (orthographic) projection of the box centred
    in a view of ``size`` px, the box spanning ``fill`` of it (y down, as project() returns)."""
    el, az = np.radians(elevation), np.radians(azimuth)
    rz = np.array([[np.cos(az), -np.sin(az), 0], [np.sin(az), np.cos(az), 0], [0, 0, 1]])
    rx = np.array([[1, 0, 0], [0, np.cos(el), -np.sin(el)], [0, np.sin(el), np.cos(el)]])
    rot = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0]]) @ rx.T @ rz  # scene z up → screen up, y → depth
    centre = (np.asarray(box_lo) + np.asarray(box_hi)) / 2
    corners = view3d.box_corners(box_lo, box_hi)
    cam = (corners - centre) @ rot.T
    scale = fill * min(size[0] / np.ptp(cam[:, 0]), size[1] / np.ptp(cam[:, 1]))

    def map_(pts):
        c = (np.atleast_2d(pts) - centre) @ rot.T
        x = size[0] / 2 + scale * c[:, 0]
        y = size[1] / 2 - scale * c[:, 1]
        return np.stack([x, y, np.zeros_like(x), np.ones_like(x)], axis=1)

    return SimpleNamespace(scene=SimpleNamespace(transform=SimpleNamespace(map=map_)), size=size)


@pytest.fixture
def frame(_vispy_on_qt):
    canvas = SimpleNamespace(add_visual=lambda name, node: None)
    return view3d.Frame3D(canvas, "test")


CASES = [  # (box hi, view size, elevation, azimuth): the walk's views and harder ones
    ((32.0, 32.0, 32.0), (700, 700), 30, 30),  # amr3d-periodic: y ran into the picture
    ((64.0, 64.0, 64.0), (338, 814), 30, 30),  # diffusion3d in a narrow canvas
    ((1.84, 0.92, 0.64), (338, 814), 30, 30),  # sph-dambreak3d (lo = -0.12) in the walk's window
    ((96.0, 32.0, 32.0), (900, 500), 60, -40),
    ((16.0, 16.0, 48.0), (500, 700), 5, 80),
    ((32.0, 32.0, 32.0), (700, 700), 89, 0),  # straight down: the z edges seen end-on
]


@pytest.mark.parametrize("hi, size, elevation, azimuth", CASES)
def test_axis_labels_lie_outside_the_box_inside_the_view_and_apart(frame, hi, size, elevation, azimuth):
    lo = (-0.12, -0.12, -0.12) if hi[0] < 2 else (0.0, 0.0, 0.0)
    view = _view(elevation, azimuth, size, lo, hi)
    frame.set_box(lo, hi, "m" if hi[0] < 2 else "cells")  # the units as the drawers give them
    frame.place(view, dpi=96.0)
    hull = view3d._convex_hull(view3d.project(view, view3d.box_corners(lo, hi)))
    centres = view3d.project(view, frame.labels.pos)
    char_w, line_h = 0.6 * view3d.LABEL_PT * 96 / 72, 1.2 * view3d.LABEL_PT * 96 / 72
    rects, units = [], "m" if hi[0] < 2 else "cells"
    for a, (c, text) in enumerate(zip(centres, frame.labels.text)):
        assert text.startswith(view3d.AXES[a] + " ") and text.endswith(f"{hi[a]:.4g} {units}")
        half = 0.5 * np.array([char_w * len(text), line_h])
        rect = (c - half, c + half)
        assert (rect[0] >= -0.5).all() and (rect[1] <= np.asarray(size) + 0.5).all(), (text, c)
        if elevation < 89:  # looking straight down the box fills its own outline: no outside spot for z
            assert not view3d._rect_meets_polygon(rect, hull), (text, c, hull)
        assert all(not view3d._rects_meet(rect, r) for r in rects), text
        rects.append(rect)
    # each axis' line is one of the box's edges along that axis
    for a, (i, j) in enumerate(frame.edges):
        assert j == i | (1 << a) and not (i >> a) & 1


def test_labels_follow_the_camera_and_the_outline_is_depth_tested(frame):
    lo, hi = (0.0, 0.0, 0.0), (32.0, 32.0, 32.0)
    frame.set_box(lo, hi, "cells")
    frame.place(_view(30, 30, (700, 700), lo, hi))
    first = frame.labels.pos.copy()
    frame.place(_view(30, 120, (700, 700), lo, hi))
    assert np.abs(frame.labels.pos - first).max() > 1.0
    for line in (frame.outline, frame.axes):  # LineVisual draws through its sub-visuals
        assert all(v._vshare.gl_state.get("depth_test") is True for v in line._subvisuals)

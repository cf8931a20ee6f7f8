"""Colours of the geometry drawn over the views (octree leaves, tracers, trails), shared by the
host path (view3d.py), the device path (device_draw.py) and the headless frames (frame_markers.py),
so all draw the same picture."""
from __future__ import annotations

import numpy as np

# octree levels: distinct colours (level 0 coarsest), the legend shows the same table
LEVEL_COLOURS = np.array([(0.85, 0.85, 0.85, 1), (0.25, 0.75, 1.0, 1), (1.0, 0.75, 0.2, 1), (0.95, 0.3, 0.45, 1),
                          (0.5, 0.95, 0.45, 1), (0.75, 0.5, 1.0, 1), (1.0, 1.0, 0.4, 1), (0.4, 1.0, 0.9, 1)],
                         np.float32)
TRACER_RGBA = (1.0, 1.0, 1.0, 0.9)  # 3D particles drawn inside a volume (white: readable on any colormap)
TRACER_SIZE = 4.0  # their sprite diameter, logical px
TRAIL_RGB = (0.88, 0.92, 1.0)  # particle trails: a light colour, alpha fading toward the oldest sample
TRAIL_ALPHA = (0.12, 0.85)  # (oldest, newest)

# particles over a 2D grid (shaders/glsl/overlay.frag.glsl): a light core in a dark ring, so a marker
# shows on every colour map (white alone vanished on a diverging map's white middle, black alone on
# a dark one)
OVERLAY_SIZE = 6.0  # sprite diameter, logical px: a 3.6 px core in a ring 1.2 px wide
OVERLAY_CORE = 0.6  # the core's radius as a fraction of the sprite's
OVERLAY_RGBA = (1.0, 1.0, 1.0, 0.9)  # the core
OVERLAY_HALO_RGBA = (0.0, 0.0, 0.0, 0.85)  # the ring

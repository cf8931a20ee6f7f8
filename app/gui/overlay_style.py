"""Colours of the geometry drawn over the views (octree leaves, tracers, trails), shared by the
host path (view3d.py), the device path (device_draw.py) and the headless frames (frame_markers.py),
so all draw the same picture; the 2D particles' sprite size and the view's background, which the
headless particle frames (fieldkinds/particles.py) share with the window; and the marker of the tracers
over a 2D field (canvas.py), one rule for the tracers the host uploads and those the device writes into
the same vertex buffer."""
from __future__ import annotations

import numpy as np

# octree levels: distinct colours (level 0 coarsest), the legend shows the same table
LEVEL_COLOURS = np.array([(0.85, 0.85, 0.85, 1), (0.25, 0.75, 1.0, 1), (1.0, 0.75, 0.2, 1), (0.95, 0.3, 0.45, 1),
                          (0.5, 0.95, 0.45, 1), (0.75, 0.5, 1.0, 1), (1.0, 1.0, 0.4, 1), (0.4, 1.0, 0.9, 1)],
                         np.float32)
CANVAS_RGB = (0.08, 0.08, 0.1)  # the view's background (and a headless particle frame's)
DOMAIN_RGBA = (0.6, 0.6, 0.65, 1.0)  # the outline of a 2D particle field's domain (its bounds)
TRACER_RGBA = (1.0, 1.0, 1.0, 0.9)  # 3D particles drawn inside a volume (white: readable on any colormap)
TRACER_SIZE = 4.0  # their sprite diameter, logical px
TRAIL_RGB = (0.88, 0.92, 1.0)  # particle trails: a light colour, alpha fading toward the oldest sample
TRAIL_ALPHA = (0.12, 0.85)  # (oldest, newest)

# 2D particles (shaders/glsl/particles.*.glsl): round sprites coloured by an attribute, smaller for a
# crowd so the flow's shape shows rather than a solid blob
PARTICLE_SIZE = 7.0  # sprite diameter, logical px
PARTICLE_SIZE_CROWD = 3.0  # logical px, from PARTICLE_CROWD particles on
PARTICLE_CROWD = 5000


def particle_size(count: int) -> float:
    """The 2D particles' sprite diameter in logical px for a field of ``count`` rows (parked ones
    included: the window sizes them from the packet's row count, known without reading the device)."""
    return PARTICLE_SIZE if int(count) < PARTICLE_CROWD else PARTICLE_SIZE_CROWD


# particles over a 2D grid (shaders/glsl/overlay.frag.glsl): a light core in a dark ring, so a marker
# shows on every colour map (white alone vanished on a diverging map's white middle, black alone on
# a dark one)
OVERLAY_SIZE = 6.0  # sprite diameter, logical px: a 3.6 px core in a ring 1.2 px wide
OVERLAY_CORE = 0.6  # the core's radius as a fraction of the sprite's
OVERLAY_RGBA = (1.0, 1.0, 1.0, 0.9)  # the core
OVERLAY_HALO_RGBA = (0.0, 0.0, 0.0, 0.85)  # the ring

# ---- tracers over a 2D field (the overlay sprite: a light core in a dark ring) --------------------
# The marker shrinks as tracers crowd the screen (more of them, or the view zoomed out), so the
# field stays readable between them; it never falls below a size at which the light core still
# sits in a dark ring (visible on a dark map and on a diverging map's white middle alike).
OVERLAY_MAX = OVERLAY_SIZE  # logical px: a sparse set (a 3.6 px core in a ring 1.2 px wide)
OVERLAY_MIN = 3.0  # logical px: one light pixel inside a dark ring
OVERLAY_SPACING = 0.5  # the marker's diameter as a fraction of the mean distance between tracers
OVERLAY_RING = 1.2  # logical px: the dark ring's width, where the core keeps its least radius
# the core's least radius, logical px: the pixel centre nearest the sprite's centre (up to 0.71 px
# from it, wherever the tracer sits in its pixel) always lies in the core, so a 3 px marker still
# has a light pixel
OVERLAY_CORE_MIN = 0.75
# the ring's opacity: full contrast for a few large markers, lighter for a crowd of small ones
# (mostly ring where they touch: at full opacity they darkened the field into a grey blanket)
OVERLAY_RING_ALPHA = (0.55, OVERLAY_HALO_RGBA[3])  # (at OVERLAY_MIN, at OVERLAY_MAX)


def overlay_marker(count: int, area_px: float) -> tuple[float, float, float]:
    """(diameter in logical px, core radius as a fraction of the sprite's, the ring's opacity) of ``count`` tracers
    spread over ``area_px`` square logical px of the screen (the domain they fill, at the view's
    zoom). The same rule for tracers drawn from the host and from the device: ``count`` is the
    number of rows the packet carries (parked ones included: known without reading the device)."""
    count, area_px = int(count), float(area_px)
    if count < 0 or not np.isfinite(area_px) or area_px < 0:
        raise ValueError(f"overlay_marker: count {count} and area {area_px} px² must be ≥ 0 and finite")
    if count == 0:
        size = OVERLAY_MAX
    else:
        size = float(np.clip(OVERLAY_SPACING * np.sqrt(area_px / count), OVERLAY_MIN, OVERLAY_MAX))
    core = max(size / 2 - OVERLAY_RING, OVERLAY_CORE_MIN)
    t = (size - OVERLAY_MIN) / (OVERLAY_MAX - OVERLAY_MIN)
    alpha = OVERLAY_RING_ALPHA[0] + t * (OVERLAY_RING_ALPHA[1] - OVERLAY_RING_ALPHA[0])
    return size, 2.0 * core / size, alpha

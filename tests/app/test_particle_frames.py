"""A headless particle frame (app/fieldkinds/particles.py) is the window's 2D particle view: the
dam break's frame against FieldCanvas' render of the same particles, framed alike, pixel by pixel."""
from __future__ import annotations

import numpy as np
import pytest

from tests.app.frame_check import isolated

pytestmark = pytest.mark.gui


def test_a_headless_sph_frame_is_the_window_s_view(make_canvas):
    if not isolated(__file__, "test_a_headless_sph_frame_is_the_window_s_view"):
        return
    from nagare.app.fieldkinds.particles import FRAME_MARGIN, PNG_SIZE
    from nagare.app.frames import field_image
    from nagare.app.packets import FramePacket
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset("sph-dambreak2d", backend="numpy"), get_backend("numpy"))
    e.step(60)
    f = e.field("particles")
    frame = field_image(e)
    h, w = frame.shape[:2]
    pos, speed = np.asarray(f.positions, np.float32), np.asarray(f.attributes["speed"], np.float32)
    c = make_canvas(w, h, colorbar=False, axes=False)
    c.set_colormap(e.preset.view.colormap)
    c.show_packet(FramePacket(seq=1, step=1, time=0.0, field_name="particles", kind="particles", fields=("particles",),
                              positions=pos, data=speed, vmin=speed.min(), vmax=speed.max(), bounds=f.bounds))
    c.draw_now(finish=True)
    # the view the frame shows: the domain and the window's margins, a logical px a frame pixel
    lo, hi = (np.asarray(b, np.float64) for b in f.bounds)
    origin = lo - FRAME_MARGIN * (hi - lo)
    per_px = (1 + 2 * FRAME_MARGIN) * (hi - lo).max() / PNG_SIZE
    c.view.camera.rect = (origin[0], origin[1], w * per_px, h * per_px)
    window = c.render(alpha=False)
    assert window.shape == frame.shape
    diff = np.abs(window.astype(int) - frame.astype(int)).max(axis=-1)
    # the same but for rounding: a shade's last bit, and pixel centres a float32 rounding from a
    # dot's rim (GL's float32 against NumPy's float64) that fall on the other side
    assert np.count_nonzero(diff > 1) <= 10, np.argwhere(diff > 1)[:10]
    assert np.count_nonzero((window != window[0, 0]).any(axis=-1)) > 0.2 * diff.size  # a real picture

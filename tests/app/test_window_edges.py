"""The app as a new user meets it (issue 41): simulated time, tooltips, exports framed as on screen,
the frame cap, tracers on every map, the 3D dock and zoom to the cursor. Real windows under Xvfb;
``NAGARE_SHOTS=folder`` keeps the screenshots the tests take (to look at them)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from nagare.app.packets import time_label

from .test_window import on_worker, pause, wait_steps

pytestmark = pytest.mark.gui


def keep_shot(w, name: str) -> None:
    """Save a picture of the whole window when NAGARE_SHOTS names a folder."""
    folder = os.environ.get("NAGARE_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        w.grab().save(str(Path(folder) / f"{name}.png"))


def test_time_label_says_the_units():
    assert time_label(0.25, "s") == "t = 0.25 s"
    assert time_label(1200.0, "lattice steps") == "t = 1200 lattice steps"
    assert time_label(0.5, "–") == "t = 0.5"


def test_simulated_time_in_the_status_line_and_hud(make_window, qtbot):
    w = make_window("compact-rotating-cone")
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.shown.step > 0, timeout=30000)
    qtbot.waitUntil(lambda: w.status_labels["time"].text().startswith("t = "), timeout=5000)
    pause(qtbot, w)
    qtbot.waitUntil(lambda: w.canvas.shown.step == w.worker.engine.step_count, timeout=10000)
    w._update_status()
    pk = w.canvas.shown
    dt = w.worker.engine.dt
    shown = float(re.match(r"t = (\S+)", w.status_labels["time"].text()).group(1))
    np.testing.assert_allclose(shown, pk.step * dt, rtol=1e-5)
    assert w.status_labels["time"].text() in w._hud_model()[2]
    keep_shot(w, "time-compact-rotating-cone")


def test_time_units_of_each_family():
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.lbm2d.engine import LBM2D
    from nagare.engine.sph.engine import SPH

    assert (LBM2D.time_units, AMR3D.time_units, SPH.time_units) == ("lattice steps", "level-0 steps", "s")


def test_frame_cap_is_a_setting_up_to_the_refresh_rate(make_window, qtbot):
    w = make_window("lbm2d-cavity", fps=15)
    assert w.max_fps == 15 and w.worker.display_interval == pytest.approx(1 / 15)
    assert w.fps_actions[15.0].isChecked()
    limit = w.refresh_rate()
    assert max(w.fps_actions) == limit  # the menu offers caps up to the display's refresh rate
    w.fps_actions[30.0].trigger()
    assert w.max_fps == 30 and w.worker.display_interval == pytest.approx(1 / 30)
    assert w._pacer.interval == pytest.approx(1 / 30)
    assert w.set_frame_cap(10 * limit) == limit  # clamped to what the screen shows
    assert "frame cap" in w.messages[-1]
    above = make_window("lbm2d-cavity", fps=10 * limit)
    assert above.max_fps == limit and any("refresh rate" in m for m in above.messages)

"""The step beside the simulated time (status bar and HUD) is the frame on screen's, as the time is:
the stats are sampled less often than frames are drawn, and the walkthrough saw
"t = 1735 lattice steps … step 1715"."""
from __future__ import annotations

import re

from nagare.app.packets import time_label


def test_status_bar_and_hud_show_the_step_and_time_of_one_frame(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: w.worker.latest_stats() is not None and w.canvas.shown is not None, timeout=10000)
    w.worker.stats_interval = 1e9  # the stats' step stands still from here; the frames go on
    stats_step = w.worker.latest_stats().step
    qtbot.waitUntil(lambda: w.canvas.shown.step > stats_step + 5, timeout=10000)
    w.worker.send("pause")
    qtbot.waitUntil(lambda: not w.worker.running, timeout=5000)
    w.canvas.native.repaint()
    w._update_status()
    pk = w.canvas.shown
    step = int(re.match(r"step (\d+)", w.status_labels["steps"].text()).group(1))
    assert step == pk.step and step != stats_step
    assert w.status_labels["time"].text() == time_label(float(pk.time), pk.time_units)
    hud = w._hud_model()[2]
    assert f"step {pk.step} ·" in hud and w.status_labels["time"].text() in hud

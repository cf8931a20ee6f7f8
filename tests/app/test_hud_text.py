"""What the HUD and the status line say: the glyphs the app's units use, the quantity plots' scale
and labels, one frame's step and time in both, long messages, the screenshot tool's bad options."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from nagare.app.gui.hud import distinct_range, quantity_scale

from tests.app.frame_check import isolated

# in units and field labels: l/c∞ (compact NS), m², m³, τ, φ, ω, ρ, the "·" separators, "−", "…"
APP_GLYPHS = "∞²³τφωρ·×−…≤≈±μνσΔ"


def test_hud_font_has_the_glyphs_of_the_apps_units():
    imgui = pytest.importorskip("imgui_bundle").imgui
    from nagare.app.gui.hud_fonts import load_fonts, spelled

    ctx = imgui.create_context()
    try:
        io = imgui.get_io()
        io.backend_flags |= imgui.BackendFlags_.renderer_has_textures
        bare = io.fonts.add_font_default()
        assert not bare.is_glyph_in_font(ord("∞"))  # ProggyClean alone: "l/c?" on screen
        font = load_fonts(io)
        missing = [c for c in APP_GLYPHS if not font.is_glyph_in_font(ord(c))]
        assert missing == [], missing
        for c in spelled("a → b ▪ c"):  # what neither font has is spelled in ASCII
            assert font.is_glyph_in_font(ord(c)), c
    finally:
        imgui.destroy_context(ctx)


def test_quantity_labels_tell_a_step_apart():
    assert distinct_range(141.99, 142.0) == "141.99 .. 142"
    assert distinct_range(142.0, 142.0) == "142 .. 142"
    assert distinct_range(0.0, 1e-7) == "0 .. 1e-07"


def test_quantity_scale_covers_a_step_in_the_oldest_quarter():
    """amr3d-vortex-adapt's leaves: 137 for the first readings, 142 since; the scale came from the
    newer three quarters alone and read "142 .. 142" while the line stepped off its bottom."""
    y = np.array([137.0] * 5 + [142.0] * 50, np.float32)
    s = quantity_scale(y)
    assert s.lo < 137.0 and s.hi > 142.0
    assert s.label == "137 .. 142" and s.off_scale == ""


def test_quantity_scale_leaves_an_early_spike_out_and_says_so():
    y = np.array([85.0, 40.0] + [1.1, 1.15, 1.05, 1.1] * 25, np.float32)
    s = quantity_scale(y)
    assert s.hi < 2.0 and s.lo > 1.0  # the live curve fills the plot
    assert s.off_scale == "2 older off scale (all readings: 1.05 .. 85)", s.off_scale
    assert quantity_scale(np.full(10, np.nan, np.float32)) is None


def test_hud_draws_the_plotted_range_and_the_off_scale_note(headless_hud, monkeypatch):
    from imgui_bundle import imgui
    from nagare.app.gui.worker import QuantitySample

    texts, plots = [], []
    text, plot = imgui.text, imgui.plot_lines
    monkeypatch.setattr(imgui, "text", lambda s: (texts.append(s), text(s))[1])
    monkeypatch.setattr(imgui, "plot_lines", lambda label, v, **kw: (plots.append((np.array(v), kw)),
                                                                      plot(label, v, **kw))[1])
    values = [85.0] + [1.1 + 0.01 * (i % 3) for i in range(39)]
    headless_hud.quantity_source = lambda: (1, [QuantitySample(i + 1, i, {"cd": v}) for i, v in enumerate(values)])
    headless_hud.frame()
    (y, kw), = plots
    assert kw["overlay_text"] == "1.1 .. 1.12"
    assert y.max() <= kw["scale_max"]  # the spike drawn at the top edge, not off the plot
    assert any(t.startswith("1 older off scale") for t in texts), texts


# ---- the window ------------------------------------------------------------------------------------
def test_hud_and_status_line_show_the_same_frame_at_every_draw(make_window, qtbot, fake_preset):
    """The status line was refreshed at 5 Hz and the HUD with each frame: the walk saw the HUD at
    step 6256 and the status line at 6191. At every HUD frame both now read the frame on screen."""
    if not isolated(__file__, "test_hud_and_status_line_show_the_same_frame_at_every_draw"):
        return
    w = make_window(fake_preset())
    seen = []
    render = w.hud.render

    def render_and_compare(*a, **kw):
        render(*a, **kw)
        if w.hud.status_shown and w.canvas.shown is not None:
            hud_step = int(re.search(r"step (\d+)", w.hud.status_shown).group(1))
            bar_step = int(re.match(r"step (\d+)", w.status_labels["steps"].text()).group(1))
            hud_time = w.hud.status_shown.split("\n")[1].removesuffix(" (frame on screen)")
            seen.append((hud_step, bar_step, hud_time, w.status_labels["time"].text()))

    w.hud.render = render_and_compare
    qtbot.waitUntil(lambda: len({s[0] for s in seen}) >= 20, timeout=30000)
    assert w.hud.error is None, w.hud.error
    bad = [s for s in seen if s[0] != s[1] or s[2] != s[3]]
    assert bad == [], bad[:5]


def test_a_long_status_message_is_elided_with_its_whole_text_as_tooltip(make_window, qtbot, fake_preset):
    w = make_window(fake_preset(), hud=False)
    qtbot.waitUntil(lambda: w.canvas.shown is not None, timeout=10000)
    w._update_status()
    sb = w.statusBar()
    text = ("presets/big_mem.toml: grid.nx: got 40000; this preset needs about 22.8 GiB of memory and "
            "this machine has 7.6 GiB free; lower grid.nx or grid.ny (each halves the need), or run on a GPU")
    w.message(text)
    shown = sb.currentMessage()
    assert w.messages[-1] == text
    assert shown != text and shown.endswith("…")
    assert text.startswith(shown[:-1])
    room = min(lab.geometry().left() for lab in w.status_labels.values() if lab.isVisible() and lab.text())
    assert sb.fontMetrics().horizontalAdvance(shown) < room
    assert sb.toolTip() == text
    w.message("loaded fake")  # a short one: whole, no tooltip
    assert sb.currentMessage() == "loaded fake" and sb.toolTip() == ""


# ---- the screenshot tool -------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["wave2d", "x.png", "--size", "big"], "--size 'big': expected WIDTHxHEIGHT"),
    (["wave2d", "x.png", "--size", "0x500"], "--size '0x500': each side must be 1 to"),
    (["no-such-preset", "x.png"], "no-such-preset: no such preset"),
])
def test_screenshot_tool_refuses_bad_options_in_one_line(tmp_path, args, says):
    r = subprocess.run([sys.executable, "-m", "nagare.app.gui.screenshot", *args], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not (tmp_path / "x.png").exists()


def test_a_shown_message_is_elided_again_when_the_status_labels_grow(make_window, qtbot, fake_preset):
    """A message that fitted when it was shown must not run under labels that grow while it stays."""
    w = make_window(fake_preset(), hud=False)
    qtbot.waitUntil(lambda: w.canvas.shown is not None, timeout=10000)
    w._update_status()
    sb = w.statusBar()
    room = min(lab.geometry().left() for lab in w.status_labels.values() if lab.isVisible() and lab.text())
    words, text = iter(range(1000)), "paused at the preset's end:"
    while sb.fontMetrics().horizontalAdvance(text + " word") < room - 30:
        text += f" w{next(words)}"
    w.message(text)
    assert sb.currentMessage() == text  # fits whole
    dev = w.status_labels["device"]
    dev.setText(dev.text() + " · GPU 0")  # ~50 px more: the labels start left of the message's end
    qtbot.waitUntil(lambda: (w._update_status() or True) and sb.currentMessage() != text, timeout=5000)
    shown = sb.currentMessage()
    assert shown.endswith("…") and text.startswith(shown[:-1]) and sb.toolTip() == text
    room = min(lab.geometry().left() for lab in w.status_labels.values() if lab.isVisible() and lab.text())
    assert sb.fontMetrics().horizontalAdvance(shown) < room

"""The app as a new user meets it (issue 41): simulated time, tooltips, exports framed as on screen,
the frame cap, tracers on every map, the 3D dock and zoom to the cursor. Real windows under Xvfb;
``NAGARE_SHOTS=folder`` keeps the screenshots the tests take (to look at them)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PyQt6", reason="the window needs PyQt6 (the GPU machine has none)")
from nagare.app.packets import time_label

from .test_window import pause

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


def test_compact_s_time_units_follow_its_engine_class():
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    units = {p: create_engine(load_preset(p, backend="numpy"), get_backend("numpy")).time_units
             for p in ("compact-vortex-outflow", "compact-rotating-cone")}
    assert units == {"compact-vortex-outflow": "l/c∞", "compact-rotating-cone": "–"}


def test_frame_cap_is_a_setting_up_to_the_refresh_rate(make_window, qtbot):
    w = make_window("lbm2d-cavity", fps=15)
    assert w.max_fps == 15 and w.worker.display_interval == pytest.approx(1 / 15)
    assert w.fps_actions[15.0].isChecked()
    limit = w.refresh_rate()
    assert max(w.fps_actions) == limit  # the menu offers caps up to the display's refresh rate
    w.fps_actions[30.0].trigger()
    assert w.max_fps == 30 and w.worker.display_interval == pytest.approx(1 / 30)
    assert w._pacer.interval == pytest.approx(1 / 30)
    said = len(w.messages)
    assert w.set_frame_cap(10 * limit) == limit  # clamped to what the screen shows
    # said among the messages since (a worker notice may land after it on a loaded machine)
    assert any("frame cap" in m for m in w.messages[said:]), w.messages[said:]
    above = make_window("lbm2d-cavity", fps=10 * limit)
    assert above.max_fps == limit and any("refresh rate" in m for m in above.messages)


def test_run_speed_is_a_setting_and_a_paced_preset_starts_paced(make_window, qtbot):
    """Run ▸ Speed: as fast as it runs, or N steps a frame (the preset's run.steps_per_frame marked);
    wave2d (run.paced) starts at its 20 steps a frame, a choice reaches the worker and the menu follows."""
    from tests.app.waiting import wait_until

    w = make_window("wave2d")
    qtbot.waitUntil(lambda: w.worker.frame_steps == 20, timeout=20000)
    w._fill_speed_menu()
    assert w.speed_actions[20].isChecked() and "(the preset's)" in w.speed_actions[20].text()
    assert None in w.speed_actions and {1, 10, 100, 1000} <= set(w.speed_actions)
    w.speed_actions[None].trigger()
    wait_until(lambda: w.worker.frame_steps is None)
    qtbot.waitUntil(lambda: any("as fast as it runs" in m for m in w.messages), timeout=20000)
    assert w.speed_actions[None].isChecked()
    w.set_speed(100)
    qtbot.waitUntil(lambda: any("100 steps a frame" in m for m in w.messages), timeout=20000)
    assert w.speed_actions[100].isChecked()
    assert w.worker.frame_steps == 100


@pytest.mark.parametrize("name", ["lbm2d-cylinder", "amr3d-sphere-re100", "sph-dambreak2d", "compact-rotating-cone",
                                  "compact-vortex-outflow", "diffusion3d", "wave2d"])
def test_every_parameter_has_its_schema_description_as_tooltip(qtbot, name):
    from nagare.app.gui.window import ParameterForm
    from nagare.engine.presets import load_preset

    p = load_preset(name, backend="numpy")
    form = ParameterForm()
    qtbot.addWidget(form)
    form.load(p)
    for key, (w, _) in form.editors.items():
        section = getattr(p, key[0]) if len(key) == 2 else p
        info = type(section).model_fields[key[-1]]
        assert info.description, f"{name}: {'.'.join(key)} has no description in its schema"
        assert info.description in w.toolTip(), key
        assert form.form.labelForField(w).toolTip() == w.toolTip(), key  # the label too (a narrow dock clips it)
        if hasattr(w, "itemData"):
            for i in range(w.count()):
                assert info.description in w.itemData(i, 3), (key, w.itemText(i))  # 3: Qt.ToolTipRole


def test_variant_choices_carry_their_doc_and_why_unavailable(make_window, qtbot, fake_preset):
    from nagare.app.gui.hud import choice_tooltip
    from PyQt6.QtCore import Qt

    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: "kernel" in w.variant_combos, timeout=5000)
    cb = w.variant_combos["kernel"]
    tips = {cb.itemText(i): cb.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(cb.count())}
    assert tips["roll"] == "roll: np.roll stencil" and tips["slices"] == "slices: padded slices"
    assert tips["gpu-only"].startswith("gpu-only: stands for a CUDA kernel\nunavailable: ")
    assert "needs a CUDA GPU" in tips["gpu-only"]
    assert "two equivalent ways" in cb.toolTip()
    assert w.variants_form.labelForField(cb).toolTip() == cb.toolTip()
    assert choice_tooltip(w.variant_info["kernel"], "gpu-only") == tips["gpu-only"]


def test_preset_rows_and_hud_toggles_are_never_clipped_without_a_tooltip(make_window, qtbot):
    w = make_window("compact-rotating-cone")  # five variant axes, some with long choice names
    qtbot.waitUntil(lambda: "batching" in w.variant_combos, timeout=20000)
    lst = w.preset_list
    for i in range(lst.count()):
        item = lst.item(i)
        assert item.text() in item.toolTip()  # the whole row, however narrow the dock
    w.hud._want_collapsed = False
    from imgui_bundle import imgui

    def open_toggles():  # the section is a collapsing header: open it for the test
        imgui.set_next_item_open(True)

    w.hud.extra = None
    w.hud.toggle_rows_fit = None
    original = w.hud._draw_quantities
    w.hud._draw_quantities = lambda: (original(), open_toggles())
    qtbot.waitUntil(lambda: w.hud.toggle_rows_fit is not None and w.hud.frames > 3, timeout=10000)
    w.canvas.update()
    qtbot.wait(300)
    assert w.hud.toggle_rows_fit is True
    keep_shot(w, "hud-quick-toggles")


def test_the_apps_vtkhdf_export_says_what_each_file_holds(make_window, qtbot, tmp_path):
    w = make_window("amr3d-periodic")
    qtbot.waitUntil(lambda: w.worker.engine is not None and w.worker.engine.step_count >= 1, timeout=60000)
    w.export_vtkhdf(tmp_path / "x.vtkhdf")
    qtbot.waitUntil(lambda: any(m.startswith("VTKHDF written") for m in w.messages), timeout=30000)
    said = next(m for m in w.messages if m.startswith("VTKHDF written"))
    assert f"{tmp_path / 'x.vtkhdf'} (ImageData, " in said
    assert f"{tmp_path / 'x_leaves.vtkhdf'} (PolyData lines, " in said
    assert f"{tmp_path / 'x_octree.vtkhdf'} (OverlappingAMR, the octree itself" in said


BACKGROUND = (20, 20, 26)  # FieldCanvas' bgcolor (0.08, 0.08, 0.1) in 8 bits


def test_png_export_is_the_scene_as_framed_without_the_hud_strip(make_window, qtbot, tmp_path):
    from nagare.app.gui.axes2d import strip_sizes
    from nagare.app.gui.hud import WIDTH
    from PIL import Image

    w = make_window("lbm2d-cavity")
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.hud.frames > 1, timeout=20000)
    w.resize(1500, 720)  # a wide canvas: the square field is drawn right of the HUD's column
    qtbot.waitUntil(lambda: w.canvas.dock_origin == (WIDTH, 0.0), timeout=5000)
    s = w.canvas.pixel_scale
    pw, ph = w.canvas.physical_size
    img = np.asarray(Image.open(w.screenshot(tmp_path / "scene.png")))
    assert img.shape[:2] == (ph, pw - int(round(WIDTH * s)))  # the HUD's column is not in the picture
    # no empty strip where the HUD was: the field (and its axes) start at the image's left edge
    assert not (img[:, : int(100 * s), :3] == BACKGROUND).all()
    fx, fy, fw, fh = w.canvas.field_rect()
    assert w.canvas.axes.visible
    # only the y axis' strip left of the field
    assert fx - int(round(WIDTH * s)) <= int(round(strip_sizes(w.canvas.dpi)[0] * s))
    keep_shot(w, "export-window")
    Image.fromarray(img).save(tmp_path / "look.png")
    if os.environ.get("NAGARE_SHOTS"):
        Image.fromarray(img).save(Path(os.environ["NAGARE_SHOTS"]) / "export-scene.png")

    w.hud_export.setChecked(True)  # the HUD drawn in, as on screen: the whole canvas
    img = np.asarray(Image.open(w.screenshot(tmp_path / "with-hud.png")))
    assert img.shape[:2] == (ph, pw)
    hud = img[:, : int(WIDTH * s), :3]
    assert len(np.unique(hud.reshape(-1, 3), axis=0)) > 20, "the HUD's text and plots are in the picture"
    if os.environ.get("NAGARE_SHOTS"):
        Image.fromarray(img).save(Path(os.environ["NAGARE_SHOTS"]) / "export-with-hud.png")


def test_a_slow_runs_video_has_a_frame_per_published_frame_at_the_chosen_rate(make_window, qtbot, fake_preset,
                                                                           tmp_path):
    import imageio.v2 as imageio

    # 10 steps of 0.03 s a batch: 3 frames/s unless the worker steps in shorter batches while recording
    w = make_window(fake_preset(text="[physics]\nstep_seconds = 0.03\n[run]\nsteps_per_frame = 10\n"))
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.shown.step > 0, timeout=20000)
    w.video_fps.setValue(12)
    path = tmp_path / "slow.mp4"
    w.toggle_recording(path)
    assert "one video frame per published frame, played at 12 frames/s" in w.messages[-1]
    first = w._recorded_seq
    qtbot.wait(3000)
    rec = w.recorder
    w.toggle_recording()
    assert rec.frames >= 20, f"{rec.frames} frames in 3 s of a slow run"
    assert rec.frames + rec.missed == w._recorded_seq - first  # every packet published since the start
    said = w.messages[-1]
    assert said.startswith(f"video written: {path} — {rec.frames} frames at 12 frames/s (")
    assert "one per published frame" in said
    assert not w.worker.recording  # the worker's batches are whole again
    reader = imageio.get_reader(path)
    assert reader.count_frames() == rec.frames
    assert reader.get_meta_data()["fps"] == pytest.approx(12)
    reader.close()


@pytest.mark.parametrize("value", [-1.0, 0.0, 1.0])  # both ends of each map and the diverging maps' white middle
def test_tracers_show_on_every_colour_map(make_canvas, value):
    from nagare.app import colormaps
    from nagare.app.gui.worker import FramePacket

    n = 64
    c = make_canvas(n, n, colorbar=False, axes=False)
    c.set_range((-1.0, 1.0))
    cells = np.array([[16, 16], [40, 30]])
    for cmap in colormaps.NAMES:
        c.set_colormap(cmap)
        field = np.full((n, n), value, np.float32)
        c.show_packet(FramePacket(seq=1, step=1, time=0.0, field_name="f", kind="grid2d", data=field,
                                  vmin=np.float32(-1), vmax=np.float32(1), fields=("f",),
                                  overlay=(cells + 0.5).astype(np.float32)))
        c.draw_now(finish=True)
        c.view.camera.rect = (0, 0, n, n)
        frame = c.grab().astype(int)
        under = frame[2, 2]  # the field away from the tracers
        for x, y in cells:
            row = n - 1 - y
            core = frame[row, x]
            ring = frame[row, x + int(round(2.5 * c.pixel_scale))]
            contrast = max(np.abs(core - under).sum(), np.abs(ring - under).sum())
            assert contrast > 250, f"{cmap} at {value}: tracer {core}/{ring} on field {under}"
            assert core.sum() > 600 and ring.sum() < 150, (cmap, value, core, ring)


def test_3d_dock_is_off_for_2d_presets_and_a_mip_has_no_holes_where_the_planes_cut_it(make_window, qtbot):
    w = make_window("lbm2d-cavity")
    page = w.view3d_dock.widget()
    qtbot.waitUntil(lambda: w.canvas.shown is not None and not page.isEnabled(), timeout=20000)
    assert "2D" in page.toolTip()
    assert w.open_preset("diffusion3d")
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.shown.kind == "volume3d", timeout=30000)
    qtbot.waitUntil(page.isEnabled, timeout=5000)
    pause(qtbot, w)
    qtbot.wait(300)
    w.volume_combo.setCurrentText("mip")

    def shot():
        w.canvas.update()
        qtbot.wait(200)
        return w.canvas.export_frame().astype(int)

    with_planes = shot()
    for slider in w.plane_sliders.values():  # the planes elsewhere: a hole would move with them
        slider.setValue(250)
    without = shot()
    x, y, fw, fh = w.canvas.field_rect()
    region = w.canvas.export_region() or (0, 0)  # the exported frame begins there (logical px)
    left, top = (int(round(v * w.canvas.pixel_scale)) for v in region[:2])
    core = (slice(y - top + fh // 3, y - top + 2 * fh // 3), slice(x - left + fw // 3, x - left + 2 * fw // 3))
    differ = np.abs(with_planes[core] - without[core]).sum(axis=-1) > 30
    if os.environ.get("NAGARE_SHOTS"):
        from PIL import Image

        for name, img in (("mip-planes-mid", with_planes), ("mip-planes-quarter", without)):
            Image.fromarray(img.astype(np.uint8)).save(Path(os.environ["NAGARE_SHOTS"]) / f"{name}.png")
    assert differ.mean() < 0.01, f"{differ.mean():.1%} of the MIP changes with the planes on"
    keep_shot(w, "mip-with-planes")


def _wheel_at(canvas, pos, notches: float = 2.0) -> None:
    canvas.events.mouse_wheel(pos=np.array(pos, float), delta=(0.0, notches), modifiers=(), button=None)


def _world_under(canvas, pos, depth_point=None):
    """The world point drawn at canvas pixel ``pos`` (2D: the pan/zoom map; 3D: on the plane
    through ``depth_point`` facing the camera)."""
    from nagare.app.gui import slice_pick as sp

    tr = canvas.view.scene.node_transform(canvas.scene)
    if depth_point is None:
        return np.asarray(tr.imap(pos))[:2]
    M = np.asarray(tr.map(np.eye(4)), np.float64)
    o, d = sp.pixel_ray(M, pos)
    _, d0 = sp.pixel_ray(M, sp.project(M, np.asarray(depth_point)[None])[0])
    return o + d * float((np.asarray(depth_point) - o) @ d0) / float(d @ d0)


def test_the_wheel_zooms_about_the_pointer_in_2d_and_3d(make_window, qtbot):
    from nagare.app.gui import slice_pick as sp

    w = make_window("lbm2d-cavity")
    c = w.canvas
    qtbot.waitUntil(lambda: c.shown is not None, timeout=20000)
    pause(qtbot, w)
    (x, y), (vw, vh) = c.view.pos, c.view.size
    pos = (x + 0.8 * vw, y + 0.3 * vh)  # off the centre
    before = _world_under(c, pos)
    width = c.view.camera.rect.width
    _wheel_at(c, pos)
    assert c.view.camera.rect.width < 0.9 * width  # zoomed in
    np.testing.assert_allclose(_world_under(c, pos), before, atol=1e-3 * width)

    assert w.open_preset("diffusion3d")
    qtbot.waitUntil(lambda: c.shown is not None and c.shown.kind == "volume3d", timeout=30000)
    pause(qtbot, w)
    cam = c.view.camera
    (x, y), (vw, vh) = c.view.pos, c.view.size
    pos = (x + 0.7 * vw, y + 0.35 * vh)
    centre0 = np.array(cam.center, float)
    before = _world_under(c, pos, centre0)
    scale = cam.scale_factor
    _wheel_at(c, pos)
    assert cam.scale_factor == pytest.approx(scale * 1.1 ** -2)  # one zoom, not two (the camera's own is blocked)
    tr = c.view.scene.node_transform(c.scene)
    M = np.asarray(tr.map(np.eye(4)), np.float64)
    np.testing.assert_allclose(sp.project(M, before[None])[0], pos, atol=0.5)  # still under the pointer
    assert np.linalg.norm(np.array(cam.center) - centre0) > 1.0  # the centre moved towards it


def test_keys_dialog_names_3d_pan_and_the_wheel():
    from nagare.app.gui.window import KEYS_HELP

    assert "Shift+drag beside the planes pans" in KEYS_HELP
    assert "wheel zooms about the pointer" in KEYS_HELP


def test_a_preset_switch_clears_the_picture_at_once_and_shows_progress(make_window, qtbot):
    from nagare.engine import progress

    w = make_window("lbm2d-cavity")
    qtbot.waitUntil(lambda: w.canvas.shown is not None, timeout=20000)
    old_run = w.worker.run_id
    stages = []
    show = w._show_progress
    w._show_progress = lambda stage, frac: (stages.append(stage), show(stage, frac))
    assert w.open_preset("amr3d-periodic")
    assert w.canvas.shown is None and not any(v.visible for v in w.canvas.visuals.values())  # cleared at once
    assert w.loading_label.isVisible() and "amr3d-periodic" in w.loading_label.text()
    assert w.progress_bar.isVisible()
    keep_shot(w, "preset-switch-loading")
    qtbot.waitUntil(lambda: w.canvas.shown is not None, timeout=60000)
    assert w.canvas.shown.run > old_run  # never a frame of the replaced run
    assert not w.loading_label.isVisible()
    assert "building the octree" in stages and "setting the initial flow" in stages, stages
    # kernels compiling (engine/cuda.py reports them) reach the window the same way
    seen = []
    with progress.reporting(lambda stage, frac: seen.append((stage, frac))):
        progress.report("compiling kernels: x.cu")
    assert seen == [("compiling kernels: x.cu", None)]


def test_a_wide_field_is_drawn_under_a_short_hud_and_exported_without_it(make_window, qtbot, tmp_path):
    """The cylinder's channel (2.5:1) beside the HUD's 340-px column got a sliver of the canvas while
    the room under the HUD stayed empty: it is drawn under the HUD (the HUD as tall as its content),
    clear of the HUD's window, larger than beside it; a PNG is the canvas under the HUD; collapsing
    the HUD gives the field the room down to its title strip, and expanding it takes it back."""
    from nagare.app.gui.hud import WIDTH
    from PIL import Image

    w = make_window("lbm2d-cylinder")
    c = w.canvas
    qtbot.waitUntil(lambda: c.shown is not None and w.hud.frames > 2 and w.hud.height is not None, timeout=20000)
    qtbot.waitUntil(lambda: c.dock_origin[1] > 0, timeout=5000)
    hx, hy, hw, hh = w.hud.rect
    assert hw == WIDTH and hh < c.size[1] - 100  # the HUD as tall as its content, not the canvas
    assert c.dock_origin == (0.0, hh)
    (_, y), (vw, vh) = c.view.pos, c.view.size
    assert y >= hy + hh  # the field begins under the HUD's window
    ny, nx = c.shown.data.shape[:2]
    under = min(vw / nx, vh / ny)  # px a cell
    assert under > (c.size[0] - WIDTH) / nx  # more than the whole width right of the HUD could give
    s = c.pixel_scale
    pw, ph = c.physical_size
    img = np.asarray(Image.open(w.screenshot(tmp_path / "scene.png")))
    assert img.shape[:2] == (ph - int(round(hh * s)), pw)  # the HUD's rows are not in the picture
    assert len(np.unique(img[:, : int(WIDTH * s), :3].reshape(-1, 3), axis=0)) > 20, "the field is there"

    w.hud.set_collapsed(True)
    qtbot.waitUntil(lambda: w.hud.collapsed and c.dock_origin == (0.0, w.hud.title_h), timeout=5000)
    assert c.view.size[1] > vh
    w.hud.set_collapsed(False)
    qtbot.waitUntil(lambda: not w.hud.collapsed and c.dock_origin == (0.0, w.hud.height), timeout=5000)

    # while a video records, the field stays where it is (its frames keep one size), then follows again
    w.toggle_recording(tmp_path / "held.mp4")
    held = c.dock_origin
    w.hud.set_collapsed(True)
    qtbot.waitUntil(lambda: w.hud.collapsed, timeout=5000)
    qtbot.wait(300)
    assert c.dock_origin == held
    w.toggle_recording()
    assert c.dock_origin == (0.0, w.hud.title_h)

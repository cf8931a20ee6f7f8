"""The desktop app in a real window (Qt + VisPy + imgui on Mesa under Xvfb), driven like a user."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PyQt6", reason="the window needs PyQt6 (the GPU machine has none)")
from nagare.engine.presets import preset_names
from PyQt6.QtCore import Qt

pytestmark = pytest.mark.gui

BROKEN = Path(__file__).resolve().parents[1] / "unit" / "broken_presets"


def on_worker(qtbot, w, fn, timeout=10000):
    """Run fn(engine) on the simulation thread (between steps) and return its result."""
    box = []
    tag = f"test:{id(box)}"
    w._call(tag, fn, box.append)
    qtbot.waitUntil(lambda: bool(box), timeout=timeout)
    return box[0]


def steps(w):
    return w.worker.engine.step_count if w.worker.engine is not None else -1


def wait_steps(qtbot, w, n, timeout=15000):
    start = steps(w)
    qtbot.waitUntil(lambda: steps(w) >= start + n, timeout=timeout)


def pause(qtbot, w):
    w.worker.send("pause")
    on_worker(qtbot, w, lambda eng: None)  # the pause has been applied once this returns
    assert not w.worker.running


def state(qtbot, w):
    return on_worker(qtbot, w, lambda eng: (eng.step_count, {k: eng.backend.asnumpy(v).copy()
                                                             for k, v in eng.state_arrays().items()}))


def test_main_window_opens_runs_and_draws(make_window, qtbot):
    w = make_window()
    wait_steps(qtbot, w, 30)
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.frames_drawn > 2, timeout=10000)
    assert w.worker.running
    assert w.status_labels["backend"].text() == "backend: numpy"
    qtbot.waitUntil(lambda: "steps/s" in w.status_labels["steps"].text(), timeout=5000)
    assert "MUPS" in w.status_labels["throughput"].text()
    assert "roofline" in w.status_labels["roofline"].text()
    for name in ("Presets", "Parameters", "Variants", "View", "Export"):
        assert name in {d.objectName() for d in w.findChildren(type(w.preset_dock))}


@pytest.mark.slow  # every shipped preset built and run in the window: over a minute
def test_every_preset_loads_and_runs(make_window, qtbot):
    w = make_window()
    for name in preset_names():
        assert w.open_preset(name)
        qtbot.waitUntil(lambda name=name: w.worker.engine is not None
                        and Path(w.worker.engine.preset.source).stem == name, timeout=20000)
        # one batch (run.steps_per_frame steps) since the engine was made at step 0: counted from 0,
        # not from when the test looks — a fast preset with run.pause_at_end (compact-advection1d: 400
        # steps in well under a second) may have run to its end and paused before the first look
        qtbot.waitUntil(lambda: steps(w) >= 1, timeout=30000)
        qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.shown.step > 0, timeout=30000)
        assert w.worker.diverged is None
        assert w.messages == [m for m in w.messages if "error" not in m.lower()]


def test_variant_switch_while_running_continues_without_jump(make_window, qtbot, fake_preset, fake_family):
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    path = fake_preset()
    w = make_window(path)
    wait_steps(qtbot, w, 40)
    s_switch = steps(w)
    w.set_variant("kernel", "slices")
    qtbot.waitUntil(lambda: w.variant_combos["kernel"].currentText() == "slices", timeout=5000)
    wait_steps(qtbot, w, 40)
    pause(qtbot, w)
    n, arrays = state(qtbot, w)
    assert n > s_switch + 40, "the switch must not reset the run"
    assert w.worker.engine.selection["kernel"] == "slices"
    # the same number of steps with the reference choice from the initial state: round-off only
    ref = fake_family.FakeEngine(load_preset(path, backend="numpy"), get_backend("numpy"), {"kernel": "roll"})
    ref.step(n)
    np.testing.assert_allclose(arrays["rho"], ref.rho, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(arrays["pos"], ref.pos, rtol=1e-9, atol=1e-9)


def test_non_live_variant_resets_and_says_so(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    wait_steps(qtbot, w, 30)
    engine = w.worker.engine
    assert w.variants_form.labelForField(w.variant_combos["layout"]).text() == "layout (resets)"
    w.set_variant("layout", "b")
    qtbot.waitUntil(lambda: w.worker.engine is not engine, timeout=5000)
    assert w.worker.engine.selection["layout"] == "b"
    assert w.worker.engine.selection["kernel"] == engine.selection["kernel"]
    qtbot.waitUntil(lambda: any("the run was reset" in m for m in w.messages), timeout=5000)
    qtbot.waitUntil(lambda: w.variant_combos["layout"].currentText() == "b", timeout=5000)


def test_unavailable_variant_is_greyed_with_reason(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: "kernel" in w.variant_combos, timeout=5000)
    cb = w.variant_combos["kernel"]
    idx = cb.findText("gpu-only")
    item = cb.model().item(idx)
    assert not item.isEnabled()
    assert "needs a CUDA GPU" in item.toolTip()
    assert cb.model().item(cb.findText("slices")).isEnabled()


def test_tracer_count_control_is_off_for_engines_without_adjustable_tracers(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    wait_steps(qtbot, w, 5)
    qtbot.waitUntil(lambda: "tracer-capacity" not in w._result_callbacks, timeout=5000)  # the answer came
    assert not w.tracer_spin.isEnabled()


def test_pause_step_reset_keys(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    wait_steps(qtbot, w, 20)
    qtbot.keyClick(w, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: not w.worker.running, timeout=5000)
    n0, _ = state(qtbot, w)
    n1, _ = state(qtbot, w)
    assert n1 == n0, "paused: no steps"
    qtbot.keyClick(w, Qt.Key.Key_N)
    qtbot.waitUntil(lambda: steps(w) == n0 + 1, timeout=5000)
    qtbot.keyClick(w, Qt.Key.Key_R)
    qtbot.waitUntil(lambda: steps(w) == 0, timeout=5000)
    qtbot.keyClick(w, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: w.worker.running and steps(w) > 0, timeout=5000)


def test_png_export_is_not_uniform_and_has_canvas_size(make_window, qtbot, tmp_path):
    from PIL import Image

    w = make_window()
    qtbot.waitUntil(lambda: w.canvas.shown is not None, timeout=10000)
    out = w.screenshot(tmp_path / "frame.png")
    assert out is not None and out.is_file()
    img = np.asarray(Image.open(out))
    x, y, width, height = w.canvas.export_region() or (0, 0, *w.canvas.size)  # the canvas beside the HUD
    s = w.canvas.pixel_scale
    assert img.shape[:2] == (int(height * s), int(width * s))
    assert len(np.unique(img.reshape(-1, img.shape[-1]), axis=0)) > 20, "the frame must show the field"


def test_failing_write_gives_message_and_run_goes_on(make_window, qtbot, tmp_path):
    w = make_window()
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert w.screenshot(blocker / "frame.png") is None
    assert "cannot write" in w.last_error_box.text()
    wait_steps(qtbot, w, 10)


def test_mp4_recording_reads_back(make_window, qtbot, tmp_path):
    import imageio.v2 as imageio

    w = make_window()
    path = tmp_path / "clip.mp4"
    w.toggle_recording(path)
    qtbot.waitUntil(lambda: w.recorder is not None and w.recorder.frames >= 8, timeout=20000)
    rec = w.recorder
    w.toggle_recording()
    assert w.recorder is None and path.is_file()
    reader = imageio.get_reader(path)
    assert reader.count_frames() == rec.frames
    frame = reader.get_data(0)
    assert frame.shape[0] >= 100 and frame.std() > 5
    reader.close()


def test_checkpoint_save_load_continue(make_window, qtbot, tmp_path, fake_preset):
    w = make_window(fake_preset())
    wait_steps(qtbot, w, 30)
    pause(qtbot, w)
    n_saved, saved = state(qtbot, w)
    path = tmp_path / "ck.npz"
    w.save_checkpoint(path)
    qtbot.waitUntil(path.is_file, timeout=5000)
    w.worker.send("play")
    wait_steps(qtbot, w, 30)
    pause(qtbot, w)
    assert w.load_checkpoint(path)
    n_loaded, loaded = state(qtbot, w)
    assert n_loaded == n_saved
    for k in saved:
        np.testing.assert_allclose(loaded[k], saved[k], rtol=0, atol=0)
    w.worker.send("play")
    wait_steps(qtbot, w, 10)


def test_broken_preset_shows_error_and_leaves_run_untouched(make_window, qtbot):
    w = make_window()
    wait_steps(qtbot, w, 10)
    engine = w.worker.engine
    assert not w.open_preset(BROKEN / "unknown_key.toml")
    text = w.last_error_box.text()
    assert "unknown_key.toml" in text and "unknown key" in text
    assert w.worker.engine is engine and w.worker.running
    wait_steps(qtbot, w, 10)


def test_parameter_form_validates_and_resets(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: w.worker.engine is not None, timeout=5000)
    nu_edit, _ = w.params.editors[("physics", "nu")]
    # typing digits and letters into the form goes to the editor, not to the single-key shortcuts
    was_running = w.worker.running
    nu_edit.setFocus()
    nu_edit.selectAll()
    qtbot.keyClicks(nu_edit, "0.9 nr1")
    assert nu_edit.text() == "0.9 nr1"
    assert w.worker.running == was_running and w.field_combo.currentIndex() == 0
    nu_edit.setText("0.9")
    engine = w.worker.engine
    assert not w.apply_parameters()
    assert "physics.nu" in w.last_error_box.text()
    assert w.worker.engine is engine
    nu_edit.setText("0.1")
    assert w.params.editors[("physics", "damping")][0].text() == ""  # unset optional stays unset
    w.params.editors[("grid", "nx")][0].setValue(80)
    assert w.apply_parameters()
    qtbot.waitUntil(lambda: w.worker.engine is not engine, timeout=5000)
    assert w.worker.engine.rho.shape == (48, 80)
    assert w.worker.engine.preset.physics.nu == 0.1
    assert w.worker.engine.preset.physics.damping is None


def test_divergence_pauses_and_last_good_state_restores(make_window, qtbot, fake_preset):
    w = make_window(fake_preset(text="[physics]\nblowup_at = 40\n"))
    # the worker sets `diverged` first; the window shows its notice at its next tick
    qtbot.waitUntil(lambda: w.worker.diverged is not None and w.last_error_box is not None, timeout=10000)
    assert not w.worker.running
    assert "diverged" in w.last_error_box.text()
    assert w.worker.last_good is not None
    w.worker.send("restore")
    qtbot.waitUntil(lambda: w.worker.diverged is None, timeout=5000)
    n, arrays = state(qtbot, w)
    assert n == w.worker.last_good["meta"]["step"] < 40 and np.isfinite(arrays["rho"]).all()


def test_every_field_kind_draws(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: w.field_combo.count() == 4, timeout=10000)
    for key, name, visual in ((Qt.Key.Key_1, "rho", "image"), (Qt.Key.Key_2, "u", "image"),
                              (Qt.Key.Key_3, "tracers", "markers"), (Qt.Key.Key_4, "tree", "lines")):
        qtbot.keyClick(w, key)
        qtbot.waitUntil(lambda name=name: w.canvas.shown is not None and w.canvas.shown.field_name == name,
                        timeout=5000)
        w.canvas.native.repaint()
        assert getattr(w.canvas, visual).visible
        img = w.canvas.grab()
        background = img[0, 0]
        drawn = np.any(img != background, axis=-1).sum()
        assert drawn > 200, f"{name}: nothing drawn ({drawn} pixels differ from the background)"
        if os.environ.get("NAGARE_TEST_SHOTS"):
            w.grab().save(str(Path(os.environ["NAGARE_TEST_SHOTS"]) / f"kind-{name}.png"))
    assert w.canvas.mask_image.visible is False  # boxes have no mask


def test_particles_colour_by_attribute(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: w.field_combo.count() == 4, timeout=10000)
    w.show_field(2)
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.shown.kind == "particles", timeout=5000)
    assert [w.attr_combo.itemText(i) for i in range(w.attr_combo.count())] == ["radius", "x"]
    w.attr_combo.activated.emit(1)
    qtbot.waitUntil(lambda: w.canvas.shown.attribute == "x", timeout=5000)
    x = np.asarray(w.canvas.shown.positions)[:, 0]
    np.testing.assert_allclose(np.asarray(w.canvas.shown.data), x, rtol=1e-6)
    lo, hi = w.canvas.current_range
    np.testing.assert_allclose([lo, hi], [x.min(), x.max()], rtol=1e-6)


def test_range_boxes_show_the_range_of_the_frame_on_screen(make_window, qtbot, fake_preset):
    """With "auto" on, the range boxes show the colour range the canvas draws with — of the frame
    on screen, not of the one before it (a packet is only queued by show_packet; its range is known
    after the next draw)."""
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.frames_drawn > 3, timeout=10000)
    w.worker.send("pause")
    qtbot.wait(300)
    seen = []
    for _ in range(3):  # a few single steps: each shows a new frame with a new automatic range
        w.worker.send("step", n=5)
        qtbot.wait(400)
        lo, hi = w.canvas.current_range
        qtbot.waitUntil(lambda: w.range_hi.text() == f"{float(w.canvas.current_range[1]):.4g}", timeout=3000)
        assert w.range_lo.text() == f"{float(lo):.4g}" and w.range_lo.isReadOnly()
        seen.append(w.range_hi.text())
    assert len(set(seen)) > 1  # the range did move between the frames


def test_grid3d_slice_moves(make_window, qtbot):
    w = make_window("diffusion3d")
    qtbot.waitUntil(lambda: w.canvas.shown is not None, timeout=10000)
    w.mode_combo.setCurrentText("slice")  # the 2D single-slice mode (the default is the 3D view)
    w.slice_axis.setCurrentText("x")
    w.slice_slider.setValue(0)
    qtbot.waitUntil(lambda: w.canvas.shown.slice_index == 0 and w.canvas.shown.data.shape == (64, 64), timeout=5000)
    w.slice_slider.setValue(1000)
    qtbot.waitUntil(lambda: w.canvas.shown.slice_index == 63, timeout=5000)


def test_vtk_and_timing_log_export(make_window, qtbot, tmp_path, fake_preset):
    import json

    from nagare.app.gui.export import read_vtk_structured_points

    w = make_window(fake_preset())
    wait_steps(qtbot, w, 20)
    pause(qtbot, w)
    _, arrays = state(qtbot, w)
    w.export_vtk(tmp_path / "vtk")
    qtbot.waitUntil(lambda: len(list((tmp_path / "vtk").glob("*.vtk"))) == 4, timeout=5000)
    rho_file = next((tmp_path / "vtk").glob("*_rho.vtk"))
    dims, values = read_vtk_structured_points(rho_file)
    assert dims == (64, 48, 1)
    np.testing.assert_allclose(values[0], arrays["rho"], rtol=1e-6, atol=1e-6)
    w.export_timings(tmp_path / "log.csv")
    qtbot.waitUntil(lambda: (tmp_path / "log.json").is_file(), timeout=5000)
    log = json.loads((tmp_path / "log.json").read_text())
    assert log["rows"] and "phase_stencil_ms" in log["columns"]
    assert (tmp_path / "log.csv").read_text().startswith("wall_time,")


def test_hud_toggles_with_f1(make_window, qtbot):
    w = make_window()
    qtbot.waitUntil(lambda: w.hud.frames > 2, timeout=10000)
    assert w.hud.error is None
    qtbot.keyClick(w, Qt.Key.Key_F1)
    assert not w.hud.visible
    before_hud, before_canvas = w.hud.frames, w.canvas.frames_drawn
    qtbot.waitUntil(lambda: w.canvas.frames_drawn > before_canvas + 3, timeout=10000)
    assert w.hud.frames == before_hud
    qtbot.keyClick(w, Qt.Key.Key_F1)
    qtbot.waitUntil(lambda: w.hud.frames > before_hud, timeout=5000)


def test_help_overlay_lists_keys(make_window, qtbot):
    w = make_window()
    qtbot.keyClick(w, Qt.Key.Key_H)
    assert "Space" in w.help_box.text() and "F1" in w.help_box.text()


def test_launch_entry_point_opens_and_quits(qtbot, _vispy_on_qt, monkeypatch, tmp_path):
    """``nagare`` (cli.py) calls nagare.app.gui.launch(preset, backend) -> exit status."""
    from nagare.app import gui
    from PyQt6 import QtCore, QtWidgets

    monkeypatch.chdir(tmp_path)
    seen = []

    def close_when_running():
        wins = [w for w in QtWidgets.QApplication.topLevelWidgets() if type(w).__name__ == "MainWindow"]
        if wins and wins[0].worker.engine is not None and wins[0].worker.engine.step_count > 0:
            seen.append(wins[0].windowTitle())
            wins[0].close()
        else:
            QtCore.QTimer.singleShot(100, close_when_running)

    QtCore.QTimer.singleShot(100, close_when_running)
    assert gui.launch("diffusion3d-thin", "numpy") == 0
    assert seen == ["nagare — diffusion3d-thin"]


def test_gl_texture_handle_of_the_field_image(make_window, qtbot):
    """The interop path registers the GL texture VisPy made for the field: it must be findable."""
    from vispy.gloo import gl

    w = make_window()
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.frames_drawn > 2, timeout=10000)
    w.canvas.set_current()
    handle = w.canvas._gl_texture_handle()
    assert handle > 0 and gl.glIsTexture(handle)
    gl.glBindTexture(gl.GL_TEXTURE_2D, handle)
    GL = pytest.importorskip("OpenGL.GL")
    # the interop copy writes float32 rows into this texture: it must be R32F of the field's shape
    ny, nx = w.canvas.shown.data.shape
    assert GL.glGetTexLevelParameteriv(GL.GL_TEXTURE_2D, 0, GL.GL_TEXTURE_WIDTH) == nx
    assert GL.glGetTexLevelParameteriv(GL.GL_TEXTURE_2D, 0, GL.GL_TEXTURE_HEIGHT) == ny
    assert GL.glGetTexLevelParameteriv(GL.GL_TEXTURE_2D, 0, GL.GL_TEXTURE_INTERNAL_FORMAT) == GL.GL_R32F
    assert w.canvas.display_path == "host" and "NumPy" in w.canvas.path_reason


def test_hud_takes_the_mouse_over_its_window_only(make_window, qtbot, fake_preset):
    """Qt→imgui bridge: over the HUD the wheel goes to imgui (no zoom); elsewhere the camera zooms."""
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: w.hud.frames > 2 and w.canvas.shown is not None, timeout=10000)
    cam = w.canvas.view.camera
    ev = w.canvas.events

    def wheel_at(pos):
        ev.mouse_move(pos=pos, button=None, modifiers=(), buttons=[])
        for _ in range(3):  # imgui decides hovering on its next frames
            w.canvas.native.repaint()
            qtbot.wait(20)
        before = tuple(cam.rect.size)
        ev.mouse_wheel(pos=pos, delta=(0, 1), modifiers=(), buttons=[])
        w.canvas.native.repaint()
        return before, tuple(cam.rect.size)

    before, after = wheel_at((60, 60))  # inside the HUD window (top-left)
    np.testing.assert_allclose(after, before)
    (x, y), (vw, vh) = w.canvas.view.pos, w.canvas.view.size
    assert not w.hud.covers((x + vw / 2, y + vh / 2))
    before, after = wheel_at((x + vw / 2, y + vh / 2))  # the field's middle
    assert after[0] < before[0], "the wheel outside the HUD must zoom the camera"


def test_particles_overlay_on_grid_fields(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.shown.field_name == "rho", timeout=10000)
    qtbot.waitUntil(lambda: w.canvas.shown.overlay is not None, timeout=5000)
    w.canvas.native.repaint()
    assert w.canvas.overlay.visible and w.canvas.image.visible
    w.particles_overlay.setChecked(False)
    qtbot.waitUntil(lambda: w.canvas.shown.overlay is None, timeout=5000)
    w.canvas.native.repaint()
    assert not w.canvas.overlay.visible


def test_a_preset_can_start_with_the_particles_overlay_off(make_window, qtbot, fake_preset):
    """[view] particles_overlay = false (what headless frames follow too): the box starts unticked and
    the worker's packets carry no overlay; ticking it draws the tracers."""
    w = make_window(fake_preset(text="[view]\nfield = \"rho\"\nparticles_overlay = false\n"))
    qtbot.waitUntil(lambda: w.canvas.shown is not None and w.canvas.shown.field_name == "rho", timeout=10000)
    assert not w.particles_overlay.isChecked() and w.canvas.shown.overlay is None
    w.canvas.native.repaint()
    assert not w.canvas.overlay.visible
    w.particles_overlay.setChecked(True)
    qtbot.waitUntil(lambda: w.canvas.shown.overlay is not None, timeout=5000)


def test_s_and_v_keys_write_into_the_output_folder(make_window, qtbot, tmp_path):
    w = make_window(output_dir=tmp_path / "keys")
    qtbot.waitUntil(lambda: w.canvas.shown is not None, timeout=10000)
    qtbot.keyClick(w, Qt.Key.Key_S)
    assert len(list((tmp_path / "keys").glob("*.png"))) == 1
    qtbot.keyClick(w, Qt.Key.Key_V)
    qtbot.waitUntil(lambda: w.recorder is not None and w.recorder.frames >= 3, timeout=10000)
    qtbot.keyClick(w, Qt.Key.Key_V)
    assert w.recorder is None
    assert len(list((tmp_path / "keys").glob("*.mp4"))) == 1
    assert not list((tmp_path / "keys").glob(".*tmp*"))


def test_status_throughput_keeps_three_digits_below_one_mups():
    """A NumPy SPH run updates ~25 000 particles a second: the status line says 0.025 MUPS, not 0.0."""
    from nagare.app.gui.window import throughput_text

    assert throughput_text(25_400, 0.004) == "0.0254 MUPS · 0.00 GB/s"
    assert throughput_text(3.94e6, 0.28) == "3.9 MUPS · 0.28 GB/s"
    assert throughput_text(7.02e9, 1234.5) == "7,020 MUPS · 1234.50 GB/s"

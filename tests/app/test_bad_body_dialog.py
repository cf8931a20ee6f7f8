"""Loading a preset whose engine cannot be built (a bad STL mesh, issue 40): one error dialog, on top,
that names the file; no second dialog; the previous run stays loaded, in the worker and in the UI."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PyQt6", reason="Qt widgets need PyQt6 (the GPU machine has none)")
from PyQt6 import QtWidgets

pytestmark = pytest.mark.gui

REPO = Path(__file__).resolve().parents[2]


def _bad_stl_preset(tmp_path, content: bytes):
    bad = tmp_path / "broken.stl"
    bad.write_bytes(content)
    text = (REPO / "presets" / "amr3d-stl.toml").read_text().replace('"amr3d-stl/body.stl"', repr(str(bad)))
    path = tmp_path / "bad-stl.toml"
    path.write_text(text)
    return path


def _boxes(w):
    return [b for b in w.findChildren(QtWidgets.QMessageBox) if b.isVisible()]


@pytest.mark.parametrize("content", [b"not a mesh at all", b"solid x\nendsolid x\n"])
def test_a_bad_stl_shows_one_dialog_and_keeps_the_previous_run(make_window, qtbot, fake_preset, content, tmp_path):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: w.worker.engine is not None and w.worker.engine.step_count > 0, timeout=15000)
    before = w.worker.engine
    assert w.open_preset(_bad_stl_preset(tmp_path, content))
    qtbot.waitUntil(lambda: len(_boxes(w)) >= 1, timeout=20000)
    qtbot.wait(800)  # any second dialog (a command the failed load left queued) would show by now
    boxes = _boxes(w)
    assert len(boxes) == 1, [b.text() for b in boxes]
    assert "broken.stl" in boxes[0].text() and "no engine" not in boxes[0].text()
    assert w.last_error_box is boxes[0]
    assert w.worker.engine is before and w.worker.engine.family == "fake2d"
    assert Path(w.preset.source).stem == "fake" and "fake" in w.windowTitle()
    step = before.step_count
    qtbot.waitUntil(lambda: before.step_count > step, timeout=10000)  # and it runs on


def test_a_bad_stl_at_start_shows_its_error_alone(make_window, qtbot, tmp_path):
    """Started on such a preset there is no run to keep: the build's error is the one dialog; the
    commands queued behind it (play, the tracer-capacity ask) say "no engine" in the status bar."""
    w = make_window(_bad_stl_preset(tmp_path, b"not a mesh at all"))
    qtbot.waitUntil(lambda: len(_boxes(w)) >= 1, timeout=20000)
    qtbot.wait(800)
    boxes = _boxes(w)
    assert len(boxes) == 1 and "broken.stl" in boxes[0].text(), [b.text() for b in boxes]
    assert w.worker.engine is None
    w.worker.send("play")
    qtbot.waitUntil(lambda: any("no engine is loaded" in m for m in w.messages), timeout=5000)
    assert len(_boxes(w)) == 1


def test_a_failed_switch_keeps_the_run_paused_and_its_field(make_window, qtbot, fake_preset, tmp_path):
    """The run that stays loaded stays as the user left it: paused stays paused, and the field it
    shows is its own (not the field the failed preset asked for)."""
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: w.worker.engine is not None and w.worker.engine.step_count > 0, timeout=15000)
    w.worker.send("pause")
    qtbot.waitUntil(lambda: not w.worker.running, timeout=5000)
    field = w.worker.view.field
    before = w.worker.engine
    assert w.open_preset(_bad_stl_preset(tmp_path, b"not a mesh at all"))
    qtbot.waitUntil(lambda: len(_boxes(w)) >= 1, timeout=20000)
    qtbot.wait(800)
    assert len(_boxes(w)) == 1, [b.text() for b in _boxes(w)]
    assert w.worker.engine is before and not w.worker.running
    assert w.worker.view.field == field
    step = before.step_count
    qtbot.wait(500)
    assert before.step_count == step  # still paused

"""Single-key shortcuts do not fire while a list, spin box or combo box has the focus (typing in the
preset list took screenshots, opened help and switched fields); on the canvas they still do."""
from __future__ import annotations

import pytest

pytest.importorskip("PyQt6", reason="Qt widgets need PyQt6 (the GPU machine has none)")
from PyQt6.QtCore import Qt


def test_typing_in_a_focused_list_or_spin_box_fires_no_shortcut(make_window, qtbot, fake_preset, tmp_path):
    w = make_window(fake_preset(), output_dir=tmp_path / "keys")
    qtbot.waitUntil(lambda: w.field_combo.count() == 4 and w.canvas.shown is not None, timeout=10000)
    running, bar = w.worker.running, w.colorbar_box.isChecked()
    for widget in (w.preset_list, w.params.editors[("grid", "nx")][0], w.cmap_combo):
        widget.setFocus()
        qtbot.waitUntil(lambda widget=widget: widget.hasFocus(), timeout=5000)
        qtbot.keyClicks(widget, "shb2v")
        qtbot.keyClick(widget, Qt.Key.Key_Space)
    assert not list((tmp_path / "keys").glob("*.png")), "S took a screenshot"
    assert getattr(w, "help_box", None) is None, "H opened help"
    assert w.colorbar_box.isChecked() == bar and w.field_combo.currentIndex() == 0
    assert w.recorder is None and w.worker.running == running
    # on the canvas the same keys act
    w.canvas.native.setFocus()
    qtbot.keyClick(w.canvas.native, Qt.Key.Key_B)
    assert w.colorbar_box.isChecked() != bar
    qtbot.keyClick(w.canvas.native, Qt.Key.Key_S)
    assert len(list((tmp_path / "keys").glob("*.png"))) == 1

"""Long tooltips (a parameter's description, a variant's doc, a preset's summary) are shown wrapped,
not on one line ~1400 px wide; the tooltip strings stay as they are, short ones are shown as given."""
from __future__ import annotations

import pytest
from nagare.app.gui.text_wrap import wrap_lines

pytest.importorskip("PyQt6", reason="Qt widgets need PyQt6 (the GPU machine has none)")
from PyQt6 import QtCore, QtGui, QtWidgets

LONG = ("a variant's doc that runs on and on, " * 12).strip()


def show_tip(qtbot, target, pos):
    QtWidgets.QToolTip.hideText()
    event = QtGui.QHelpEvent(QtCore.QEvent.Type.ToolTip, pos, target.mapToGlobal(pos))
    QtWidgets.QApplication.sendEvent(target, event)
    qtbot.waitUntil(QtWidgets.QToolTip.isVisible, timeout=3000)
    label = next(w for w in QtWidgets.QApplication.topLevelWidgets()
                 if w.objectName() == "qtooltip_label" and w.isVisible())
    return QtWidgets.QToolTip.text(), label.width()


def test_long_tooltips_are_shown_wrapped_everywhere(make_window, qtbot, fake_preset):
    w = make_window(fake_preset())
    qtbot.waitUntil(lambda: "kernel" in w.variant_combos, timeout=5000)
    one_line = QtGui.QFontMetrics(QtWidgets.QToolTip.font()).horizontalAdvance(LONG)
    # a widget's own tooltip (the variant combo box)
    cb = w.variant_combos["kernel"]
    cb.setToolTip(LONG)
    text, width = show_tip(qtbot, cb, QtCore.QPoint(5, 5))
    assert cb.toolTip() == LONG and "white-space:pre-wrap" in text and LONG in text
    assert width < one_line / 2, (width, one_line)
    # an item's tooltip in a list (a preset row)
    lst = w.preset_list
    lst.item(0).setToolTip(LONG)
    text, width = show_tip(qtbot, lst.viewport(), lst.visualItemRect(lst.item(0)).center())
    assert LONG in text and width < one_line / 2, (width, one_line)
    # a short tooltip is shown as given
    cb.setToolTip("short")
    text, _ = show_tip(qtbot, cb, QtCore.QPoint(5, 5))
    assert text == "short"


def test_hud_tooltips_get_line_breaks():
    lines = wrap_lines(f"kernel: {LONG}\nunavailable: needs a CUDA GPU").split("\n")
    assert all(len(line) <= 80 for line in lines) and lines[-1] == "unavailable: needs a CUDA GPU"
    assert " ".join(lines[:-1]) == f"kernel: {LONG}"

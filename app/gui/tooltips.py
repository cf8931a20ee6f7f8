"""Tooltips wrapped to a readable width. Qt shows a plain-text tooltip on one line however long it
is (a variant's doc ran ~1400 px across the screen) and word-wraps only rich text, so a filter on
the application shows each long tooltip (a widget's, or an item's in a list or combo box) as rich
text that wraps; the tooltip strings themselves stay plain. ImGui (the HUD) has no rich text: its
tooltips get line breaks instead (wrap_lines)."""
from __future__ import annotations

import html

from PyQt6 import QtCore, QtWidgets
from PyQt6.QtCore import Qt

from .text_wrap import TOOLTIP_WIDTH


def needs_wrap(text: str, width: int = TOOLTIP_WIDTH) -> bool:
    return any(len(line) > width for line in text.split("\n")) and not Qt.mightBeRichText(text)


def wrap_tooltip(text: str) -> str:
    """``text`` as rich text that Qt word-wraps, keeping its own line breaks."""
    return f"<p style='white-space:pre-wrap'>{html.escape(text, quote=False)}</p>"


def tooltip_at(obj, event) -> str:
    """The tooltip Qt would show for a ToolTip ``event`` on ``obj``: the item's under the pointer
    where ``obj`` is the viewport of a list (a preset row, a combo box's choice), else the widget's."""
    view = obj.parent() if isinstance(obj, QtWidgets.QWidget) else None
    if isinstance(view, QtWidgets.QAbstractItemView) and obj is view.viewport():
        index = view.indexAt(event.pos())
        tip = index.data(Qt.ItemDataRole.ToolTipRole) if index.isValid() else None
        return tip if isinstance(tip, str) else ""
    return obj.toolTip() if isinstance(obj, QtWidgets.QWidget) else ""


class TooltipWrapper(QtCore.QObject):
    """An application event filter: install with ``QApplication.instance().installEventFilter``;
    parented to the window, so it goes (and Qt drops the filter) when the window does."""

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() != QtCore.QEvent.Type.ToolTip:
            return False
        text = tooltip_at(obj, event)
        if not needs_wrap(text):
            return False  # Qt shows it as it is
        QtWidgets.QToolTip.showText(event.globalPos(), wrap_tooltip(text), obj)
        return True

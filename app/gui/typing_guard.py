"""Single-key shortcuts (S, H, B, R, 1–9, Space, …) are application-wide, so without a guard they
fire while the user types into a list (Qt's type-ahead), a line edit, a spin box or a combo box:
typing a preset's name took screenshots, opened help and switched fields, and R reset the run.
The guard answers Qt's ShortcutOverride for such a focused widget, so the widget takes the key;
on the canvas and elsewhere the shortcuts work as before, and chords with Ctrl/Alt stay shortcuts."""
from __future__ import annotations

from PyQt6 import QtCore, QtWidgets
from PyQt6.QtCore import Qt

# widgets that do something with a bare printable key (edit text, search their items, step a value)
TYPING_WIDGETS = (QtWidgets.QLineEdit, QtWidgets.QAbstractSpinBox, QtWidgets.QComboBox,
                  QtWidgets.QAbstractItemView, QtWidgets.QTextEdit, QtWidgets.QPlainTextEdit)
# keys without text that such widgets use to move through their items or text
NAVIGATION_KEYS = {Qt.Key.Key_Space, Qt.Key.Key_Home, Qt.Key.Key_End, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown}
_CHORD = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier | Qt.KeyboardModifier.MetaModifier


def typing_widget_has_focus(widget: QtWidgets.QWidget | None) -> bool:
    return isinstance(widget, TYPING_WIDGETS)


def is_typed_key(event) -> bool:
    """A key a typing widget takes for itself: printable text or a navigation key, without Ctrl/Alt/Meta."""
    if event.modifiers() & _CHORD:
        return False
    text = event.text()
    return (bool(text) and text.isprintable()) or Qt.Key(event.key()) in NAVIGATION_KEYS


class TypingGuard(QtCore.QObject):
    """An application event filter: install with ``QApplication.instance().installEventFilter``;
    parented to the window, so it goes (and Qt drops the filter) when the window does."""

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        if (event.type() == QtCore.QEvent.Type.ShortcutOverride and obj is QtWidgets.QApplication.focusWidget()
                and typing_widget_has_focus(obj) and is_typed_key(event)):
            event.accept()  # accepted override: Qt delivers the key to the widget, not to a shortcut
            return True
        return False

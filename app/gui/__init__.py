"""The desktop app: a Qt window around a VisPy canvas, an imgui HUD, a simulation thread."""
from __future__ import annotations

import signal
import sys

from nagare.engine.errors import NagareError


def launch(preset: str | None = None, backend: str = "auto", fps: float | None = None) -> int:
    """Open the main window and run the Qt event loop; returns the exit status."""
    # PyQt6 and VisPy (≈2 s) load only when the window opens: importing nagare.app.gui (its light
    # modules: ticks, the CLI's headless path) must not pull in a UI toolkit
    from PyQt6 import QtWidgets
    from vispy import app as vispy_app

    vispy_app.use_app("pyqt6")
    qapp = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    qapp.setApplicationName("nagare")
    from .window import MainWindow  # PyQt6 too: loaded with the window, as above

    try:
        win = MainWindow(preset, backend, fps=fps)
    except NagareError as exc:
        print(f"nagare: {exc}", file=sys.stderr)
        return 2
    win.show()
    # Ctrl-C in the terminal closes the window cleanly (stops recording, joins the worker) instead
    # of raising KeyboardInterrupt inside a Qt slot; the window's 60 Hz timer lets Python see it.
    previous = signal.signal(signal.SIGINT, lambda *_: win.close())
    try:
        return qapp.exec()
    finally:
        signal.signal(signal.SIGINT, previous)

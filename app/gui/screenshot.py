"""Open the app, let the preset run a few seconds, save a picture of the whole window.

    xvfb-run -a -s "-screen 0 1600x1000x24" python -m nagare.app.gui.screenshot lbm2d-cylinder docs/screenshot.png

(The README's screenshot is made this way.)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from nagare.app.atomic import ExportError, output_writer, write_atomic


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m nagare.app.gui.screenshot")
    p.add_argument("preset", nargs="?", help="preset name or TOML path (default: the app's default)")
    # the current folder: a user's picture must not land in (or fail on a missing) docs/ folder
    p.add_argument("out", nargs="?", default="nagare-screenshot.png", help="PNG to write (default: %(default)s)")
    p.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--size", default="1400x860")
    a = p.parse_args(argv)

    # PyQt6 and VisPy (≈2 s) load after the arguments are parsed: `--help` and usage errors stay instant
    from PyQt6 import QtWidgets
    from vispy import app as vispy_app

    vispy_app.use_app("pyqt6")
    qapp = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    from .window import MainWindow  # PyQt6 too: loaded with the window, as above

    w = MainWindow(a.preset, a.backend, output_dir="nagare-output")
    w.resize(*(int(x) for x in a.size.split("x")))
    w.show()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        qapp.processEvents()
        time.sleep(0.01)
    image = w.grab().toImage()
    w.close()
    try:
        save_screenshot(image, a.out)
    except ExportError as exc:
        print(f"NOT written: {exc}")
        return 4
    print(f"written: {a.out}")
    return 0


@output_writer("a screenshot of the window")
def save_screenshot(image, path) -> Path:
    """A QImage as PNG, encoded in memory and written atomically (Qt's own file writer would leave
    half a file on a full disk)."""
    from PyQt6.QtCore import QBuffer, QIODevice

    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buf, "PNG"):
        raise ExportError(f"cannot write {path}: the image could not be encoded as PNG")
    data = bytes(buf.data())
    return write_atomic(path, lambda tmp: tmp.write_bytes(data))


if __name__ == "__main__":
    sys.exit(main())

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
from nagare.engine.errors import NagareError, one_line


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m nagare.app.gui.screenshot")
    p.add_argument("preset", nargs="?", help="preset name or TOML path (default: the app's default)")
    # the current folder: a user's picture must not land in (or fail on a missing) docs/ folder
    p.add_argument("out", nargs="?", default="nagare-screenshot.png", help="PNG to write (default: %(default)s)")
    p.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--size", default="1400x860")
    a = p.parse_args(argv)
    # checked before Qt and VisPy load: a bad size raised inside Qt's window code and the process then
    # died in Qt's teardown (a traceback, then "Segmentation fault"); an unknown preset printed a traceback
    try:
        size = parse_size(a.size)
        if a.preset is not None:
            from nagare.engine.presets import resolve_path

            resolve_path(a.preset)
    except (ValueError, NagareError) as exc:
        print(f"{p.prog}: {exc}", file=sys.stderr)
        return 2

    # PyQt6 and VisPy (≈2 s) load after the arguments are parsed: `--help` and usage errors stay instant
    from PyQt6 import QtWidgets
    from vispy import app as vispy_app

    vispy_app.use_app("pyqt6")
    qapp = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    from .window import MainWindow  # PyQt6 too: loaded with the window, as above

    try:
        w = MainWindow(a.preset, a.backend, output_dir="nagare-output")
    except NagareError as exc:  # a preset that names a file but does not validate: one line
        print(f"{p.prog}: {one_line(exc)}", file=sys.stderr)
        return 2
    w.resize(*size)
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


MAX_SIDE = 16384  # px: beyond what a GL surface (and Xvfb's screen) can hold


def parse_size(text: str) -> tuple[int, int]:
    """``WIDTHxHEIGHT`` in pixels (e.g. 1400x860) as (width, height); a ValueError naming the option."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--size {text!r}: expected WIDTHxHEIGHT in pixels, e.g. 1400x860")
    w, h = (int(p) for p in parts)
    if not (1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE):
        raise ValueError(f"--size {text!r}: each side must be 1 to {MAX_SIDE} pixels")
    return w, h


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

"""Open the app, let the preset run a few seconds, save a picture of the whole window.

    xvfb-run -a -s "-screen 0 1600x1000x24" python -m nagare.app.gui.screenshot lbm2d-cylinder docs/screenshot.png

(The README's screenshot is made this way.)
"""
from __future__ import annotations

import argparse
import sys
import time


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
    ok = w.grab().save(a.out)
    w.close()
    print(f"{'written' if ok else 'NOT written'}: {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

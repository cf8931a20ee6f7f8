"""The display benchmark runs where PyQt6 is absent (the GPU machine draws through VisPy's EGL
backend): nothing it imports may import PyQt6."""
from __future__ import annotations

import subprocess
import sys

BLOCK_QT = """
import sys
class BlockQt:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'PyQt6':
            raise ImportError(f'{name} imported by a module that must run without Qt')
sys.meta_path.insert(0, BlockQt())
import nagare.app.gui.bench_display, nagare.app.gui.hud, nagare.app.gui.view3d, nagare.app.gui.device_draw
print('ok')
"""


def test_the_display_bench_imports_nothing_from_pyqt6():
    r = subprocess.run([sys.executable, "-c", BLOCK_QT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.stdout
    assert r.stdout.strip() == "ok"

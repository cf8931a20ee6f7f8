"""Shared by the Mesa (host-copy) and GPU (interop) display tests: a field that exposes any
geometry error, a one-pixel-per-cell view, and the comparison of the screen with the field."""
from __future__ import annotations

import numpy as np

CMAP = "viridis"
RANGE = (-1.0, 1.0)


def random_field(ny: int, nx: int, seed: int) -> np.ndarray:
    """Independent values per cell: a shift, flip or clipped row/column by one cell changes ~all
    pixels of that region (a smooth field would hide such errors inside the tolerance)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (ny, nx)).astype(np.float32)


def one_pixel_per_cell(canvas, nx: int, ny: int) -> None:
    """Camera rect = the field exactly (set_range(margin=0) adds 0.1 in VisPy): pixel centres sit
    on texel centres, so nearest sampling picks cell (i, j) for pixel (i, j)."""
    assert tuple(canvas.physical_size) == (nx, ny), canvas.physical_size
    canvas.view.camera.rect = (0, 0, nx, ny)


def assert_frame_shows_field(frame: np.ndarray, field: np.ndarray, mask: np.ndarray | None = None) -> None:
    from nagare.app import colormaps

    expected = colormaps.apply(field, CMAP, RANGE, mask=mask)
    assert frame.shape == expected.shape
    # VisPy samples a 1D LUT texture linearly where colormaps.apply picks the nearest of the same
    # 256 entries: the two can differ by one LUT step (≤ 4 levels per channel for viridis).
    diff = np.abs(frame.astype(int) - expected.astype(int)).max(axis=-1)
    bad = np.argwhere(diff >= 5)
    assert len(bad) == 0, (f"{len(bad)} of {diff.size} pixels differ from the colour-mapped field; "
                           f"rows {np.unique(bad[:, 0])[:8]}, columns {np.unique(bad[:, 1])[:8]}")
    assert np.median(diff) <= 1


def in_isolated_child() -> bool:
    """True in the fresh process that ``isolated`` starts. A fixture that shows a window builds it
    only there: the pytest process that hands the test on needs none, and each window shown in that
    long-lived process risks the Qt/Mesa crash in ``show()`` that the isolation exists to avoid."""
    import os

    return bool(os.environ.get("NAGARE_GL_ISOLATED"))


def isolated(test_file: str, name: str, timeout: float = 120) -> bool:
    """Run test ``name`` of ``test_file`` in a fresh process and assert it passed; True when the
    caller is that process (go on with the body). For canvases that draw VisPy text: Mesa fails
    in a long-lived GL process after such canvases were closed (see tests/app/test_view3d.py)."""
    import os
    import subprocess
    import sys

    if os.environ.get("NAGARE_GL_ISOLATED") == name:
        return True
    # -m "": the test runs whatever its marks (a slow-marked one from the slow step; the default addopts
    # deselect slow tests, and the child would then collect nothing)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-m", "",
                        f"{test_file}::{name}"],
                       env={**os.environ, "NAGARE_GL_ISOLATED": name}, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    return False


def gl_buffer_rows(canvas, vbo, rows: int, row: int) -> np.ndarray:
    """The first ``rows`` float32 rows (``row`` components) of a gloo VertexBuffer as GL holds it
    now — what CUDA wrote into a registered buffer, read back by GL (the canvas' context made current)."""
    from OpenGL import GL  # PyOpenGL: glGetBufferSubData, which VisPy's ES 2 API lacks

    canvas.set_current()
    canvas.context.flush_commands()
    handle = int(canvas.context.shared.parser._objects[vbo.id].handle)
    data = np.zeros(rows * row * 4, np.uint8)
    GL.glBindBuffer(GL.GL_ARRAY_BUFFER, handle)
    try:
        GL.glGetBufferSubData(GL.GL_ARRAY_BUFFER, 0, data.nbytes, data)
    finally:
        GL.glBindBuffer(GL.GL_ARRAY_BUFFER, 0)
    return data.view(np.float32).reshape(rows, row)

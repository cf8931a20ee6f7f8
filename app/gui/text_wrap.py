"""Plain-text line wrapping for tooltips, without Qt: the HUD (ImGui, no rich text) breaks its long
tooltips into lines, and the HUD is drawn where PyQt6 is absent (bench_display on EGL)."""
from __future__ import annotations

import textwrap

TOOLTIP_WIDTH = 80  # characters per line


def wrap_lines(text: str, width: int = TOOLTIP_WIDTH) -> str:
    """``text`` with each of its lines broken at ``width`` characters (a word longer than that, such
    as a path, stays whole)."""
    return "\n".join(textwrap.fill(line, width, break_long_words=False, break_on_hyphens=False) if line else ""
                     for line in text.split("\n"))

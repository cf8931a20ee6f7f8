"""The HUD's font: imgui's built-in ProggyClean with the glyphs it lacks merged in from DroidSans.

ProggyClean covers ASCII and part of Latin-1 only: the status line's "l/c∞" (compact NS presets'
time unit) was drawn as "l/c?", and the "·" separators and Greek field names (ρ, τ, φ, ω) as the
missing-glyph box. DroidSans, which imgui-bundle ships in its assets, has ∞, ², ³, Greek, "·", "•",
"−", "…", "≤" and the like; merged into the default font it supplies only the glyphs ProggyClean
has not, so ASCII text looks as before. imgui ≥ 1.92 rasterises glyphs on first use, so no glyph
ranges need listing. A character neither font has is drawn as imgui's fallback; :func:`spelled`
turns the few the app uses into ASCII first.
"""
from __future__ import annotations

from pathlib import Path

FONT_SIZE = 13.0  # ProggyClean's own size (px)
# DroidSans' glyphs at ProggyClean's size look a size smaller than ProggyClean's (its ∞ was half
# the height of a digit): drawn this much larger and 2 px lower, they sit like its own glyphs
MERGED_SCALE = 1.35
MERGED_OFFSET_Y = 2.0
MERGED_FONT = Path("assets") / "fonts" / "DroidSans.ttf"  # inside the imgui_bundle package

# characters the app puts in labels that neither font has: an ASCII spelling
SPELLED = {"→": "->", "←": "<-", "▪": "*", "▸": ">", "∇": "grad ", "₀": "0", "₁": "1", "₂": "2"}


def merged_font_path() -> Path:
    import imgui_bundle  # imgui-bundle is loaded only once the HUD is drawn (hud.py)

    return Path(imgui_bundle.__file__).parent / MERGED_FONT


def load_fonts(io) -> object:
    """Add the default font with DroidSans merged in to ``io.fonts``; returns the font. A missing
    DroidSans file leaves the default font alone (text as before, no failure)."""
    from imgui_bundle import imgui

    base = imgui.ImFontConfig()
    base.size_pixels = FONT_SIZE  # an explicit size: imgui merges only into a font that has one
    font = io.fonts.add_font_default(base)
    path = merged_font_path()
    if path.is_file():
        cfg = imgui.ImFontConfig()
        cfg.merge_mode = True
        cfg.glyph_offset = (0.0, MERGED_OFFSET_Y)
        cfg.extra_size_scale = MERGED_SCALE  # merged glyphs are drawn at the font's size times this
        io.fonts.add_font_from_file_ttf(str(path), FONT_SIZE, cfg)
    return font


def spelled(text: str) -> str:
    """``text`` with the characters neither of the HUD's fonts has in an ASCII spelling."""
    if text.isascii():
        return text
    return "".join(SPELLED.get(c, c) for c in text)

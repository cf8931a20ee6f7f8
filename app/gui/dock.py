"""Where the field goes beside the docked HUD: right of its column or under it.

The HUD is pinned to the canvas' top-left corner, a fixed width and as tall as its content. A wide
field (a channel of 2.5:1) drawn right of the HUD's column would get a sliver of the canvas while
the space under the HUD stayed empty; a tall or square one drawn under a tall HUD would lose most of
the height. The field takes whichever of the two regions shows it larger at its aspect; on a tie it
stays right of the column (the HUD's traditional place, no jump while the HUD grows)."""
from __future__ import annotations


def field_origin(size: tuple[float, float], hud: tuple[float, float] | None, aspect: float | None,
                 right: float = 0.0, strips: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """(left, top) in logical px where the field's region begins.

    ``size``: the canvas (w, h); ``hud``: the HUD's (w, h) at the top-left corner, None when there is
    none; ``aspect``: width / height of what the view frames (1 for a 3D view; None for content that
    stretches to any region, a profile's plot: the larger area wins); ``right``: the colour bar's
    column; ``strips``: (y axis width, x axis height) taken from the region when axes are drawn."""
    if hud is None or hud[0] <= 0 or hud[1] <= 0:
        return 0.0, 0.0
    w, h = size
    hud_w, hud_h = min(hud[0], w), min(hud[1], h)
    lw, bh = strips

    def scale(left: float, top: float) -> float:
        """Logical px per unit of the framed content's height in that region (its area where the
        content has no aspect of its own)."""
        vw, vh = max(w - left - right - lw, 0.0), max(h - top - bh, 0.0)
        if aspect is None:
            return vw * vh
        return min(vw / (aspect if aspect > 0 else 1.0), vh)

    beside, below = scale(hud_w, 0.0), scale(0.0, hud_h)
    return (0.0, hud_h) if below > beside else (hud_w, 0.0)

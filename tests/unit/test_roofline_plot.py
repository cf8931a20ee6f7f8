"""`nagare bench`'s roofline PNG: its caption fits inside the figure (a one-case figure is narrow)
and names only what is drawn (the orange of a bar above the copy bandwidth only where one is)."""
from __future__ import annotations

import pytest
from nagare.app.bench_report import roofline_figure
from nagare.engine.bench import BenchResult


def _results(*gbs):
    return [BenchResult("128x128", {}, f"variant {k}", True, steps=1, gbytes_per_s=g) for k, g in enumerate(gbs)]


@pytest.mark.parametrize("gbs,orange", [((4.0, 5.5), False), ((4.0, 35.0), True)])
def test_the_caption_fits_the_figure_and_names_only_what_is_drawn(gbs, orange):
    import matplotlib.pyplot as plt

    fig = roofline_figure(_results(*gbs), 29e9, "nagare bench wave2d on CPU (x86_64, 2 threads)")
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box, page = fig._suptitle.get_window_extent(renderer), fig.bbox
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
        for ax in fig.axes:  # the caption stays above the panels' titles
            assert box.y0 >= ax.title.get_window_extent(renderer).y1
        text = fig._suptitle.get_text()
        assert "nagare bench wave2d on CPU" in text.replace("\n", " ")
        assert ("orange" in text) is orange
        bars = [p.get_facecolor() for p in fig.axes[0].patches]
        assert any(c[0] > 0.9 and c[2] < 0.2 for c in bars) is orange  # tab:orange is (1, 0.5, 0.05)
    finally:
        plt.close(fig)

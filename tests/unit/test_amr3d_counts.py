"""The bench's honest counts (engine/amr3d/counts.py): distinct nodes per level against closed forms
and a brute-force count of node positions, and P0's break-even and the effective speed-up from
made-up rates, through the bench report."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nagare.engine.amr3d import counts
from nagare.engine.amr3d.cases import bench_report, distinct_report
from nagare.engine.amr3d.tree import Forest, coarsen, refine
from nagare.engine.backend import get_backend
from nagare.engine.bench import BenchResult
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset


def brute_force(forest: Forest) -> dict[int, int]:
    """Every stored node's position in finest units, periodic sides wrapped; a position counts for
    the finest level whose leaves have it."""
    m = forest.m
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    local = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)
    sets = {}
    for lv in forest.levels:
        sl = forest.level_slice(lv)
        pts = (forest.origin[sl, None, :] + int(forest.spacing_of(lv)) * local[None]).reshape(-1, 3)
        pts, inside = forest.wrap_points(pts)
        assert inside.all()
        sets[lv] = {tuple(p) for p in pts}
    out, finer = {}, set()
    for lv in sorted(sets, reverse=True):
        out[lv] = len(sets[lv] - finer)
        finer |= sets[lv]
    return dict(sorted(out.items()))


@pytest.mark.parametrize("m", [3, 5, 9, 17])
@pytest.mark.parametrize("roots", [(1, 1, 1), (3, 2, 4), (2, 5, 1)])
@pytest.mark.parametrize("periodic", [(True, True, True), (False, False, False), (True, False, True)])
def test_a_box_of_leaves_has_the_closed_form_count(m, roots, periodic):
    """L×M×N leaves of m³: (L(m−1)+1)(M(m−1)+1)(N(m−1)+1) distinct nodes with walls on every side,
    L(m−1)·M(m−1)·N(m−1) periodic (the far faces are the near ones), per axis as it is."""
    forest = Forest.uniform(roots, 0, m, periodic=periodic)
    want = int(np.prod([n * (m - 1) + (not p) for n, p in zip(roots, periodic)]))
    assert counts.distinct_nodes_per_level(forest) == {0: want}
    assert counts.uniform_lattice_nodes(forest, 0) == want
    fig = counts.figures(forest, 0)
    assert fig["distinct_nodes"] == fig["distinct_updates_per_step"] == fig["finest_lattice_nodes"] == want
    assert fig["finest_steps_per_step"] == 1.0


@pytest.mark.parametrize("m", [5, 9, 17])
@pytest.mark.parametrize("periodic", [True, False])
def test_one_refined_root_counts_its_interface_for_the_fine_level(m, periodic):
    """3×3×3 roots of m³, the centre one refined: the fine level has the (2m−1)³ nodes of its box,
    the coarse lattice everything else — its nodes on the interface (the centre root's m³ coarse
    positions) are fine nodes too and count once, for the fine level."""
    forest = refine(Forest.uniform((3, 3, 3), 0, m, max_level=1, periodic=(periodic,) * 3), [13])
    assert forest.n_leaves == 26 + 8
    coarse = (3 * (m - 1) + (not periodic)) ** 3 - m**3
    fine = (2 * m - 1) ** 3
    assert counts.distinct_nodes_per_level(forest) == {0: coarse, 1: fine} == brute_force(forest)
    fig = counts.figures(forest, 0)
    assert fig["distinct_nodes"] == coarse + fine
    assert fig["distinct_updates_per_step"] == coarse + 2 * fine  # the fine level steps twice
    assert fig["finest_lattice_nodes"] == (6 * (m - 1) + (not periodic)) ** 3
    assert fig["finest_steps_per_step"] == 2.0


def test_a_refined_corner_root_on_a_periodic_box_wraps():
    """2×2×2 periodic roots, one refined: its far faces are the near faces of the same coarse
    lattice, so the coarse level keeps 8(m−1)³ − m³ nodes."""
    m = 9
    forest = refine(Forest.uniform((2, 2, 2), 0, m, max_level=1), [0])
    assert counts.distinct_nodes_per_level(forest) == {0: 8 * (m - 1) ** 3 - m**3, 1: (2 * m - 1) ** 3}


ops = st.lists(st.tuples(st.sampled_from(["refine", "coarsen"]), st.floats(0, 0.999)), min_size=1, max_size=6)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(roots=st.sampled_from([(1, 1, 1), (2, 1, 1), (2, 2, 1), (3, 1, 2)]),
       periodic=st.tuples(st.booleans(), st.booleans(), st.booleans()), seq=ops, m=st.sampled_from([3, 5]))
def test_the_element_count_is_the_brute_force_count_on_random_trees(roots, periodic, seq, m):
    forest = Forest.uniform(roots, 0, m, 3, periodic)
    for op, x in seq:
        leaf = int(x * forest.n_leaves)
        if op == "refine" and forest.level[leaf] < forest.max_level:
            forest = refine(forest, [leaf])
        elif op == "coarsen":
            forest = coarsen(forest, [leaf])
    per = counts.distinct_nodes_per_level(forest)
    assert per == brute_force(forest)
    # every position stored anywhere counts exactly once over the levels
    k, j, i = np.meshgrid(np.arange(m), np.arange(m), np.arange(m), indexing="ij")
    local = np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)
    pts = (forest.origin[:, None, :] + forest.spacing[:, None, None] * local[None]).reshape(-1, 3)
    assert sum(per.values()) == len({tuple(p) for p in forest.wrap_points(pts)[0]})


def test_break_even_and_speedup_arithmetic():
    """P0's own figures: 108.7 of a reachable 385.8 GFLOPS is its 28.2 %. A made-up tree: W = 6e6
    distinct updates per coarse step at 5e9 a second (1.2 ms), against a uniform finest lattice of
    2e8 nodes × 8 steps at 1.5e10 a second (106.7 ms)."""
    assert round(100 * counts.break_even_fraction(108.7, 385.8), 1) == 28.2
    share = counts.work_share(6e6, 2e8, 8)
    even = counts.break_even_fraction(5e9, 1.5e10)
    np.testing.assert_allclose(share, 0.00375, rtol=1e-15)
    np.testing.assert_allclose(even, 1 / 3, rtol=1e-15)
    np.testing.assert_allclose(counts.uniform_ms_per_step(2e8, 8, 1.5e10), 1.6e9 / 1.5e10 * 1e3, rtol=1e-15)
    speedup = counts.effective_speedup(1.2, 2e8, 8, 1.5e10)
    np.testing.assert_allclose(speedup, (1.6e9 / 1.5e10 * 1e3) / 1.2, rtol=1e-14)
    np.testing.assert_allclose(speedup, even / share, rtol=1e-14)  # faster exactly when share < break-even
    assert counts.effective_speedup(1.2, 2e8, 8, 5e9 * (2e8 * 8) / 6e6) == pytest.approx(1.0)


def cell(case, label, sel, ms, stored, pct, **extra):
    return BenchResult(case, sel, label, True, ms_per_step=ms, updates_per_s=stored / (ms * 1e-3),
                       roofline_pct=pct, extra=extra)


def test_the_bench_report_counts_distinct_nodes_and_compares_with_the_uniform_rung():
    box = {"distinct_nodes": 3.2e7, "distinct_updates_per_step": 3.2e7, "finest_lattice_nodes": 3.2e7,
           "finest_steps_per_step": 1.0}
    small = dict(box, distinct_nodes=2.0e6, distinct_updates_per_step=2.0e6, finest_lattice_nodes=2.0e6)
    tree = {"distinct_nodes": 1.6e6, "distinct_updates_per_step": 6e6, "finest_lattice_nodes": 2e8,
            "finest_steps_per_step": 8.0, "uniform_points": 2e8}
    results = [
        cell("small-box", "uniform", {"kernels": "uniform"}, 0.05, 2.0e6, 95.0, **small),  # faster, but small
        cell("fill", "uniform", {"kernels": "uniform"}, 2.4, 3.2e7, 88.0, **box),
        cell("fill", "uniform graph", {"kernels": "uniform", "graph": "on"}, 2.0, 3.2e7, 90.0, **box),
        cell("fill", "naive", {"kernels": "naive"}, 3.0, 3.8e7, 80.0, **box),
        cell("sphere", "naive-fused", {"kernels": "naive-fused"}, 1.2, 7.2e6, 50.0, **tree),
        cell("sphere", "naive", {"kernels": "naive"}, 1.5, 7.2e6, 40.0, **tree),
        cell("sphere", "naive fp16", {"kernels": "naive", "storage": "fp16"}, 1.0, 7.2e6, 30.0, **tree),
        BenchResult("sphere", {"kernels": "templates"}, "templates", False, reason="cannot"),
    ]
    report = distinct_report(results)
    uniform_rate = 3.2e7 / 2e-3  # uniform graph on the filling box: the largest box's fastest
    # the naive cell on the box: 3.8e7 stored, 3.2e7 distinct in 3 ms; 80 % stored → 80 · 32/38
    assert (f"| fill | naive | 3.0000 | {3.8e7 / 3e-3 / 1e6:,.1f} | 80.0 | {3.2e7 / 3e-3 / 1e6:,.1f} | "
            f"{80 * 3.2 / 3.8:.1f} | 100.00 | {100 * (3.2e7 / 3e-3) / uniform_rate:.1f} | "
            f"{2.0 / 3.0:,.2f} |") in report
    rate = 6e6 / 1.2e-3
    share, even = 6e6 / (2e8 * 8), rate / uniform_rate
    speedup = (2e8 * 8 / uniform_rate * 1e3) / 1.2
    assert (f"| sphere | naive-fused | 1.2000 | 6,000.0 | 50.0 | {rate / 1e6:,.1f} | {50 * 6 / 7.2:.1f} | "
            f"{100 * share:.2f} | {100 * even:.1f} | {speedup:,.2f} |") in report
    # no uniform rung with fp16 storage was measured: nothing to compare with
    assert (f"| sphere | naive fp16 | 1.0000 | {7.2e6 / 1e-3 / 1e6:,.1f} | 30.0 | {6e6 / 1e-3 / 1e6:,.1f} | 25.0 "
            "| 0.38 | — | — |") in report
    # the headline: the tree's fastest fp32 rung against the uniform graph cell of the filling box
    assert (f"- **sphere** (fastest rung naive-fused): P0's break-even {100 * even:.1f} % against uniform graph "
            f"on fill ({uniform_rate / 1e6:,.1f} M distinct updates/s); work share {100 * share:.2f} %; effective "
            f"speed-up over the uniform finest lattice {speedup:,.2f}×") in report
    assert "templates" not in report and "**fill**" not in report  # a box has no headline
    assert distinct_report([results[-1]]) == "" and bench_report([results[-1]]) == ""


def test_the_engine_reports_the_distinct_counts():
    p = load_preset("amr3d-bench", ["grid.leaves=[2, 1, 1]", "grid.m=9"], backend="numpy")
    extra = create_engine(p, get_backend("numpy")).timing_extra()
    assert extra["distinct_nodes"] == extra["distinct_updates_per_step"] == 16 * 8 * 8
    assert extra["finest_lattice_nodes"] == 16 * 8 * 8 and extra["finest_steps_per_step"] == 1.0

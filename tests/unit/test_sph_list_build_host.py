"""The Verlet list build's host logic (engine/sph/gpu.py) without a GPU: CuPy stood in for by NumPy and
the count / fill / fill_cap kernels by Python that writes what they write, so the one-pass build's
re-run past its room, the room's shrinking and the fallbacks when the memory does not hold the lists
are checked exactly."""
import logging
import types

import numpy as np
import pytest
from nagare.engine.sph.gpu import GpuSPH


class OOM(Exception):
    pass


def fake_cp():
    cp = types.SimpleNamespace(**{k: getattr(np, k) for k in ("empty", "zeros", "arange", "int32", "int64", "cumsum")})
    cp.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(OutOfMemoryError=OOM))
    return cp


def make(lists, interleaved=False, limit=None):
    g = GpuSPH.__new__(GpuSPH)
    g.cp = fake_cp()
    g.n = len(lists)
    g.nwarps = (g.n + 31) // 32
    g.interleaved, g.one_pass, g.cap = interleaved, True, 0
    g.list, g.list_capacity = None, 0
    g.e = types.SimpleNamespace(stats={})
    g.p = g.pz = g.kind_s = g.skey = g.start = None
    g.ncell = (1, 1, 1)
    g.dtype = np.dtype(np.float32)
    g.calls = []

    def alloc(size):
        if limit is not None and size > limit:
            raise OOM()
        return np.full(size, -7, np.int32)
    g._allocate_list = alloc

    def launch(name, *a, threads=None):
        g.calls.append(name)
        if name == "fill_cap":
            cap, lst, counts, wmax, top = int(a[10]), a[11], a[12], a[13], a[14]
            for i, l in enumerate(lists):
                b = 32 * cap * (i >> 5) + (i & 31) if interleaved else cap * i
                s = 32 if interleaved else 1
                for c, j in enumerate(l):
                    if c < cap:
                        lst[b + s * c] = j
                counts[i] = len(l)
            for w in range(g.nwarps):
                wmax[w] = max(len(l) for l in lists[32 * w:32 * w + 32])
            top[0] = max(top[0], max(len(l) for l in lists))
        elif name == "count":
            counts, wmax = a[-2], a[-1]
            for i, l in enumerate(lists):
                counts[i] = len(l)
            for w in range(g.nwarps):
                wmax[w] = max(len(l) for l in lists[32 * w:32 * w + 32])
        elif name == "fill":
            base, lst = a[-2], a[-1]
            for i, l in enumerate(lists):
                b = base[i >> 5] + (i & 31) if interleaved else base[i]
                s = 32 if interleaved else 1
                for c, j in enumerate(l):
                    lst[b + s * c] = j
    g._launch = launch
    return g


def read(g):
    out = []
    for i, c in enumerate(g.counts):
        b = g.base[i >> 5] + (i & 31) if g.interleaved else g.base[i]
        s = 32 if g.interleaved else 1
        out.append([int(g.list[b + s * k]) for k in range(c)])
    return out


@pytest.mark.parametrize("interleaved", [False, True])
def test_one_pass_lists_are_exact_after_outgrowing_and_shrinking_their_room(interleaved):
    rng = np.random.default_rng(0)
    lists = [list(rng.integers(0, 1000, rng.integers(0, 40))) for _ in range(70)]
    g = make(lists, interleaved)
    assert g._build_lists(1.0)
    assert read(g) == lists and g.calls.count("fill_cap") == 2  # the first build (room 0) runs twice
    lists[5] = list(range(200))  # one list grows past the room: the search runs again, every entry right
    assert g._build_lists(1.0)
    assert read(g) == lists
    for i in range(len(lists)):  # the lists shrink: the room does for the next build, these lists stay right
        lists[i] = lists[i][:3]
    assert g._build_lists(1.0)
    assert read(g) == lists


@pytest.mark.parametrize("interleaved", [False, True])
def test_one_pass_lists_that_do_not_fit_are_built_in_two_passes(interleaved, caplog):
    """One long list sets every list's room: one pass needs n x that, two passes the sum of the
    counts. Where only the two-pass lists fit, they are built that way (not the cell-search fallback)."""
    lists = [[1] * 5 for _ in range(1000)]
    lists[0] = list(range(300))
    g = make(lists, interleaved, limit=4 * sum(map(len, lists)) + 32 * 300)
    with caplog.at_level(logging.WARNING, logger="nagare"):
        assert g._build_lists(1.0)
    assert read(g) == lists
    assert g.e.stats.get("one_pass_oom_fallbacks") == 1 and not g.e.stats.get("verlet_oom_fallbacks")
    assert not g.one_pass and "two passes" in caplog.text and len(caplog.records) == 1
    g.calls.clear()
    assert g._build_lists(1.0) and "fill_cap" not in g.calls  # later builds go straight to two passes
    assert read(g) == lists


def test_lists_that_fit_in_neither_build_fall_back_to_the_cell_search():
    lists = [[1] * 5 for _ in range(100)]
    g = make(lists, False, limit=10)
    assert not g._build_lists(1.0)
    assert g.e.stats.get("verlet_oom_fallbacks") == 1


def test_every_gpu_bench_cell_measures_a_different_selection():
    """Cells that resolve to the same choices would time one kernel twice under two names; the
    pair/list-build cells name both axes, so they keep meaning what they say whatever the defaults."""
    from nagare.engine import registry
    from nagare.engine.sph.engine import SPH

    base = registry.default_selection("sph", "cupy")
    cells = SPH.bench_selections("cupy")
    resolved = [tuple(sorted({**base, **sel}.items())) for _, sel in cells]
    assert len(set(resolved)) == len(resolved), [label for label, _ in cells]
    named = dict(cells)
    assert named["VL float4 exact"]["pair"] == "exact" and named["VL float4 exact"]["verlet_build"] == "two-pass"
    for label, sel in cells:
        if label.startswith("VL float4 "):
            assert {"pair", "verlet_build"} <= set(sel), label

"""Every family's estimated_bytes() covers what it really allocates — neighbour lists and work
arrays included — so a preset too large for the machine is refused in one line before anything is
allocated, instead of being killed by the kernel's OOM killer (issue 19: a 3D SPH preset with a
small dp reached 24 GB).

NumPy: the peak of the array allocations (tracemalloc sees NumPy's) over construction, steps,
diagnostics, fields and a checkpoint must not exceed the estimate, and the estimate must not be
absurdly high either (≤ 4× the peak) so that what fits is not refused. CuPy (gpu-marked): the
memory pool's bytes after the same must not exceed the estimate.
"""
from __future__ import annotations

import subprocess
import sys
import tracemalloc

import pytest
from nagare.engine.backend import get_backend
from nagare.engine.contract import OutOfMemory
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset, preset_names
from nagare.engine.sph import geometry, memory


def _cases(numpy: bool = True):
    out = []
    for name in preset_names():
        marks = []
        searches = ("cell-full", "cell-half", "verlet") if name.startswith("sph") else (None,)
        for search in searches:
            out.append(pytest.param(name, search, id=name + (f"-{search}" if search else ""), marks=marks))
    return out


def _peak(name, variants, steps=3):
    preset = load_preset(name, backend="numpy")
    create_engine(preset, get_backend("numpy"), variants=variants).step(1)  # imports and caches: not the engine's
    tracemalloc.start()
    try:
        e = create_engine(preset, get_backend("numpy"), variants=variants)
        e.step(steps)
        e.diagnostics()
        e.fields()
        e.checkpoint()
        return e, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name,search", _cases())
def test_numpy_estimate_covers_the_peak(name, search):
    e, peak = _peak(name, {"search": search} if search else None)
    est = e.estimated_bytes()
    assert est >= peak, f"{name}: estimated {est / 2**20:.1f} MiB, allocated {peak / 2**20:.1f} MiB at the peak"
    # An adaptive octree is estimated at the leaves it may grow to (AMR3D.reserved_leaves); the few
    # steps here run on the tree it starts with, so the bound scales with the ratio.
    grow = e.reserved_leaves() / e.forest.n_leaves if hasattr(e, "reserved_leaves") else 1.0
    assert est <= 4 * peak * grow, (f"{name}: estimated {est / 2**20:.1f} MiB for a peak of {peak / 2**20:.1f} MiB "
                                    f"(the tree may grow {grow:.2f}×)")


@pytest.mark.parametrize("name", [n for n in preset_names() if n.startswith("sph")])
@pytest.mark.parametrize("over", [[], ["particles.dp=0.013"], ["particles.boundary_layers=5"]])
def test_sph_particle_count_without_building(name, over):
    """The estimate counts the particles from the sizes (building a huge layout would itself run
    out of memory): an upper bound within 5 % of what build() lays out."""
    p = load_preset(name, over, backend="numpy")
    n, c = len(geometry.build(p).pos), geometry.count(p)
    assert n <= c <= 1.05 * n, (n, c)


def test_full_neighbourhood_counts_lattice_points():
    assert memory.full_neighbourhood(2, 1.5) == 8  # the 3×3 block around a point
    assert memory.full_neighbourhood(3, 1.01) == 6
    assert memory.full_neighbourhood(3, 2 * 3 ** 0.5) == 170  # r_c = 2h, h = √3·dp (coefh 1)


def test_a_3d_sph_preset_with_a_small_dp_is_refused_before_allocating():
    p = load_preset("sph-dambreak3d", ["particles.dp=0.001"], backend="numpy")
    assert memory.estimate(p, "numpy", {"search": "cell-full"}) > 2**40  # > 1 TiB: no machine here has it
    assert memory.estimate(p, "cupy", {"search": "verlet"}) > 160 * 2**30  # nor any single GPU (H200: 141 GB)
    tracemalloc.start()
    try:
        with pytest.raises(OutOfMemory, match="needs about .* GiB of host memory.*reduce the problem size"):
            create_engine(p, get_backend("numpy"))
        assert tracemalloc.get_traced_memory()[1] < 2**26  # refused before the particles were laid out
    finally:
        tracemalloc.stop()


def test_cli_refuses_a_3d_sph_preset_with_a_small_dp_in_one_line():
    r = subprocess.run([sys.executable, "-m", "nagare.app.cli", "run", "sph-dambreak3d", "--set", "particles.dp=0.001",
                        "--backend", "numpy", "--steps", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "needs about" in lines[0] and "GiB of host memory" in lines[0], r.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("name,search", _cases(numpy=False))
def test_gpu_estimate_covers_the_memory_pool(name, search):
    import cupy

    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    before = pool.total_bytes()
    e = create_engine(load_preset(name, backend="cupy"), get_backend("cupy"),
                      variants={"search": search} if search else None)
    e.step(5)
    e.diagnostics()
    e.fields()
    e.checkpoint()
    e.synchronize()
    used = pool.total_bytes() - before  # the pool keeps freed blocks: its size is the peak
    est = e.estimated_bytes()
    assert est >= used, f"{name}: estimated {est / 2**20:.1f} MiB, pool {used / 2**20:.1f} MiB"

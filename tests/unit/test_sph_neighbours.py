"""Every SPH neighbour search finds exactly the brute-force pair set (random clouds, particles on
cell boundaries, periodic images), and a Verlet list kept by the Δh/2 rule never misses a pair."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from nagare.engine.sph.neighbours import (
    Domain,
    VerletList,
    brute_force_pairs,
    search_pairs,
)

METHODS = ("cell-full", "cell-half")


def _as_set(i, j):
    return set(zip(np.asarray(i).tolist(), np.asarray(j).tolist()))


def _cloud(rng, n, domain, radius, on_boundaries):
    lo, hi = np.array(domain.lo), np.array(domain.hi)
    pos = lo + rng.random((n, domain.dim)) * (hi - lo)
    if on_boundaries:
        # a third of the particles exactly on cell faces of both cell sizes (multiples of r_c/2),
        # some exactly r_c apart (excluded: the search is r < r_c) and some at the box faces
        k = n // 3
        grid = np.floor((pos[:k] - lo) / (radius / 2)) * (radius / 2) + lo
        pos[:k] = np.minimum(grid, hi - 1e-12)
        pos[k:k + 4] = lo
    return pos


CASES = [
    ("2d-open", Domain((0.0, 0.0), (1.0, 0.7), (False, False))),
    ("2d-periodic-x", Domain((0.0, 0.0), (1.0, 0.7), (True, False))),
    ("2d-periodic-xy", Domain((-0.5, 0.0), (0.5, 0.6), (True, True))),
    ("3d-open", Domain((0.0, 0.0, 0.0), (0.6, 0.5, 0.4), (False, False, False))),
    ("3d-periodic-z", Domain((0.0, 0.0, 0.0), (0.6, 0.5, 0.6), (False, False, True))),
]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("on_boundaries", [False, True], ids=["random", "on-cell-faces"])
@pytest.mark.parametrize("name,domain", CASES, ids=[c[0] for c in CASES])
def test_cell_search_equals_brute_force(name, domain, on_boundaries, method):
    rng = np.random.default_rng(zlib.crc32(f"{name}{on_boundaries}".encode()))
    radius = 0.1
    n = 500 if domain.dim == 2 else 700
    pos = _cloud(rng, n, domain, radius, on_boundaries)
    i, j, d, r2 = search_pairs(np, pos, domain, radius, method)
    expected = brute_force_pairs(pos, domain, radius)
    got = _as_set(i, j)
    assert len(got) == len(i), "a pair was produced twice"
    assert got == expected
    # the displacements are the minimum-image ones
    ref = pos[i] - pos[j]
    for a, per in enumerate(domain.periodic):
        if per:
            length = domain.hi[a] - domain.lo[a]
            ref[:, a] -= length * np.round(ref[:, a] / length)
    np.testing.assert_allclose(d, ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(r2, np.sum(ref * ref, axis=1), rtol=1e-12, atol=0)


def test_periodic_images_are_found():
    """Two particles near opposite faces of a periodic axis are neighbours through the image."""
    domain = Domain((0.0, 0.0), (1.0, 1.0), (True, False))
    pos = np.array([[0.01, 0.5], [0.99, 0.5], [0.5, 0.5]])
    for method in METHODS:
        i, j, d, _ = search_pairs(np, pos, domain, 0.1, method)
        assert _as_set(i, j) == {(0, 1), (1, 0)}
        np.testing.assert_allclose(np.abs(d[:, 0]), [0.02, 0.02], atol=1e-12)


def test_particles_outside_the_box_are_still_found():
    domain = Domain((0.0, 0.0), (1.0, 1.0), (False, False))
    rng = np.random.default_rng(3)
    pos = rng.uniform(-0.3, 1.3, (400, 2))  # a quarter of them outside (clamped into edge cells)
    for method in METHODS:
        i, j, _, _ = search_pairs(np, pos, domain, 0.12, method)
        assert _as_set(i, j) == brute_force_pairs(pos, domain, 0.12)


def test_periodic_axis_too_short_is_a_clear_error():
    domain = Domain((0.0, 0.0), (0.25, 1.0), (True, False))
    with pytest.raises(ValueError, match="periodic axis 0"):
        search_pairs(np, np.zeros((3, 2)) + 0.1, domain, 0.1, "cell-full")


@pytest.mark.parametrize("periodic", [False, True])
def test_verlet_list_with_the_half_skin_rule_never_misses_a_pair(periodic):
    """Random walk: the list is rebuilt only when some particle travelled > Δh/2, and at every
    step the list filtered to r < r_c equals brute force."""
    rng = np.random.default_rng(7)
    domain = Domain((0.0, 0.0), (1.0, 1.0), (periodic, periodic))
    pos = rng.random((400, 2))
    rc, skin = 0.08, 0.03
    vl = VerletList(rc)
    rebuilds = 0
    for _ in range(60):
        if vl.needs_rebuild(np):
            grid = vl.sort(np, pos, domain, skin)
            vl.build(np, pos, domain, grid)
            rebuilds += 1
        i, j, _, _ = vl.pairs(np, pos, domain)
        assert _as_set(i, j) == brute_force_pairs(pos, domain, rc)
        step = rng.normal(0, 0.003, pos.shape)
        new = pos + step
        if periodic:
            new = np.mod(new, 1.0)
        else:
            new = np.clip(new, 0, 1)
        vl.advance(np, step)
        pos = new
    assert 3 <= rebuilds < 60, f"{rebuilds} rebuilds: the list should last several steps"
    assert vl.mean_length > 0

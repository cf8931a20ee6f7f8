"""amr3d passive tracers (engine/amr3d/tracers.py, docs/amr3d.md §"Tracers"): the lookup lattice
against the tree's own search, trilinear velocity (exact for linear fields across levels and
periodic wrap, exact at nodes), Heun steps (uniform flow, second order on solid-body rotation),
parking at open sides and in solids, ring reuse, set_capacity, batch independence and checkpoints."""
from __future__ import annotations

import io

import numpy as np
import pytest
from nagare.engine.amr3d import reference
from nagare.engine.amr3d.tracers import Lookup, Tracers, leaf_of_cell, locate, velocity_at
from nagare.engine.amr3d.tree import Forest, refine

M = 9
MAX_LEVEL = 2


def refine_at(forest: Forest, point, level: int) -> Forest:
    """Refine the leaf holding ``point`` (level-0 units, strictly inside a leaf) down to ``level``."""
    p = np.asarray(point, np.float64) * (1 << forest.max_level)
    while True:
        lo, hi = forest.origin, forest.origin + forest.extent[:, None]
        (leaf,) = np.nonzero(np.all((lo <= p) & (p < hi), axis=1))
        if forest.level[leaf[0]] >= level:
            return forest
        forest = refine(forest, leaf[:1])


def three_levels(periodic=(True, True, True), roots=(3, 3, 2), at=(7.0, 7.0, 4.0)) -> Forest:
    f = Forest.uniform(roots, 0, M, MAX_LEVEL, periodic=periodic)
    return refine_at(f, at, 2)


def field(forest: Forest, fn) -> np.ndarray:
    """(3, L, m, m, m) from fn(x (..., 3)) → (..., 3), evaluated at every stored node."""
    x = reference.point_coordinates(forest)
    return np.moveaxis(fn(x), -1, 0).copy()


def domain0(forest: Forest) -> np.ndarray:
    return forest.domain / float(1 << forest.max_level)


def points_in_leaves(forest: Forest, rng, per_leaf: int):
    """Random points strictly inside every leaf (level-0 units) and the leaf they are in."""
    s = float(1 << forest.max_level)
    lo = forest.origin / s
    ext = forest.extent / s
    t = rng.uniform(0.01, 0.99, (forest.n_leaves, per_leaf, 3))
    pts = lo[:, None, :] + t * ext[:, None, None]
    return pts.reshape(-1, 3), np.repeat(np.arange(forest.n_leaves), per_leaf)


# ---- (f) the lookup lattice -------------------------------------------------------------------
@pytest.mark.parametrize("periodic", [(True, True, True), (False, True, False)])
def test_lookup_lattice_matches_tree_search(periodic):
    f = three_levels(periodic)
    lut = leaf_of_cell(f)
    assert lut.shape == tuple(int(r) << MAX_LEVEL for r in f.roots[::-1])
    counts = np.bincount(lut.ravel(), minlength=f.n_leaves)
    np.testing.assert_array_equal(counts, 8 ** (MAX_LEVEL - f.level))
    rng = np.random.default_rng(1)
    # Integer finest-unit points strictly inside a finest block: exactly one leaf holds each.
    n = 2000
    cell = rng.integers(0, np.asarray(f.roots) << MAX_LEVEL, (n, 3))
    pts = cell * (M - 1) + rng.integers(1, M - 1, (n, 3))
    want = np.full(n, -1)
    for lv in sorted(f.levels, reverse=True):
        todo = want < 0
        want[todo] = f.containing(lv, pts[todo])
    assert np.all(want >= 0)
    np.testing.assert_array_equal(lut[cell[:, 2], cell[:, 1], cell[:, 0]], want)
    # Float positions through Lookup/locate land in a leaf whose closed box holds them.
    lk = Lookup.build(np, f)
    x = rng.uniform(0, 1, (n, 3)) * domain0(f)
    leaf, i0, t = locate(np, lk, x)
    s = float(1 << MAX_LEVEL)
    assert np.all((f.origin[leaf] / s <= x) & (x <= (f.origin[leaf] + f.extent[leaf, None]) / s))
    np.testing.assert_allclose(f.origin[leaf] / s + (i0 + t) * f.spacing[leaf, None] / s, x, rtol=0, atol=1e-13)


# ---- (a) interpolation --------------------------------------------------------------------------
@pytest.mark.parametrize("periodic", [(True, True, True), (True, False, False)])
def test_linear_field_is_exact_in_every_leaf_and_across_wrap(periodic):
    f = three_levels(periodic)
    rng = np.random.default_rng(2)
    A = rng.normal(size=(3, 3)) * 0.01
    b = rng.normal(size=3) * 0.1
    u = field(f, lambda x: x @ A.T + b)
    lk = Lookup.build(np, f)
    x, leaf = points_in_leaves(f, rng, 20)
    assert set(f.level[leaf]) == {0, 1, 2}
    np.testing.assert_allclose(velocity_at(np, lk, u, x), x @ A.T + b, rtol=0, atol=1e-15)
    # Whole periods added on periodic axes: the velocity of the wrapped point.
    D = domain0(f)
    shift = rng.integers(-2, 3, x.shape) * np.where(f.periodic, D, 0.0)
    np.testing.assert_allclose(velocity_at(np, lk, u, x + shift), x @ A.T + b, rtol=0, atol=1e-15)


def test_exact_at_nodes_of_the_located_leaf():
    f = three_levels((True, False, True))
    u = field(f, lambda x: np.stack([np.sin(0.3 * x[..., 0] + x[..., 2]), np.cos(0.2 * x[..., 1]),
                                     x[..., 0] * x[..., 1] * x[..., 2] * 1e-3], axis=-1))
    # Nodes with every index in 0..m−2 lie in their own leaf's half-open box, so the lookup picks
    # that leaf (a node on a leaf's upper face may belong to a coarser neighbour's interior).
    x = reference.point_coordinates(f)[:, :-1, :-1, :-1].reshape(-1, 3)
    want = u[:, :, :-1, :-1, :-1].reshape(3, -1).T
    np.testing.assert_array_equal(velocity_at(np, Lookup.build(np, f), u, x), want)


# ---- (b) uniform flow -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_uniform_flow_moves_and_wraps(dtype):
    f = three_levels((True, True, True))
    vel = np.array([0.37, -0.21, 0.13])
    u = field(f, lambda x: np.broadcast_to(vel, x.shape)).astype(dtype)
    seeds = np.array([[3.3, 20.1, 7.7], [11.2, 6.9, 2.5]])
    tr = Tracers(np, f, seeds, capacity=1, release_every=10**6, dtype=dtype)
    dt, n = 0.5, 300
    tr.advance(u, u, dt)  # releases at the seeds
    for _ in range(n):
        tr.advance(u, u, dt)
    D = domain0(f)
    assert np.all(np.abs(n * vel * dt) > D)  # every axis wrapped at least once
    d = tr.positions() - (seeds + n * vel * dt)
    d -= D * np.rint(d / D)
    tol = 1e-12 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(d, 0, rtol=0, atol=tol)
    pos = tr.positions()
    assert np.all((pos >= 0) & (pos < D))
    assert tr.count == 2
    np.testing.assert_allclose(tr.state_arrays()["age"], n * dt, rtol=1e-15)


# ---- (c) solid-body rotation --------------------------------------------------------------------
def test_rotation_is_second_order():
    f = three_levels((False, False, True))  # the circle crosses the refined corner (levels 0, 1, 2)
    c = np.array([12.0, 12.0, 0.0])
    omega = 0.01
    u = field(f, lambda x: np.stack([-omega * (x[..., 1] - c[1]), omega * (x[..., 0] - c[0]),
                                     np.zeros(x.shape[:-1])], axis=-1))
    seed = np.array([[12.0 + 7.0, 12.0, 5.0]])
    r0 = 7.0
    lk = Lookup.build(np, f)
    levels_seen = set()
    pos_err, rad_err = [], []
    for n in (100, 200, 400):
        dt = 2 * np.pi / omega / n
        tr = Tracers(np, f, seed, capacity=1, release_every=10**6)
        tr.advance(u, u, dt)
        for _ in range(n):
            tr.advance(u, u, dt)
            levels_seen.add(int(f.level[locate(np, lk, tr.positions())[0][0]]))
        p = tr.positions()[0]
        pos_err.append(np.linalg.norm(p - seed[0]))  # one full turn: back at the seed
        rad_err.append(abs(np.hypot(p[0] - c[0], p[1] - c[1]) - r0))
        assert p[2] == seed[0, 2]
    assert levels_seen == {0, 1, 2}
    # Heun's global error is O(dt²) (phase); the radius drifts one order better, O(dt³).
    for a, b in zip(pos_err, pos_err[1:]):
        assert 3.8 < a / b < 4.2, pos_err
    for a, b in zip(rad_err, rad_err[1:]):
        assert 7.5 < a / b < 8.5, rad_err
    assert pos_err[-1] < 2e-3 * r0


# ---- (d) parking and reuse ----------------------------------------------------------------------
def test_open_side_parks_and_the_slot_is_reused():
    f = three_levels((False, True, True))
    u = field(f, lambda x: np.broadcast_to([0.5, 0.0, 0.0], x.shape))
    D = domain0(f)[0]
    tr = Tracers(np, f, [[D - 2.0, 5.0, 5.0]], capacity=2, release_every=3)
    alive, xs = [], []
    for _ in range(12):
        tr.advance(u, u, 1.0)
        alive.append(tr.state_arrays()["alive"].copy())
        xs.append(tr.positions()[:, 0].copy())
    alive, xs = np.array(alive), np.array(xs)
    # Slot 0: released on calls 0, 6; slot 1 on calls 3, 9. A tracer reaches D after 4 steps
    # (x = D exactly is still inside) and is parked on the 5th.
    np.testing.assert_array_equal(alive[:, 0], [1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(alive[:, 1], [0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1])
    assert np.isnan(xs[5, 0]) and np.isnan(xs[8, 1]) and np.isnan(xs[0, 1])
    np.testing.assert_array_equal(xs[[0, 6], 0], D - 2.0)  # reused: back at the seed
    np.testing.assert_array_equal(xs[4, 0], D)
    assert np.isnan(tr.trails()[:, 0]).all()  # parked: nothing to draw
    assert tr.count == 1


def test_solid_parks_at_the_half_way_wall():
    f = three_levels((True, True, True), at=(12.0, 12.0, 8.0))
    centre, R = np.array([12.0, 12.0, 8.0]), 2.6

    def sphere(x):
        return np.linalg.norm(x - centre, axis=-1) < R

    u = field(f, lambda x: np.broadcast_to([0.25, 0.0, 0.0], x.shape))
    seeds = [[4.0, 12.0, 8.0], [4.0, 12.3, 8.2], [4.0, 18.0, 8.0]]  # two hit the sphere, one misses
    tr = Tracers(np, f, seeds, capacity=1, release_every=10**6, solid=sphere)
    last = None
    for _ in range(60):
        before = tr.positions().copy()
        tr.advance(u, u, 1.0)
        gone = ~tr.state_arrays()["alive"] & np.isfinite(before[:, 0])
        if gone.any():
            last = before[gone]
            break
    assert last is not None and len(last) == 2
    np.testing.assert_array_equal(tr.state_arrays()["alive"], [False, False, True])
    h = 0.25  # node spacing of the level-2 leaves around the sphere
    dist = np.linalg.norm(last - centre, axis=1)
    # The last alive position is outside the sphere, within one step (0.25) plus a node spacing.
    assert np.all((dist > R - h) & (dist < R + 0.25 + h)), dist


# ---- (e) batch independence and checkpoints ------------------------------------------------------
def flow(f: Forest):
    """A time-dependent flow: rotation about the domain centre plus a shear, modulated in time."""
    c = domain0(f) / 2
    x = reference.point_coordinates(f) - c
    rot = np.stack([-x[..., 1], x[..., 0], 0.3 * np.sin(x[..., 0] / 3)], axis=-1) * 0.02
    shear = np.stack([np.sin(x[..., 2] / 2), np.zeros(x.shape[:-1]), np.cos(x[..., 1] / 4)], axis=-1) * 0.1

    def u_at(t):
        return np.moveaxis(rot * (1 + 0.3 * np.sin(0.1 * t)) + shear * np.cos(0.07 * t), -1, 0).copy()

    return u_at


def make(f, solid):
    return Tracers(np, f, [[3.0, 4.0, 5.0], [20.0, 23.3, 3.0], [15.0, 9.9, 8.0]], capacity=5,
                   release_every=2, solid=solid, trail_length=4, trail_every=3)


def run(tr, u_at, start, n, dt=0.5, peek=False):
    for k in range(start, start + n):
        tr.advance(u_at(k * dt), u_at((k + 1) * dt), dt)
        if peek:  # reading for drawing must not change anything
            tr.positions(), tr.trails(), tr.count  # noqa: B018


def test_checkpoint_resume_is_bit_identical():
    f = three_levels((True, False, True))
    centre = domain0(f) / 2 + [3.0, 0.0, 0.0]

    def solid(x):
        return np.linalg.norm(x - centre, axis=-1) < 2.0

    u_at = flow(f)
    a = make(f, solid)
    run(a, u_at, 0, 60)
    b = make(f, solid)
    run(b, u_at, 0, 23, peek=True)
    buf = io.BytesIO()
    np.savez(buf, **b.state_arrays())
    run(b, u_at, 23, 5)  # the saved state must not follow the live one
    buf.seek(0)
    c = make(f, solid)
    c.load_state_arrays(dict(np.load(buf)))
    run(c, u_at, 23, 37, peek=True)
    sa, sc = a.state_arrays(), c.state_arrays()
    assert sa.keys() == sc.keys()
    for k in sa:
        np.testing.assert_array_equal(sc[k], sa[k], err_msg=k)
    np.testing.assert_array_equal(c.trails(), a.trails())
    assert 0 < a.count < 15 and int(sa["step"][0]) == 60
    assert not np.all(sa["alive"])  # something was parked (wall or solid) on the way


# ---- (g) set_capacity ------------------------------------------------------------------------------
def by_age(tr):
    s = tr.state_arrays()
    al = s["alive"]
    order = np.lexsort((s["positions"][al, 0], s["age"][al]))
    return s["age"][al][order], s["positions"][al][order]


def test_set_capacity_keeps_the_newest():
    f = three_levels((True, True, True))
    u = field(f, lambda x: np.broadcast_to([0.3, 0.1, 0.0], x.shape))
    seeds = [[2.0, 3.0, 4.0], [10.0, 11.0, 5.0]]
    big = Tracers(np, f, seeds, capacity=5, release_every=1, trail_length=3)
    small = Tracers(np, f, seeds, capacity=3, release_every=1, trail_length=3)
    for _ in range(8):
        big.advance(u, u, 1.0)
        small.advance(u, u, 1.0)
    assert big.count == 10
    old = big.state_arrays()
    big.set_capacity(3)
    assert big.capacity == 3 and big.count == 6
    for x, y in zip(by_age(big), by_age(small)):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(np.sort(big.state_arrays()["age"]), [0, 0, 1, 1, 2, 2])
    # Kept tracers carry their trails.
    new = big.state_arrays()
    for i in range(6):
        j = np.nonzero(np.all(old["positions"] == new["positions"][i], axis=1))[0]
        np.testing.assert_array_equal(new["trail"][:, i], old["trail"][:, j[0]])
    for _ in range(4):  # the next releases overwrite the oldest kept
        big.advance(u, u, 1.0)
        small.advance(u, u, 1.0)
        for x, y in zip(by_age(big), by_age(small)):
            np.testing.assert_array_equal(x, y)
    big.set_capacity(6)  # grows with parked slots, filled one release at a time
    assert big.count == 6
    for want in (8, 10, 12, 12):
        big.advance(u, u, 1.0)
        assert big.count == want
    np.testing.assert_array_equal(np.sort(big.state_arrays()["age"]), np.repeat(np.arange(6.0), 2))


def test_rejects_seed_outside_a_wall():
    f = three_levels((False, True, True))
    with pytest.raises(ValueError, match="outside"):
        Tracers(np, f, [[-1.0, 2.0, 2.0]], capacity=2)


# ---- the live count through the engine (the app's "tracers per seed" control) ----------------------
def _sphere_engine(count=6, level=1):
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    over = ["grid.m=9", "refine=[]",
            f"body=[{{kind='sphere', center=[8.0, 8.0, 8.0], diameter=2.0, level={level}, band=0.5}}]",
            f"tracers.count={count}", "tracers.seeds=[[6.0, 7.5, 7.5], [6.0, 8.5, 8.5]]", "tracers.release_every=1",
            "variants.kernels=reference"]
    return AMR3D(load_preset("amr3d-sphere-re20", over, backend="numpy"), get_backend("numpy"))


def test_engine_tracer_count_changes_live_and_resumes_bit_for_bit():
    e = _sphere_engine(6)
    assert e.tracer_capacity() == 6
    e.step(8)
    alive_before = int(e.state_arrays()["tracers/alive"].sum())
    assert alive_before == 2 * 6  # one release per step and seed, the ring full
    e.set_tracer_count(3)
    assert e.tracer_capacity() == 3 and int(e.state_arrays()["tracers/alive"].sum()) == 2 * 3
    e.set_tracer_count(10)  # grows with parked slots, filled one release at a time
    e.step(2)
    assert e.tracer_capacity() == 10 and int(e.state_arrays()["tracers/alive"].sum()) == 2 * 5
    ck = e.checkpoint()
    e.step(3)
    other = _sphere_engine(6)  # the preset says 6; the checkpoint's arrays carry 10
    other.restore(ck)
    assert other.tracer_capacity() == 10
    other.step(3)
    for k, v in e.state_arrays().items():
        np.testing.assert_array_equal(other.state_arrays()[k], v, err_msg=k)


def test_engine_tracer_count_refuses_nonsense_in_one_line():
    e = _sphere_engine(4)
    for bad in (0, -3, 100_001):
        with pytest.raises(ValueError, match="tracers per seed") as exc:
            e.set_tracer_count(bad)
        assert "\n" not in str(exc.value)
    assert e.tracer_capacity() == 4
    none = _sphere_engine(0)
    assert none.tracer_capacity() is None
    with pytest.raises(ValueError, match="no tracers"):
        none.set_tracer_count(3)


@pytest.mark.parametrize("count", [8, 3, 1])  # 8: as many slots as trail samples (trail_length = 8)
def test_a_checkpoint_after_a_count_change_resumes_whatever_the_sizes(count):
    """The tracer axis of each checkpointed array is named, not guessed from sizes: 1 seed × 8 slots
    has a trail (8, 8, 3) whose two first axes look alike."""
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import get_backend
    from nagare.engine.presets import load_preset

    over = ["grid.m=9", "refine=[]", "body=[{kind='sphere', center=[8.0, 8.0, 8.0], diameter=2.0, level=1, band=0.5}]",
            "tracers.count=12", "tracers.seeds=[[6.0, 8.0, 8.0]]", "tracers.release_every=1", "tracers.trail_length=8",
            "variants.kernels=reference"]

    def engine():
        return AMR3D(load_preset("amr3d-sphere-re20", over, backend="numpy"), get_backend("numpy"))

    e = engine()
    e.step(3)
    e.set_tracer_count(count)
    e.step(2)
    ck = e.checkpoint()
    other = engine()
    other.restore(ck)
    other.step(2)
    e.step(2)
    for k, v in e.state_arrays().items():
        np.testing.assert_array_equal(other.state_arrays()[k], v, err_msg=k)


# ---- a checkpoint's tracers must agree with its meta (audit D13) ----------------------------
def _edited(ck, **arrays):
    return {"meta": dict(ck["meta"]), "arrays": {**ck["arrays"], **arrays}}


@pytest.mark.parametrize("case,fragment", [
    ("clock", "state array 'tracers/step' = [-100] is not the run's step clock meta.step = 5"),
    ("clock_ahead", "state array 'tracers/step' = [6] is not the run's step clock meta.step = 5"),
    ("far", "alive tracer lies outside the domain along x (0 … 24 level-0 units), e.g. tracer 0"),
    ("below", "outside the domain along z"),
    ("cursor", "state array 'tracers/cursor' = [-7] is not a ring row (0 … 5 for 6 tracers per seed)"),
    ("cursor_big", "state array 'tracers/cursor' = [6] is not a ring row"),
    ("age", "state array 'tracers/age' holds ages from"),
])
def test_a_checkpoint_whose_tracers_disagree_with_it_is_refused(case, fragment):
    from nagare.engine.errors import CheckpointError

    e = _sphere_engine(6)
    e.step(5)
    ck = e.checkpoint()
    a = ck["arrays"]
    pos, alive = a["tracers/positions"].copy(), a["tracers/alive"]
    first = int(np.flatnonzero(alive)[0])
    assert first == 0, "the first slot is alive after 5 releases"
    edits = {
        "clock": {"tracers/step": np.array([-100], a["tracers/step"].dtype)},
        "clock_ahead": {"tracers/step": a["tracers/step"] + 1},
        "cursor": {"tracers/cursor": np.array([-7], a["tracers/cursor"].dtype)},
        "cursor_big": {"tracers/cursor": np.array([6], a["tracers/cursor"].dtype)},
        "age": {"tracers/age": np.where(alive, a["tracers/age"] + 1e3, a["tracers/age"])},
    }
    if case == "far":
        pos[first] = 1e6
        edits[case] = {"tracers/positions": pos}
    if case == "below":
        pos[first, 2] = -0.5
        edits[case] = {"tracers/positions": pos}
    other = _sphere_engine(6)
    with pytest.raises(CheckpointError) as info:
        other.restore(_edited(ck, **edits[case]))
    assert fragment in str(info.value) and "\n" not in str(info.value), str(info.value)
    other.restore(ck)  # the unedited checkpoint still restores
    assert other.step_count == 5


def test_a_checkpoint_of_the_tracers_holds_the_runs_clock():
    e = _sphere_engine(4)
    e.step(7)
    ck = e.checkpoint()
    assert int(ck["arrays"]["tracers/step"][0]) == ck["meta"]["step"] == 7


def test_a_seed_inside_a_body_is_refused_naming_it():
    """audit D12: a seed in the solid parks every tracer it releases at the next step."""
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.backend import get_backend
    from nagare.engine.errors import PresetError
    from nagare.engine.presets import load_preset

    base = ["grid.m=9", "refine=[]", "tracers.count=4", "variants.kernels=reference",
            "body=[{kind='sphere', center=[8.0, 8.0, 8.0], diameter=2.0, level=1, band=0.5}]"]
    # [8.0, 8.0, 8.875]: inside the sphere (r = 1) where the tracers' interpolated solid indicator is
    # only ¼; [8.6, 8.6, 8.6]: outside it (|r| = 1.04) where the indicator is ½ or more
    for seeds, where in (("[[6.0, 7.5, 7.5], [8.2, 8.0, 8.0]]", "inside"),
                         ("[[6.0, 7.5, 7.5], [8.0, 8.0, 8.875]]", "inside"),
                         ("[[6.0, 7.5, 7.5], [8.6, 8.6, 8.6]]", "within half a node of the wall of")):
        with pytest.raises(PresetError) as info:
            AMR3D(load_preset("amr3d-sphere-re20", [*base, f"tracers.seeds={seeds}"], backend="numpy"),
                  get_backend("numpy"))
        msg = str(info.value)
        assert "tracers.seeds[1]: got [" in msg and f"lies {where} body[0] (the sphere)" in msg, msg
    # a seed just clear of the wall releases tracers that live
    e = AMR3D(load_preset("amr3d-sphere-re20", [*base, "tracers.seeds=[[8.0, 8.0, 9.6]]"], backend="numpy"),
              get_backend("numpy"))
    e.step(3)
    assert int(e.state_arrays()["tracers/alive"].sum()) >= 2


# ---- (h) the step reads the populations at the stencil nodes only ----------------------------------
def _tree_stepper_for(e):
    """The engine's state in a TreeStepper with the array-code kernels (NumpyKernels: the GPU's
    per-level buffers and orchestration), swapped in for the reference stepper."""
    from nagare.engine.amr3d.tree_stepper import NumpyKernels, TreeStepper

    st = TreeStepper(np, e.forest, e.shape.interface(), e.preset.physics.tau, e.accel, NumpyKernels(), e.timer,
                     dtype=e.dtype, bnd=e._bnd, collision=e.collision)
    st.set_state(e.shape.leaves())
    return st


def test_steppers_gather_the_populations_of_point_ids():
    """populations(ids) = the canonical state (f[Q, leaf, k, j, i]) at the ids, bit for bit, from the
    reference's f and from the per-level buffers of a three-level TreeStepper (no state assembled)."""
    e = _sphere_engine(2, level=2)
    e.step(3)
    st = _tree_stepper_for(e)
    st.advance(1)
    e.shape.stepper.step(1)
    assert st.levels == [0, 1, 2]
    m3 = e.m**3
    edges = [x for c in st.coupling.values() for x in (c.lo * m3, (c.lo + c.n) * m3 - 1)]  # each level's ends
    ids = np.concatenate([edges, np.random.default_rng(4).integers(0, e.forest.n_leaves * m3, 494)]).reshape(2, -1)
    for stepper in (e.shape.stepper, st):
        want = stepper.state() if stepper is st else stepper.f
        got = stepper.populations(ids)
        assert got.shape == (27,) + ids.shape
        np.testing.assert_array_equal(got, want.reshape(27, -1)[:, ids])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_node_velocity_is_the_fluid_velocity_and_zero_at_rest(dtype):
    from nagare.engine.amr3d import boundaries, d3q27
    from nagare.engine.amr3d.tracers import node_velocity

    f = three_levels()
    lk = Lookup.build(np, f, dtype)
    rng = np.random.default_rng(5)
    pop = (d3q27.W[:, None, None] * (1 + 0.2 * rng.standard_normal((27, 8, 50)))).astype(dtype)
    pop[:, 3] = boundaries.rest_values(dtype)[:, None]  # a solid node: reset to rest
    got = node_velocity(np, lk, pop)
    want = np.stack(d3q27.fluid_velocity(np, pop)[1:])
    tol = 1e-6 if dtype == np.float32 else 1e-15
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())
    assert got.dtype == dtype
    assert np.all(got[:, 3] == 0)  # exactly: opposite populations cancel pair by pair


def test_a_tracer_velocity_does_not_depend_on_its_batch():
    """From a field or from populations, a point's velocity has the same bits alone or in a batch."""
    from nagare.engine.amr3d.tracers import velocity_from_populations

    f = three_levels((True, False, True))
    rng = np.random.default_rng(6)
    u = rng.normal(size=(3, f.n_leaves, M, M, M)).astype(np.float32)
    pop = (1 + 0.1 * rng.random((27, f.n_leaves * M**3))).astype(np.float32)
    lk = Lookup.build(np, f, np.float32)
    x = (rng.uniform(0, 1, (40, 3)) * domain0(f)).astype(np.float32)
    batch = velocity_at(np, lk, u, x), velocity_from_populations(np, lk, lambda ids: pop[:, ids], x)
    for i in range(len(x)):
        one = velocity_at(np, lk, u, x[i:i + 1]), velocity_from_populations(np, lk, lambda ids: pop[:, ids], x[i:i + 1])
        for a, b in zip(one, batch):
            np.testing.assert_array_equal(a[0], b[i])


def test_the_tracer_step_never_computes_a_whole_field(monkeypatch):
    """Neither the whole-field velocity, nor an assembled state, nor a velocity at more nodes than the
    tracers' stencils: with those raising, the engine's tracers step — on the reference stepper and on
    the per-level TreeStepper — and agree with each other to the fluids' round-off."""
    from nagare.engine.amr3d import d3q27, tracers
    from nagare.engine.amr3d.tree_shape import Tree
    from nagare.engine.amr3d.tree_stepper import TreeStepper

    ref, tree = _sphere_engine(6, level=2), _sphere_engine(6, level=2)
    tree.shape.stepper = _tree_stepper_for(tree)
    assert tree.shape.stepper.levels == [0, 1, 2]
    slots = ref._tracers.pos.shape[0]

    def forbidden(*a, **k):
        raise AssertionError("a whole-field computation in a tracer step")

    node_velocity = tracers.node_velocity

    def stencil_only(xp, lookup, f):
        assert f.shape == (27, 8, slots), f.shape
        return node_velocity(xp, lookup, f)

    with monkeypatch.context() as mp:
        mp.setattr(d3q27, "fluid_velocity", forbidden)
        mp.setattr(Tree, "leaves", forbidden)
        mp.setattr(TreeStepper, "state", forbidden)
        mp.setattr(tracers, "node_velocity", stencil_only)
        for e in (ref, tree):
            e.step(6)
    a, b = ref.state_arrays(), tree.state_arrays()
    np.testing.assert_array_equal(a["tracers/alive"], b["tracers/alive"])
    assert a["tracers/alive"].sum() == 12
    np.testing.assert_allclose(b["tracers/positions"], a["tracers/positions"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(b["f"], a["f"], rtol=0, atol=1e-6)


def test_engine_tracers_batch_independent_bit_for_bit():
    """step(N) = N × step(1) with the tracers' k₁ read before each step and k₂ after it."""
    a, b = _sphere_engine(5), _sphere_engine(5)
    a.step(9)
    for n in (1, 3, 1, 4):
        b.step(n)
    for k, v in a.state_arrays().items():
        np.testing.assert_array_equal(b.state_arrays()[k], v, err_msg=k)

"""A tree's fields on its sampling lattice from the points the samples read (engine/amr3d/sampled.py):
bit for bit what the whole state's moments (leafgrid.macroscopic) and the per-corner gather gave,
for every moment, any subset of them and the fields built from them; on the reference's state, a
TreeStepper's level buffers (mother leaves, several levels) and the pending state."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from nagare.app.fieldkinds.grids import slice3d
from nagare.engine.amr3d import builder, leafgrid, mesh, reference, sampled, tree
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.backend import get_backend
from nagare.engine.presets import load_preset

from tests.unit.test_amr3d_engine_tree import small_tree
from tests.unit.test_amr3d_mothers import deep_roots, mother_stepper
from tests.unit.test_amr3d_tree_stepper import flow_state

MOMENTS = ("rho", "ux", "uy", "uz")


def lattice_by_lookups(forest: tree.Forest, budget: int) -> mesh.Sampling:
    """mesh.sampling as it was built before (host NumPy, one lookup of every sample per level,
    finest first: Forest.containing), the reference the painted lattice must equal bit for bit."""
    m = forest.m
    lv = min(forest.levels)
    while lv < forest.max_level and np.prod(mesh._counts(forest, lv + 1)) <= budget:
        lv += 1
    unit = int(forest.spacing_of(lv))
    n = mesh._counts(forest, lv)
    z, y, x = np.meshgrid(*(np.arange(k, dtype=np.int64) * unit for k in n[::-1]), indexing="ij")
    pts = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    leaf = np.full(len(pts), -1, np.int64)
    for level in sorted(forest.levels, reverse=True):
        todo = leaf < 0
        if not todo.any():
            break
        leaf[todo] = forest.containing(level, pts[todo])
    assert np.all(leaf >= 0)
    h = forest.spacing[leaf]
    off = forest.local_offset(leaf, pts)
    i0 = np.minimum(off // h[:, None], m - 2)
    frac = (off - i0 * h[:, None]) / h[:, None]
    ids = np.empty((8, len(pts)), np.int64)
    w = np.empty((8, len(pts)), np.float64)
    for c, (dx, dy, dz) in enumerate((x, y, z) for z in (0, 1) for y in (0, 1) for x in (0, 1)):
        ijk = i0 + np.array([dx, dy, dz])
        ids[c] = leaf * m**3 + (ijk[:, 2] * m + ijk[:, 1]) * m + ijk[:, 0]
        w[c] = np.prod(np.where(np.array([dx, dy, dz]) == 1, frac, 1.0 - frac), axis=1)
    return mesh.Sampling(lv, (int(n[2]), int(n[1]), int(n[0])), ids, w, unit)


def whole_state_samples(xp, forest, leaves, budget: int, dtype) -> dict:
    """What the tree's fields were sampled with before the plan: every point's moments, then for
    each sample w₀·a[id₀] + w₁·a[id₁] + … in corner order, on the lattice built by lookups."""
    smp = lattice_by_lookups(forest, budget)
    ids, w = xp.asarray(smp.ids), xp.asarray(smp.weights, dtype=dtype)
    out = {}
    for name, a in zip(MOMENTS, leafgrid.macroscopic(xp, leaves)):
        flat = a.reshape(-1)
        v = w[0] * flat[ids[0]]
        for c in range(1, 8):
            v = v + w[c] * flat[ids[c]]
        out[name] = v.reshape(smp.shape)
    return out


def assert_same_bits(got, want, name="") -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, name
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=name)
    # the bit patterns elsewhere: a −0 for a +0 would pass an equality of values
    np.testing.assert_array_equal(got[~nan].view(np.uint8), want[~nan].view(np.uint8), err_msg=name)


def _developed(e: AMR3D, steps: int = 3) -> AMR3D:
    e.random_state(np.random.default_rng(7))
    e.step(steps)
    return e


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_the_plan_samples_bit_for_bit_what_the_whole_state_did(dtype):
    e = _developed(AMR3D(small_tree(physics={"tau": 0.6, "precision": dtype}), get_backend("numpy")))
    want = whole_state_samples(np, e.forest, e.shape.leaves(), 1 << 18, e.dtype)
    got = e.shape.macroscopic()
    for name, g in zip(MOMENTS, got):
        assert_same_bits(g, want[name], name)
    for names in (("rho",), ("uy",), ("ux", "uy", "uz"), ("uz", "rho")):
        for name, g in zip(names, e.shape.macroscopic(names)):
            assert_same_bits(g, want[name], f"{names}: {name}")
    speed = np.sqrt(want["ux"] * want["ux"] + want["uy"] * want["uy"] + want["uz"] * want["uz"])
    assert_same_bits(e.field("speed").data, speed, "speed")
    for name in MOMENTS:
        assert_same_bits(e.field(name).data, want[name], f"field {name}")


def test_a_points_plan_reads_each_point_once_and_only_the_points_the_samples_need():
    e = AMR3D(small_tree(), get_backend("numpy"))
    smp = mesh.sampling(e.forest, 1 << 18)
    p = sampled.plan(np, smp, e.forest.n_leaves * e.m**3, np.float32, by_points=True)
    np.testing.assert_array_equal(p.points, np.unique(smp.ids))
    np.testing.assert_array_equal(p.points[p.local], smp.ids)
    assert p.local.dtype == np.int32 and p.ids is None and sampled.gpu_supports(p)
    assert p.shape == smp.shape and p.unit == smp.unit and p.level == smp.level
    assert len(p.points) < e.forest.n_leaves * e.m**3  # fewer than every point of the tree
    assert e.shape.sampling_lattice().points is None  # NumPy: the array code on the whole state


def _preset_forest(name: str, backend: str = "numpy") -> tree.Forest:
    p = load_preset(name, backend=backend)
    return mesh.build_forest(p, builder.make_bodies(p))


def _refined_at_random(periodic, seed: int, rounds: int = 3) -> tree.Forest:
    rng = np.random.default_rng(seed)
    f = tree.Forest.uniform((3, 2, 2), m=9, max_level=rounds, periodic=periodic)
    for _ in range(rounds):
        f = tree.refine(f, rng.choice(f.n_leaves, size=max(1, f.n_leaves // 6), replace=False))
    return f


def _finer_than_a_sample() -> tree.Forest:
    """Leaves of 5³ down to level 4 sampled on level 0: leaves smaller than a sample spacing, some
    holding no sample, refined at the far faces of the periodic axes (whose far face is sample 0)."""
    f = tree.Forest.uniform((2, 1, 2), m=5, max_level=4, periodic=(True, False, True))
    for corner in ((0, 0, 0), (1, 0, 1), (1, 0, 0)):
        for _ in range(4):
            lv = int(f.level.max())
            at = np.asarray(corner) * (f.blocks_per_axis(lv) - 1)
            pick = np.flatnonzero((f.level == lv) & np.all(f.block == at, axis=1))
            f = tree.refine(f, pick[:1])
    return f


LATTICES = {
    "two-levels-periodic": lambda: mesh.build_forest(small_tree()),
    "two-levels-walls-xz": lambda: mesh.build_forest(
        small_tree(grid={"leaves": [4, 2, 2], "m": 9, "periodic": [False, True, False]})),
    "sphere-three-levels-body": lambda: _preset_forest("amr3d-sphere-re100"),
    "vortex-box": lambda: _preset_forest("amr3d-vortex-adapt"),
    "three-levels-mothers": deep_roots,
    "three-levels-walls-yz": lambda: deep_roots((True, False, False)),
    "random-refinement-periodic": lambda: _refined_at_random((True, True, True), 3),
    "random-refinement-mixed": lambda: _refined_at_random((False, True, False), 4),
    "leaves-finer-than-a-sample": _finer_than_a_sample,
}


@pytest.mark.parametrize("budget", [1 << 18, 1 << 11, 1])
@pytest.mark.parametrize("name", list(LATTICES))
def test_the_painted_lattice_is_the_one_the_lookups_built(name, budget):
    """mesh.sampling paints each sample's leaf leaf by leaf and builds the ids and weights per axis:
    the same lattice, ids and weights (bit for bit) as one lookup of every sample per level."""
    forest = LATTICES[name]()
    want, got = lattice_by_lookups(forest, budget), mesh.sampling(forest, budget)
    assert (got.level, got.shape, got.unit) == (want.level, want.shape, want.unit)
    assert got.ids.dtype == np.int64 and got.weights.dtype == np.float64
    np.testing.assert_array_equal(got.ids, want.ids)
    assert_same_bits(got.weights, want.weights, "weights")
    # in the engine's fp32: the float64 weights rounded once
    assert_same_bits(mesh.sampling(forest, budget, dtype=np.float32).weights, want.weights.astype(np.float32), "fp32")


def test_a_forest_with_a_hole_is_refused():
    forest = mesh.build_forest(small_tree())
    holed = forest.replace(forest.level[1:], forest.block[1:])
    with pytest.raises(AssertionError, match="outside every leaf"):
        mesh.sampling(holed, 1 << 18)


def test_the_array_code_on_a_points_plan_samples_as_before():
    """A points plan the kernels do not take (int64 indices): the moments at its points, the same bits."""
    e = _developed(AMR3D(small_tree(), get_backend("numpy")))
    want = whole_state_samples(np, e.forest, e.shape.leaves(), 1 << 18, e.dtype)
    p = sampled.plan(np, mesh.sampling(e.forest, 1 << 18), e.forest.n_leaves * e.m**3, e.dtype, by_points=True)
    p.local = p.local.astype(np.int64)
    e.shape.sampling = p
    assert not sampled.gpu_supports(p)
    for name, g in zip(MOMENTS, e.shape.macroscopic()):
        assert_same_bits(g, want[name], name)
    speed = np.sqrt(want["ux"] * want["ux"] + want["uy"] * want["uy"] + want["uz"] * want["uz"])
    assert_same_bits(e.field("speed").data, speed, "speed")


def test_the_sphere_with_its_links_and_walls_samples_as_before():
    """The NumPy sphere (inlet, outlet, a body at level 2, tracers): the reference's state."""
    p = load_preset("amr3d-sphere-re100", backend="numpy")
    e = AMR3D(p, get_backend("numpy"))
    e.step(2)
    want = whole_state_samples(np, e.forest, e.shape.leaves(), 1 << 18, e.dtype)
    for name, g in zip(MOMENTS, e.shape.macroscopic()):
        assert_same_bits(g, want[name], name)


def test_the_pending_state_before_a_stepper_samples_as_before():
    e = _developed(AMR3D(small_tree(), get_backend("numpy")))
    shape = e.shape
    shape.pending, shape.stepper = np.array(shape.leaves()), None  # as the state waits before a selection
    want = whole_state_samples(np, e.forest, shape.leaves(), 1 << 18, e.dtype)
    for name, g in zip(MOMENTS, shape.macroscopic()):
        assert_same_bits(g, want[name], name)


def test_a_tree_steppers_populations_at_the_plans_points_are_its_states():
    """The ladder's storage (NumpyKernels): three levels on mother leaves with provisional points;
    the plan gathers through TreeStepper.gather_plan / gathered, which must be state() at those
    points, as populations is."""
    forest = deep_roots()
    phys = reference.Physics(0.57, (1e-5, 0.0, 0.0))
    st, _ = mother_stepper(forest, phys, "quadratic", ())
    st.set_state(flow_state(forest, phys), synchronised=False)
    st.advance(2)
    p = sampled.plan(np, mesh.sampling(forest, 1 << 18), forest.n_leaves * forest.m**3, np.float64, by_points=True)
    want_f = st.state().reshape(27, -1)[:, p.points]
    assert_same_bits(st.populations(p.points), want_f, "populations")
    plan = st.gather_plan(p.points)
    assert len(plan) == 3 and sum(len(i) for i in plan) == len(p.points)
    assert_same_bits(st.gathered(plan), want_f, "gathered")
    st.advance(1)  # the other buffer of each pair: the plan holds indices, not buffers
    assert_same_bits(st.gathered(plan), st.state().reshape(27, -1)[:, p.points], "gathered after a step")
    at = sampled.moments(np, st.gathered(plan))
    # the state in C order, as the engines hold it (NumPy's concatenation of the mother leaves'
    # gathers keeps their F order, whose axis-0 sum NumPy takes pairwise: other bits)
    want = whole_state_samples(np, forest, np.ascontiguousarray(st.state()), 1 << 18, np.float64)
    for name in MOMENTS:
        assert_same_bits(sampled.sample(np, p, at[name], p.local), want[name], name)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_gpu_kernels_compute_the_array_codes_bits(emulated_cupy, dtype):
    """shaders/cuda/amr3d/sample.cu through the g++ emulation (its exact source, no FMA contraction):
    the two launches after the density's sum give what sampled.moments and sampled.sample give, and
    the speed what Shape.speed's array code gives."""
    e = AMR3D(small_tree(), get_backend("numpy"))
    p = sampled.plan(np, mesh.sampling(e.forest, 1 << 18), e.forest.n_leaves * e.m**3, dtype, by_points=True)
    rng = np.random.default_rng(5)
    f = (rng.uniform(0.01, 0.1, (27, len(p.points))) * (1 + rng.uniform(-0.3, 0.3, (27, 1)))).astype(dtype)
    f[:, :7] = 0.0  # a point at rest, of zero mass: 0/0 and signed zeros take the same path too
    f[:, 7:9] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        at = sampled.moments(np, f)
    assert sampled.gpu_supports(p)
    for names in (MOMENTS, ("ux", "uy", "uz"), ("rho",), ("uz", "ux")):
        got = sampled.gpu_samples(emulated_cupy, p, f, names)
        for name, g in zip(names, got):
            assert_same_bits(g, sampled.sample(np, p, at[name], p.local), f"{names}: {name}")
    ux, uy, uz = (sampled.sample(np, p, at[name], p.local) for name in ("ux", "uy", "uz"))
    (speed,) = sampled.gpu_samples(emulated_cupy, p, f, ("ux", "uy", "uz"), speed=True)
    assert_same_bits(speed, np.sqrt(ux * ux + uy * uy + uz * uz), "speed")


def body_tree(levels: int, rung: str):
    """The NumPy sphere (leaves of 9³; inlet, outlet, periodic sides, a sphere with interpolated
    walls, tracers) with the body meshed at level 1 (a tree of two levels) or 2 (three); ``rung``
    a kernels rung, "+fp16" for half-precision storage."""
    kernels, _, half = rung.partition("+")
    over = [f"body[0].level={levels - 1}", f"variants.kernels={kernels}"] + (["variants.storage=fp16"] if half else [])
    return load_preset("amr3d-sphere-re100", over, backend="numpy")


def assert_published_fields_are_the_old_paths(e: AMR3D, budget: int) -> dict:
    """Every sampled field of the engine (each moment, any subset of them, the speed, outputs.fields,
    the three middle planes of each) against the old path on the engine's device: the whole state's
    moments sampled on the lattice the lookups built, bit for bit. Returns the old path's moments."""
    xp, asnumpy = e.xp, e.backend.asnumpy
    want = whole_state_samples(xp, e.forest, e.shape.leaves(), budget, e.dtype)
    want["speed"] = xp.sqrt(want["ux"] * want["ux"] + want["uy"] * want["uy"] + want["uz"] * want["uz"])
    want = {k: asnumpy(v) for k, v in want.items()}
    for name, g in zip(MOMENTS, e.shape.macroscopic()):
        assert_same_bits(asnumpy(g), want[name], name)
    for names in (("rho",), ("ux", "uy", "uz"), ("uz", "rho")):
        for name, g in zip(names, e.shape.macroscopic(names)):
            assert_same_bits(asnumpy(g), want[name], f"{names}: {name}")
    every = e.fields()
    for name in ("speed",) + MOMENTS:
        for label, got in (("field", asnumpy(e.field(name).data)), ("fields", asnumpy(every[name].data))):
            assert_same_bits(got, want[name], f"{label} {name}")
            for axis in "xyz":  # the slice planes the app and the headless frames cut from them
                assert_same_bits(slice3d(got, axis), slice3d(want[name], axis), f"{label} {name}, {axis} plane")
    return want


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")
@pytest.mark.parametrize("rung", ["naive-fused", "mother-leaf", "naive+fp16"])
@pytest.mark.parametrize("levels", [2, 3])
def test_the_engine_on_the_emulated_gpu_publishes_the_old_fields(emulated_cupy, levels, rung):
    """The CuPy path end to end (emulated): the plan built on the device, the ladder's gather
    indices (leaf and mother-leaf storage, fp16 storage widened), the density's sum and sample.cu's two launches: every
    field as the old path gave it (the emulation's sum is NumPy's, so the old path is NumPy's)."""
    from nagare.engine.backend import Backend

    dev = Backend("cupy", emulated_cupy, _cupy=emulated_cupy)
    e = AMR3D(body_tree(levels, rung), dev)
    e._roofline = 1e12  # (no copy bandwidth to measure)
    assert e.forest.levels == list(range(levels)) and e.selection["kernels"] == rung.partition("+")[0]
    assert e.selection.get("storage", "native") == ("fp16" if rung.endswith("+fp16") else "native")
    e.random_state(np.random.default_rng(11))
    p = e.shape.sampling_lattice()
    assert sampled.gpu_supports(p) and p.ids is None
    assert_published_fields_are_the_old_paths(e, 1 << 21)


@pytest.mark.gpu
@pytest.mark.parametrize("rung", ["naive-fused", "mother-leaf", "naive+fp16"])
@pytest.mark.parametrize("levels", [2, 3])
def test_the_engine_on_the_gpu_publishes_the_old_fields(levels, rung):
    """sample.cu's two launches with CuPy on a developed flow past a body (two and three levels,
    leaf, mother-leaf and fp16 storage): every field and plane bit for bit what the old path gives on
    the GPU (CuPy's reductions on the whole state); the NumPy path on the host's copy of the state
    agrees to rounding (CuPy sums the density's 27 rows as a tree, NumPy one after another)."""
    cp = pytest.importorskip("cupy")
    e = AMR3D(body_tree(levels, rung), get_backend("cupy"))
    assert e.forest.levels == list(range(levels)) and e.selection["kernels"] == rung.partition("+")[0]
    e.step(8)
    p = e.shape.sampling_lattice()
    assert sampled.gpu_supports(p) and isinstance(p.local, cp.ndarray)
    want = assert_published_fields_are_the_old_paths(e, 1 << 21)
    host = whole_state_samples(np, e.forest, cp.asnumpy(e.shape.leaves()), 1 << 21, e.dtype)
    for name in MOMENTS:
        np.testing.assert_allclose(want[name], host[name], rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(LATTICES))
def test_the_lattice_and_plan_built_on_the_gpu_are_the_hosts(name):
    """mesh.sampling and sampled.plan on CuPy (integer division and modulo, float64 division and
    products, the mark, the index): the host's lattice and plan bit for bit."""
    cp = pytest.importorskip("cupy")
    forest = LATTICES[name]()
    want = lattice_by_lookups(forest, 1 << 18)
    got = mesh.sampling(forest, 1 << 18, cp)
    assert (got.level, got.shape, got.unit) == (want.level, want.shape, want.unit)
    np.testing.assert_array_equal(cp.asnumpy(got.ids), want.ids)
    assert_same_bits(cp.asnumpy(got.weights), want.weights, "weights")
    n = forest.n_leaves * forest.m**3
    for dtype in (np.float32, np.float64):
        got = mesh.sampling(forest, 1 << 18, cp, dtype)
        host, dev = sampled.plan(np, want, n, dtype, True), sampled.plan(cp, got, n, dtype, True)
        np.testing.assert_array_equal(cp.asnumpy(dev.points), host.points)
        np.testing.assert_array_equal(cp.asnumpy(dev.local), host.local)
        assert dev.local.dtype == np.int32
        assert_same_bits(cp.asnumpy(dev.weights), host.weights, "plan weights")


@pytest.mark.gpu
def test_the_plan_samples_bit_for_bit_on_the_gpu():
    """The CUDA ladder (naive-fused, the sphere preset's rung) and CuPy's reductions: the plan's
    samples equal the whole state's moments and gather, bit for bit."""
    cp = pytest.importorskip("cupy")
    p = load_preset("amr3d-sphere-re100", ["variants.kernels=naive-fused"], backend="cupy")
    e = AMR3D(p, get_backend("cupy"))
    e.step(8)
    want = whole_state_samples(cp, e.forest, e.shape.leaves(), 1 << 21, e.dtype)
    for name, g in zip(MOMENTS, e.shape.macroscopic()):
        assert_same_bits(cp.asnumpy(g), cp.asnumpy(want[name]), name)
    speed = cp.sqrt(want["ux"] * want["ux"] + want["uy"] * want["uy"] + want["uz"] * want["uz"])
    assert_same_bits(cp.asnumpy(e.field("speed").data), cp.asnumpy(speed), "speed")

"""amr3d on one level of leaves (NumPy): the leaf reference is the plain periodic D3Q27 lattice,
storage conversions are lossless, and the physics decays a shear wave at the analytic rate."""
from __future__ import annotations

import numpy as np
import pytest
from nagare.engine.amr3d import d3q27, leafgrid, storage
from nagare.engine.backend import get_backend
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset


def engine(*sets):
    return create_engine(load_preset("amr3d-bench", list(sets), backend="numpy"), get_backend("numpy"))


def roll_step(f, omega, a):
    """The plain uniform periodic lattice, written separately: np.roll streaming, then the family's
    collision operator (the same operations, so the same bits)."""
    c = d3q27.C
    g = np.stack([np.roll(f[q], shift=(c[q, 2], c[q, 1], c[q, 0]), axis=(0, 1, 2)) for q in range(27)])
    return leafgrid.collide(np, g, f.dtype.type(omega), a)


@pytest.mark.parametrize("leaves, m, precision", [((2, 2, 2), 17, "fp64"), ((3, 1, 2), 9, "fp64"),
                                                   ((2, 2, 2), 9, "fp32")])
def test_one_level_of_leaves_is_the_uniform_periodic_lattice(leaves, m, precision):
    e = engine(f"grid.leaves={list(leaves)}", f"grid.m={m}", f"physics.precision='{precision}'",
               "physics.force=[1e-5, -2e-5, 0.0]", "initial.kind='random'")
    u = storage.uniform_from_leaves(np, e.state_arrays()["f"], m, leaves)
    for _ in range(6):
        u = roll_step(u, e.omega, e.accel)
    e.step(6)
    got = e.state_arrays()["f"]
    np.testing.assert_array_equal(storage.uniform_from_leaves(np, got, m, leaves), u)
    # every copy of a shared face node holds the same value
    np.testing.assert_array_equal(storage.leaves_from_uniform(np, u, m, leaves), got)


def test_storage_conversions_are_lossless():
    rng = np.random.default_rng(1)
    u = rng.random((3, 16, 24, 32))
    leaves = storage.leaves_from_uniform(np, u, 9, (4, 3, 2))
    np.testing.assert_array_equal(storage.uniform_from_leaves(np, leaves, 9, (4, 3, 2)), u)
    even = storage.leaves_from_uniform(np, rng.random((2, 16, 16, 32)), 9, (4, 2, 2))
    mothers = storage.mothers_from_leaves(np, even, 9, (4, 2, 2))
    assert mothers.shape == (2, 2, 17, 17, 17)  # 4×2×2 leaves = 2×1×1 mothers
    np.testing.assert_array_equal(storage.leaves_from_mothers(np, mothers, 9, (4, 2, 2)), even)
    with pytest.raises(ValueError, match="even number of leaves"):
        storage.mothers_from_leaves(np, leaves, 9, (4, 3, 2))
    apart = storage.apart_from_leaves(np, leaves, 9)
    assert apart.shape == (3, 24 * 9**3)
    # the first run is every leaf's inner block in index order: leaf 5's point (i, j, k) = (3, 1, 7)
    np.testing.assert_array_equal(apart[:, 5 * 7**3 + (6 * 7 + 0) * 7 + 2], leaves[:, 5, 7, 1, 3])
    np.testing.assert_array_equal(storage.leaves_from_apart(np, apart, 9, 24), leaves)
    with pytest.raises(ValueError, match="not 23 leaves"):
        storage.leaves_from_apart(np, apart, 9, 23)


def test_p0_table_in_the_bench_report():
    """`nagare bench amr3d` writes P0's table: the inner kernel's % of P counts its own points."""
    from nagare.engine.amr3d.cases import P0_FLOPS
    from nagare.engine.amr3d.engine import AMR3D
    from nagare.engine.bench import BenchResult

    peak = {"improved_roofline_gflops": 4000.0}
    naive = BenchResult("box", {"kernels": "naive"}, "naive", True, ms_per_step=2.0, updates_per_s=1e10,
                        phases={"step": 2.0}, extra=peak)
    split = BenchResult("box", {"kernels": "split"}, "split", True, ms_per_step=4.0, updates_per_s=5e9,
                        phases={"inner": 2.5, "shell": 1.5}, extra=dict(peak, inner_points=2.5e7))
    bad = BenchResult("box", {"kernels": "uniform"}, "uniform", False, reason="cannot")
    table = AMR3D.bench_report([naive, split, bad])
    inner_pct = 100 * 2.5e7 / 2.5e-3 * P0_FLOPS / 1e9 / 4000.0
    assert f"| box | split | 2.5000 | 1.5000 | 4.0000 | 0.50× | {5e9 * P0_FLOPS / 1e9:,.0f} |" in table
    assert table.rstrip().endswith(f"{inner_pct:.1f} |") and "uniform" not in table
    assert AMR3D.bench_report([bad]) == ""
    e = engine("grid.leaves=[2, 2, 2]", "grid.m=9")
    assert e.timing_extra()["inner_points"] == 8 * 7**3


def test_shear_wave_decays_at_the_viscous_rate():
    """u_x = U sin(2π z/L) decays as exp(−ν k² t), ν = (τ − ½)/3, on a 16×16×64 box of 17³ leaves."""
    tau, steps = 0.8, 300
    e = engine("grid.leaves=[1, 1, 4]", "grid.m=17", f"physics.tau={tau}", "physics.precision='fp64'",
               "initial.kind='shear-wave'", "initial.u0=0.01")
    nz = e.preset.shape[0]
    z = np.arange(nz)
    mode = np.sin(2 * np.pi * z / nz)

    def amplitude():
        ux = e.field("ux").data
        return float((ux.mean(axis=(1, 2)) * mode).sum() / (mode * mode).sum())
    a0 = amplitude()
    e.step(steps)
    nu, k = (tau - 0.5) / 3, 2 * np.pi / nz
    rate = -np.log(amplitude() / a0) / steps
    np.testing.assert_allclose(rate, nu * k * k, rtol=0.01)


def test_field_by_name_equals_fields():
    e = engine("initial.kind='random'")
    e.step(2)
    every = e.fields()
    for name in e.field_names():
        one = e.field(name)
        if hasattr(one, "data"):
            np.testing.assert_array_equal(one.data, every[name].data, err_msg=name)


def test_fp16_storage_on_the_reference_rounds_every_step():
    """storage = fp16 on NumPy: the reference keeps what fp16 storage would (storage.round_fp16 after
    every step), bit for bit with the loop written here; switching back to native keeps the state;
    the same run in fp32 differs by fp16 rounding only; on a tree fp16 runs the reference and the
    naive rungs, and is refused with Kobayashi's CSM or the mother-leaf rungs in one line."""
    from nagare.engine import registry
    from nagare.engine.amr3d import ladder

    a = engine("grid.leaves=[2, 2, 2]", "grid.m=9", "initial.kind='random'")
    ref = engine("grid.leaves=[2, 2, 2]", "grid.m=9", "initial.kind='random'")
    f0 = ref.state_arrays()["f"]
    a.set_variant(storage="fp16")
    want = storage.round_fp16(np, f0)
    np.testing.assert_array_equal(a.state_arrays()["f"], want)
    src = leafgrid.gather_sources(ladder.periodic_neighbours((2, 2, 2)), 9)
    for _ in range(6):
        want = storage.round_fp16(np, leafgrid.step(np, want, src, a.omega, a.accel, model=a.collision))
    a.step(6)
    ref.step(6)
    np.testing.assert_array_equal(a.state_arrays()["f"], want)
    diff = np.abs(a.state_arrays()["f"] - ref.state_arrays()["f"]).max()
    assert 0 < diff < 1e-4
    a.set_variant(storage="native")
    np.testing.assert_array_equal(a.state_arrays()["f"], want)
    tree = load_preset("amr3d-periodic", ["grid.m=9"], backend="numpy")
    fp16 = registry.axes("amr3d")["storage"].choices["fp16"]
    assert registry.unavailable_reason(fp16, "numpy", {"kernels": "reference", "storage": "fp16"}, tree) is None
    assert registry.unavailable_reason(fp16, "cupy", {"kernels": "naive-fused", "storage": "fp16"}, tree) is None
    reason = registry.unavailable_reason(fp16, "cupy", {"kernels": "mother-leaf", "storage": "fp16"}, tree)
    assert reason and "naive and uniform" in reason and "\n" not in reason
    csm = load_preset("amr3d-periodic", ["grid.m=9", "physics.les='csm'"], backend="numpy")
    reason = registry.unavailable_reason(fp16, "numpy", {"kernels": "reference", "storage": "fp16"}, csm)
    assert reason and "csm" in reason and "\n" not in reason
    box = load_preset("amr3d-bench", ["grid.leaves=[2, 2, 2]"], backend="cupy")
    reason = registry.unavailable_reason(registry.axes("amr3d")["storage"].choices["fp16"], "cupy",
                                         {"kernels": "templates", "storage": "fp16"}, box)
    assert reason and "naive and uniform" in reason

"""A regrid on the state's own device (engine/amr3d/transfer.py, regridding.py; issue 38 item 4):
the same tree and the same populations, bit for bit on NumPy, as the host path it replaces
(amr3d_regrid_reference.py: a per-leaf loop on the host, then the host synchronisation); the
kernels' compilations do not depend on the tree; every regrid that changes the tree is timed."""
from __future__ import annotations

import time

import numpy as np
import pytest
from nagare.engine.amr3d import cases, d3q27, reference, transfer
from nagare.engine.amr3d.config import AMR3DPreset
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.amr3d.regrid_clock import REGRID_PARTS
from nagare.engine.amr3d.tree import Forest, coarsen, refine
from nagare.engine.backend import get_backend

from tests.unit import amr3d_regrid_reference as old

M = 9


def vortex(**over) -> AMR3DPreset:
    raw = {"engine": "amr3d", "description": "test", "grid": {"leaves": [4, 4, 1], "m": M},
           "physics": {"tau": 0.56, "precision": "fp64"},
           "initial": {"kind": "vortex", "u0": 0.04, "center": [12.0, 12.0, 4.0], "radius": 3.0},
           "flow": {"velocity": [0.08, 0.0, 0.0]},
           "adapt": {"every": 5, "refine_above": 0.3, "coarsen_below": 0.1, "max_level": 2, "initial": True}}
    for k, v in over.items():
        raw[k] = {**raw.get(k, {}), **v} if isinstance(v, dict) else v
    return AMR3DPreset.model_validate(raw)


def smooth_state(forest: Forest, dtype, seed: int = 0) -> np.ndarray:
    """Post-collision populations of a smooth flow with a non-equilibrium part, equal on every copy
    of a node (a function of position)."""
    rng = np.random.default_rng(seed)
    X = reference.point_coordinates(forest)
    k = rng.uniform(0.05, 0.2, 3)
    rho = 1 + 0.01 * np.sin(k[0] * X[..., 0] + k[1] * X[..., 1])
    u = np.stack([0.03 * np.cos(k[1] * X[..., 1] + k[2] * X[..., 2]), 0.02 * np.sin(k[0] * X[..., 0]),
                  0.01 * np.cos(k[2] * X[..., 2])])
    f = reference.init_state(np, forest, reference.Physics(0.7), rho, u)
    f = f * (1 + 0.002 * np.sin(X[..., 0] * k[2] + X[..., 1] * k[0] + X[..., 2] * k[1]))[None]
    return f.astype(dtype)


def tree_pairs():
    """(old, new) forests: a refinement with its ripple, a coarsening, both at once, two levels at a
    time, on periodic and walled axes and one root in z (the domain's far face is the near one)."""
    out = []
    for roots, periodic in (((2, 2, 1), (True, True, True)), ((2, 1, 2), (False, True, False)),
                            ((1, 2, 1), (True, False, True))):
        a = refine(Forest.uniform(roots, 0, M, 2, periodic), [0])
        b = refine(a, [a.n_leaves - 1, 1])
        c = coarsen(b, [int(np.flatnonzero(b.level == 2)[0])])
        r = refine(c, [int(np.flatnonzero(c.level < c.max_level)[-1])])
        d = coarsen(r, np.flatnonzero(r.level == r.level.max())[:9:8])
        out += [(a, b), (b, a), (b, c), (c, d), (d, a)]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("accel", [(0.0, 0.0, 0.0), (1e-5, -2e-5, 3e-6)])
def test_transfer_equals_the_per_leaf_host_transfer_bit_for_bit(dtype, accel):
    for i, (a, b) in enumerate(tree_pairs()):
        f = smooth_state(a, dtype, seed=i)
        want = old.transfer(a, b, f, 0.62, accel)
        got = transfer.transfer(a, b, f, 0.62, accel, xp=np)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_transfer_batches_do_not_change_the_bits(monkeypatch):
    a, b = tree_pairs()[0]
    f = smooth_state(a, np.float32)
    want = transfer.transfer(a, b, f, 0.62)
    for n in (1, 3, 1000):
        monkeypatch.setitem(transfer.PROLONG_BATCH, "host", n)
        np.testing.assert_array_equal(transfer.transfer(a, b, f, 0.62), want)


def test_the_early_restriction_is_the_couplings():
    """interface.early_restriction (before the coupling, for the state's synchronisation) gives the
    fix-up points and, per level, the restriction the coupling holds (level-relative there); a build
    handed them gives the tables of a build without them. None for a flow with a free-slip side."""
    from nagare.engine.amr3d import interface

    restricted = 0
    for a, b in tree_pairs():
        for forest in (a, b):
            early = interface.early_restriction(forest)
            with_early = interface.build(forest, early=early)
            plain = interface.build(forest.replace(forest.level, forest.block))
            m3 = forest.m ** 3
            for lv, c in plain.items():
                dst, src = early[1][lv]
                np.testing.assert_array_equal(dst, c.restrict_dst + c.lo * m3)
                fine = forest.level_slice(lv + 1).start * m3 if c.restrict_src.size else 0
                np.testing.assert_array_equal(src, c.restrict_src + fine)
                for k in ("fix_pts", "desc", "fine_pts", "coarse_pts", "interp_slot", "interp_w", "restrict_dst",
                          "restrict_src"):
                    np.testing.assert_array_equal(getattr(with_early[lv], k), getattr(c, k), err_msg=k)
            restricted += sum(len(early[1][lv][0]) for lv in forest.levels)
    assert restricted > 0
    assert interface.early_restriction(a, slip=("x-",)) is None


def test_forest_copies_are_every_levels_copies():
    """interface.forest_copies (one pass over the forest, state point ids) gives each level's
    level_copies shifted by the level's first point, pair for pair in the same order."""
    from nagare.engine.amr3d import interface

    for a, b in tree_pairs():
        for forest in (a, b):
            got = interface.forest_copies(forest)
            assert list(got) == list(forest.levels)
            for lv in forest.levels:
                lo = forest.level_slice(lv).start * M ** 3
                dst, src = interface.level_copies(forest, lv)
                assert dst.size > 0
                np.testing.assert_array_equal(got[lv][0], dst + lo)
                np.testing.assert_array_equal(got[lv][1], src + lo)


def shifted(e, dx: float):
    """Engine ``e``'s vortex moved by dx (level-0 units) on its present tree: the next regrid refines
    ahead of it and coarsens behind it."""
    p = e.preset
    c = list(p.initial.center)
    c[0] += dx
    moved = p.model_copy(update={"initial": p.initial.model_copy(update={"center": c})})
    return cases.initial_tree_state(moved, e.forest)


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_a_regrid_gives_the_host_paths_tree_and_populations(precision):
    e = AMR3D(vortex(physics={"precision": precision}), get_backend("numpy"))
    e.shape.set_leaves(shifted(e, 10.0))
    plan = e.shape._plan(e.regrid_criterion())
    want = old.regrid(e, plan.forest)
    ev = e.regrid()
    assert ev["refined"] > 0 and ev["coarsened"] > 0
    np.testing.assert_array_equal(e.forest.level, plan.forest.level)
    np.testing.assert_array_equal(e.forest.block, plan.forest.block)
    np.testing.assert_array_equal(np.asarray(e.state_arrays()["f"]), want)


def test_a_regrid_next_to_a_body_gives_the_host_paths_populations():
    """Inlet, outlet and a sphere's solid nodes: the boundaries are applied on the device too."""
    p = vortex(grid={"leaves": [4, 2, 2], "m": M, "periodic": [False, True, True]},
               refine=[{"lo": [0.75, 0.0, 0.0], "hi": [1.0, 0.5, 0.5], "level": 1}],
               body=[{"kind": "sphere", "center": [10.0, 8.0, 8.0], "diameter": 2.0, "level": 1, "band": 0.5}],
               flow={"inlet": "x-", "outlet": "x+", "velocity": [0.04, 0.0, 0.0]},
               initial={"kind": "uniform"}, adapt={"every": 2, "refine_above": 5.0, "coarsen_below": 2.5,
                                                     "max_level": 1, "initial": False})
    e = AMR3D(p, get_backend("numpy"))
    e.step(1)
    plan = e.shape._plan(e.regrid_criterion())
    want = old.regrid(e, plan.forest)
    assert e.regrid()["coarsened"] > 0
    np.testing.assert_array_equal(np.asarray(e.state_arrays()["f"]), want)


def test_the_kernels_compiled_do_not_depend_on_the_tree():
    """A regrid changes leaf counts and tables, never a compilation: the kernel specs (sources,
    names, prelude) of every tree rung are the same before and after."""
    e = AMR3D(vortex(physics={"precision": "fp32"}), get_backend("numpy"))
    rungs = ("naive", "naive-fused", "split", "sorted", "templates")
    before = {r: e.shape.kernel_specs({"kernels": r}) for r in rungs}
    e.shape.set_leaves(shifted(e, 10.0))
    n = e.forest.n_leaves
    e.regrid()
    assert e.forest.n_leaves != n
    assert {r: e.shape.kernel_specs({"kernels": r}) for r in rungs} == before


def test_regrids_that_change_the_tree_are_timed():
    e = AMR3D(vortex(), get_backend("numpy"))
    assert "regrid_ms" not in e.timing_extra()
    e.regrid()  # nothing to change right after the initial adaptation
    assert e.shape.regrid_times == []
    e.shape.set_leaves(shifted(e, 10.0))
    e.regrid()
    x = e.timing_extra()
    assert x["regrids_timed"] == 1
    assert x["regrid_ms"] >= x["regrid_host_ms"] > 0
    np.testing.assert_allclose(x["regrid_host_ms"] + x["regrid_device_ms"], x["regrid_ms"], rtol=1e-12)
    assert d3q27.Q == 27


@pytest.mark.gpu
def test_a_regrid_on_the_gpu_follows_the_numpy_one():
    """The shipped vortex's regrid on CuPy (naive-fused, the state on the device throughout): the same
    tree as NumPy's from the same state, populations equal to fp32 round-off."""
    from nagare.engine.presets import load_preset  # (the shipped preset, GPU sizes)

    p = load_preset("amr3d-vortex-adapt", backend="cupy")
    g = AMR3D(p, get_backend("cupy"), variants={"kernels": "naive-fused"})
    n = AMR3D(p, get_backend("numpy"))
    np.testing.assert_array_equal(g.forest.block, n.forest.block)
    f = shifted(n, 12.0).astype(np.float32)
    g.shape.set_leaves(f)
    n.shape.set_leaves(f)
    a, b = g.regrid(), n.regrid()
    assert a == b and a["refined"] > 0
    np.testing.assert_array_equal(g.forest.block, n.forest.block)
    np.testing.assert_allclose(np.asarray(g.backend.asnumpy(g.state_arrays()["f"])),
                               np.asarray(n.state_arrays()["f"]), rtol=2e-6, atol=1e-7)
    g.step(20)  # steps on the new tree, regrids again
    assert np.isfinite(g.diagnostics()["mass"])


def test_a_regrid_s_parts_add_up_to_its_wall_time():
    """Every part of REGRID_PARTS is timed and reported; the parts of one regrid add up to its wall
    time within the timer's resolution; the first regrid is reported apart from the later ones."""
    e = AMR3D(vortex(), get_backend("numpy"))
    e.shape.set_leaves(shifted(e, 10.0))
    e.regrid()
    x = e.timing_extra()
    assert x["regrids_warm"] == 0 and "regrid_warm_ms" not in x
    assert x["regrid_first_ms"] == x["regrid_ms"]
    for shift in (-10.0, 10.0):
        e.shape.set_leaves(shifted(e, shift))
        e.regrid()
    r = e.shape.regrid_times[-1]
    parts = [r[f"{p}_ms"] for p in REGRID_PARTS]
    assert all(v >= 0 for v in parts)
    assert min(r[f"{p}_ms"] for p in ("criterion", "plan", "coupling_host", "transfer", "synchronise",
                                      "select")) > 0
    resolution_ms = 1e3 * time.get_clock_info("perf_counter").resolution
    np.testing.assert_allclose(sum(parts), r["total_ms"], rtol=0, atol=len(parts) * resolution_ms + 1e-9)
    x = e.timing_extra()
    assert x["regrids_timed"] == 3 and x["regrids_warm"] == 2
    assert x["regrid_first_ms"] == e.shape.first_regrid["total_ms"]
    np.testing.assert_allclose(x["regrid_warm_ms"], np.median([t["total_ms"] for t in e.shape.regrid_times[1:]]))
    for p in REGRID_PARTS:
        np.testing.assert_allclose(x[f"regrid_{p}_ms"], np.median([t[f"{p}_ms"] for t in e.shape.regrid_times[1:]]))


@pytest.mark.gpu
def test_a_warm_regrid_compiles_nothing(monkeypatch):
    """CuPy compiles the regrid's elementwise, reduction and indexing kernels at their first use, so
    on the engine's first regrid that changes the tree (those the engine's build and steps did not
    use); the regrids after it compile nothing. Every kernel CuPy does not hold in memory (compiled,
    or loaded from its disk cache) goes through cupy.cuda.compiler._compile_module_with_cache."""
    import cupy  # (gpu test)
    from nagare.engine.presets import load_preset  # (the shipped preset, GPU sizes)

    p = load_preset("amr3d-vortex-adapt", backend="cupy")
    g = AMR3D(p, get_backend("cupy"), variants={"kernels": "naive-fused"})
    g.step(2)
    compiled = []
    inner = cupy.cuda.compiler._compile_module_with_cache

    def counting(source, *a, **k):
        compiled.append(source.splitlines()[-1][:120] if source else "")
        return inner(source, *a, **k)
    monkeypatch.setattr(cupy.cuda.compiler, "_compile_module_with_cache", counting)
    seen = []
    for dx in (12.0, 0.0, 12.0, 0.0):
        g.shape.set_leaves(shifted(g, dx).astype(np.float32))
        n = g.forest.n_leaves
        g.regrid()
        assert g.forest.n_leaves != n
        seen.append(len(compiled))
    assert seen[1:] == [seen[0]] * 3, f"compiled after the first regrid: {compiled[seen[0]:]}"


def test_the_bench_report_has_the_regrid_times():
    from nagare.engine.amr3d.cases import bench_report  # (the bench's formatting only)
    from nagare.engine.bench import BenchResult

    x = {"regrid_ms": 31.25, "regrid_host_ms": 12.5, "regrid_device_ms": 18.75, "regrids_timed": 7.0, "leaves": 130,
         "regrid_first_ms": 180.25, "regrid_warm_ms": 30.5, "regrids_warm": 6.0,
         **{f"regrid_{p}_ms": 1.0 + i for i, p in enumerate(REGRID_PARTS)}}
    first_only = {"regrid_ms": 180.25, "regrid_host_ms": 12.5, "regrid_device_ms": 167.75, "regrids_timed": 1.0,
                  "leaves": 130, "regrid_first_ms": 180.25, "regrids_warm": 0.0,
                  **{f"regrid_{p}_ms": 1.0 for p in REGRID_PARTS}}
    cells = [BenchResult("vortex-adapt", {"kernels": "naive-fused"}, "naive-fused", True, ms_per_step=0.5,
                         phases={"regrid": 0.05}, extra=x),
             BenchResult("vortex-adapt", {"kernels": "split"}, "split", True, ms_per_step=0.6, extra={}),
             BenchResult("vortex-adapt", {"kernels": "templates"}, "templates", False, reason="cannot"),
             BenchResult("vortex-adapt", {"kernels": "naive"}, "naive", True, ms_per_step=0.5, extra=first_only)]
    report = bench_report(cells)
    assert "## Regrids" in report
    assert ("| vortex-adapt | naive-fused | 180.2 | 30.5 | 1.0 | 2.0 | 3.0 | 4.0 | 5.0 | 6.0 | 7.0 | 8.0 | 9.0 "
            "| 6 | 130 | 10.0 |") in report
    assert "| vortex-adapt | naive | 180.2 | — | — | — | — | — | — | — | — | — | — | 0 | 130 | — |" in report
    assert "| split |" not in report.split("## Regrids")[1]
    assert ("| first (compiles) ms | regrid ms | criterion | plan | coupling host | coupling device | transfer "
            in report)
    assert bench_report(cells[1:3]) == ""


def test_a_regrid_on_the_emulated_gpu_gives_the_host_paths_populations(emulated_cupy):
    """The CuPy path's glue (tree_stepper.CupyKernels, the xp transfer and synchronisation, the
    stepper rebuilt on the new tree) on the emulated CuPy: the host path's state, then steps on."""
    from nagare.engine.backend import Backend

    p = vortex(physics={"precision": "fp32"})
    e = AMR3D(p, Backend("cupy", emulated_cupy, _cupy=emulated_cupy), variants={"kernels": "naive-fused"})
    e.shape.set_leaves(shifted(e, 10.0))
    plan = e.shape._plan(e.regrid_criterion())
    want = old.regrid(e, plan.forest)
    ev = e.regrid()
    assert ev["refined"] > 0 and ev["coarsened"] > 0
    np.testing.assert_array_equal(e.forest.block, plan.forest.block)
    np.testing.assert_array_equal(np.asarray(e.state_arrays()["f"]), want)
    assert e.shape.regrid_figures()["regrids_timed"] == 1
    e.step(2)
    assert np.isfinite(np.asarray(e.state_arrays()["f"])).all()


@pytest.mark.parametrize("storage_kind", ["native", "fp16"])
def test_the_criterions_levels_are_the_transfers_state(emulated_cupy, storage_kind):
    """Regridding.level_chunks (the criterion's input) joined is the stepper's state, bit for bit: a
    regrid hands them to the transfer instead of assembling the state again (fp16 storage: one
    conversion of the levels, not two)."""
    from nagare.engine.backend import Backend

    p = vortex(physics={"precision": "fp32"})
    e = AMR3D(p, Backend("cupy", emulated_cupy, _cupy=emulated_cupy),
              variants={"kernels": "naive-fused", "storage": storage_kind})
    e.shape.set_leaves(shifted(e, 10.0))
    e.step(1)
    chunks = e.shape.level_chunks()
    np.testing.assert_array_equal(e.shape._leaves_from(chunks), e.shape.leaves())
    np.testing.assert_array_equal(e.shape.regrid_criterion(chunks), e.regrid_criterion())
    ref = AMR3D(p, get_backend("numpy"))
    ref.shape.set_leaves(shifted(ref, 10.0))
    np.testing.assert_array_equal(ref.shape._leaves_from(ref.shape.level_chunks()), ref.shape.leaves())


def test_a_new_stepper_keeps_the_coupling_settings_of_the_last(emulated_cupy):
    """A regrid and a rung switch (through the reference rung, which has no TreeStepper) build a new
    stepper: the coupling's launch choices a tool set stay, and the split launches' dense rows are
    back on it (fused_coupling off). Its steps then equal those of the fused coupling's engine."""
    from nagare.engine.amr3d.tree_stepper import COUPLING_SETTINGS
    from nagare.engine.backend import Backend

    p = vortex(physics={"precision": "fp32"})
    backend = Backend("cupy", emulated_cupy, _cupy=emulated_cupy)
    e = AMR3D(p, backend, variants={"kernels": "naive-fused"})
    twin = AMR3D(p, backend, variants={"kernels": "naive-fused"})
    chosen = {"fused_coupling": False, "interp_lanes": 9, "pair_restrictions": False}
    assert set(chosen) == set(COUPLING_SETTINGS)
    assert e.shape.stepper.coupling_settings() != chosen  # the defaults differ from what is chosen
    e.shape.stepper.apply_coupling_settings(chosen)
    for eng in (e, twin):
        eng.shape.set_leaves(shifted(eng, 10.0))
        assert eng.regrid()["refined"] > 0
    assert e.shape.stepper.coupling_settings() == chosen
    assert all("interp_slot" in d for d in e.shape.stepper.kernels.dev.values())  # the split launches' rows
    chosen["interp_lanes"] = 1  # changed after the regrid: the switch keeps this one
    e.shape.stepper.interp_lanes = 1
    e.set_variant(kernels="reference")
    e.set_variant(kernels="naive-fused")
    assert e.shape.stepper.coupling_settings() == chosen
    e.step(2)
    twin.set_variant(kernels="reference")
    twin.set_variant(kernels="naive-fused")
    twin.step(2)
    np.testing.assert_allclose(np.asarray(e.state_arrays()["f"]), np.asarray(twin.state_arrays()["f"]),
                               rtol=0, atol=2e-6)
    with pytest.raises(ValueError, match="unknown coupling settings"):
        e.shape.stepper.apply_coupling_settings({"lanes": 3})


def test_a_rung_switch_whose_stepper_cannot_be_built_keeps_the_state(emulated_cupy, monkeypatch):
    """The new rung's stepper fails to build (out of memory, a compile error): the selection rolls
    back to the old rung with the state it had, not the one of the last regrid or of the start."""
    from nagare.engine.amr3d import tree_shape
    from nagare.engine.backend import Backend

    class Refused(Exception):
        pass

    p = vortex(physics={"precision": "fp32"})
    e = AMR3D(p, Backend("cupy", emulated_cupy, _cupy=emulated_cupy), variants={"kernels": "naive-fused"})
    e.step(3)
    before = np.asarray(e.shape.leaves()).copy()
    real = tree_shape.CupyKernels
    refuse = {"on": True}

    def kernels(*a, **kw):
        if refuse["on"]:
            raise Refused("the new rung's kernels cannot be built here")
        return real(*a, **kw)

    monkeypatch.setattr(tree_shape, "CupyKernels", kernels)
    with pytest.raises(Refused):
        e.set_variant(kernels="naive")
    refuse["on"] = False
    assert e.selection["kernels"] == "naive-fused"
    np.testing.assert_array_equal(np.asarray(e.shape.leaves()), before)

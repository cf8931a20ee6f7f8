"""The fused level coupling of a tree (tree_stepper.py ``fused_coupling``; coupling.cu
amr3d_rescale_two, amr3d_interpolate_rows, amr3d_restrict_fine): the same operations on the same
inputs as the split launches, in fewer launches.

- the orchestration (NumpyKernels, fp64 and fp32) steps bit for bit as the split one, on two and
  three levels, walls, a body force, both stencils;
- the CUDA kernels through the g++ emulation (tests/unit/amr3d_emulated_cupy.py), fp32 and fp16
  storage, naive and naive-fused rungs: fused equals split bit for bit, on trees with walls and free
  slip and on the sphere's (links, inlet, outlet, MRT with LES);
- the coupling launches a coarse step: 18 → 9 on three levels, 42 → 20 on four (the sphere's), as
  counted from the calls and from the emulated launches; a second step's restriction held for the
  next one (restrict_two) only where that one reads none of its nodes;
- the interpolation's threads a source position (1, 3, 9: amr3d_interpolate_rows<L>) give the same bits.
"""
from __future__ import annotations

import shutil
from collections import Counter

import numpy as np
import pytest
from nagare.engine.amr3d import interface, reference
from nagare.engine.amr3d.engine import AMR3D
from nagare.engine.amr3d.tree import Forest, refine
from nagare.engine.amr3d.tree_stepper import INTERP_LANES_DEFAULT, NumpyKernels, TreeStepper
from nagare.engine.backend import Backend, get_backend
from nagare.engine.timing import PhaseTimer

from tests.unit.test_amr3d_tree_stepper import flow_state, three_levels, two_levels

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")
PRESETS = AMR3D.equivalence_presets()
M = 9
# the kernel methods that launch level coupling (interface buffers and restriction; the fix-up is
# counted apart: naive-fused does it inside the ladder kernel)
COUPLING_CALLS = ("rescale_points", "interpolate", "restrict", "rescale_two", "interpolate_two", "restrict_fine",
                  "restrict_two")


def four_levels() -> Forest:
    """three_levels with one level-2 leaf refined again (balance spreads it)."""
    f = refine(Forest.uniform((1, 1, 4), 0, M, 3), [1])
    child = int(np.nonzero((f.level == 1) & np.all(f.block == (0, 0, 3), axis=1))[0][0])
    f = refine(f, [child])
    return refine(f, [int(np.nonzero(f.level == 2)[0][-1])])


def numpy_stepper(forest, phys, interp="quadratic", fused=True, dtype=np.float64):
    st = TreeStepper(np, forest, interface.build(forest, interp), phys.tau0, phys.accel0, NumpyKernels(),
                     PhaseTimer(get_backend("numpy")), dtype=dtype)
    st.fused_coupling = fused
    st.set_state(flow_state(forest, phys).astype(dtype), synchronised=False)
    return st


def count_calls(st) -> Counter:
    """Wraps the stepper's coupling methods to count the stepper's calls of them (instance
    attributes; NumpyKernels' fused methods call the split ones, which are not launches of their own)."""
    calls, depth = Counter(), [0]
    k = st.kernels
    for name in COUPLING_CALLS:
        fn = getattr(k, name)

        def wrapped(*a, _fn=fn, _name=name, **kw):
            if not depth[0]:
                calls[_name] += 1
            depth[0] += 1
            try:
                return _fn(*a, **kw)
            finally:
                depth[0] -= 1
        setattr(k, name, wrapped)
    return calls


@pytest.mark.parametrize("forest_fn,periodic,interp,accel,dtype", [
    (two_levels, (True, True, True), "quadratic", (0.0, 0.0, 0.0), np.float64),
    (three_levels, (True, True, True), "quadratic", (0.0, 2e-5, 0.0), np.float64),
    (three_levels, (False, True, True), "linear", (1e-5, 0.0, 0.0), np.float32),
    (four_levels, (True, True, True), "quadratic", (0.0, 0.0, 0.0), np.float32),
])
def test_fused_orchestration_steps_as_the_split_one_bit_for_bit(forest_fn, periodic, interp, accel, dtype):
    forest = forest_fn() if forest_fn is four_levels else forest_fn(periodic)
    phys = reference.Physics(0.57, accel)
    split = numpy_stepper(forest, phys, interp, fused=False, dtype=dtype)
    fused = numpy_stepper(forest, phys, interp, fused=True, dtype=dtype)
    for _ in range(3):
        split.advance(1)
        fused.advance(1)
        np.testing.assert_array_equal(fused.state(), split.state())
    assert np.abs(fused.state() - flow_state(forest, phys)).max() > 1e-5  # it moved


@pytest.mark.parametrize("forest_fn,split_calls,fused_calls", [(three_levels, 18, 9), (four_levels, 42, 20)])
def test_coupling_launches_per_coarse_step(forest_fn, split_calls, fused_calls):
    """One coupling launch per call: 18 → 9 on three levels (the benchmark tree's count), 42 → 20
    on four (the sphere's), each level with coarser and finer neighbours as there (each second
    step's restriction joins the next one: restrict_two); in a run of k coarse steps the coarsest
    level's restriction joins the next step's fine values k − 1 times (one launch fewer each)."""
    forest = forest_fn()
    assert len(forest.levels) == (3 if forest_fn is three_levels else 4)
    phys = reference.Physics(0.57)
    for fused, want in ((False, split_calls), (True, fused_calls)):
        st = numpy_stepper(forest, phys, fused=fused)
        calls = count_calls(st)
        st.advance(1)  # (the first step's calls as every later one's: nothing is set up lazily)
        calls.clear()
        st.advance(1)
        assert sum(calls.values()) == want
        calls.clear()
        st.advance(3)
        assert sum(calls.values()) == 3 * want - (2 if fused else 0)
        if fused:
            assert calls["rescale_two"] and calls["interpolate_two"] and calls["restrict_fine"]
            assert calls["restrict_two"] and not calls["interpolate"]


@pytest.mark.parametrize("forest_fn", [three_levels, four_levels])
def test_runs_of_steps_equal_single_steps_bit_for_bit(forest_fn):
    """advance(n) (the coarsest level's restriction carried into the next step) = n × advance(1) =
    the split launches, bit for bit; nothing pending or held after it."""
    forest = forest_fn()
    phys = reference.Physics(0.57, (0.0, 1e-5, 0.0))
    split = numpy_stepper(forest, phys, fused=False, dtype=np.float32)
    single = numpy_stepper(forest, phys, fused=True, dtype=np.float32)
    run = numpy_stepper(forest, phys, fused=True, dtype=np.float32)
    split.advance(4)
    for _ in range(4):
        single.advance(1)
    run.advance(4)
    np.testing.assert_array_equal(run.state(), split.state())
    np.testing.assert_array_equal(single.state(), split.state())
    assert not run._pending and run._held is None


@pytest.mark.parametrize("pairs", ["built", "plain", "none"])
def test_held_restrictions_step_as_the_split_ones(pairs):
    """A second step's restriction held back for the next one (restrict_two): paired as the tables
    allow ("built": with the fine values), only with plain restrictions ("plain": where it meets the
    pending restriction with fine values it runs alone first), or never ("none") — the same bits as
    the split launches each way, and nothing held after a coarse step."""
    forest = four_levels()
    phys = reference.Physics(0.57, (1e-5, 0.0, 0.0))
    split = numpy_stepper(forest, phys, fused=False, dtype=np.float32)
    fused = numpy_stepper(forest, phys, fused=True, dtype=np.float32)
    assert set(fused._pairable) == {1, 2}  # (the middle levels of four)
    if pairs != "built":
        fused._pairable = {lv: "plain" for lv in fused._pairable} if pairs == "plain" else {}
    calls = count_calls(fused)
    for _ in range(2):
        split.advance(1)
        fused.advance(1)
        np.testing.assert_array_equal(fused.state(), split.state())
        assert fused._held is None
    assert bool(calls["restrict_two"]) == (pairs != "none")


def test_pairable_restrictions_refuse_meeting_points():
    """A restriction that writes a node the next one reads is not paired, and mother leaves never."""
    from nagare.engine.amr3d.tree_stepper import pairable_restrictions

    c = interface.build(four_levels(), "quadratic")
    assert pairable_restrictions(c) == {1: "fine", 2: "fine"}
    assert pairable_restrictions(c, mapped=True) == {}
    below = c[1]
    saved = below.restrict_src
    below.restrict_src = np.concatenate([saved, c[2].restrict_dst[:1]])  # level 1 reads a node level 2 writes
    try:
        assert 2 not in pairable_restrictions(c) and 1 in pairable_restrictions(c)
    finally:
        below.restrict_src = saved
    saved = below.fine_pts
    below.fine_pts = np.concatenate([saved, c[2].restrict_dst[-1:]])
    try:
        assert pairable_restrictions(c)[2] == "plain"
    finally:
        below.fine_pts = saved


def test_fused_coupling_state_is_checkpoint_free():
    """Nothing of the fused coupling outlives a coarse step (the deferred restriction is done
    within it), so a state set from another stepper's steps continues bit for bit."""
    forest = three_levels()
    phys = reference.Physics(0.57)
    a = numpy_stepper(forest, phys)
    a.advance(2)
    saved = a.state().copy()
    a.advance(2)
    b = numpy_stepper(forest, phys)
    b.set_state(saved.copy())
    b.advance(2)
    np.testing.assert_array_equal(b.state(), a.state())
    assert not a._pending


# ---- the CUDA kernels through the g++ emulation -------------------------------------------------

def emulated_engine(cp, label: str, rung: str, storage_kind: str, fused: bool, seed: int = 1234) -> AMR3D:
    e = AMR3D(PRESETS[label], Backend("cupy", cp, _cupy=cp), variants={"kernels": rung, "storage": storage_kind})
    e._roofline = 1e12  # (no copy bandwidth to measure)
    e.random_state(np.random.default_rng(seed))
    e.shape.stepper.fused_coupling = fused
    return e


@needs_gxx
@pytest.mark.parametrize("label,rung,storage_kind", [
    ("fp32-tree2-m9", "naive", "native"),
    ("fp32-tree2-slip-m9", "naive-fused", "native"),
    ("fp32-tree2-m9", "naive-fused", "fp16"),
    ("fp32-sphere-m9", "naive-fused", "fp16"),
    ("fp32-sphere-m9", "naive", "native"),
])
def test_fused_coupling_kernels_equal_the_split_launches(emulated_cupy, label, rung, storage_kind):
    """The CUDA kernels (emulated, the exact source): fused coupling steps bit for bit as the split
    launches, on fp32 and fp16 storage, with walls, free slip and the sphere's boundaries."""
    split = emulated_engine(emulated_cupy, label, rung, storage_kind, fused=False)
    fused = emulated_engine(emulated_cupy, label, rung, storage_kind, fused=True)
    for _ in range(2):
        split.step(1)
        fused.step(1)
        np.testing.assert_array_equal(np.asarray(fused.state_arrays()["f"]), np.asarray(split.state_arrays()["f"]))


@needs_gxx
@pytest.mark.parametrize("label,storage_kind", [("fp32-tree2-slip-m9", "native"), ("fp32-sphere-m9", "fp16")])
def test_interpolate_rows_lanes_give_the_same_bits(emulated_cupy, label, storage_kind):
    """amr3d_interpolate_rows with 1, 3 or 9 threads a source position (tree_stepper ``interp_lanes``):
    each population's sum over the same pairs in the same order, so the interpolated buffers of both
    time levels and the stepped state are the same bits (and the split launches' too)."""
    from nagare.engine.amr3d.tree_stepper import INTERP_LANES

    runs = {}
    for lanes in INTERP_LANES:
        e = emulated_engine(emulated_cupy, label, "naive-fused", storage_kind, fused=True)
        st = e.shape.stepper
        st.interp_lanes = lanes
        for lv in st.levels:  # (entries outside the mask keep what they held: the same NaN everywhere)
            st.interp_buf[lv][...] = np.nan
            st.interp_half[lv][...] = np.nan
        e.step(2)
        runs[lanes] = (np.asarray(e.state_arrays()["f"]),
                       {lv: (np.asarray(st.interp_buf[lv]).copy(), np.asarray(st.interp_half[lv]).copy())
                        for lv in st.levels})
    split = emulated_engine(emulated_cupy, label, "naive-fused", storage_kind, fused=False)
    split.step(2)
    for lanes in INTERP_LANES[1:]:
        np.testing.assert_array_equal(runs[lanes][0], runs[1][0])
        for lv, (now, half) in runs[lanes][1].items():
            np.testing.assert_array_equal(now, runs[1][1][lv][0])
            np.testing.assert_array_equal(half, runs[1][1][lv][1])
    np.testing.assert_array_equal(runs[INTERP_LANES[-1]][0], np.asarray(split.state_arrays()["f"]))
    assert any(np.isfinite(b[0]).any() for b in runs[3][1].values())  # (a level interpolated something)


def test_interp_lanes_default_is_a_choice():
    from nagare.engine.amr3d.tree_stepper import INTERP_LANES, INTERP_LANES_DEFAULT

    assert INTERP_LANES_DEFAULT in INTERP_LANES and all(27 % k == 0 for k in INTERP_LANES)


@needs_gxx
@pytest.mark.parametrize("storage_kind", ["native", "fp16"])
def test_emulated_restrict_two_equals_the_split_launches(emulated_cupy, storage_kind):
    """amr3d_restrict_two (a second step's restriction with the next one, three levels): launched,
    and the state bit for bit the split launches'."""
    split = emulated_engine(emulated_cupy, "fp32-tree3-m9", "naive-fused", storage_kind, fused=False)
    fused = emulated_engine(emulated_cupy, "fp32-tree3-m9", "naive-fused", storage_kind, fused=True)
    assert fused.shape.stepper._pairable
    key = "restrict_two" + ("_16" if storage_kind == "fp16" else "")
    kern = fused.shape.stepper.kernels.k[key]
    before = kern.launches
    for n in (1, 1, 3):  # (3: the coarsest level's restriction carried into the next step too)
        split.step(n)
        fused.step(n)
        np.testing.assert_array_equal(np.asarray(fused.state_arrays()["f"]), np.asarray(split.state_arrays()["f"]))
    assert kern.launches > before


@needs_gxx
def test_emulated_coupling_launches_per_coarse_step(emulated_cupy):
    """The launches themselves (the emulated kernels count theirs): on two levels 6 → 4 a coarse step
    (level 1's two steps: rescale + interpolate each → amr3d_rescale_two + amr3d_interpolate_rows),
    and in a run of two steps 3.5 (the first step's restriction joins the second's fine values:
    amr3d_restrict_fine)."""
    got = {}
    for fused in (False, True):
        e = emulated_engine(emulated_cupy, "fp32-tree2-m9", "naive-fused", "native", fused)
        e.step(1)
        kernels = e.shape.stepper.kernels.k
        before = {key: k.launches for key, k in kernels.items() if hasattr(k, "launches")}
        e.step(2)
        per = Counter({key.split("_16")[0]: (k.launches - before[key]) / 2 for key, k in kernels.items()
                       if hasattr(k, "launches") and k.launches > before[key]})
        got[fused] = per
    coupling = ("rescale", "restrict", "interp8", "interp27", "rescale_two", "restrict_fine", "interp_rows",
                "interp_rows3", "interp_rows9", "restrict_two")
    assert sum(got[False][k] for k in coupling) == 6
    assert sum(got[True][k] for k in coupling) == 3.5
    rows = "interp_rows" + ("" if INTERP_LANES_DEFAULT == 1 else str(INTERP_LANES_DEFAULT))
    assert got[True]["rescale_two"] == 1 and got[True][rows] == 1 and got[True]["restrict_fine"] == 0.5
    assert got[True]["interp8"] + got[True]["interp27"] == 0


@pytest.mark.parametrize("interp", ["quadratic", "linear"])
def test_compact_rows_give_the_dense_rows_values_where_the_fixup_reads(interp):
    """interp_rows: fewer pairs than the dense rows (the zero weights dropped), a mask covering
    every interpolated entry the descriptors read and fewer than all, and at those entries the
    dense rows' values bit for bit (fp32, the kernels' precision)."""
    from nagare.engine.amr3d import interp_rows

    forest = three_levels()
    rng = np.random.default_rng(3)
    for c in interface.build(forest, interp).values():
        if not c.coarse_pts.size:
            continue
        rows = interp_rows.build(np, c.interp_slot, c.interp_w, c.desc, c.fine_pts.size)
        U, S = c.interp_w.shape
        assert rows.count.sum() == np.count_nonzero(c.interp_w) < U * S
        for u in range(0, U, 7):  # each row's nonzero pairs first, in the dense order
            keep = c.interp_w[u] != 0
            np.testing.assert_array_equal(rows.slot[u, :rows.count[u]], c.interp_slot[u, keep])
            np.testing.assert_array_equal(rows.w[u, :rows.count[u]], c.interp_w[u, keep].astype(np.float32))
        nf = c.fine_pts.size
        j = -1 - c.desc[c.desc < 0] - 27 * nf
        j = j[(j >= 0) & (j < 27 * U)]
        need = np.zeros((27, U), bool)
        need.reshape(-1)[j] = True
        bits = (rows.mask[None, :] >> np.arange(27, dtype=np.uint32)[:, None]) & 1
        np.testing.assert_array_equal(bits.astype(bool), need)
        assert 0 < need.sum() < need.size
        coarse = (rng.uniform(0.01, 0.1, (27, c.coarse_pts.size))).astype(np.float32)
        w = c.interp_w.astype(np.float32)
        dense = w[:, 0] * coarse[:, c.interp_slot[:, 0]]
        for s in range(1, S):
            dense = dense + w[:, s] * coarse[:, c.interp_slot[:, s]]
        out = np.full((27, U), np.nan, np.float32)
        interp_rows.apply(np, rows, coarse, out)
        np.testing.assert_array_equal(out[need], dense[need])
        assert np.all(np.isnan(out[~need]))  # (left as they were)


@needs_gxx
def test_coupling_profile_tool_runs_with_the_graph_off(emulated_cupy, capsys, monkeypatch):
    """tools/amr3d_coupling_profile.py on a small tree through the emulation (on the GPU it runs the
    benchmark tree and the sphere, whose preset selects the graph): it turns the graph off, says so,
    and reports both coupling paths' launches (the figures of time are the emulation's zeros)."""
    import importlib.util
    from pathlib import Path

    from nagare.engine import backend
    from nagare.engine.amr3d.cases import THREE_LEVELS

    plain = backend.get_backend
    monkeypatch.setattr(backend, "get_backend",
                        lambda name="auto": Backend("cupy", emulated_cupy, _cupy=emulated_cupy) if name == "cupy"
                        else plain(name))
    path = Path(__file__).resolve().parents[2] / "tools" / "amr3d_coupling_profile.py"
    spec = importlib.util.spec_from_file_location("amr3d_coupling_profile", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--preset", "amr3d-bench", "--steps", "1", "--set", "grid.leaves=[2, 2, 2]",
                      "--set", "grid.m=9", "--set", THREE_LEVELS]) == 0
    out = capsys.readouterr().out
    assert "graph OFF while profiling" in out
    assert "coupling launches per coarse step 6 " in out.split("[fused]")[0]
    assert "coupling launches per coarse step 4 " in out.split("[fused]")[1]
    assert "summary: coupling share split" in out
    # one fused run per threads a source position of the interpolation, each with the same launches
    assert tool.main(["--preset", "amr3d-bench", "--steps", "1", "--coupling", "fused", "--lanes", "1,3",
                      "--set", "grid.leaves=[2, 2, 2]", "--set", "grid.m=9", "--set", THREE_LEVELS]) == 0
    out = capsys.readouterr().out
    for lanes in (1, 3):
        assert "coupling launches per coarse step 4 " in out.split(f"[fused lanes={lanes}]")[1].split("\n")[0]
    # --before and --device-time (its spin kernel a no-op here, the graph step's steps launched plainly:
    # the emulation has neither raw kernels nor graphs)
    from nagare.engine.amr3d.tree_stepper import CupyKernels

    monkeypatch.setattr(tool, "spin_kernel", lambda cp: (lambda *a, **k: None))
    monkeypatch.setattr(CupyKernels, "graphs", False)
    assert tool.main(["--preset", "amr3d-bench", "--steps", "1", "--before", "--device-time",
                      "--set", "grid.leaves=[2, 2, 2]", "--set", "grid.m=9", "--set", THREE_LEVELS]) == 0
    out = capsys.readouterr().out
    for label in ("split", "fused before", "fused"):
        assert f"[{label}] " in out and f"[{label} device] graph step " in out
    assert "summary: coupling share split" in out and "summary device: coupling share fused before" in out


@needs_gxx
def test_an_interp_lanes_value_the_kernel_lacks_is_refused_where_it_is_set(emulated_cupy):
    """Refused when set, so no coarse step stops half done at the launch (some levels stepped, the
    step count not); the state and the step count stay as they were."""
    from nagare.engine.amr3d.tree_stepper import INTERP_LANES_DEFAULT

    e = emulated_engine(emulated_cupy, "fp32-tree2-m9", "naive-fused", "native", fused=True)
    st = e.shape.stepper
    before = np.asarray(st.state()).copy()
    for bad in (4, 0, 2.5, True, "3"):
        with pytest.raises(ValueError, match="interp_lanes"):
            st.interp_lanes = bad
        assert st.interp_lanes == INTERP_LANES_DEFAULT
    np.testing.assert_array_equal(np.asarray(st.state()), before)
    assert e.step_count == 0
    st.interp_lanes = 9
    assert st.interp_lanes == 9


def test_pairable_restrictions_check_fine_points_left_on_the_device_there():
    """Fine points a regrid left on the device (LevelCoupling.keep_on_device) are checked where they
    are: the same answer as from the host tables, and nothing read back to the host."""
    from nagare.engine.amr3d.tree_stepper import pairable_restrictions

    c = interface.build(four_levels(), "quadratic")
    host = pairable_restrictions(c)
    below = c[1]
    reads = []

    def to_host(a):
        reads.append(a)
        return np.asarray(a)

    for extra, want in ((np.zeros(0, np.int64), host[2]), (c[2].restrict_dst[-1:], "plain")):
        fine = np.concatenate([np.asarray(below.fine_pts), extra])
        saved = below.fine_pts
        below.fine_pts = None
        below.keep_on_device({"fine_pts": fine}, to_host, (0, 0))
        try:
            assert below.held_on_device() == ("fine_pts",)
            assert pairable_restrictions(c)[2] == want
            assert not reads
        finally:
            below._lazy, below.fine_pts = None, saved

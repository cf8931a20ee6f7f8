"""``pointwise = fused`` (engine/compact/ns_pointwise.py, shaders/cuda/compact/ns_pointwise.cu) on the CPU:
CuPy replaced by tests/unit/fake_cupy.py, whose RawModule kernels are the exact .cu source compiled with
g++ (-ffp-contract=off, the device's --fmad=false) and run thread by thread. The tridiagonal solves are a
line-addressed NumPy Thomas stand-in (the one of test_compact_ns.py: the NumPy reference's bits) and the
transposes NumPy's, so any difference from the NumPy engine with ``pointwise = array`` comes from the
pointwise kernels — and there is none: bit for bit (assert_array_equal), fp64 and fp32, viscous and
Euler, every kind of side and corner. Launches per evaluation are counted on both paths."""
from __future__ import annotations

import itertools
import types
from contextlib import contextmanager

import numpy as np
import pytest
from nagare.engine import registry
from nagare.engine.backend import Backend, get_backend
from nagare.engine.compact import Engine, ns_pointwise
from nagare.engine.compact import navier_stokes as ns
from nagare.engine.compact.config import CompactPreset
from nagare.engine.errors import VariantUnavailable
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

from tests.unit import cuda_emulator
from tests.unit.compact_fake_gpu import fake_gpu

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ to emulate the kernels")

NUMPY = get_backend("numpy")
VORTEX_SIDES = {"west": "hold", "east": "nscbc", "south": "nscbc", "north": "nscbc"}  # the preset's


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("ns_fused")  # the emulated kernels compile once per module


@pytest.fixture
def fcp(workdir, monkeypatch):
    """The fake CuPy (tests/unit/compact_fake_gpu.py) and the solver / transpose stand-ins."""
    yield from fake_gpu(workdir, monkeypatch)


def _gpu(cp):
    return Backend("cupy", cp, _cupy=cp)


def _pointwise_launches(cp) -> int:
    return sum(len(k.launches) for k in cp.kernels if k.name.startswith("ns_"))


def _preset(sides, *, viscous=True, precision="fp64", mach=0.5, angle=30.0, nx=20, ny=17):
    return CompactPreset.model_validate({
        "engine": "compact", "description": "test", "initial": {"kind": "random"},
        "grid": {"nx": nx, "ny": ny, "x0": -1, "x1": 1, "y0": -1, "y1": 0.7},
        "physics": {"problem": "navier-stokes", "dt": 0.01, "reynolds": 100.0, "viscous": viscous,
                    "precision": precision, "mach": mach, "flow_angle": angle},
        "boundaries": sides})


# ---- the vortex-outflow case, a few RK4 steps -----------------------------------------------------------
@pytest.mark.parametrize("viscous", [True, False], ids=["viscous", "euler"])
@pytest.mark.parametrize("batching", ["stacked", "grouped"])
def test_vortex_outflow_steps_bit_for_bit_on_the_fake_gpu(fcp, batching, viscous):
    """compact-vortex-outflow (its physics and sides: held inflow, characteristic outflow on three sides,
    the filter) at 24², from a random state (the preset's vortex is a 10⁻⁶ disturbance: a random one
    sends waves in and out of every side), 3 RK4 steps: pointwise = fused on the fake GPU leaves exactly
    NumPy's state (pointwise = array), with 3 pointwise launches per evaluation (Euler: 2). Under
    grouped the kernels write (u, v, T) and F straight into the groups' buffers."""
    n = 24
    over = [f"grid.nx={n}", f"grid.ny={n}", f"physics.dt={0.76 / (n - 1):.3g}", 'initial.kind="random"',
            f"physics.viscous={'true' if viscous else 'false'}"]
    pre = load_preset("compact-vortex-outflow", over, backend=None)
    ref = create_engine(pre, NUMPY)
    cand = create_engine(pre, _gpu(fcp), variants={"kernel": "array", "solver": "thomas", "batching": batching,
                                            **Engine.equivalence_companions("batching", batching)})
    assert cand.selection["pointwise"] == "fused" and ref.selection["pointwise"] == "array"  # the defaults
    assert cand.ns.grouped == (batching == "grouped")
    np.testing.assert_array_equal(cand.U, ref.U)
    before = _pointwise_launches(fcp)
    steps = 3
    ref.step(steps)
    cand.step(steps)
    np.testing.assert_array_equal(cand.U, ref.U)
    assert not np.array_equal(ref.U, create_engine(pre, NUMPY).U)  # it moved
    per_rate = 3 if viscous else 2
    assert _pointwise_launches(fcp) - before == 4 * steps * per_rate
    extra = cand.timing_extra()
    assert extra["pointwise"] == "fused" and extra["pointwise_launches_per_rate"] == per_rate
    assert ref.timing_extra()["pointwise"] == "array" and "pointwise_launches_per_rate" not in ref.timing_extra()


@pytest.mark.parametrize("label", ["navier-stokes", "navier-stokes-square"])
def test_registry_equivalence_presets_on_the_fake_gpu(fcp, label):
    """What tests/equivalence/test_registry.py runs for pointwise = fused on a GPU, here on the fake one: the
    family's Navier–Stokes equivalence presets (held inflow + characteristic outflow in x with periodic y;
    bounded on all sides, square), the GPU's default selection (kernel = array instead of the generated
    stencil: bit for bit the same on the host, and not what is tested here), equivalence_steps steps from
    the registry test's random state: NumPy's state (pointwise = array) bit for bit."""
    preset = Engine.equivalence_presets()[label]
    choice = registry.axes("compact")["pointwise"].choices["fused"]
    ref = create_engine(preset, NUMPY, variants=choice.reference)
    ref.random_state(np.random.default_rng(1234))
    sel = dict(registry.default_selection("compact", "cupy"), kernel="array")
    cand = create_engine(preset, _gpu(fcp), variants=sel)
    cand.random_state(np.random.default_rng(1234))
    assert cand.selection["pointwise"] == "fused"
    ref.step(Engine.equivalence_steps)
    cand.step(Engine.equivalence_steps)
    np.testing.assert_array_equal(cand.U, ref.U)


# ---- one evaluation, every kind of side and corner ------------------------------------------------------
KINDS = ("nscbc", "extrapolate", "hold")
SIDE_SETS = [dict(zip(("west", "east", "south", "north"), c)) for c in itertools.product(KINDS, repeat=4)]


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
@pytest.mark.parametrize("viscous", [True, False], ids=["viscous", "euler"])
def test_fused_rate_equals_array_for_every_side_combination(fcp, precision, viscous):
    """dU/dt once, fused (fake GPU) vs array (NumPy), bit for bit, for all 81 combinations of nscbc /
    extrapolate / hold on the four sides (corner ownership: characteristic terms of both sides, then the
    extrapolated copies in side order, held sides last), periodic in x or y or both, a subsonic stream at
    30° (incoming acoustic, entropy and vorticity waves on the inflow sides) and a supersonic one."""
    periodic = [{}, {"west": "nscbc", "east": "extrapolate", "south": "periodic", "north": "periodic"},
                {"west": "periodic", "east": "periodic", "south": "hold", "north": "nscbc"}]
    cases = [(s, 0.5, 30.0) for s in SIDE_SETS + periodic] + [(VORTEX_SIDES, 1.1, 0.0), (VORTEX_SIDES, 1.1, 200.0)]
    be = _gpu(fcp)
    for sides, mach, angle in cases:
        pre = _preset(sides, viscous=viscous, precision=precision, mach=mach, angle=angle)
        ref = create_engine(pre, NUMPY)
        eq = ns.NavierStokes(pre, fcp, ref.dtype)
        eq.build(dict(ref.selection, pointwise="fused"), be)
        got, want = np.full_like(ref.U, np.nan), np.empty_like(ref.U)
        eq.rate(ref.U, got)
        ref.ns.rate(ref.U, want)
        np.testing.assert_array_equal(got, want, err_msg=f"{sides} Ma {mach} at {angle}°")
        np.testing.assert_array_equal(eq.p, ref.ns.p)
        np.testing.assert_array_equal(eq.tau, ref.ns.tau)


# ---- launches per evaluation: before (array) and after (fused) ------------------------------------------
_COUNT = {"on": False, "n": 0}


class _Counted(np.ndarray):
    """An array whose element-wise operations and item assignments are counted while ``_COUNT["on"]``: on
    CuPy each is (at least) one kernel launch. An assignment of a view onto itself (``a[i] -= b`` ends in
    ``a[i] = a[i]``) is not counted: a lower bound."""

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kw):
        if _COUNT["on"]:
            _COUNT["n"] += 1
        inputs = tuple(i.view(np.ndarray) if isinstance(i, _Counted) else i for i in inputs)
        if out is not None:
            kw["out"] = tuple(o.view(np.ndarray) if isinstance(o, _Counted) else o for o in out)
        res = getattr(ufunc, method)(*inputs, **kw)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return res.view(_Counted) if isinstance(res, np.ndarray) else res

    def __setitem__(self, key, value):
        dst = self[key]
        same = (isinstance(value, np.ndarray) and value.shape == dst.shape and value.strides == dst.strides
                and value.ctypes.data == dst.ctypes.data)
        if _COUNT["on"] and not same:
            _COUNT["n"] += 1
        super().__setitem__(key, value)


def _counting(xp):
    """``xp`` whose allocations are :class:`_Counted` and whose ``where`` counts (it is no ufunc)."""
    mod = types.ModuleType("counting_xp")
    mod.__dict__.update({k: v for k, v in vars(xp).items() if not k.startswith("__")})

    def alloc(fn):
        return lambda *a, **k: fn(*a, **k).view(_Counted)

    for name in ("zeros", "empty", "zeros_like", "empty_like", "full"):
        setattr(mod, name, alloc(getattr(xp, name)))

    def where(*a):
        if _COUNT["on"]:
            _COUNT["n"] += 1
        return np.where(*a).view(_Counted)

    mod.where = where
    return mod


@contextmanager
def _count_phase(name):
    _COUNT["on"] = name == "other"
    try:
        yield
    finally:
        _COUNT["on"] = False


def _launches_in_other(pre, xp, backend, selection, cp=None):
    """Array operations + pointwise kernel launches in the phase ``other`` of one evaluation."""
    ref = create_engine(pre, NUMPY)
    eq = ns.NavierStokes(pre, _counting(xp), ref.dtype, phase=_count_phase)
    eq.build(selection, backend)
    U = ref.U.copy().view(_Counted)
    out = np.empty_like(ref.U).view(_Counted)
    _COUNT["n"] = 0
    kernels = _pointwise_launches(cp) if cp is not None else 0
    eq.rate(U, out)
    want = np.empty_like(ref.U)
    ref.ns.rate(ref.U, want)
    np.testing.assert_array_equal(out, want)
    return _COUNT["n"] + (_pointwise_launches(cp) - kernels if cp is not None else 0)


# the array path's counts on the vortex preset's sides (CuPy: one launch each; documented in docs/compact.md):
# 53 periodic viscous (21 Euler), + 150 (110) per characteristic side, + 1 per held or extrapolated side
ARRAY_LAUNCHES = {True: 507, False: 355}


@pytest.mark.parametrize("viscous", [True, False], ids=["viscous", "euler"])
def test_pointwise_launches_per_evaluation_before_and_after(fcp, viscous):
    """The phase ``other`` of one evaluation on the vortex preset's sides (hold + 3 × nscbc): the array
    path performs ARRAY_LAUNCHES element-wise operations (each one launch on CuPy; the characteristic
    ones on single lines), the fused path 3 kernel launches and nothing else (Euler: 2)."""
    pre = _preset(VORTEX_SIDES, viscous=viscous)
    sel = registry.default_selection("compact", "numpy")
    before = _launches_in_other(pre, np, NUMPY, sel)
    after = _launches_in_other(pre, fcp, _gpu(fcp), dict(sel, pointwise="fused"), cp=fcp)
    assert before == ARRAY_LAUNCHES[viscous], before
    assert after == ns_pointwise.launches_per_rate(viscous) == (3 if viscous else 2)


# ---- live switching, registry, bench --------------------------------------------------------------------
def test_pointwise_switches_live_and_compiles_its_module(fcp):
    """set_variant(pointwise=...) rebuilds on the running engine: fused → array → fused steps leave NumPy's
    state bit for bit; kernel_specs names the pointwise module only while fused is selected."""
    pre = _preset(VORTEX_SIDES, mach=1.1, angle=0.0)
    ref = create_engine(pre, NUMPY)
    cand = create_engine(pre, _gpu(fcp), variants={"kernel": "array", "solver": "thomas"})
    fused_spec = ns_pointwise.spec(cand.dtype)
    assert fused_spec in cand.kernel_specs()
    assert fused_spec not in cand.kernel_specs(dict(cand.selection, pointwise="array"))
    for choice in ("fused", "array", "fused"):
        cand.set_variant(pointwise=choice)
        assert (cand.ns.fused is not None) == (choice == "fused")
        before = _pointwise_launches(fcp)
        ref.step(1)
        cand.step(1)
        np.testing.assert_array_equal(cand.U, ref.U)
        assert _pointwise_launches(fcp) - before == (12 if choice == "fused" else 0)


def test_numpy_reports_fused_unavailable_and_the_bench_lists_it():
    """On NumPy the fused choice is unavailable with the reason (a request is refused, build() says it
    too); the registry test walks both choices (fused on CuPy only, `gpu`-marked there); `nagare bench
    compact --only pointwise` has a row for it."""
    from nagare.engine.bench import run_bench

    choices = registry.axes("compact")["pointwise"].choices
    assert set(choices) == {"array", "fused"}
    assert registry.default_selection("compact", "numpy")["pointwise"] == "array"
    assert registry.default_selection("compact", "cupy")["pointwise"] == "fused"
    assert choices["fused"].backends == {"cupy"} and choices["array"].backends == {"numpy", "cupy"}
    assert all(c.reference == {"pointwise": "array"} for c in choices.values())
    pre = _preset(VORTEX_SIDES)
    reason = registry.unavailable_reason(choices["fused"], "numpy", {}, pre)
    assert reason and "CUDA" in reason
    with pytest.raises(VariantUnavailable, match="pointwise=fused"):
        create_engine(pre, NUMPY, variants={"pointwise": "fused"})
    eq = ns.NavierStokes(pre, np, np.float64)
    with pytest.raises(VariantUnavailable, match="pointwise=fused"):
        eq.build(dict(registry.default_selection("compact", "numpy"), pointwise="fused"), NUMPY)
    rows = run_bench("compact", NUMPY, cases=["ns-vortex-64-fp64"], only=["pointwise"], min_time=0.01)
    assert [(r.label, r.ok) for r in rows] == [("pointwise=fused", False)] and "CUDA" in rows[0].reason
    labels = [lbl for lbl, _ in Engine.bench_selections("cupy")]
    assert "pointwise=array" in labels  # the GPU's default is fused: its bench row compares array

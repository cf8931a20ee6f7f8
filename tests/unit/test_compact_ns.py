"""P4's test 4 machinery (engine/compact/navier_stokes.py, nscbc.py, filter.py, batched.py) on small
grids: the right-hand side of a uniform flow, the order of convergence on an exact Euler solution,
conservation on a periodic grid, the characteristic outflow against plain boundaries, the filter's
transfer function, the batching axis (bit for bit), and the preset through the engine."""
from __future__ import annotations

import math

import numpy as np
import pytest
from nagare.engine.backend import get_backend
from nagare.engine.compact import Engine, solvers, tridiag
from nagare.engine.compact import filter as cfilter
from nagare.engine.compact import navier_stokes as ns
from nagare.engine.compact.config import CompactPreset
from nagare.engine.compact.solvers.thomas import thomas
from nagare.engine.compact.variants import SOLVER_ATOL, SOLVER_RTOL
from nagare.engine.families import create_engine
from nagare.engine.presets import load_preset

NUMPY = get_backend("numpy")


def _preset(grid, physics=None, initial=None, boundaries=None):
    return CompactPreset.model_validate({
        "engine": "compact", "description": "test", "grid": grid,
        "physics": {"problem": "navier-stokes", **(physics or {})},
        "initial": initial or {"kind": "uniform"}, "boundaries": boundaries or {}})


BOUNDED = {"west": "hold", "east": "nscbc", "south": "nscbc", "north": "nscbc"}
ALL_KINDS = [
    {},  # periodic
    BOUNDED,
    {"west": "nscbc", "east": "nscbc", "south": "extrapolate", "north": "extrapolate"},
    {"west": "hold", "east": "hold", "south": "periodic", "north": "periodic"},
]


@pytest.mark.parametrize("mach,angle", [(1.1, 0.0), (0.3, 30.0)])
@pytest.mark.parametrize("sides", ALL_KINDS, ids=["periodic", "inflow-nscbc", "nscbc-extrapolate", "hold"])
def test_uniform_flow_has_zero_rate(mach, angle, sides):
    """A free stream is a solution: every flux is constant, every derivative (interior rows, closures,
    one-sided characteristic differences) vanishes to round-off, no wave is incoming."""
    pre = _preset({"nx": 20, "ny": 16, "x0": -1, "x1": 1, "y0": -1, "y1": 1},
                  {"mach": mach, "flow_angle": angle, "reynolds": 100.0}, boundaries=sides)
    e = create_engine(pre, NUMPY)
    k = np.empty_like(e.U)
    e.ns.rate(e.U, k)
    np.testing.assert_allclose(k, 0.0, rtol=0, atol=1e-13)
    # ... and it is not trivially zero: a perturbed state has a rate of order one
    e.U[3, 8, 10] *= 1.01
    e.ns.rate(e.U, k)
    assert np.abs(k).max() > 1e-2


def _isentropic_vortex_error(n: int) -> float:
    half = 8.0  # exp((1 - 64)/2) ≈ 2e-14: the Gaussian vortex is periodic to round-off on [-8, 8]²
    pre = _preset({"nx": n, "ny": n, "x0": -half, "x1": half, "y0": -half, "y1": half},
                  {"dt": 0.01, "viscous": False, "filter": False, "mach": 0.5, "flow_angle": 30.0},
                  {"kind": "isentropic-vortex", "amplitude": 0.3, "core": 1.0})
    e = create_engine(pre, NUMPY)
    e.step(8)
    g = e.ns.gas
    wrap = lambda a, shift: (a - shift + half) % (2 * half) - half  # noqa: E731
    rho, u, v, p = ns.initial_primitives(pre, wrap(e._x_host, g.u_inf * e.time), wrap(e._y_host, g.v_inf * e.time))
    exact = ns.conservative(np, rho, u, v, p, g.gamma, np.empty((4, n, n)))
    return float(np.abs(e.U - exact).max())


def test_isentropic_vortex_converges_at_sixth_order():
    """The exact Euler vortex carried by a free stream at 30° (both directions, every flux term):
    the error at t = 0.08 falls with the compact scheme's order over 32², 64², 128² (Δt = 0.01 fixed,
    RK4's error far below). Measured: 2.4e-4, 2.9e-6, 4.0e-8 → orders 6.36, 6.19."""
    errs = [_isentropic_vortex_error(n) for n in (32, 64, 128)]
    orders = [math.log2(errs[i] / errs[i + 1]) for i in range(2)]
    assert min(orders) > 5.7, (errs, orders)
    assert errs[-1] < 1e-7, errs


@pytest.mark.parametrize("filt", [False, True], ids=["raw", "filtered"])
def test_periodic_domain_conserves_mass_momentum_energy(filt):
    """Conservative form on a periodic grid: Σρ, Σρu, Σρv, ΣρE constant to round-off (viscous terms and the
    filter included: the filter's coefficients sum to 1 + 2α_f, so it conserves Σ too)."""
    pre = _preset({"nx": 24, "ny": 20}, {"dt": 0.005, "reynolds": 50.0, "filter": filt, "mach": 0.4,
                                          "flow_angle": 20.0}, {"kind": "random"})
    e = create_engine(pre, NUMPY)
    before = e.U.sum(axis=(1, 2))
    start = e.U.copy()
    e.step(10)
    after = e.U.sum(axis=(1, 2))
    np.testing.assert_allclose(after, before, rtol=1e-13, atol=1e-13 * np.abs(before).max())
    assert np.abs(e.U - start).max() > 1e-4  # the state did change


def _pulse_reflection(east: str, filt: bool) -> float:
    """A right-running acoustic pulse (δp = 10⁻³, width 0.06) in a Ma 0.2 stream leaves through the east
    boundary of [0, 1] (64 points, a periodic strip 8 points high: 1D); after it has left (t = 0.66),
    the largest |p - p∞| left in the domain over the pulse's amplitude."""
    nx = 64
    h = 1.0 / (nx - 1)
    dt = 0.5 * h / 1.2
    pre = _preset({"nx": nx, "ny": 8, "x0": 0.0, "x1": 1.0, "y0": 0.0, "y1": 8 * h},
                  {"dt": dt, "mach": 0.2, "filter": filt},
                  {"kind": "acoustic-pulse", "amplitude": 1e-3, "core": 0.06, "center": [0.6, 0.0]},
                  {"west": "hold", "east": east, "south": "periodic", "north": "periodic"})
    e = create_engine(pre, NUMPY)
    e.step(100)
    return e.diagnostics()["max_dp"] / 1e-3


def test_characteristic_outflow_lets_an_acoustic_pulse_out():
    """Poinsot & Lele's outflow (σ = 0.25) reflects ~1 % (the pressure relaxation's low-frequency
    reflection, ≈ K/2ω); holding the boundary values reflects the pulse almost entirely and zeroth-order
    extrapolation a fifth — both as grid-scale (odd-even) waves, so the filter, which would hide them, is
    off here. Measured: nscbc 0.010, hold 0.92, extrapolate 0.20 (nscbc with the filter 0.010)."""
    got = {k: _pulse_reflection(k, False) for k in ("nscbc", "hold", "extrapolate")}
    assert got["nscbc"] < 0.02, got
    assert got["hold"] > 0.5, got
    assert got["extrapolate"] > 0.1, got
    assert _pulse_reflection("nscbc", True) < 0.02


@pytest.mark.parametrize("order", [2, 4, 6, 8, 10])
def test_filter_transfer_function(order):
    """Periodic filter of cos(kx) = T(kh)·cos(kx) to round-off; T(0) = 1, T(π) = 0."""
    alpha = 0.45
    assert cfilter.transfer(0.0, order, alpha) == pytest.approx(1.0, abs=1e-15)
    assert cfilter.transfer(math.pi, order, alpha) == pytest.approx(0.0, abs=1e-13)
    if order != cfilter.ORDER:
        return
    n = 48
    x = np.arange(n) / n
    fac = tridiag.factorise(*cfilter.bands(n, alpha, "periodic"), True)
    for m in (1, 6, 12, 20, 24):
        f = np.cos(2 * math.pi * m * x)
        got = solvers.solve("thomas", fac, cfilter.rhs(np, f[None, :], alpha, "periodic"))[0]
        np.testing.assert_allclose(got, cfilter.transfer(2 * math.pi * m / n, order, alpha) * f, rtol=0, atol=1e-13)


def test_filter_rows_are_exact_on_polynomials_to_their_order():
    """On a bounded line the boundary row is the identity and row i (from either end) the centred filter
    of order 2i (interior: 10): row i leaves a polynomial of degree 2i-1 unchanged (A p = r(p) in that
    row) and not one of degree 2i."""
    n, alpha, alpha_b = 24, 0.45, 0.47
    x = np.linspace(-1, 1, n)
    lower, diag, upper = cfilter.bands(n, alpha, "closures", alpha_b)

    def residual(deg):
        p = x ** deg
        ap = diag * p
        ap[1:] += lower[1:] * p[:-1]
        ap[:-1] += upper[:-1] * p[1:]
        return np.abs(ap - cfilter.rhs(np, p, alpha, "closures", alpha_b=alpha_b))

    for i in range(n):
        order = 2 * min(i, n - 1 - i, cfilter.HALF)
        if order == 0:
            np.testing.assert_allclose(residual(12)[i], 0.0, atol=0)  # identity row
            continue
        np.testing.assert_allclose(residual(order - 1)[i], 0.0, atol=1e-14, err_msg=f"row {i}")
        # the first polynomial the row misses: x^order itself, or x^order shifted so that odd rows' symmetry
        # does not hide it
        miss = np.abs((residual(order) + residual(order + 1))[i])
        assert miss > 1e-10, (i, order, miss)


def test_batching_is_bit_for_bit_and_batches():
    """stacked (4 solves per evaluation: (u, v, T) in x and y, F in x, G in y) and per-variable (14)
    give identical numbers on NumPy."""
    pre = _preset({"nx": 24, "ny": 20, "x0": -1, "x1": 1, "y0": -1, "y1": 1}, {"dt": 0.01, "reynolds": 200.0},
                  {"kind": "random"}, BOUNDED)
    a = create_engine(pre, NUMPY, variants={"batching": "stacked"})
    b = create_engine(pre, NUMPY, variants={"batching": "per-variable"})
    assert a.ns.launches_per_rate() == 4 and b.ns.launches_per_rate() == 14
    for solver in ("thomas", "pcr"):
        a.set_variant(solver=solver)
        b.set_variant(solver=solver)
        a.step(3)
        b.step(3)
        np.testing.assert_array_equal(a.U, b.U)
    b.set_variant(batching="stacked")  # live switch keeps the state
    a.step(1)
    b.step(1)
    np.testing.assert_array_equal(a.U, b.U)


GROUPABLE = {  # square grids whose x and y share one matrix
    "bounded": ({"nx": 20, "ny": 20, "x0": -1, "x1": 1, "y0": -1, "y1": 1}, BOUNDED),
    # h_x ≠ h_y: one solve, but a right-hand-side sweep per half
    "periodic-hx-ne-hy": ({"nx": 16, "ny": 16, "x0": -1, "x1": 1, "y0": -1.5, "y1": 1.5}, {}),
}
GROUPED = {"batching": "grouped", "y-direction": "transpose"}


@pytest.mark.parametrize("viscous", [True, False], ids=["viscous", "euler"])
@pytest.mark.parametrize("layout", list(GROUPABLE))
def test_grouped_is_bit_for_bit_with_stacked_and_launches_two_solves(layout, viscous):
    """batching = grouped (P4's 8 + 6: the x-lines and the transposed y-lines of a pass in one batch)
    performs stacked's element-wise operations on the same lines: identical numbers on NumPy for the
    direct solvers and for the stencil framework's host right-hand side; 2 solves per evaluation
    (Euler: 1) against stacked's 4 (2) and per-variable's 14 (8); live switches keep the state.
    CGS / Bi-CGSTAB agree to the family's solver tolerance only: their inner products are NumPy
    reductions, whose summation order depends on whether a line is contiguous (grouped: transposed
    y-lines) or a strided view (stacked on NumPy), and converged iterations taken along different
    round-off paths differ by up to κ·tol — the y-lines' layout, not the batching (the same lines in a
    larger batch give the same bits: test_iterative_lines_do_not_depend_on_their_batch)."""
    grid, sides = GROUPABLE[layout]
    pre = _preset(grid, {"dt": 0.01, "reynolds": 200.0, "viscous": viscous}, {"kind": "random"}, sides)
    c = create_engine(pre, NUMPY, variants={"batching": "per-variable"})
    for solver in ("cr", "pcr", "cr-pcr", "cgs", "bicgstab"):
        a = create_engine(pre, NUMPY, variants={"batching": "stacked", "y-direction": "transpose", "solver": solver})
        b = create_engine(pre, NUMPY, variants=dict(GROUPED, solver=solver))
        a.step(2)
        b.step(2)
        if solver in ("cgs", "bicgstab"):
            # converged to 1e-13 by different paths: apart by up to κ·tol (~1e-11), the family's solver
            # tolerance (variants.SOLVER_RTOL/ATOL) is what they are held to against each other
            np.testing.assert_allclose(b.U, a.U, rtol=SOLVER_RTOL, atol=SOLVER_ATOL, err_msg=solver)
        else:
            np.testing.assert_array_equal(a.U, b.U, err_msg=solver)
    a = create_engine(pre, NUMPY, variants={"batching": "stacked", "y-direction": "transpose"})
    b = create_engine(pre, NUMPY, variants=GROUPED)
    assert (a.ns.launches_per_rate(), b.ns.launches_per_rate(), c.ns.launches_per_rate()) == (
        (4, 2, 14) if viscous else (2, 1, 8))
    sweeps = 2 if layout == "periodic-hx-ne-hy" else 1
    assert b.ns.rhs_sweeps_per_rate() == sweeps * (2 if viscous else 1)
    ex = b.timing_extra()
    assert ex["batching"] == "grouped" and ex["solve_launches_per_rate"] == b.ns.launches_per_rate()
    assert ex["solve_launches_per_step"] == 4 * ex["solve_launches_per_rate"] + 2  # filter: x, then y
    a.step(2)
    b.step(2)
    np.testing.assert_array_equal(a.U, b.U, err_msg="thomas")
    for e in (a, b):
        e.set_variant(kernel="stencil-host")
    a.step(2)
    b.step(2)
    np.testing.assert_array_equal(a.U, b.U, err_msg="stencil-host")
    b.set_variant(batching="stacked")  # live switches keep the state (and the group's views go)
    b.set_variant(batching="grouped")
    a.step(1)
    b.step(1)
    np.testing.assert_array_equal(a.U, b.U)
    calls = b.ns.flux.solver.calls + (b.ns.grad.solver.calls if viscous else 0)
    assert calls == b.ns.launches_per_rate() * 4  # one step since the last rebuild: 4 evaluations


def test_the_registry_test_runs_grouped_somewhere_and_the_bench_measures_it():
    """tests/equivalence/test_registry.py walks the equivalence presets: at least one must let grouped
    run (else its check would skip everywhere), with the companion y-direction it names; `nagare bench
    compact` has Navier–Stokes cases where the GPU's default selection lets the grouped cell run."""
    from nagare.engine import registry
    from nagare.engine.compact.batched import grouping_reason

    comp = Engine.equivalence_companions("batching", "grouped")
    assert comp == {"y-direction": "transpose"}
    runs = [k for k, p in Engine.equivalence_presets().items() if grouping_reason(p, comp) is None]
    assert runs == ["navier-stokes-square"]
    gpu_default = registry.default_selection("compact", "cupy")
    ns_cases = [(lbl, ov) for lbl, ov in Engine.bench_cases("cupy") if ov[0] == "@compact-vortex-outflow"]
    assert [lbl for lbl, _ in ns_cases] == ["ns-vortex-256-fp64", "ns-vortex-512-fp64"]
    for _, ov in ns_cases:
        pre = load_preset(ov[0][1:], ov[1:], backend=None)
        assert grouping_reason(pre, dict(gpu_default, batching="grouped", **comp)) is None


def test_gpu_bench_times_both_boundaries_at_4096():
    """The GPU bench's largest derivative case runs the preset's periodic lines and P4's closure rows
    (its own matrix): the 80 % roofline figure names which one it is."""
    from nagare.engine.bench import case_preset

    cases = dict(Engine.bench_cases("cupy"))
    assert "4096x4096-x-fp64-closures" not in dict(Engine.bench_cases("numpy"))
    kinds = {lbl: case_preset(Engine.bench_spec(), cases[lbl]).boundaries.kind
             for lbl in ("2048x2048-x-fp64", "4096x4096-x-fp64", "4096x4096-x-fp64-closures")}
    assert kinds == {"2048x2048-x-fp64": "periodic", "4096x4096-x-fp64": "periodic",
                     "4096x4096-x-fp64-closures": "closures"}
    assert case_preset(Engine.bench_spec(), cases["4096x4096-x-fp64-closures"]).shape == (4096, 4096)


@pytest.mark.parametrize("kind", ["cgs", "bicgstab"])
def test_iterative_lines_do_not_depend_on_their_batch(kind):
    """A contiguous line gets the same bits alone, in a stack or beside other lines in a larger batch."""
    from nagare.engine.compact import schemes
    from nagare.engine.compact.solvers import iterative

    fac = tridiag.factorise(*schemes.bands(20, "closures"), False)
    d = np.random.default_rng(1).random((6, 20))
    whole = iterative.solve(kind, fac, d)
    np.testing.assert_array_equal(iterative.solve(kind, fac, d[:2]), whole[:2])
    np.testing.assert_array_equal(iterative.solve(kind, fac, d[4:]), whole[4:])


@pytest.mark.parametrize("grid,sides,fragment", [
    ({"nx": 24, "ny": 20}, BOUNDED, "nx = 24 ≠ ny = 20"),
    ({"nx": 20, "ny": 20}, {"west": "hold", "east": "nscbc", "south": "periodic", "north": "periodic"},
     "x is closures, y is periodic"),
])
def test_grouped_is_unavailable_where_x_and_y_differ(grid, sides, fragment):
    """Different matrices (sizes, closures), strided y-lines or a scalar problem: one line says why,
    through the registry (a requested choice is refused, a preset default falls back, the engine keeps
    running what it ran)."""
    from nagare.engine import registry
    from nagare.engine.errors import VariantUnavailable

    grid = dict(grid, x0=-1, x1=1, y0=-1, y1=1)
    pre = _preset(grid, {"dt": 0.01}, {"kind": "random"}, sides)
    choice = registry.axes("compact")["batching"].choices["grouped"]
    reason = registry.unavailable_reason(choice, "numpy", dict(GROUPED, solver="thomas"), pre)
    assert reason and fragment in reason and "\n" not in reason
    with pytest.raises(VariantUnavailable, match=fragment):
        create_engine(pre, NUMPY, variants=GROUPED)
    e = create_engine(pre, NUMPY, variants={"y-direction": "transpose"})
    with pytest.raises(VariantUnavailable, match=fragment):
        e.set_variant(batching="grouped")
    assert e.selection["batching"] == "stacked"
    e.step(1)
    square = _preset({"nx": 20, "ny": 20, "x0": -1, "x1": 1, "y0": -1, "y1": 1}, {"dt": 0.01}, {"kind": "random"},
                     BOUNDED)
    assert "y-direction = transpose" in registry.unavailable_reason(choice, "numpy", {"y-direction": "strided"}, square)
    e = create_engine(square, NUMPY, variants=GROUPED)
    with pytest.raises(VariantUnavailable, match="batching = grouped"):
        e.set_variant(**{"y-direction": "strided"})  # would leave grouped without its transposed y-lines
    scalar = load_preset("compact-derivative", [], backend="numpy")
    assert "Navier–Stokes" in registry.unavailable_reason(choice, "numpy", GROUPED, scalar)
    held = load_preset("compact-vortex-outflow", ["grid.nx=32", "grid.ny=32", "physics.dt=0.02"], backend="numpy")
    held.variants.update(GROUPED)  # a preset default that can run is kept
    assert create_engine(held, NUMPY).selection["batching"] == "grouped"
    # cuSPARSE's gtsv2 transposes the y-lines whatever y-direction says: grouped needs nothing more
    assert registry.unavailable_reason(choice, "numpy", {"y-direction": "strided", "solver": "gtsv2"}, square) is None


def test_preset_runs_with_fields_diagnostics_and_phases():
    pre = load_preset("compact-vortex-outflow", ["grid.nx=48", "grid.ny=48", "physics.dt=0.016"], backend="numpy")
    e = create_engine(pre, NUMPY)
    d0 = e.diagnostics()
    assert d0["max_vorticity"] == pytest.approx(2 * 0.0005 / 0.15 ** 2, rel=0.05)  # 2|Γ|/r_c² at the centre
    assert d0["reflected_p"] < 1e-3
    e.step(3)
    d = e.diagnostics()
    for k in ("mass", "energy", "max_vorticity", "min_density", "min_pressure", "max_mach", "max_dp", "reflected_p"):
        assert math.isfinite(d[k]), k
    assert set(e.field_names()) == {"density", "vorticity", "pressure", "u", "v", "mach"}
    # the velocity in c∞: the free stream's far from the vortex, the local Mach number's maximum the diagnostic's
    g = e.ns.gas
    u, v, mach = (e.field(k).data for k in ("u", "v", "mach"))
    np.testing.assert_allclose([u[0, 0], v[0, 0]], [0.0, 0.0], atol=1e-3 * g.u_inf + 1e-6)  # far off: the stream
    np.testing.assert_allclose(mach.max(), d["max_mach"], rtol=1e-12)
    rho, uu, vv, _p = e._primitives()
    np.testing.assert_allclose(u + g.u_inf, uu, rtol=1e-12)
    assert float(np.abs(v).max()) > 1e-4  # the vortex's swirl, not only the stream
    dens = e.field("density")
    assert dens.data.shape == (48, 48) and float(np.abs(dens.data).max()) > 1e-6
    phases = e.timings.phase_ms_per_step
    for ph in ("rhs", "solve", "other", "update", "filter"):
        assert ph in phases, phases
    assert e.timings.steps == 3  # the diagnostics' derivatives are not counted as steps


class _LineAddressedSolver:
    """A stand-in for a solver's device side: solves the systems a launch names by (nsys, sys_stride,
    elem_stride) on the flat (C-contiguous) array, as the CUDA kernels address them."""

    def __init__(self, fac):
        self.fac, self.launches = fac, 0

    def solve(self, d, x, nsys, sys_stride, elem_stride):
        assert d.flags.c_contiguous and x.flags.c_contiguous  # a kernel sees only the pointer
        idx = np.arange(nsys)[:, None] * sys_stride + np.arange(self.fac.n)[None, :] * elem_stride
        x.reshape(-1)[idx] = thomas(self.fac, d.reshape(-1)[idx])
        self.launches += 1


@pytest.mark.parametrize("batching", ["stacked", "per-variable"])
@pytest.mark.parametrize("ydir", ["strided", "transpose"])
@pytest.mark.parametrize("axis", ["x", "y"])
def test_device_line_addressing_of_stacks(monkeypatch, axis, ydir, batching):
    """The GPU path of lines.LineSolver (system strides of stacked x-lines, per-variable strided
    y-lines, the (nv·ny, nx) transpose whose rows are nv consecutive y-systems) with the kernels replaced
    by a solver that addresses lines exactly as they do: equal to the NumPy solve."""
    from nagare.engine.compact import gpu, lines, schemes

    monkeypatch.setattr(gpu, "transpose", lambda src, dst: dst.__setitem__(Ellipsis, src.T))
    nv, ny, nx = 3, 10, 13
    n = nx if axis == "x" else ny
    fac = tridiag.factorise(*schemes.bands(n, "closures"), False)
    sel = {"solver": "thomas", "y-direction": ydir, "batching": batching}
    s = lines.LineSolver(fac, shape=(ny, nx), axis=axis, dtype=np.float64, selection=sel, backend=NUMPY)
    s.gpu, s.device = True, _LineAddressedSolver(fac)
    d = np.random.default_rng(3).random((nv, ny, nx))
    got = np.zeros_like(d)
    s(d, got)
    want = np.zeros_like(d)
    s.gpu = False
    s(d, want)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    strided_y = axis == "y" and ydir == "strided"
    assert s.device.launches == (nv if (batching == "per-variable" or strided_y) else 1)


class _CountedDevice(_LineAddressedSolver):
    """lines.device_solver's signature and the device side's solve(), every launch counted in one shared list."""

    log: list = []

    def __init__(self, kind, fac, sched, dtype, stream=None):
        super().__init__(fac)

    def solve(self, d, x, nsys, sys_stride, elem_stride):
        super().solve(d, x, nsys, sys_stride, elem_stride)
        self.log.append((self.fac.n, nsys, sys_stride, elem_stride))


@pytest.mark.parametrize("batching,ydir", [("stacked", "transpose"), ("stacked", "strided"),
                                           ("per-variable", "transpose"), ("grouped", "transpose")])
def test_gpu_path_launches_what_timing_extra_reports(monkeypatch, batching, ydir):
    """The Navier–Stokes evaluation and filter on the GPU path (lines.LineSolver/GroupedDerivative with
    is_gpu, kernels replaced by a solver that addresses lines as they do and counts its launches, the
    transpose kernel by NumPy's): the launches counted per evaluation and per step are the ones
    timing_extra reports — grouped 2 solves per evaluation (one of 2·3·n systems, one of 2·4·n, all of
    stride n), stacked 4 (9 with strided y-lines: one launch per variable), per-variable 14 — and the
    numbers are NumPy's (stacked), bit for bit."""
    import types

    from nagare.engine.compact import filter as filt
    from nagare.engine.compact import gpu, lines, ns_engine

    monkeypatch.setattr(lines, "device_solver", _CountedDevice)
    monkeypatch.setattr(gpu, "transpose", lambda src, dst: dst.__setitem__(Ellipsis, src.T))
    # the filter's explicit side stays NumPy's here (its kernel: tests/unit/test_compact_closure.py)
    monkeypatch.setattr(filt, "DeviceFilterRhs", lambda *a, **k: None)
    n = 16
    pre = _preset({"nx": n, "ny": n, "x0": -1, "x1": 1, "y0": -1, "y1": 1}, {"dt": 0.01, "reynolds": 200.0},
                  {"kind": "random"}, BOUNDED)
    ref = create_engine(pre, NUMPY)
    sel = dict(ref.selection, batching=batching, **{"y-direction": ydir})
    fake = types.SimpleNamespace(xp=np, is_gpu=True, name="cupy")
    eq = ns.NavierStokes(pre, np, np.float64)
    eq.build(sel, fake)
    _CountedDevice.log = []
    out, want = np.empty_like(ref.U), np.empty_like(ref.U)
    eq.rate(ref.U, out)
    ref.ns.rate(ref.U, want)
    np.testing.assert_array_equal(out, want)
    per_rate = {"stacked": 9 if ydir == "strided" else 4, "per-variable": 14, "grouped": 2}[batching]
    assert len(_CountedDevice.log) == eq.launches_per_rate() == per_rate
    if batching == "grouped":
        assert sorted(_CountedDevice.log) == [(n, 2 * 3 * n, n, 1), (n, 2 * 4 * n, n, 1)]
    _CountedDevice.log = []
    eq.filter(ref.U.copy())
    assert len(_CountedDevice.log) == eq.filter_launches() == (8 if batching == "per-variable" else
                                                              5 if ydir == "strided" else 2)
    # what the engine reports: the same model on the engine's own NavierStokes
    eng = types.SimpleNamespace(ns=eq, selection=sel, systems_per_step=0)
    extra = ns_engine.CompactNavierStokes.timing_extra(eng)
    assert extra["solve_launches_per_rate"] == per_rate
    assert extra["solve_launches_per_step"] == 4 * per_rate + eq.filter_launches()


def test_audit_tiny_core_is_refused_and_a_fast_free_stream_is_not_a_divergence():
    """A vortex narrower than half a grid spacing is a one-line preset error (it was a traceback);
    the Mach bound follows physics.mach (a Mach-10 free stream tripped a fixed bound of 10)."""
    from nagare.engine.backend import get_backend
    from nagare.engine.errors import PresetError
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    with pytest.raises(PresetError, match="below half the grid spacing") as exc:
        load_preset("compact-vortex-outflow", ["initial.core=1e-200"], backend="numpy")
    assert "\n" not in str(exc.value)
    p = load_preset("compact-vortex-outflow", ["grid.nx=32", "grid.ny=32", "physics.mach=10.0", "physics.dt=0.001"],
                    backend="numpy")
    e = create_engine(p, get_backend("numpy"))
    lo, hi = e.sanity_bounds()["max_mach"]
    assert hi >= 3 * 10.0


def test_audit_sanity_bounds_follow_the_preset_not_the_loaded_state():
    """A checkpoint whose φ was blown up 10⁶× is not physical for linear advection: the bound is 2 ×
    the preset's pulse height, kept through a restore (it was 100 × the loaded state's); Navier–Stokes
    bounds the pressure disturbance by 50 × the preset's initial one."""
    from nagare.engine.backend import get_backend
    from nagare.engine.contract import Diverged
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    be = get_backend("numpy")
    e = create_engine(load_preset("compact-advection1d", backend="numpy"), be)
    e.step(5)
    ck = e.checkpoint()
    ck["arrays"]["phi"] = np.asarray(ck["arrays"]["phi"]) * 1e6
    other = create_engine(load_preset("compact-advection1d", backend="numpy"), be)
    other.restore(ck)
    with pytest.raises(Diverged):
        other.diagnostics()
    ns = create_engine(load_preset("compact-vortex-outflow", ["grid.nx=32", "grid.ny=32"], backend="numpy"), be)
    lo, hi = ns.sanity_bounds()["max_dp"]
    assert 0 < hi < 1e-3  # 50 × the vortex's own dip (≈ 5e-6)


def test_advection_logs_its_rms_error_for_the_timing_log_and_the_hud():
    from nagare.engine.backend import get_backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    e = create_engine(load_preset("compact-advection1d", backend="numpy"), get_backend("numpy"))
    e.step(50)
    q = e.logged_quantities()
    assert set(q) == {"l2_error"}
    np.testing.assert_allclose(q["l2_error"], float(e.diagnostics()["l2_error"]), rtol=1e-12)
    ns = create_engine(load_preset("compact-vortex-outflow", ["grid.nx=32", "grid.ny=32"], backend="numpy"),
                       get_backend("numpy"))
    assert ns.logged_quantities() == {}

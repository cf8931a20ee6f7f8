"""P4's compact schemes and tridiagonal solvers (engine/compact/schemes.py, tridiag.py, solvers/) against closed
forms: the modified wavenumber, convergence orders, row-by-row exactness on polynomials, the
dissipative scheme's upwind sign, and every solver against a dense solve (np.linalg.solve)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from nagare.engine.compact import reference, schemes, solvers, tridiag
from nagare.engine.compact.solvers import reduction, thomas

DIRECT = ("thomas", "cr", "pcr", "cr-pcr", "scan", "window", "stream")  # the direct solvers NumPy runs


def _periodic_grid(n):
    return np.arange(n) / n, 1.0 / n


@pytest.mark.parametrize("kh", [0.1, 0.5, math.pi / 4, math.pi / 2, 2.0, 2.8])
def test_modified_wavenumber_reproduced_to_round_off(kh):
    """The derivative of sin(kx) on a periodic grid is (k'h/h) cos(kx) with Lele's
    k'h = (a sin kh + b/2 sin 2kh)/(1 + 2α cos kh) — to round-off, for any solver."""
    n = 64
    m = kh * n / (2 * math.pi)
    # choose the grid so that kh is an exact mode: n' = 2π m'/kh with integer m'
    m_int = max(1, round(m))
    n = int(round(2 * math.pi * m_int / kh)) if abs(m - m_int) > 1e-12 else n
    kh = 2 * math.pi * m_int / n
    x, h = _periodic_grid(n)
    f = np.sin(2 * math.pi * m_int * x)
    want_kp = (schemes.A6 * math.sin(kh) + schemes.B6 / 2 * math.sin(2 * kh)) / (1 + 2 * schemes.ALPHA * math.cos(kh))
    assert schemes.modified_wavenumber(kh) == pytest.approx(want_kp, rel=1e-14)
    want = want_kp / h * np.cos(2 * math.pi * m_int * x)
    fac = tridiag.factorise(*schemes.bands(n, "periodic"), True)
    r = schemes.rhs(np, f, h, "periodic")
    for kind in DIRECT:
        got = solvers.solve(kind, fac, r[None, :])[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 / h, err_msg=kind)


def test_modified_wavenumber_at_half_pi_is_14_9():
    assert schemes.modified_wavenumber(math.pi / 2) == pytest.approx(14 / 9, rel=1e-15)


def _orders(errs):
    e = np.asarray(errs)
    return np.log2(e[:-1] / e[1:])


@pytest.mark.parametrize("delta,order", [(0.0, 5.8), (schemes.upwind_delta(+1), 4.8), (schemes.upwind_delta(-1), 4.8)])
def test_convergence_periodic(delta, order):
    """Smooth periodic f = exp(sin 2πx) over 4 resolutions: ≥ 5.8 for the 6th-order scheme, ≥ 4.8
    for the 5th-order dissipative scheme (measured 6.02 and 5.02 at the finest pair)."""
    errs = []
    for n in (16, 32, 64, 128):
        x, h = _periodic_grid(n)
        f = np.exp(np.sin(2 * np.pi * x))
        df = 2 * np.pi * np.cos(2 * np.pi * x) * f
        errs.append(np.max(np.abs(schemes.derivative_dense(f, h, "periodic", delta) - df)))
    orders = _orders(errs)
    assert orders[-1] >= order, orders
    assert np.all(orders >= order - 0.3), orders


def test_convergence_with_closures():
    """With P4's closures the boundary rows are 4th order (α = 3 one-sided row, Padé row): the max
    error converges at 4 (≥ 3.9 measured 4.03), the RMS error a little faster (boundary-limited)."""
    errs, rms = [], []
    for n in (32, 64, 128, 256):
        x = np.linspace(0, 1, n)
        h = x[1]
        f = np.sin(3 * x + 0.3)
        e = schemes.derivative_dense(f, h, "closures") - 3 * np.cos(3 * x + 0.3)
        errs.append(np.max(np.abs(e)))
        rms.append(np.sqrt(np.mean(e * e)))
    assert np.all(_orders(errs) >= 3.9), _orders(errs)
    assert np.all(_orders(rms) >= 4.3), _orders(rms)


@pytest.mark.parametrize("deg", range(0, 9))
def test_rows_exact_on_polynomials(deg):
    """Row by row: A f' - r(f)/h = 0 for f = x^deg exactly while deg ≤ the row's order (interior 6,
    boundary rows 4), and not beyond (each row's order is exactly that)."""
    n = 16
    x = np.linspace(-0.3, 1.1, n)
    h = x[1] - x[0]
    f, df = x ** deg, deg * x ** max(deg - 1, 0) if deg else 0 * x
    for boundary in schemes.BOUNDARIES[1:]:  # closures (polynomials are not periodic)
        res = schemes.dense(n, boundary) @ df - schemes.rhs(np, f, h, boundary)
        scale = np.max(np.abs(df)) + 1
        interior, edge = np.abs(res[2:-2]) / scale, np.abs(np.r_[res[:2], res[-2:]]) / scale
        if deg <= 6:
            np.testing.assert_allclose(interior, 0, atol=1e-11)
        else:
            assert interior.max() > 1e-8
        if deg <= 4:
            np.testing.assert_allclose(edge, 0, atol=1e-11)
        else:
            assert edge.max() > 1e-8


@pytest.mark.parametrize("deg", range(0, 7))
def test_dissipative_rows_exact_on_polynomials(deg):
    """The dissipative interior rows (δ = ±1/4, d = 4/9, e = 1/9) are exact to degree 5 (5th order)
    and not to degree 6 (the dissipation is the leading error)."""
    n = 16
    x = np.linspace(0.2, 1.3, n)
    h = x[1] - x[0]
    f, df = x ** deg, deg * x ** max(deg - 1, 0) if deg else 0 * x
    for delta in (-0.25, 0.25):
        res = (schemes.dense(n, "closures", delta) @ df - schemes.rhs(np, f, h, "closures", delta))[2:-2]
        res = np.abs(res) / (np.max(np.abs(df)) + 1)
        if deg <= 5:
            np.testing.assert_allclose(res, 0, atol=1e-11)
        else:
            assert res.max() > 1e-8


def test_dissipative_sign_is_upwind():
    """φ_t = -c D φ decays every mode (Im k' ≤ 0 for c > 0) with δ = upwind_delta(+1), and the
    opposite δ amplifies: the sign choice is not arbitrary."""
    kh = np.linspace(0.01, np.pi, 200)
    good = schemes.modified_wavenumber(kh, schemes.upwind_delta(+1))
    bad = schemes.modified_wavenumber(kh, -schemes.upwind_delta(+1))
    assert np.all(good.imag <= 1e-15) and good.imag.min() < -1.0
    assert bad.imag.max() > 1.0
    # well-resolved waves: k' → k at 5th order (|k'h - kh| = O(kh⁶))
    small = kh < 0.3
    np.testing.assert_allclose(good[small], kh[small], rtol=0, atol=1e-5)


@pytest.mark.parametrize("n", [8, 9, 31, 32, 33, 100, 257])
@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("delta", [0.0, -0.25, 0.25])
def test_every_solver_matches_a_dense_solve(n, boundary, delta):
    rng = np.random.default_rng(n)
    a = schemes.dense(n, boundary, delta)
    fac = tridiag.factorise(*schemes.bands(n, boundary, delta), boundary == "periodic")
    d = rng.standard_normal((4, n))
    want = np.linalg.solve(a, d.T).T
    for kind in DIRECT:
        got = solvers.solve(kind, fac, d)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.max(np.abs(want)), err_msg=kind)
        got32 = solvers.solve(kind, fac, d.astype(np.float32), dtype=np.float32)
        assert got32.dtype == np.float32
        np.testing.assert_allclose(got32, want, rtol=0, atol=5e-5 * np.max(np.abs(want)), err_msg=f"{kind} fp32")
    # one system: the scalar Thomas path (1D problems) gives the vectorised path's bits
    one = thomas.thomas(fac, d[:1])
    np.testing.assert_array_equal(one, thomas.thomas(fac, np.vstack([d[:1], d[:1]]))[:1])


def test_hybrid_schedule_shapes():
    fac = tridiag.factorise(*schemes.bands(512, "periodic"), True)
    assert (reduction.schedule(fac, "cr").lc, reduction.schedule(fac, "cr").p) == (9, 0)
    assert (reduction.schedule(fac, "pcr").lc, reduction.schedule(fac, "pcr").p) == (0, 9)
    s = reduction.schedule(fac, "cr-pcr")
    assert 512 >> s.lc <= reduction.HYBRID_SIZE and s.p == math.ceil(math.log2(512 >> s.lc))


def test_stand_alone_advection_reference_agrees_with_exact_solution():
    """The dense-solve RK4 reference (used by the engine tests) carries a smooth pulse one period."""
    n = 64
    x, h = _periodic_grid(n)
    phi0 = np.exp(np.sin(2 * np.pi * x))
    phi = reference.advect_dense(phi0, h, 1.0, 0.005, 200, "periodic", "compact6")
    np.testing.assert_allclose(phi, phi0, rtol=0, atol=2e-5)


def test_the_solver_axis_is_the_registry_of_strategies():
    """variants.py registers one ``solver`` choice per strategy of engine/compact/solvers/, in its order, with
    the strategy's backends; the one that fuses the right-hand side is scan, the one that needs contiguous
    lines gtsv2, and an unknown name is refused with the choices."""
    from nagare.engine import registry
    from nagare.engine.compact import Engine  # noqa: F401  (registers the family's axes)

    choices = registry.axes("compact")["solver"].choices
    assert list(choices) == list(solvers.SOLVERS)
    assert all(choices[name].backends == frozenset(s.backends) for name, s in solvers.SOLVERS.items())
    assert solvers.fusing() == "scan"
    assert [name for name, s in solvers.SOLVERS.items() if s.contiguous_only] == ["gtsv2"]
    with pytest.raises(ValueError, match="unknown solver 'lu'.*thomas"):
        solvers.get("lu")


@pytest.mark.parametrize("boundary", schemes.BOUNDARIES)
@pytest.mark.parametrize("delta", [0.0, -schemes.DELTA, schemes.DELTA])
def test_ground_truth_is_the_dense_solve_by_either_route(boundary, delta):
    """derivative_dense by SciPy's sparse LU (when installed) equals np.linalg.solve of the dense matrix to
    round-off, lines along either axis: the GPU tests' ground truth does not depend on which route ran."""
    rng = np.random.default_rng(11)
    for n in (8, 37, 257, 1000):
        f = rng.standard_normal((3, n))
        want = np.linalg.solve(schemes.dense(n, boundary, delta), schemes.rhs(np, f, 0.37, boundary, delta).T).T
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(schemes.derivative_dense(f, 0.37, boundary, delta), want, rtol=0,
                                   atol=1e-14 * scale)
        np.testing.assert_allclose(schemes.derivative_dense(f.T, 0.37, boundary, delta, axis=0), want.T, rtol=0,
                                   atol=1e-14 * scale)

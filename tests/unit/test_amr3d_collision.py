"""The collision operators of the octree LBM (engine/amr3d/collision.py, d3q27.cuh): Suga et al.'s
D3Q27 MRT and Smagorinsky's LES, on NumPy in fp64 and — through the CPU emulation of the CUDA
source (tests/unit/cuda_emulator.py) — the kernels' own code in fp32:
- the moment basis (orthogonal, integer, complete) and the operator against the dense M⁻¹ S M;
- conservation of mass and of momentum with P0's force; every rate = ω is BGK; the shear moments
  relax exactly as BGK's (so the viscosity is BGK's), and a shear wave decays at BGK's rate;
- Smagorinsky: C_s = 0 or a uniform flow give the plain operator bit for bit, τ_e solves its
  quadratic with the Chapman–Enskog Π^neq of a given strain, and a shear wave decays faster by
  what ν_t = C_s² |S̄| predicts;
- the per-level GPU orchestration (NumpyKernels) equals the reference on a two-level tree;
- the CUDA collide, the ladder rungs and the fix-up kernel compiled with the model's macros.
GPU-marked tests (skipped here) run the same kernels through CuPy."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
from nagare.engine.amr3d import collision, d3q27, gpu, interface, ladder, leafgrid, reference, storage, tables
from nagare.engine.amr3d.collision import Collision
from nagare.engine.amr3d.tree import Forest
from nagare.engine.amr3d.tree_stepper import NumpyKernels, TreeStepper
from nagare.engine.backend import get_backend
from nagare.engine.timing import PhaseTimer

from nagare import shaders
from tests.unit.cuda_emulator import PRELUDE, compile_shared
from tests.unit.test_amr3d_ladder_emulated import ladder_source, random_state, run_rung
from tests.unit.test_amr3d_tree_stepper import assert_gpu_tree_stepper_equals_numpy_kernels, flow_state, two_levels

C, Q = d3q27.C, d3q27.Q
MRT = Collision("mrt")
MODELS = [MRT, Collision("bgk", "smagorinsky", 0.3), Collision("mrt", "smagorinsky", 0.3)]
ALL = [Collision()] + MODELS
IDS = ["bgk", "mrt", "bgk-les", "mrt-les"]
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")


def near_equilibrium(rng, n, dtype=np.float64, amp=0.01):
    """f^eq of random ρ ≈ 1, |u| ≈ 0.05 per point, perturbed by ``amp`` (relative)."""
    rho = 1 + 0.02 * rng.standard_normal(n)
    u = 0.05 * rng.standard_normal((3, n))
    feq = d3q27.equilibrium(np, rho, *u)
    return (feq * (1 + amp * rng.standard_normal(feq.shape))).astype(dtype)


def momentum(f):
    return np.stack([(f * C[:, a, None]).sum(0) for a in range(3)])


# ---- the basis and the operator -----------------------------------------------------------------
def test_basis_is_orthogonal_integer_and_complete():
    m, n = collision.basis()
    assert m.shape == (Q, Q) and m.dtype == np.int64 and np.abs(m).max() <= 8
    np.testing.assert_array_equal(m @ m.T, np.diag(n))
    assert np.linalg.matrix_rank(m.astype(float)) == Q
    np.testing.assert_array_equal(m[0], 1)
    np.testing.assert_array_equal(m[1:4], C.T)
    rows = collision.correction_rows()
    assert len(rows) == 18 and not set(rows) & {0, 1, 2, 3, *collision.SHEAR_ROWS}
    # the shear rows are the traceless and off-diagonal second moments
    e2 = (C * C).sum(1)
    np.testing.assert_array_equal(m[5], 2 * C[:, 0] ** 2 - C[:, 1] ** 2 - C[:, 2] ** 2)
    np.testing.assert_array_equal(m[7], C[:, 0] * C[:, 1])
    np.testing.assert_array_equal(m[4], e2 - 2)  # energy, orthogonal to 1


def dense_mrt(f, tau, accel, rates=collision.RATES):
    """f − M⁻¹ S (M f − M f^eq) + F with the dense matrices (fp64)."""
    m, _ = collision.basis()
    om = 1.0 / tau
    s = np.array([om if r is None else r for r in rates])
    rho, ux, uy, uz = d3q27.velocity(np, f)
    feq = d3q27.equilibrium(np, rho, ux, uy, uz)
    return f - np.linalg.inv(m.astype(float)) @ (s[:, None] * (m @ (f - feq))) + d3q27.force(np, rho, accel)


@pytest.mark.parametrize("tau", [0.51, 0.6, 1.3])
def test_mrt_is_the_dense_moment_space_operator(tau):
    f = near_equilibrium(np.random.default_rng(1), 400)
    a = (2e-4, -1e-4, 3e-5)
    np.testing.assert_allclose(collision.collide(np, f, tau, a, MRT), dense_mrt(f, tau, a), rtol=0, atol=1e-15)


@pytest.mark.parametrize("model", MODELS, ids=IDS[1:])
@pytest.mark.parametrize("accel", [(0.0, 0.0, 0.0), (3e-4, -2e-4, 1e-4)], ids=["no-force", "force"])
def test_operators_conserve_mass_and_momentum(model, accel):
    f = near_equilibrium(np.random.default_rng(2), 2000, amp=0.05)
    rho = f.sum(0)
    want = momentum(f) + rho * np.asarray(accel)[:, None]  # post-collision momentum ρ(u + a)
    for out in (collision.collide(np, f, 0.55, accel, model),
                leafgrid.collide(np, f, np.float64(1 / 0.55), accel, model)):
        np.testing.assert_allclose(out.sum(0), rho, rtol=0, atol=1e-13)
        np.testing.assert_allclose(momentum(out), want, rtol=0, atol=1e-13)


def test_mrt_with_every_rate_omega_is_bgk():
    f = near_equilibrium(np.random.default_rng(3), 500)
    a, tau = (1e-4, 2e-4, -1e-4), 0.7
    every = collision.collide_kernels(np, f, np.float64(1 / tau), a, MRT, rates=(None,) * Q)
    # λ_k = 0 exactly: BGK's expression in the kernels' order, bit for bit
    np.testing.assert_array_equal(every, leafgrid.collide(np, f, np.float64(1 / tau), a))
    np.testing.assert_allclose(every, d3q27.collide(np, f, tau, a), rtol=0, atol=1e-14)
    np.testing.assert_allclose(dense_mrt(f, tau, a, rates=(None,) * Q), d3q27.collide(np, f, tau, a),
                               rtol=0, atol=1e-14)


def test_mrt_relaxes_the_shear_moments_as_bgk():
    """The viscous stress (off-diagonal and traceless second moments of f* − F) is BGK's: the
    correction rows are orthogonal to them. The trace (bulk, rate 1.54) and higher moments differ."""
    f = near_equilibrium(np.random.default_rng(4), 500, amp=0.05)
    a, tau = (1e-4, 0.0, 2e-4), 0.62
    rho = f.sum(0)
    F = d3q27.force(np, rho, a)
    bgk, mrt = d3q27.collide(np, f, tau, a) - F, collision.collide(np, f, tau, a, MRT) - F
    cc = C.astype(float)
    for x, y in ((0, 1), (0, 2), (1, 2)):
        np.testing.assert_allclose((mrt * (cc[:, x] * cc[:, y])[:, None]).sum(0),
                                   (bgk * (cc[:, x] * cc[:, y])[:, None]).sum(0), rtol=0, atol=1e-15)
    for row in (5, 6):
        mr = collision.basis()[0][row].astype(float)[:, None]
        np.testing.assert_allclose((mrt * mr).sum(0), (bgk * mr).sum(0), rtol=0, atol=1e-15)
    assert np.abs((mrt * (cc * cc).sum(1)[:, None]).sum(0) - (bgk * (cc * cc).sum(1)[:, None]).sum(0)).max() > 1e-6


# ---- Smagorinsky ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["bgk", "mrt"])
def test_smagorinsky_with_cs_zero_is_the_plain_operator(kind):
    f = near_equilibrium(np.random.default_rng(5), 800, amp=0.05)
    a, tau = (2e-4, 0.0, -1e-4), 0.58
    plain, les = Collision(kind), Collision(kind, "smagorinsky", 0.0)
    np.testing.assert_array_equal(collision.collide(np, f, tau, a, les), collision.collide(np, f, tau, a, plain))
    om = np.float64(1 / tau)
    np.testing.assert_array_equal(leafgrid.collide(np, f, om, a, les), leafgrid.collide(np, f, om, a, plain))


@pytest.mark.parametrize("kind", ["bgk", "mrt"])
def test_smagorinsky_in_a_uniform_flow_is_the_plain_operator(kind):
    """f = f^eq (Π^neq = 0 up to round-off, far below where √(1 + x) leaves 1): ω_e = ω bit for bit."""
    f = near_equilibrium(np.random.default_rng(6), 800, amp=0.0)
    a, tau = (2e-4, 1e-4, 0.0), 0.53
    plain, les = Collision(kind), Collision(kind, "smagorinsky", 0.5)
    np.testing.assert_array_equal(collision.collide(np, f, tau, a, les), collision.collide(np, f, tau, a, plain))
    om = np.float64(1 / tau)
    np.testing.assert_array_equal(leafgrid.collide(np, f, om, a, les), leafgrid.collide(np, f, om, a, plain))


@pytest.mark.parametrize("tau,cs", [(0.52, 0.1), (0.6, 0.17), (0.9, 0.3)])
def test_effective_tau_recovers_the_eddy_viscosity_of_a_given_strain(tau, cs):
    """Pre-collision f = f^eq + the Chapman–Enskog f^neq of a strain S relaxed with τ_e, where
    τ_e = τ + C_s² |S̄| / c_s² (ν + ν_t with ν_t = C_s² |S̄|, Δ = 1): the operator's ω_e is 1/τ_e.
    This checks the constant 18√2 of collision.py's derivation."""
    rng = np.random.default_rng(7)
    n = 300
    g = 1e-3 * rng.standard_normal((n, 3, 3))
    S = 0.5 * (g + g.transpose(0, 2, 1))
    S -= np.trace(S, axis1=1, axis2=2)[:, None, None] * np.eye(3) / 3  # incompressible
    snorm = np.sqrt(2 * np.einsum("nab,nab->n", S, S))
    tau_e = tau + cs * cs * snorm / d3q27.CS2
    rho = 1 + 0.02 * rng.standard_normal(n)
    u = 0.03 * rng.standard_normal((3, n))
    cc = C.astype(float)
    qab = np.einsum("qa,qb->qab", cc, cc) - np.eye(3) / 3
    fneq = -3 * d3q27.W[:, None] * rho * tau_e * np.einsum("qab,nab->qn", qab, S)
    f = d3q27.equilibrium(np, rho, *u) + fneq
    # the operator's own ω_e: BGK + LES minus BGK with ω is −(ω_e − ω) d
    d = f - d3q27.equilibrium(np, *d3q27.velocity(np, f))
    diff = collision.collide(np, f, tau, (0, 0, 0), Collision("bgk", "smagorinsky", cs)) - d3q27.collide(np, f, tau)
    big = np.argmax(np.abs(d), axis=0)
    om_e = 1 / tau - diff[big, np.arange(n)] / d[big, np.arange(n)]
    np.testing.assert_allclose(1 / om_e - tau, tau_e - tau, rtol=1e-6)  # the eddy part, ν_t / c_s²
    # and the closed form of the docstring, τ_e = ½ (τ + √(τ² + 18√2 C_s² |Π^neq| / ρ))
    pn = np.sqrt((np.einsum("qab,qn->nab", np.einsum("qa,qb->qab", cc, cc), d) ** 2).sum(axis=(1, 2)))
    closed = 0.5 * (tau + np.sqrt(tau * tau + 18 * np.sqrt(2) * cs * cs * pn / rho))
    np.testing.assert_allclose(closed - tau, tau_e - tau, rtol=1e-6)


# ---- shear waves on one periodic level (reference.Stepper) ---------------------------------------
M = 9


def shear_wave(tau, model, amp, roots, steps, every=50):
    """u_x = amp sin(2π z / L_z) on a periodic one-level forest: the mode's amplitude every
    ``every`` steps (projection over the distinct nodes), and k."""
    forest = Forest.uniform(roots, 0, M, 0)
    phys = reference.Physics(tau, (0.0, 0.0, 0.0), model)
    X = reference.point_coordinates(forest)
    k = 2 * np.pi / (roots[2] * (M - 1))
    L = forest.n_leaves
    u = np.zeros((3, L, M, M, M))
    u[0] = amp * np.sin(k * X[..., 2])
    grad = np.zeros((L, M, M, M, 3, 3))
    grad[..., 2, 0] = amp * k * np.cos(k * X[..., 2])
    st = reference.Stepper(np, forest, phys, reference.init_state(np, forest, phys, np.ones((L, M, M, M)), u, grad))
    mode = np.sin(k * X[..., 2])[:, :-1, :-1, :-1]
    amps = []
    for i in range(steps // every + 1):
        if i:
            st.step(every)
        ux = d3q27.fluid_velocity(np, st.f)[1][:, :-1, :-1, :-1]
        amps.append(2 * np.mean(ux * mode))
    return np.array(amps), k


@pytest.mark.parametrize("tau", [0.55, 0.8])
def test_mrt_shear_wave_decays_at_the_bgk_rate(tau):
    """32 points a wavelength: MRT's rate is BGK's within 1 % (measured 0.01 % at τ = 0.55, 0.12 %
    at 0.8; the difference is the k⁴ term, which the higher rates change: 0.5 % at 16 points)."""
    steps = 400
    bgk, k = shear_wave(tau, Collision(), 0.01, (1, 1, 4), steps)
    mrt, _ = shear_wave(tau, MRT, 0.01, (1, 1, 4), steps)
    span = steps - 50  # from step 50: past the start's transient
    r_bgk, r_mrt = (-np.log(a[-1] / a[1]) / span for a in (bgk, mrt))
    np.testing.assert_allclose(r_mrt, r_bgk, rtol=1e-2)
    np.testing.assert_allclose(r_bgk, d3q27.viscosity(tau) * k * k, rtol=1e-2)


@pytest.mark.parametrize("kind", ["bgk", "mrt"])
def test_smagorinsky_shear_wave_decays_as_the_eddy_viscosity_predicts(kind):
    """u = A sin(kz) x̂: |S̄| = A k |cos kz|, so the mode obeys dA/dt = −k² ν A − b A² with
    b = C_s² k³ · 2⟨|cos|³⟩/⟨sin²⟩ = 8 C_s² k³ / (3π). With a = the measured molecular rate:
    A_LES / A = a / (a + b A₀ (1 − e^{−at})). The extra decay matches within 10 % (measured 1–2 %)."""
    tau, cs, amp, steps = 0.51, 0.3, 0.05, 300
    plain, k = shear_wave(tau, Collision(kind), amp, (1, 1, 2), steps)
    les, _ = shear_wave(tau, Collision(kind, "smagorinsky", cs), amp, (1, 1, 2), steps)
    t = np.arange(plain.size) * 50.0
    a = -np.log(plain[-1] / plain[0]) / t[-1]
    b = 8 * cs * cs * k**3 / (3 * np.pi)
    assert b * amp / a > 0.3  # the eddy viscosity is a sizeable part of the decay
    predicted = np.log1p(b * plain[0] * (1 - np.exp(-a * t[1:])) / a)
    np.testing.assert_allclose(np.log(plain[1:] / les[1:]), predicted, rtol=0.1)


# ---- the GPU's orchestration on a tree --------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS, ids=IDS[1:])
def test_tree_stepper_with_numpy_kernels_equals_the_reference(model):
    forest = two_levels()
    phys = reference.Physics(0.57, (1e-5, 0.0, -2e-5), model)
    f0 = flow_state(forest, phys)
    ref = reference.Stepper(np, forest, phys, f0.copy(), tables.build(forest))
    st = TreeStepper(np, forest, interface.build(forest), phys.tau0, phys.accel0, NumpyKernels(),
                     PhaseTimer(get_backend("numpy")), dtype=np.float64, collision=model)
    st.set_state(f0.copy(), synchronised=False)
    for _ in range(3):
        ref.step(2)
        st.advance(2)
        np.testing.assert_allclose(st.state(), ref.f, rtol=0, atol=2e-14)
    # the operator matters here: BGK's run differs
    bgk = reference.Stepper(np, forest, reference.Physics(phys.tau0, phys.accel0), f0.copy(), tables.build(forest))
    bgk.step(6)
    assert np.abs(bgk.f - ref.f).max() > 1e-7


def test_bgk_kernels_are_the_modules_of_before():
    """P0's BGK adds nothing to the prelude: the same KernelSpec (NVRTC cache entry, bits)."""
    base = ladder.velocity_prelude(C, d3q27.W_EXACT)
    assert "NAGARE" not in base
    assert ladder.velocity_prelude(C, d3q27.W_EXACT, Collision()) == base
    assert gpu.kernel_spec(9, Collision()) == gpu.kernel_spec(9)
    assert gpu.coupling_spec(Collision()) == gpu.coupling_spec()
    specs = {gpu.kernel_spec(9, m) for m in ALL} | {gpu.kernel_spec(9, Collision("mrt", "smagorinsky", 0.2))}
    assert len(specs) == 5
    assert "#define NAGARE_CS2 0.09" in gpu.coupling_spec(Collision("bgk", "smagorinsky", 0.3)).prelude


def test_every_ladder_kernel_inlines_at_most_one_collision():
    """Compile cost: each kernel of ladder.cu calls d3q27::collide once. The sorted shell kernel
    switches over 26 class gathers; with the collision inside every case NVRTC inlined 26 MRT
    operators into one function (over 5 minutes and 11 GB of host memory for that one kernel;
    after the change 5 s, measured with NVRTC 12.9 on the CPU)."""
    import re

    src = shaders.source(ladder.SOURCE)
    starts = [m.start() for m in re.finditer(r"__global__ void \w+", src)]
    assert len(starts) >= 6
    for a, b in zip(starts, starts[1:] + [len(src)]):
        body = src[a:b].split("#define NAGARE_CLASS")[0]  # the sorted kernel's macro precedes it
        name = re.match(r"__global__ void (\w+)", body).group(1)
        calls = body.count("d3q27::collide(") + body.count("shell_class_point<")  # the latter collides once
        assert calls == (0 if name.startswith("amr3d_csm_") else 1), name  # the CSM's pre-pass does not collide
    macro = src.split("#define NAGARE_CLASS")[1].split("template <int M>")[0]
    assert "collide" not in macro.replace("the collision", "") and "shell_class_point" not in macro


def test_collision_model_is_checked():
    with pytest.raises(ValueError):
        Collision("trt")
    with pytest.raises(ValueError):
        Collision("bgk", "wale")
    with pytest.raises(ValueError):
        Collision("bgk", "smagorinsky", -0.1)


# ---- the CUDA source, emulated on the CPU (fp32) ----------------------------------------------------
def _compile(src: str, tmp_path_factory) -> ctypes.CDLL:
    return compile_shared(src, "amr3d_collision", tmp_path_factory)


COLLIDE_WRAPPER = """
extern "C" void collide_points(float* f, int n, float omega, float ax, float ay, float az) {
    for (int p = 0; p < n; ++p) {
        float g[27];
        for (int q = 0; q < 27; ++q) g[q] = f[q * n + p];
        d3q27::collide(g, omega, ax, ay, az);
        for (int q = 0; q < 27; ++q) f[q * n + p] = g[q];
    }
}
"""


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


@needs_gxx
@pytest.mark.parametrize("model", ALL, ids=IDS)
def test_cuda_collide_matches_numpy_in_fp32(model, tmp_path_factory):
    src = PRELUDE + ladder.velocity_prelude(C, d3q27.W_EXACT, model) + shaders.source("cuda/amr3d/d3q27.cuh")
    lib = _compile(src + COLLIDE_WRAPPER, tmp_path_factory)
    f = near_equilibrium(np.random.default_rng(8), 3000, np.float32, amp=0.05)
    a, tau = (1e-4, -2e-4, 3e-5), 0.53
    om = np.float32(1 / tau)
    got = f.copy()
    lib.collide_points(ptr(got), ctypes.c_int(f.shape[1]), ctypes.c_float(om), *(ctypes.c_float(x) for x in a))
    np.testing.assert_allclose(got, leafgrid.collide(np, f, om, a, model), rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, collision.collide(np, f, tau, a, model), rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, collision.collide(np, f.astype(np.float64), tau, a, model), rtol=0, atol=1e-6)
    if not model.plain:  # the operator is not BGK's
        bgk = leafgrid.collide(np, f, om, a)
        assert np.abs(got - bgk).max() > 1e-5


@needs_gxx
def test_cuda_ladder_rungs_step_with_the_model(tmp_path_factory):
    """Every rung of ladder.cu (the apart storage's too) compiled with MRT + Smagorinsky gives the
    same bits, and one step is leafgrid.step with the model (fp32, round-off)."""
    model, m, shape = Collision("mrt", "smagorinsky", 0.3), 9, (2, 1, 2)
    src = ladder_source(m, model)
    lib = _compile(src, tmp_path_factory)
    rng = np.random.default_rng(9)
    s = m - 1
    u0 = random_state(rng, (shape[2] * s, shape[1] * s, shape[0] * s), np.float32)
    f = storage.leaves_from_uniform(np, u0, m, shape)
    nbr = ladder.periodic_neighbours(shape)
    om, a = np.float32(1 / 0.53), (2e-5, -1e-5, 3e-5)
    want = leafgrid.step(np, f, leafgrid.gather_sources(nbr, m), om, a, model)
    first = None
    for rung in ladder.RUNGS + ladder.BOX_RUNGS:
        got = run_rung(lib, rung, f, nbr, m, om, a)
        if first is None:
            first = got
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(got, first, err_msg=rung)
    assert np.abs(first - leafgrid.step(np, f, leafgrid.gather_sources(nbr, m), om, a)).max() > 1e-6


FIXUP_WRAPPER = """
extern "C" void fixup(int grid, int block, const float* src, float* dst, const int* pts, const int* desc, int n,
                      long long plane, float omega, float ax, float ay, float az) {
    blockDim = {(unsigned)block, 1u, 1u};
    for (unsigned b = 0; b < (unsigned)grid; ++b) {
        blockIdx = {b, 0u, 0u};
        for (unsigned t = 0; t < (unsigned)block; ++t) {
            threadIdx = {t, 0u, 0u};
            amr3d_fixup<int>(src, dst, pts, desc, n, plane, nullptr, 0, nullptr, 0, nullptr, omega, ax, ay, az);
        }
    }
}
"""


@needs_gxx
@pytest.mark.parametrize("model", MODELS, ids=IDS[1:])
def test_cuda_fixup_collides_with_the_model(model, tmp_path_factory):
    """coupling.cu compiled with the model's macros: the fix-up gathers through its descriptors and
    collides as leafgrid.collide(model) (here with direct descriptors only)."""
    lib = _compile(PRELUDE + gpu.coupling_spec(model).code + FIXUP_WRAPPER, tmp_path_factory)
    rng = np.random.default_rng(10)
    plane, n = 400, 150
    src = near_equilibrium(rng, plane, np.float32, amp=0.05)
    pts = rng.choice(plane, n, replace=False).astype(np.int32)
    desc = (np.arange(Q)[:, None] * plane + rng.integers(0, plane, (Q, n))).astype(np.int32)
    dst = np.full_like(src, np.nan)
    om, a = np.float32(1 / 0.56), (1e-4, 0.0, -1e-4)
    lib.fixup(ctypes.c_int(-(-n // 128)), ctypes.c_int(128), ptr(src), ptr(dst), ptr(pts), ptr(desc), ctypes.c_int(n),
              ctypes.c_longlong(plane), ctypes.c_float(om), *(ctypes.c_float(x) for x in a))
    g = src.reshape(-1)[desc]
    np.testing.assert_allclose(dst[:, pts], leafgrid.collide(np, g, om, a, model), rtol=0, atol=1e-6)


# ---- on a GPU (CuPy): the compiled kernels ----------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("model", ALL, ids=IDS)
def test_gpu_ladder_rungs_equal_numpy(model):
    cp = pytest.importorskip("cupy")
    from nagare.engine.amr3d.gpu import LadderStepper

    m, shape, n = 9, (2, 2, 2), 6
    s = m - 1
    u0 = random_state(np.random.default_rng(11), (shape[2] * s, shape[1] * s, shape[0] * s), np.float32)
    f = storage.leaves_from_uniform(np, u0, m, shape)
    nbr = ladder.periodic_neighbours(shape)
    om, a = 1 / 0.53, (2e-5, -1e-5, 3e-5)
    want = f
    for _ in range(n):
        want = leafgrid.step(np, want, leafgrid.gather_sources(nbr, m), np.float32(om), a, model)
    stream = cp.cuda.get_current_stream()
    timer = PhaseTimer(get_backend("cupy"))
    for rung in ("naive", "split", "templates", "sorted", "uniform"):
        uniform = rung == "uniform"
        start = u0 if uniform else f
        st = LadderStepper(cp, stream, rung, m, shape, om, a, timer, uniform_shape=u0.shape[1:], model=model)
        bufs = [cp.asarray(start), cp.empty_like(cp.asarray(start))]
        st.advance(bufs, n, graph=False)
        got = cp.asnumpy(bufs[0])
        if uniform:
            got = storage.leaves_from_uniform(np, got, m, shape)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=rung)  # the registry's fp32 tolerance


@pytest.mark.gpu
@pytest.mark.parametrize("model", ALL, ids=IDS)
def test_gpu_tree_stepper_equals_numpy_kernels(model):
    assert_gpu_tree_stepper_equals_numpy_kernels(two_levels(), reference.Physics(0.57, (1e-5, 0.0, -2e-5), model),
                                                 "sorted", collision=model)

"""P0's kernel ladder (shaders/cuda/amr3d/ladder.cu) compiled as C++ and run on the CPU with the
CUDA built-ins emulated, on periodic leaf grids: every rung gives the same bits as every other,
and the step equals a plain uniform periodic D3Q27 lattice written separately with np.roll — so
the indexing of the 702 compile-time access patterns, the shell list, the warp-sorted segments
and the shared face nodes are checked without a GPU."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
from nagare.engine.amr3d import d3q27, gpu, ladder, storage

from tests.unit.cuda_emulator import PRELUDE, compile_shared

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU emulation")

ARGS = "float omega, float ax, float ay, float az"
CALL = "omega, ax, ay, az"


def wrapper(fn: str, params: str, kernel: str, call: str) -> str:
    return f"""
extern "C" void {fn}(int grid, int block, {params}, {ARGS}) {{
    blockDim = {{(unsigned)block, 1u, 1u}};
    for (unsigned b = 0; b < (unsigned)grid; ++b) {{
        blockIdx = {{b, 0u, 0u}};
        for (unsigned t = 0; t < (unsigned)block; ++t) {{ threadIdx = {{t, 0u, 0u}}; {kernel}({call}, {CALL}); }}
    }}
}}"""


def ladder_source(m: int, model=None) -> str:
    """ladder.cu for leaves of m³ (with the collision ``model``) and a C wrapper per kernel of every
    rung: exactly the text NVRTC compiles on the GPU, then the emulated launches."""
    leaf = "const float* src, float* dst, const int* nbr, int nleaf"
    src = PRELUDE + gpu.kernel_spec(m, model).code
    src += wrapper("naive", leaf, f"amr3d_naive<{m}>", "src, dst, nbr, nleaf")
    src += wrapper("inner", "const float* src, float* dst, int nleaf", f"amr3d_inner<{m}>", "src, dst, nleaf")
    src += wrapper("shell", leaf + ", const int* shell, int nshell", f"amr3d_shell<{m}>",
                   "src, dst, nbr, shell, nshell, nleaf")
    for c, (gi, gj, gk) in enumerate(ladder.SHELL_CLASSES):
        src += wrapper(f"cls{c}", leaf, f"amr3d_shell_class<{m},{gi},{gj},{gk}>", "src, dst, nbr, nleaf")
    src += wrapper("sorted", leaf + ", const long long* seg", f"amr3d_shell_sorted<{m}>", "src, dst, nbr, seg, nleaf")
    src += wrapper("inner_apart", "const float* src, float* dst, int nleaf", f"amr3d_inner_apart<{m}>",
                   "src, dst, nleaf")
    src += wrapper("shell_apart", leaf + ", const int* shell", f"amr3d_shell_apart<{m}>", "src, dst, nbr, shell, nleaf")
    return src


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    libs = {}

    def get(m):
        if m in libs:
            return libs[m]
        src = ladder_source(m) + wrapper("uniform", "const float* src, float* dst, int nx, int ny, int nz",
                                         "d3q27_uniform", "src, dst, nx, ny, nz")
        half = "const unsigned short* src, unsigned short* dst"
        src += wrapper("naive16", half + ", const int* nbr, int nleaf", f"amr3d_naive<{m}, unsigned short>",
                       "src, dst, nbr, nleaf")
        src += wrapper("uniform16", half + ", int nx, int ny, int nz", "d3q27_uniform<unsigned short>",
                       "src, dst, nx, ny, nz")
        libs[m] = compile_shared(src, "amr3d_ladder", tmp_path_factory)
        return libs[m]
    return get


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def params(omega, a):
    return [ctypes.c_float(omega), *(ctypes.c_float(x) for x in a)]


def launch(lib, name, n, *args, omega, a):
    grid = -(-n // ladder.BLOCK)
    getattr(lib, name)(ctypes.c_int(grid), ctypes.c_int(ladder.BLOCK), *args, *params(omega, a))


def run_rung(lib, rung, f, nbr, m, omega, a):
    nleaf = f.shape[1]
    dst = np.full_like(f, np.nan)
    nl = ctypes.c_int(nleaf)
    if rung == "naive":
        launch(lib, "naive", nleaf * m**3, ptr(f), ptr(dst), ptr(nbr), nl, omega=omega, a=a)
        return dst
    if rung == "apart":  # the same step on the apart storage, converted there and back
        src = np.ascontiguousarray(storage.apart_from_leaves(np, f, m))
        out = np.full_like(src, np.nan)
        shell = ladder.shell_list(m)
        launch(lib, "inner_apart", nleaf * (m - 2) ** 3, ptr(src), ptr(out), nl, omega=omega, a=a)
        launch(lib, "shell_apart", nleaf * len(shell), ptr(src), ptr(out), ptr(nbr), nl, ptr(shell), omega=omega, a=a)
        return storage.leaves_from_apart(np, out, m, nleaf)
    launch(lib, "inner", nleaf * (m - 2) ** 2 * m, ptr(f), ptr(dst), nl, omega=omega, a=a)  # whole x-rows
    if rung == "split":
        shell = ladder.shell_list(m)
        launch(lib, "shell", nleaf * len(shell), ptr(f), ptr(dst), ptr(nbr), nl, ptr(shell), ctypes.c_int(len(shell)),
               omega=omega, a=a)
    elif rung == "templates":
        for c, g in enumerate(ladder.SHELL_CLASSES):
            launch(lib, f"cls{c}", nleaf * ladder.class_points(m, g), ptr(f), ptr(dst), ptr(nbr), nl, omega=omega, a=a)
    elif rung == "sorted":
        seg = ladder.sorted_segments(m, nleaf)
        launch(lib, "sorted", int(seg[-1]), ptr(f), ptr(dst), ptr(nbr), nl, ptr(seg), omega=omega, a=a)
    return dst


def uniform_roll_step(f, omega, a):
    """A plain periodic D3Q27 lattice, written separately: np.roll streaming, then the BGK
    collision with P0's force term, f[q, z, y, x]."""
    c, w = d3q27.C, d3q27.W
    g = np.stack([np.roll(f[q], shift=(c[q, 2], c[q, 1], c[q, 0]), axis=(0, 1, 2)) for q in range(27)])
    rho = g.sum(0)
    u = np.stack([(g * c[:, ax, None, None, None]).sum(0) for ax in range(3)]) / rho
    cu = np.einsum("qa,azyx->qzyx", c.astype(g.dtype), u)
    usq = (u * u).sum(0)
    feq = w[:, None, None, None] * rho * (1 + 3 * cu + 4.5 * cu * cu - 1.5 * usq)
    ca = (c @ np.asarray(a, g.dtype))[:, None, None, None]
    return g - omega * (g - feq) + 3 * w[:, None, None, None] * rho * ca


def random_state(rng, shape, dtype):
    """A physically valid D3Q27 state: equilibrium of a smooth random flow plus a small perturbation."""
    nz, ny, nx = shape
    rho = 1 + 0.02 * rng.standard_normal(shape)
    u = 0.05 * rng.standard_normal((3, *shape))
    c, w = d3q27.C, d3q27.W
    cu = np.einsum("qa,azyx->qzyx", c.astype(float), u)
    feq = w[:, None, None, None] * rho * (1 + 3 * cu + 4.5 * cu * cu - 1.5 * (u * u).sum(0))
    return (feq * (1 + 0.01 * rng.standard_normal(feq.shape))).astype(dtype)


@pytest.mark.parametrize("m, shape", [(9, (2, 2, 2)), (9, (3, 1, 2)), (17, (1, 2, 1))])
def test_every_rung_equals_the_uniform_roll_lattice(emulated, m, shape):
    lib = emulated(m)
    rng = np.random.default_rng(m + sum(shape))
    s = m - 1
    u0 = random_state(rng, (shape[2] * s, shape[1] * s, shape[0] * s), np.float32)
    omega, a = 1 / 0.62, (2e-5, -1e-5, 3e-5)
    want = uniform_roll_step(u0.astype(np.float64), omega, a)
    f = storage.leaves_from_uniform(np, u0, m, shape)
    nbr = ladder.periodic_neighbours(shape)
    results = {}
    for rung in ladder.RUNGS + ladder.BOX_RUNGS:
        got = run_rung(lib, rung, f, nbr, m, np.float32(omega), a)
        assert np.isfinite(got).all(), f"{rung}: a point was not written"
        results[rung] = got
        # shared face nodes: every copy of a node got the same value
        once = storage.uniform_from_leaves(np, got, m, shape)
        np.testing.assert_array_equal(storage.leaves_from_uniform(np, once, m, shape), got,
                                      err_msg=f"{rung}: copies of a shared node differ")
        np.testing.assert_allclose(storage.uniform_from_leaves(np, got, m, shape), want, rtol=2e-6, atol=2e-7,
                                   err_msg=rung)
    for rung in ladder.RUNGS[1:] + ladder.BOX_RUNGS:
        np.testing.assert_array_equal(results[rung], results["naive"], err_msg=f"{rung} vs naive")


def test_mother_leaves_are_the_same_lattice(emulated):
    """§3.3 on one level: 2×2×2 leaves of 9³ regrouped as one mother leaf of 17³ step to the same values."""
    shape = (2, 2, 2)
    rng = np.random.default_rng(7)
    u0 = random_state(rng, (16, 16, 16), np.float32)
    f = storage.leaves_from_uniform(np, u0, 9, shape)
    mother, mshape = storage.mothers_from_leaves(np, f, 9, shape), storage.mother_shape(shape)
    assert mother.shape[1:] == (1, 17, 17, 17) and mshape == (1, 1, 1)
    np.testing.assert_array_equal(storage.leaves_from_mothers(np, mother, 9, shape), f)
    a = (0.0, 1e-5, 0.0)
    leaves = run_rung(emulated(9), "templates", f, ladder.periodic_neighbours(shape), 9, np.float32(1.6), a)
    mothers = run_rung(emulated(17), "templates", mother, ladder.periodic_neighbours(mshape), 17, np.float32(1.6), a)
    np.testing.assert_array_equal(storage.uniform_from_leaves(np, mothers, 17, mshape),
                                  storage.uniform_from_leaves(np, leaves, 9, shape))


def test_uniform_kernel_equals_roll(emulated):
    rng = np.random.default_rng(3)
    u0 = random_state(rng, (6, 5, 7), np.float32)
    dst = np.full_like(u0, np.nan)
    n = u0[0].size
    launch(emulated(9), "uniform", n, ptr(u0), ptr(dst), ctypes.c_int(7), ctypes.c_int(5), ctypes.c_int(6),
           omega=np.float32(1.3), a=(1e-5, 0, 0))
    np.testing.assert_allclose(dst, uniform_roll_step(u0.astype(np.float64), 1.3, (1e-5, 0, 0)), rtol=2e-6, atol=2e-7)


def test_shell_bookkeeping_matches_p0():
    """P0's counts: 17³ leaves have 1,538 shell points; 512 leaves 787,456; 64 mother leaves of 33³ 393,344."""
    assert sum(ladder.class_points(17, g) for g in ladder.SHELL_CLASSES) == 1538 == len(ladder.shell_list(17))
    assert ladder.point_counts(17, 512).shell == 787_456 and ladder.point_counts(17, 512).inner == 1_728_000
    assert ladder.point_counts(33, 64).shell == 393_344 and ladder.point_counts(33, 64).total == 2_299_968
    assert len(set(ladder.SHELL_CLASSES)) == 26 and (0, 0, 0) not in ladder.SHELL_CLASSES
    seg = ladder.sorted_segments(17, 5)
    assert (np.diff(seg) % 32 == 0).all() and (np.diff(seg) >= 5 * np.array(
        [ladder.class_points(17, g) for g in ladder.SHELL_CLASSES])).all()


def test_ladder_stepper_on_the_apart_storage_equals_split(emulated_cupy):
    """gpu.LadderStepper's launches of the apart rung (grid sizes, argument order) through the
    emulated CuPy: 3 steps on the apart storage, converted back, equal split's bits on leaves."""
    from nagare.engine.amr3d.gpu import LadderStepper
    from nagare.engine.backend import get_backend
    from nagare.engine.timing import PhaseTimer

    m, shape = 9, (2, 1, 2)
    s = m - 1
    u0 = random_state(np.random.default_rng(3), (shape[2] * s, shape[1] * s, shape[0] * s), np.float32)
    f0 = storage.leaves_from_uniform(np, u0, m, shape)
    out = {}
    for rung in ("split", "apart"):
        st = LadderStepper(emulated_cupy, emulated_cupy.cuda.Stream(), rung, m, shape, 1 / 0.6, (2e-5, 0.0, -1e-5),
                           PhaseTimer(get_backend("numpy")))
        f = storage.apart_from_leaves(np, f0, m) if rung == "apart" else f0
        bufs = [np.array(f, order="C"), np.full_like(f, np.nan)]  # a copy: f0 serves both rungs
        st.advance(bufs, 3, graph=False)
        out[rung] = storage.leaves_from_apart(np, bufs[0], m, 4) if rung == "apart" else bufs[0]
    assert np.isfinite(out["apart"]).all()
    np.testing.assert_array_equal(out["apart"], out["split"])


def test_fp16_storage_kernels_round_the_fp32_step(emulated):
    """fp16 storage (naive and uniform): a step on the half bits equals the fp32 kernel's step on the
    same populations (half → fp32, + w) stored back as fp32 − w rounded to half — bit for bit, so
    the fp16 kernels differ from the fp32 ones only where storage.to_fp16 says."""
    m, shape = 9, (2, 1, 2)
    lib = emulated(m)
    s = m - 1
    u0 = random_state(np.random.default_rng(4), (shape[2] * s, shape[1] * s, shape[0] * s), np.float32)
    h = storage.to_fp16(np, storage.leaves_from_uniform(np, u0, m, shape))
    f = storage.from_fp16(np, h)
    nbr = ladder.periodic_neighbours(shape)
    omega, a = np.float32(1 / 0.6), (2e-5, 0.0, -1e-5)
    got = np.full_like(h, np.nan)
    launch(lib, "naive16", f.shape[1] * m**3, ptr(h), ptr(got), ptr(nbr), ctypes.c_int(f.shape[1]), omega=omega, a=a)
    want = storage.to_fp16(np, run_rung(lib, "naive", f, nbr, m, omega, a))
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert np.abs(storage.from_fp16(np, got) - run_rung(lib, "naive", f, nbr, m, omega, a)).max() > 0  # it rounds
    hu = np.ascontiguousarray(storage.to_fp16(np, u0))
    fu = storage.from_fp16(np, hu)
    dims = [ctypes.c_int(n) for n in (u0.shape[3], u0.shape[2], u0.shape[1])]
    got_u, out_u = np.full_like(hu, np.nan), np.full_like(fu, np.nan)
    launch(lib, "uniform16", fu[0].size, ptr(hu), ptr(got_u), *dims, omega=omega, a=a)
    launch(lib, "uniform", fu[0].size, ptr(fu), ptr(out_u), *dims, omega=omega, a=a)
    np.testing.assert_array_equal(got_u.view(np.uint16), storage.to_fp16(np, out_u).view(np.uint16))


def test_ladder_stepper_fp16_steps_like_the_rounded_reference(emulated_cupy):
    """gpu.LadderStepper with fp16 buffers (naive) through the emulated CuPy: 4 steps equal
    leafgrid.step + storage.round_fp16 (the engine's fp16 reference) within the registry's fp16
    tolerance; the other rungs refuse fp16 storage."""
    from nagare.engine.amr3d import leafgrid
    from nagare.engine.amr3d.gpu import LadderStepper
    from nagare.engine.backend import get_backend
    from nagare.engine.timing import PhaseTimer

    m, shape = 9, (2, 2, 1)
    s = m - 1
    u0 = random_state(np.random.default_rng(5), (shape[2] * s, shape[1] * s, shape[0] * s), np.float32)
    f0 = storage.round_fp16(np, storage.leaves_from_uniform(np, u0, m, shape))
    a = (1e-5, -2e-5, 0.0)
    st = LadderStepper(emulated_cupy, emulated_cupy.cuda.Stream(), "naive", m, shape, 1 / 0.6, a,
                       PhaseTimer(get_backend("numpy")), fp16=True)
    h = storage.to_fp16(np, f0)
    bufs = [np.array(h), np.empty_like(h)]
    st.advance(bufs, 4, graph=False)
    want, src = f0, leafgrid.gather_sources(ladder.periodic_neighbours(shape), m)
    for _ in range(4):
        want = storage.round_fp16(np, leafgrid.step(np, want, src, np.float32(1 / 0.6), a))
    np.testing.assert_allclose(storage.from_fp16(np, bufs[0]), want, rtol=2e-5, atol=4e-5)
    with pytest.raises(ValueError, match="fp16"):
        LadderStepper(np, None, "split", m, shape, 1.6, a, None, fp16=True)


def test_live_switching_storages_and_kernels_on_the_emulated_gpu(emulated_cupy):
    """The whole engine on the emulated CuPy, switched live through the layouts (leaves, apart,
    mothers, uniform) and fp16 storage in an order that converts every way, stepping between:
    the state follows the reference (fp32, then fp16 tolerance once fp16 is on); a kernels switch
    that fp16 storage cannot run is refused in one line before anything is converted."""
    from nagare.engine import registry
    from nagare.engine.backend import Backend
    from nagare.engine.families import create_engine
    from nagare.engine.presets import load_preset

    def make():
        p = load_preset("amr3d-bench", ["grid.leaves=[2, 2, 2]", "grid.m=9", "initial.kind='random'"], backend="cupy")
        return create_engine(p, Backend("cupy", emulated_cupy, _cupy=emulated_cupy))

    a, ref = make(), make()
    ref.set_variant(kernels="reference")
    for change, atol in ((dict(kernels="split-apart"), 2e-6), (dict(kernels="mother-leaf"), 2e-6),
                         (dict(kernels="naive"), 2e-6), (dict(storage="fp16"), 4e-5), (dict(kernels="uniform"), 4e-5),
                         (dict(kernels="reference"), 4e-5), (dict(kernels="naive-fused"), 4e-5),
                         (dict(storage="native"), 4e-5), (dict(kernels="split-apart"), 4e-5)):
        a.set_variant(**change)
        if "storage" in change:
            ref.set_variant(**change)
        a.step(2)
        ref.step(2)
        got = a.state_arrays()["f"]
        assert got.dtype == np.float32 and got.shape == (27, 8, 9, 9, 9)
        np.testing.assert_allclose(got, ref.state_arrays()["f"], rtol=2e-5, atol=atol, err_msg=str(change))
        # the drawn fields come from every layout and storage too (Box.uniform; ρ sums 27 populations)
        np.testing.assert_allclose(a.field("rho").data, ref.field("rho").data, rtol=0, atol=30 * atol,
                                   err_msg=str(change))
    a.set_variant(storage="fp16", kernels="naive")
    before = a.state_arrays()["f"]
    with pytest.raises(registry.VariantUnavailable, match="fp16 storage runs the naive and uniform") as exc:
        a.set_variant(kernels="split-apart")
    assert "\n" not in str(exc.value) and a.selection["kernels"] == "naive"
    np.testing.assert_array_equal(a.state_arrays()["f"], before)

"""P1 temporal-blocking kernels (stb, srtb, srtb-ws) vs a NumPy model of the D2Q9 step.

The model below is written directly from the agreed step semantics (pull-stream with half-way and
moving-wall bounce-back, then BGK + Guo forcing; mask != 0 copied through; periodic array), in
the storage precision, independent of the engine's reference and the CUDA code except for the
collision's operation order, which is d2q9.cuh's factored collide_bgk (the kernels call it) so
that the host-emulated kernels agree bit for bit; test_model_is_the_reference_step checks that
the model equals engine/lbm2d/reference.step.
GPU tests compare every configuration of a small (kernel, ts, tr, tile) matrix after 67 steps
(>= 64, and not a multiple of ts, so the last launch is a shorter block).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from nagare.engine.lbm2d import temporal_blocking as tb

C = np.array([(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (1, 1), (-1, 1), (-1, -1), (1, -1)])
W = np.array([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4)
OPP = [0, 3, 4, 1, 2, 7, 8, 5, 6]


def feq(rho, ux, uy, dtype):
    w = W.astype(dtype)
    cu = [dtype(cx) * ux + dtype(cy) * uy for cx, cy in C]
    usq = ux * ux + uy * uy
    return np.stack([w[i] * rho * (1 + 3 * cu[i] + dtype(4.5) * cu[i] * cu[i] - dtype(1.5) * usq) for i in range(9)])


def c_dot(i, a, b):
    """c_i · (a, b) with the 0/±1 components written out (d2q9.cuh's c_dot)."""
    if i == 0:
        return a.dtype.type(0)
    if i <= 4:
        return (a, b, -a, -b)[i - 1]
    return (a + b, b - a, -(a + b), a - b)[i - 5]


def model_step(f, mask, tau, force, u_wall):
    """One step, exactly as /tmp/lbm_semantics.md (the lbm2d semantics) states it."""
    dt = f.dtype.type
    w = W.astype(f.dtype)
    fx, fy = dt(force[0]), dt(force[1])
    pulled = np.empty_like(f)
    for i, (cx, cy) in enumerate(C):
        src = np.roll(f[i], shift=(cy, cx), axis=(0, 1))  # src[y, x] = f_i(x - c_i), periodic
        msrc = np.roll(mask, shift=(cy, cx), axis=(0, 1))
        bounce = f[OPP[i]]
        moving = bounce + dt(6) * w[i] * (dt(cx) * dt(u_wall[0]) + dt(cy) * dt(u_wall[1]))
        pulled[i] = np.where(msrc == 1, bounce, np.where(msrc == 2, moving, src))
    # BGK + Guo in the paired form of d2q9.cuh's collide_bgk (the kernels call it), the same
    # operations in the same order: f_i ← (1 − ω) g_i + w_i (K + even ± odd) with R = ωρ,
    # K = R(1 − 1.5 u²) − 3(1 − ω/2) u·F, even = cu3 (R/2 cu3 + P), odd = R cu3 + P, cu3 = 3 c_i·u,
    # P = 3(1 − ω/2) c_i·F (test_lbm2d_engine checks this form against the textbook BGK + Guo).
    p = pulled
    rho = p[0] + p[1] + p[2] + p[3] + p[4] + p[5] + p[6] + p[7] + p[8]
    jx = p[1] - p[3] + p[5] - p[6] - p[7] + p[8]
    jy = p[2] - p[4] + p[5] + p[6] - p[7] - p[8]
    inv = dt(1) / rho
    ux = (jx + dt(0.5) * fx) * inv
    uy = (jy + dt(0.5) * fy) * inv
    a = dt(1) - dt(1.5) * (ux * ux + uy * uy)
    omega = dt(1 / tau)
    pref3 = dt(3) * (dt(1) - dt(0.5) * omega)
    R = omega * rho
    K = R * a - pref3 * (ux * fx + uy * fy)
    half_R = dt(0.5) * R
    omc = dt(1) - omega
    post = np.empty_like(f)
    post[0] = omc * p[0] + w[0] * K
    for i in (1, 2, 5, 6):
        cu3, P = c_dot(i, dt(3) * ux, dt(3) * uy), pref3 * c_dot(i, fx, fy)
        even = K + cu3 * (half_R * cu3 + P)
        odd = R * cu3 + P
        post[i] = omc * p[i] + w[i] * (even + odd)
        post[OPP[i]] = omc * p[OPP[i]] + w[i] * (even - odd)
    return np.where(mask[None] != 0, f, post)


def model_step_fp16(f16, mask, tau, force, u_wall):
    """fp16 storage: fp32 arithmetic on the stored halves, rounded to half after the step."""
    return model_step(f16.astype(np.float32), mask, tau, force, u_wall).astype(np.float16)


def scene(nx, ny, dtype, seed=7):
    """A random valid state with bottom wall, moving lid, a cylinder and a block across the x seam."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((ny, nx), np.uint8)
    mask[0, :] = 1
    mask[-1, :] = 2
    y, x = np.mgrid[0:ny, 0:nx]
    mask[(x - nx / 3) ** 2 + (y - ny / 2) ** 2 < (ny / 7) ** 2] = 1
    mask[ny // 4: ny // 4 + 3, [nx - 2, nx - 1, 0, 1]] = 1  # obstacle on the periodic seam
    mask[3 * ny // 4, nx // 2: nx // 2 + 4] = 2  # a short moving plate inside the fluid
    rho = (1 + 0.05 * (rng.random((ny, nx)) - 0.5)).astype(dtype)
    ux = (0.05 * (rng.random((ny, nx)) - 0.5)).astype(dtype)
    uy = (0.05 * (rng.random((ny, nx)) - 0.5)).astype(dtype)
    f = feq(rho, ux, uy, dtype.type) * (1 + 0.01 * (rng.random((9, ny, nx)) - 0.5)).astype(dtype)
    params = {"tau": 0.8, "force": (2e-5, -1e-5), "u_wall": (0.05, 0.01), "dtype": dtype}
    return np.ascontiguousarray(f.astype(dtype)), mask, params


def preset(dtype=np.float32, x="periodic", collision="bgk"):
    return SimpleNamespace(boundaries=SimpleNamespace(x=x, y="lid"),
                           physics=SimpleNamespace(dtype=np.dtype(dtype), collision=collision))


# ---- the NumPy model itself (CPU) --------------------------------------------------------------
def test_model_rest_state_is_fixed_point():
    f = np.repeat(W[:, None, None], 12, 1).repeat(10, 2)
    mask = np.zeros((12, 10), np.uint8)
    mask[0] = mask[-1] = 1
    np.testing.assert_allclose(model_step(f, mask, 0.7, (0, 0), (0, 0)), f, rtol=1e-15)


def test_model_conserves_mass_in_closed_box():
    f, mask, _ = scene(20, 16, np.dtype(np.float64))
    mask[:, 0] = mask[:, -1] = mask[0] = mask[-1] = 1
    mask[mask == 2] = 1
    fluid = mask == 0
    m0 = (f * fluid).sum()
    for _ in range(20):
        f = model_step(f, mask, 0.8, (0, 0), (0, 0))
    np.testing.assert_allclose((f * fluid).sum(), m0, rtol=1e-13)


def test_model_moving_lid_drives_flow():
    f, mask, _ = scene(16, 16, np.dtype(np.float64))
    mask[...] = 0
    mask[0] = 1
    mask[-1] = 2
    f = feq(np.ones((16, 16)), np.zeros((16, 16)), np.zeros((16, 16)), np.float64)
    for _ in range(30):
        f = model_step(f, mask, 0.8, (0, 0), (0.05, 0))
    ux = sum(C[i, 0] * f[i] for i in range(9)) / f.sum(0)
    assert ux[-2].mean() > 0.01 and abs(ux[1].mean()) < ux[-2].mean()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_model_is_the_reference_step(dtype):
    """Same operations in the same order as engine/lbm2d/reference.py (the single-step kernels'
    NumPy twin), so the model and the reference agree bit for bit."""
    from nagare.engine.lbm2d import reference

    f, mask, p = scene(45, 37, np.dtype(dtype))
    lat = reference.build_lattice(np, mask, p["tau"], p["force"], p["u_wall"], dtype)
    want, got = f, f
    for _ in range(5):
        want = model_step(want, mask, p["tau"], p["force"], p["u_wall"])
        got = reference.step(np, got, np.empty_like(got), lat)
    np.testing.assert_array_equal(got, want)


def test_node_codes():
    _, mask, _ = scene(45, 37, np.dtype(np.float32))
    code = tb.node_codes(np, mask)
    assert code.dtype == np.uint8 and code.shape == mask.shape
    np.testing.assert_array_equal(code & 0x7F, mask)
    edge = (code & tb.TB_EDGE) != 0
    assert not (edge & (mask != 0)).any()
    for y, x in zip(*np.nonzero(mask == 0)):  # edge iff an upstream node x - c_i is a wall
        up = [mask[(y - cy) % mask.shape[0], (x - cx) % mask.shape[1]] for cx, cy in C[1:]]
        assert edge[y, x] == any(m in (1, 2) for m in up)
    assert edge[1, :].all() and edge[-2, :].all()  # beside the bottom wall and the lid


# ---- unavailable_reason (CPU) -----------------------------------------------------------------
@pytest.mark.parametrize("sel, preset_kw, needle", [
    ({"kernel": "srtb", "ts": 2, "tr": 4, "tile": "32x8"}, {}, "tr = 4 > ts = 2"),
    ({"kernel": "stb", "ts": 4, "tr": 2, "tile": "32x8"}, {}, "tr must be 0"),
    ({"kernel": "srtb", "ts": 4, "tr": 0, "tile": "32x8"}, {}, "tr >= 1"),
    ({"kernel": "stb", "ts": 16, "tr": 0, "tile": "64x16"}, {}, "shared memory"),
    ({"kernel": "stb", "ts": 8, "tr": 0, "tile": "64x16"}, {"dtype": np.float64}, "shared memory"),
    ({"kernel": "stb", "ts": 4, "tr": 0, "tile": "32x8"}, {"x": "inlet-outlet"}, "inlet/outlet"),
    ({"kernel": "stb", "ts": 4, "tr": 0, "tile": "32x8"}, {"collision": "trt"}, "BGK"),
    ({"kernel": "srtb", "ts": 4, "tr": 4, "tile": "32x8"}, {}, "registers"),
    ({"kernel": "srtb", "ts": 4, "tr": 3, "tile": "32x8"}, {"dtype": np.float64}, "registers"),
    ({"kernel": "srtb-ws", "ts": 8, "tr": 8, "tile": "8x8"}, {}, "lanes"),
    ({"kernel": "srtb-ws", "ts": 2, "tr": 2, "tile": "10x10"}, {}, "whole warps"),
    ({"kernel": "stb", "ts": 1, "tr": 0, "tile": "64x32"}, {}, "threads"),
    ({"kernel": "stb", "ts": 1, "tr": 0, "tile": "32by8"}, {}, "tile must look like"),
    ({"kernel": "stb", "ts": 8, "tr": 0, "tile": "64x32", "storage": "fp16"}, {}, "threads"),
    ({"kernel": "wavefront", "ts": 4, "tr": 1, "tile": "128x64"}, {}, "tr must be 0"),
    ({"kernel": "wavefront", "ts": 4, "tr": 0, "tile": "8x64"}, {}, "keeps 0 after"),
    ({"kernel": "wavefront", "ts": 2, "tr": 0, "tile": "2048x4"}, {}, "threads"),
    ({"kernel": "wavefront", "ts": 8, "tr": 0, "tile": "256x64"}, {}, "shared memory"),
    ({"kernel": "wavefront", "ts": 4, "tr": 0, "tile": "128x64"}, {"x": "inlet-outlet"}, "inlet/outlet"),
])
def test_unavailable_reasons(sel, preset_kw, needle):
    reason = tb.unavailable_reason(sel, preset(**preset_kw))
    assert reason is not None and needle in reason, reason


@pytest.mark.parametrize("sel", [
    {"kernel": "stb", "ts": 8, "tr": 0, "tile": "32x8"},
    {"kernel": "stb", "ts": 8, "tr": 0, "tile": "64x16"},  # 180 KB: needs the Hopper opt-in
    {"kernel": "srtb", "ts": 4, "tr": 3, "tile": "32x8"},
    {"kernel": "srtb-ws", "ts": 8, "tr": 4, "tile": "32x8"},
    {"kernel": "srtb-ws", "ts": 4, "tr": 4, "tile": "8x8"},
    {"kernel": "stb", "ts": 8, "tr": 0, "tile": "64x32"} | {"tile": "64x16", "storage": "fp16"},
    {"kernel": "wavefront", "ts": 4, "tr": 0, "tile": "128x128"},  # a tile of 128 threads x 128 rows
    {"kernel": "wavefront", "ts": 8, "tr": 0, "tile": "128x64"},   # 151.5 KB: the Hopper opt-in
    {"kernel": "wavefront", "ts": 8, "tr": 0, "tile": "256x64", "storage": "fp16"},
])
def test_available(sel):
    assert tb.unavailable_reason(sel, preset()) is None


def test_fp16_storage_halves_shared_memory():
    sel = {"kernel": "stb", "ts": 8, "tr": 0, "tile": "64x16"}
    assert "shared memory" in tb.unavailable_reason(sel, preset(np.float64))
    assert tb.unavailable_reason(dict(sel, storage="fp16"), preset(np.float64)) is None
    assert tb.shared_bytes(8, (64, 16), 2) * 2 - 80 * 32 == tb.shared_bytes(8, (64, 16), 4)


def test_shared_bytes_formula():
    # 32x8 tile, halo 4: (40 x 16) nodes x 9 populations x 2 buffers x 4 B + 640 mask bytes
    assert tb.shared_bytes(4, (32, 8), 4) == 40 * 16 * 9 * 2 * 4 + 40 * 16
    assert tb.kernel_name({"kernel": "srtb-ws", "ts": 8, "tr": 2, "tile": "16x8"}, np.float32) == \
        "lbm2d_tb<float, float, 8, 2, 16, 8, true>"
    assert tb.kernel_name({"kernel": "stb", "ts": 4, "tr": 0, "tile": "32x8"}, np.float64) == \
        "lbm2d_tb<double, double, 4, 1, 32, 8, false>"
    assert tb.kernel_name({"kernel": "srtb", "ts": 4, "tr": 2, "tile": "32x8"}, np.float16) == \
        "lbm2d_tb<tb_half, float, 4, 2, 32, 8, false>"


def test_wavefront_shared_bytes_and_name():
    # ts = 4 levels x 4 ring rows x 9 populations x 128 columns x 4 B + a 16-row ring of node codes
    assert tb.wave_shared_bytes(4, 128, 4) == 4 * 4 * 9 * 128 * 4 + 16 * 128
    assert [tb.wave_code_rows(t) for t in (1, 2, 3, 4, 8)] == [8, 8, 16, 16, 32]  # power of 2 > 2 ts + 2
    assert tb.kernel_name({"kernel": "wavefront", "ts": 4, "tr": 0, "tile": "128x96"}, np.float32) == \
        "lbm2d_wave<float, float, 4, 128, 96>"
    assert tb.kernel_name({"kernel": "wavefront", "ts": 2, "tr": 0, "tile": "64x32"}, np.float16) == \
        "lbm2d_wave<tb_half, float, 2, 64, 32>"


# ---- the kernels vs the model (GPU) -----------------------------------------------------------
STEPS = 67
_MODEL_CACHE: dict = {}


def model_result(nx, ny, dtype):
    key = (nx, ny, np.dtype(dtype).name)
    if key not in _MODEL_CACHE:
        f, mask, params = scene(nx, ny, np.dtype(dtype))
        g = f
        for _ in range(STEPS):
            g = model_step(g, mask, params["tau"], params["force"], params["u_wall"])
        _MODEL_CACHE[key] = (f, mask, params, g)
    return _MODEL_CACHE[key]


def _cfg(kernel, ts, tr, tile):
    return pytest.param({"kernel": kernel, "ts": ts, "tr": tr, "tile": tile}, id=f"{kernel}-s{ts}r{tr}-{tile}")


MATRIX = (
    [_cfg("stb", ts, 0, tile) for ts in (1, 2, 4, 8) for tile in ("32x8", "8x8", "16x4")]
    + [_cfg("stb", 4, 0, "64x4")]
    + [_cfg("srtb", ts, tr, tile) for ts, tr in ((1, 1), (2, 1), (2, 2), (4, 2), (3, 3), (8, 2))
       for tile in ("32x8", "8x8")]
    + [_cfg("srtb-ws", ts, tr, tile) for ts, tr in ((2, 2), (4, 2), (4, 3), (4, 4), (8, 4)) for tile in ("32x8", "8x8")]
    + [_cfg("srtb-ws", 4, 3, "16x4"), _cfg("srtb-ws", 4, 2, "64x4")]
    # wavefront: strips that do not divide nx, runs that do not divide ny, a strip wider than the
    # domain (128 - 2 x 8 > 77), and a run longer than the domain
    + [_cfg("wavefront", ts, 0, tile) for ts, tile in ((1, "32x16"), (2, "64x7"), (4, "32x16"), (4, "128x128"),
                                                       (8, "128x20"), (3, "48x64"))]
)


def run_gpu(sel, nx, ny, dtype, nsteps=STEPS):
    cp = pytest.importorskip("cupy")
    f, mask, params, want = model_result(nx, ny, dtype)
    pre = preset(dtype)
    assert tb.unavailable_reason(sel, pre) is None
    step = tb.make_stepper(cp, sel, pre, mask, params)
    src = cp.asarray(f)
    dst = cp.zeros_like(src)
    step(src, dst, nsteps)
    np.testing.assert_array_equal(cp.asnumpy(src), f)  # the source is left untouched
    return cp.asnumpy(dst), want


@pytest.mark.gpu
@pytest.mark.parametrize("sel", MATRIX)
@pytest.mark.parametrize("nx, ny", [(77, 53), (64, 48)])
def test_kernel_matches_model_fp32(sel, nx, ny):
    got, want = run_gpu(sel, nx, ny, np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("sel", [_cfg("stb", 4, 0, "32x8"), _cfg("stb", 8, 0, "16x8"), _cfg("stb", 4, 0, "10x10"),
                                 _cfg("srtb", 4, 2, "32x8"), _cfg("srtb", 2, 2, "8x8"),
                                 _cfg("srtb-ws", 4, 3, "16x8"), _cfg("srtb-ws", 4, 2, "32x4"),
                                 _cfg("wavefront", 4, 0, "64x16"), _cfg("wavefront", 8, 0, "32x32")])
def test_kernel_matches_model_fp64(sel):
    got, want = run_gpu(sel, 77, 53, np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("sel", [_cfg("stb", 4, 0, "32x8"), _cfg("srtb", 4, 2, "32x8"), _cfg("srtb-ws", 8, 3, "32x8"),
                                 _cfg("wavefront", 4, 0, "64x16")])
def test_kernel_matches_model_fp16_storage(sel):
    """fp16 storage, fp32 arithmetic. Stated tolerance: the GPU's fused multiply-adds can move a
    value across a half rounding boundary (one half ulp = 4.9e-4 relative), and such flips spread;
    we allow 10 half ulps anywhere and 1 on average (the emulated test is bit-exact)."""
    cp = pytest.importorskip("cupy")
    f32, mask, params = scene(77, 53, np.dtype(np.float32))
    f = f32.astype(np.float16)
    params = dict(params, dtype=np.float16)
    sel = dict(sel, storage="fp16")
    assert tb.unavailable_reason(sel, preset()) is None
    step = tb.make_stepper(cp, sel, preset(), mask, params)
    src, dst = cp.asarray(f), cp.empty(f.shape, np.float16)
    step(src, dst, STEPS)
    want = f
    for _ in range(STEPS):
        want = model_step_fp16(want, mask, params["tau"], params["force"], params["u_wall"])
    got = cp.asnumpy(dst).astype(np.float64)
    want = want.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=10 * 2.0 ** -11, atol=0)
    assert np.mean(np.abs(got - want) / np.abs(want)) < 2.0 ** -11


@pytest.mark.gpu
@pytest.mark.parametrize("wave", [False, True], ids=["srtb-ws", "wavefront"])
def test_short_blocks_and_repeated_calls(wave):
    """nsteps < ts, and a sequence of calls, give the same as the model."""
    cp = pytest.importorskip("cupy")
    f, mask, params = scene(45, 37, np.dtype(np.float32))
    sel = {"kernel": "srtb-ws", "ts": 8, "tr": 3, "tile": "32x8"}
    if wave:
        sel = {"kernel": "wavefront", "ts": 8, "tr": 0, "tile": "64x16"}
    step = tb.make_stepper(cp, sel, preset(), mask, params)
    a, b = cp.asarray(f), cp.empty(f.shape, np.float32)
    want = f
    for n in (1, 5, 9, 3):
        step(a, b, n)
        a, b = b, a
        for _ in range(n):
            want = model_step(want, mask, params["tau"], params["force"], params["u_wall"])
        np.testing.assert_allclose(cp.asnumpy(a), want, rtol=1e-5, atol=0)


def test_p1_grid_lists_runnable_and_cannot_run_cells():
    rows = tb.p1_grid(preset())
    assert len(rows) == 4 * 7 + 2 * 4 * 4 * 7  # stb: ts x tiles; srtb(-ws): ts x (tr = 1..4) x tiles
    by_key = {(s["kernel"], s["ts"], s["tr"], s["tile"]): r for s, r in rows}
    assert by_key[("stb", 8, 0, "32x8")] is None
    assert "registers" in by_key[("srtb", 4, 4, "32x8")]
    assert "tr = 4 > ts = 2" in by_key[("srtb-ws", 2, 4, "8x8")]
    assert by_key[("srtb-ws", 8, 4, "32x8")] is None


@pytest.mark.gpu
def test_p1_bench_table_runs(capsys):
    from nagare.engine.lbm2d import tb_bench

    tb_bench.main(["--n", "96", "--steps", "8", "--kernels", "stb,srtb", "--ts", "2", "--tr", "0,1,4",
                   "--tiles", "32x8"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 + 3  # header lines + s2r0, s2r1, s2r4 (cannot run: tr > ts)
    assert "cannot run: tr = 4 > ts = 2" in lines[-1]
    assert float(lines[2].split("\t")[4]) > 0

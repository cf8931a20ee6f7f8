"""The generated CUDA, run on the CPU through an emulation of the CUDA launch (tests/unit/cuda_emulator.py):
for every launch configuration of the tuner's space, and every unrolled kernel, the output is bit-identical
to the NumPy loop engine, so the generated indexing, z-marching (unrolled steps, one-plane remainders,
periodic wrap at the ends of the march), register queues and fixed ranges are right without a GPU."""
from __future__ import annotations

import re

import numpy as np
import pytest
from nagare.engine.autotune import ALL_STENCIL_SHAPES, STENCIL_SHAPES, stencil_space
from nagare.engine.stencil import Loop, generate, stencil
from nagare.engine.stencil.codegen import (
    PLAIN,
    TILE,
    VEC,
    kernel_name,
    kernel_variants,
    loads_per_plane,
    output_at_line,
    tile_layout,
    tile_smem_bytes,
    unroll_for,
    unroll_variants,
    vec_choice,
    vec_layout,
    vec_reason,
    vec_widths,
)
from nagare.engine.stencil.library import diffusion7, wave2d
from nagare.engine.stencil.loops import launch_grid

from tests.unit import cuda_emulator
from tests.unit.test_stencil import mixed

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ to emulate the kernel")


@stencil(inputs=["f", "g"], outputs=["out"], params=["c"], halo=(1, 1, 2), ndim=3)
def zwide(f, g, c):
    """Two register queues (span 4 at (0,0), span 1 at (1,0)) plus direct loads with a marched offset."""
    return (c * (f[0, 0, -2] + f[0, 0, 2]) + (f[0, 0, -1] - f[0, 0, 1]) + f[1, 0, -1] * f[1, 0, 0]
            + g[0, 0, 0] - g[0, 1, 1] + f[-1, -1, 0] * f[0, 0, 0])


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    """The compiled emulations, shared by the module's tests: cuda_emulator.build caches them by content."""
    return tmp_path_factory.mktemp("stencil_emu")


def _check(st, shape, dtype, boundary, params, configs, rng, emu_dir, unroll=None):
    fns: dict = {}  # each emulated kernel is loaded on first use (compiled once per stencil, dtype and boundary)
    arrays = {n: (rng.random(shape) + 0.5).astype(dtype) for n in st.inputs}
    want = {n: np.full(shape, -3.0, dtype) for n in st.outputs}
    Loop(st, shape, dtype, boundary=boundary)(**arrays, **want, **params)
    for cfg in configs:
        plain = cfg.get("shape", "march") == PLAIN
        kind = cfg.get("shape", "march")
        u = kind if kind != "march" else (unroll if unroll is not None else unroll_for(st, cfg["zmarch"]))
        block = (cfg["bx"], cfg["by"], cfg["zmarch"] if plain else 1)
        got = {n: np.full(shape, -3.0, dtype) for n in st.outputs}
        width = int(kind[len(VEC):]) if kind.startswith(VEC) else 0
        grid = launch_grid(st, shape, boundary, cfg["bx"], cfg["by"], cfg["zmarch"], width)
        if u not in fns:
            fns[u] = cuda_emulator.build(st, dtype, boundary, emu_dir, u)
        cuda_emulator.launch(fns[u], st, dtype, grid, block, {**arrays, **got}, params, cfg["zmarch"])
        for n in st.outputs:
            np.testing.assert_array_equal(got[n], want[n], err_msg=f"{st.name} {boundary} {cfg} unroll {u} output {n}")


def _valid_configs(shapes=("march",)):
    space = stencil_space(shapes=shapes)
    return [space.config(k) for k in space.all_keys() if not space.invalid_reason(space.config(k))]


def _plain_configs():
    return [c for c in _valid_configs(STENCIL_SHAPES) if c["shape"] == PLAIN]


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_diffusion7_every_launch_configuration(boundary, rng, emu_dir):
    configs = _valid_configs()
    assert len(configs) == 161
    _check(diffusion7, (11, 9, 37), np.float32, boundary, {"r": 0.1}, configs, rng, emu_dir)


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
@pytest.mark.parametrize("unroll", [1, 2, 4, 8])
def test_every_unrolled_kernel_with_any_zmarch(boundary, unroll, rng, emu_dir):
    """Each unroll with march lengths that are not multiples of it (remainder planes), shorter than
    it (only one-plane steps), and runs that end at the grid's z-ends (periodic wrap)."""
    configs = [{"bx": 8, "by": 4, "zmarch": z} for z in (1, 3, 5, 8, 11, 16, 29, 64)]
    _check(diffusion7, (23, 6, 9), np.float32, boundary, {"r": 0.1}, configs, rng, emu_dir, unroll=unroll)
    _check(diffusion7, (23, 6, 9), np.float64, boundary, {"r": 0.1}, configs[::3], rng, emu_dir, unroll=unroll)


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_wide_queues_and_marched_direct_loads(boundary, rng, emu_dir):
    assert loads_per_plane(zwide) == 5 and unroll_variants(zwide) == (1, 2, 4, 8)
    configs = [{"bx": b, "by": y, "zmarch": z} for b, y, z in ((32, 1, 1), (8, 4, 2), (16, 2, 7), (4, 8, 8),
                                                                  (8, 8, 16), (32, 2, 64))]
    for u in unroll_variants(zwide):
        _check(zwide, (13, 7, 10), np.float64, boundary, {"c": 0.3}, configs, rng, emu_dir, unroll=u)


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_wave2d_and_multi_output_stencil(boundary, rng, emu_dir):
    configs = _valid_configs()[::7]
    _check(wave2d, (23, 41), np.float64, boundary, {"c2": 0.3}, configs, rng, emu_dir)
    _check(mixed, (7, 9, 13), np.float32, boundary, {"s": 0.3, "t": 1.7}, configs, rng, emu_dir)
    for u in unroll_variants(wave2d):  # 2D: the marched axis is y
        _check(wave2d, (29, 17), np.float32, boundary, {"c2": 0.3},
               [{"bx": 32, "by": 2, "zmarch": z} for z in (1, 3, 8, 13)], rng, emu_dir, unroll=u)


def test_grid_covers_the_update_range():
    assert launch_grid(diffusion7, (512, 512, 8), "periodic", 8, 16, 8) == (1, 32, 64)
    assert launch_grid(diffusion7, (12, 10, 8), "fixed", 4, 2, 4) == (2, 4, 3)  # 6×8×10 interior
    assert launch_grid(wave2d, (41, 23), "periodic", 8, 2, 4) == (3, 6, 1)


def test_unrolled_step_uses_32_bit_offsets_and_issues_all_loads_first():
    """The shape the performance depends on, read off the generated source: in the unrolled step
    every load comes before the first store, addresses are column pointers with int offsets (no
    64-bit index arithmetic), and the pointers advance by U planes."""
    src = generate(diffusion7, "float32", "periodic")
    for u in unroll_variants(diffusion7):
        body = src.split(f"void {kernel_name(diffusion7, 'float32', 'periodic', u)}(")[1].split("extern")[0]
        fast = body.split(f"if (k + {u} <= k1")[1].split("} else {")[0]
        lines = [ln.strip() for ln in fast.splitlines() if ln.strip() and not ln.strip().startswith("//")]
        loads = [n for n, ln in enumerate(lines) if "pin_f[" in ln]
        stores = [n for n, ln in enumerate(lines) if ln.startswith("pout_fn[")]
        assert len(loads) == 5 * u and len(stores) == u
        assert max(loads) < min(stores)
        assert "long long" not in fast and not re.search(r"\bin_f\[", fast)
        assert f"pin_f += {u} * nagare_plane;" in fast
    assert unroll_variants(diffusion7) == (1, 2, 4, 8)
    assert [unroll_for(diffusion7, z) for z in (1, 2, 3, 4, 7, 8, 16, 64)] == [1, 2, 2, 4, 4, 8, 8, 8]


def _tile_configs():
    return [c for c in _valid_configs(ALL_STENCIL_SHAPES) if c["shape"] == TILE]


def test_the_tuner_space_holds_the_kernel_shapes():
    """Default: march + plain + vec (249 valid of 630, exhaustive); tile only when asked for."""
    both = _valid_configs(STENCIL_SHAPES)
    assert STENCIL_SHAPES == ("march", "plain", "vec") and TILE not in STENCIL_SHAPES
    assert len(both) == 249 and len(_plain_configs()) == 32 and len(_tile_configs()) == 36
    assert len([c for c in both if c["shape"] == "vec"]) == 56  # 14 blocks of whole warps × 4 marches
    assert len(_valid_configs(ALL_STENCIL_SHAPES)) == 285
    assert [c for c in both if c["shape"] == "march"] == [{**c, "shape": "march"} for c in _valid_configs()]
    assert {c["zmarch"] for c in _plain_configs()} == {1, 2, 4}
    space = stencil_space(shapes=STENCIL_SHAPES)
    assert "plain shape: bz = 8" in space.invalid_reason({"bx": 32, "by": 1, "zmarch": 8, "shape": PLAIN})
    assert "1024 threads" not in (space.invalid_reason({"bx": 32, "by": 8, "zmarch": 4, "shape": PLAIN}) or "")
    assert "2048 threads per block > 1024" in space.invalid_reason({"bx": 64, "by": 8, "zmarch": 4, "shape": PLAIN})


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_plain_kernel_every_launch_configuration(boundary, rng, emu_dir):
    """The plain shape (3D blocks, one thread per point, wrapped neighbour offsets at the faces) for
    every plain point of the tuner's space, on grids that no block size divides."""
    configs = _plain_configs()
    _check(diffusion7, (11, 9, 37), np.float32, boundary, {"r": 0.1}, configs, rng, emu_dir)
    _check(diffusion7, (5, 3, 33), np.float64, boundary, {"r": 0.1}, configs[::5], rng, emu_dir)


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_plain_kernel_wide_halos_2d_and_multi_output(boundary, rng, emu_dir):
    """Halo 2 along the march axis (wrap by two), two inputs, 2D (block z folded into y), and several outputs."""
    configs = _plain_configs()[::3]
    _check(zwide, (13, 7, 10), np.float64, boundary, {"c": 0.3}, configs, rng, emu_dir)
    _check(wave2d, (23, 41), np.float64, boundary, {"c2": 0.3}, configs, rng, emu_dir)
    _check(wave2d, (29, 17), np.float32, boundary, {"c2": 0.3}, configs, rng, emu_dir)
    _check(mixed, (7, 9, 13), np.float32, boundary, {"s": 0.3, "t": 1.7}, configs, rng, emu_dir)


def test_plain_kernel_source_is_int32_and_branch_free_in_the_loads():
    src = generate(diffusion7, "float32", "periodic")
    assert kernel_variants(diffusion7) == (1, 2, 4, 8, PLAIN, TILE, "vec2", "vec4")
    body = src.split(f"void {kernel_name(diffusion7, 'float32', 'periodic', PLAIN)}(")[1].split("extern")[0]
    assert "long long" not in body and "nagare_wrap" not in body and "blockDim.z" in body
    loads = [ln.strip() for ln in body.splitlines() if "= in_f[" in ln]
    assert len(loads) == 7 and "const T f__0_0_0 = in_f[c];" in loads
    assert "out_fn[c] = " in body


@pytest.mark.parametrize("boundary", ["periodic", pytest.param("fixed", marks=pytest.mark.slow)])
def test_tile_kernel_every_launch_configuration(boundary, rng, emu_dir):
    """The 2.5D-blocked tile kernel (threaded emulation: one fiber per CUDA thread, a barrier
    for __syncthreads, NaN-poisoned shared memory) for every tile point of the tuner's space, on grids
    that no tile divides (x < bx, y not a multiple of by, z not a multiple of the march)."""
    configs = _tile_configs()
    assert kernel_variants(diffusion7) == (1, 2, 4, 8, PLAIN, TILE, "vec2", "vec4")
    _check(diffusion7, (37, 9, 11), np.float32, boundary, {"r": 0.1}, configs, rng, emu_dir)
    _check(diffusion7, (21, 13, 70), np.float64, boundary, {"r": 0.1}, configs[::5], rng, emu_dir)


@stencil(inputs=["f", "g"], outputs=["a", "b"], params=["c"], halo=(2, 2, 2), ndim=3)
def halo2(f, g, c):
    """Halo 2 in x, y and z, a diagonal (corner) read, a tiled array read off its plane, two outputs."""
    return (c * (f[-2, 0, 0] + f[2, 0, 0] + f[0, -2, 0] + f[0, 2, 0] + f[0, 0, -2] + f[0, 0, 2])
            + f[1, 1, 0] - f[-1, -2, 0] + g[0, 1, 1] * g[0, 0, 0],
            f[0, 0, 0] - g[-2, 2, -1] + g[0, 0, 1])


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_tile_kernel_halo_2_corners_and_off_plane_tiles(boundary, rng, emu_dir):
    tiles, queues = tile_layout(halo2)
    assert tiles == [("f", 0), ("g", -1), ("g", 1)] and queues == {"f": (-2, 2), "g": (-1, 1)}
    assert tile_smem_bytes(halo2, np.float64, 32, 2) == 2 * 3 * 36 * 6 * 8
    configs = [{"bx": b, "by": y, "zmarch": z, "shape": TILE} for b, y, z in
               ((32, 2, 8), (64, 4, 16), (32, 8, 64), (128, 2, 32))]
    _check(halo2, (19, 11, 7), np.float64, boundary, {"c": 0.3}, configs, rng, emu_dir)
    _check(halo2, (9, 70, 5), np.float32, boundary, {"c": 0.3}, configs[:2], rng, emu_dir)
    _check(zwide, (13, 7, 10), np.float64, boundary, {"c": 0.3}, configs, rng, emu_dir)
    _check(mixed, (7, 9, 13), np.float32, boundary, {"s": 0.3, "t": 1.7}, configs, rng, emu_dir)


def test_tile_shape_is_3d_only_and_checks_shared_memory():
    space2d = stencil_space(shapes=ALL_STENCIL_SHAPES, ndim=2)
    assert "tile shape: 3D only" in space2d.invalid_reason({"bx": 64, "by": 4, "zmarch": 16, "shape": TILE})
    assert TILE not in kernel_variants(wave2d) and "_tile(" not in generate(wave2d, "float32", "periodic")
    big = stencil_space(shapes=ALL_STENCIL_SHAPES, ndim=3, tile_smem=lambda cfg: tile_smem_bytes(
        halo2, np.float64, cfg["bx"], cfg["by"]))
    # 2 buffers × 3 tiles × 132 × 12 × 8 B = 76032 B
    assert big.invalid_reason({"bx": 128, "by": 8, "zmarch": 16, "shape": TILE}) == (
        "tile shape: needs 76032 B of shared memory > 49152 B per block")
    assert big.invalid_reason({"bx": 32, "by": 2, "zmarch": 16, "shape": TILE}) is None
    assert "tile shape: by = 1 not in" in big.invalid_reason({"bx": 32, "by": 1, "zmarch": 16, "shape": TILE})


def test_tile_kernel_source_stages_planes_in_shared_memory():
    src = generate(diffusion7, "float32", "periodic")
    body = src.split(f"void {kernel_name(diffusion7, 'float32', 'periodic', TILE)}(")[1]
    loop = body.split("for (int k = k0; k < k1; ++k) {")[1]
    assert loop.count("__syncthreads();") == 1  # double-buffered tiles: one barrier per plane
    # the next plane's queue lead is loaded before this plane's staging, barrier and update
    assert loop.index("n_f = in_f[") < loop.index("t_f_0[c] = q_f_0;") < loop.index("__syncthreads")
    update = [ln for ln in loop.splitlines() if "out_fn[at] =" in ln][0]
    assert "in_f[" not in update and update.count("t_f_0[c + so_") == 4 and "q_f_m1" in update


# ---- the vec shape: V x-consecutive points per thread, vector loads, x-neighbours by warp shuffles ----------
@stencil(inputs=["f"], outputs=["g"], params=["a"], halo=(4, 1, 1), ndim=3)
def wide4(f, a):
    """x-halo 4 = V: the whole left/right neighbour vectors come from the adjacent lanes; x-offsets at y/z offsets."""
    return (a * (f[-4, 0, 0] + f[4, 0, 0]) + f[-3, 1, 0] - f[3, -1, 1] + (f[-1, 0, -1] + f[2, 0, 1]) * f[0, 0, 0]
            - f[-2, 1, 1])


@stencil(inputs=["f", "h"], outputs=["g"], halo=(0, 1, 2), ndim=3)
def zonly(f, h):
    """No x-neighbours (no shuffles); a gapped z-run (direct rows) and a contiguous one (a queue)."""
    return f[0, 0, -2] * f[0, 0, 2] + h[0, -1, 0] - h[0, 0, -1] + h[0, 0, 0] * h[0, 0, 1]


def _vec(configs, width):
    return [{"bx": b, "by": y, "zmarch": z, "shape": f"{VEC}{width}"} for b, y, z in configs]


# Launch shapes: a single warp per row, several warps per row (64, 128 threads in x), blocks of several
# rows, marches of 1, shorter than / not a multiple of / longer than the grid's z.
VEC_LAUNCHES = ((32, 1, 1), (32, 4, 3), (64, 2, 5), (128, 1, 8), (64, 4, 64))


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
@pytest.mark.parametrize("width", [4, 2])
def test_vec_kernel_diffusion7_with_idle_lanes_and_several_warps_per_row(boundary, width, rng, emu_dir):
    """Rows of 66 (V = 4) / 68 (V = 2) vectors: with 32 threads in x, three blocks per row (the last one
    two active lanes and 30 idle ones that still shuffle); with 64, a fully idle warp; with 128, one block
    whose warps meet at lanes 31 / 0 (edge lanes load their neighbours). nx = 40: one partial warp."""
    assert vec_widths(diffusion7) == (2, 4)
    configs = _vec(VEC_LAUNCHES, width)
    nx = 264 if width == 4 else 136
    _check(diffusion7, (7, 5, nx), np.float32, boundary, {"r": 0.1}, configs, rng, emu_dir)
    _check(diffusion7, (9, 6, 40), np.float32, boundary, {"r": 0.1}, configs[:3], rng, emu_dir)
    _check(diffusion7, (6, 4, nx), np.float64, boundary, {"r": 0.1}, configs[1:4], rng, emu_dir)


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_vec_kernel_halo_2_two_inputs_and_outputs_fp64(boundary, rng, emu_dir):
    """x-halo 2 (two shuffled elements per side), corners, rows read off the plane, two inputs and two
    outputs, a parameter; V = 4 and V = 2 (= the x-halo), fp64 (32-byte vectors) and fp32."""
    assert vec_widths(halo2) == (2, 4)
    for width in (4, 2):
        configs = _vec(VEC_LAUNCHES[1:4], width)
        _check(halo2, (7, 9, 136), np.float64, boundary, {"c": 0.3}, configs, rng, emu_dir)
        _check(halo2, (6, 11, 20), np.float32, boundary, {"c": 0.3}, configs[:2], rng, emu_dir)
        _check(mixed, (7, 9, 136), np.float32, boundary, {"s": 0.3, "t": 1.7}, configs, rng, emu_dir)


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_vec_kernel_queues_gapped_rows_and_x_halo_equal_to_v(boundary, rng, emu_dir):
    queues, direct, xoffs = vec_layout(zwide)
    assert queues == {("f", 0): (-2, 2)} and ("g", 1, 1) in direct and xoffs[("f", 0, -1)] == (0, 1)
    queues, direct, _ = vec_layout(zonly)
    assert queues == {("h", 0): (-1, 1)} and direct == [("f", 0, -2), ("f", 0, 2), ("h", -1, 0)]
    assert vec_widths(wide4) == (4,) and vec_widths(zonly) == (2, 4)
    configs = _vec(VEC_LAUNCHES[:4], 4)
    _check(zwide, (13, 7, 136), np.float64, boundary, {"c": 0.3}, configs, rng, emu_dir)
    _check(wide4, (6, 5, 264), np.float32, boundary, {"a": 0.3}, configs, rng, emu_dir)
    _check(wide4, (5, 4, 12), np.float64, boundary, {"a": 0.3}, configs[:2], rng, emu_dir)  # nx = 3 V
    _check(zonly, (9, 5, 136), np.float32, boundary, {}, configs + _vec(VEC_LAUNCHES[:2], 2), rng, emu_dir)


def test_vec_shape_conditions_and_reasons():
    """Where the vec shape cannot run it says why: 2D, x-halo > V, nx not a multiple of V; the
    tuner's space rules out blocks that are not whole warps and uses the grid's reason."""
    assert vec_choice(diffusion7, (8, 8, 64)) == ("vec4", None)
    assert vec_choice(diffusion7, (8, 8, 66)) == ("vec2", None)
    variant, why = vec_choice(diffusion7, (8, 8, 37))
    assert variant is None and "vec4 shape: nx = 37 is not a multiple of V = 4" in why and "vec2 shape" in why
    assert vec_choice(wide4, (8, 8, 66))[0] is None  # vec2 is not generated for an x-halo of 4
    assert "x-halo 4 > V = 2" in vec_reason(wide4, (8, 8, 64), 2)
    assert "3D stencils only" in vec_reason(wave2d, (16, 64), 4)
    assert VEC not in "".join(map(str, kernel_variants(wave2d))) and "_vec" not in generate(wave2d, "float32", "fixed")

    @stencil(inputs=["f"], outputs=["g"], halo=(5, 0, 0), ndim=3)
    def x5(f):
        return f[-5, 0, 0] + f[5, 0, 0]

    assert vec_widths(x5) == () and "_vec" not in generate(x5, "float32", "periodic")
    assert "x-halo 5 > V = 4" in vec_choice(x5, (4, 4, 64))[1]
    space = stencil_space(shapes=STENCIL_SHAPES, vec_reason=lambda cfg: vec_choice(diffusion7, (8, 8, 37))[1])
    assert "not a multiple of V = 4" in space.invalid_reason({"bx": 32, "by": 8, "zmarch": 4, "shape": VEC})
    space = stencil_space(shapes=STENCIL_SHAPES)
    assert "vec shape: bx = 16 not in (32, 64, 128) (whole warps" in space.invalid_reason(
        {"bx": 16, "by": 8, "zmarch": 4, "shape": VEC})
    assert "vec shape: zmarch = 2 not in" in space.invalid_reason({"bx": 32, "by": 8, "zmarch": 2, "shape": VEC})
    assert "2048 threads per block" in space.invalid_reason({"bx": 128, "by": 16, "zmarch": 4, "shape": VEC})
    assert space.invalid_reason({"bx": 32, "by": 8, "zmarch": 4, "shape": VEC}) is None
    assert "vec shape: 3D only" in stencil_space(shapes=STENCIL_SHAPES, ndim=2).invalid_reason(
        {"bx": 32, "by": 8, "zmarch": 4, "shape": VEC})


def test_vec_kernel_source_is_vector_loads_and_shuffles():
    """The shape the performance depends on: per plane of diffusion7 three aligned vector loads (the
    queue lead, y−1, y+1), the x-neighbours by one shuffle each way (edge lanes load one value), one
    vector store; every shuffle outside any branch (all 32 lanes reach it)."""
    src = generate(diffusion7, "float32", "periodic")
    assert "struct alignas(16) nagare_v4 { T e[4]; };" in src and "struct alignas(8) nagare_v2" in src
    assert "struct alignas(32) nagare_v4 { T e[4]; };" in generate(diffusion7, "float64", "fixed")
    body = src.split(f"void {kernel_name(diffusion7, 'float32', 'periodic', 'vec4')}(")[1]
    loop = body.split("for (int k = k0; k < k1; ++k) {")[1]
    assert loop.count("*reinterpret_cast<const nagare_v4*>(in_f + ") == 3
    assert loop.count("__shfl_up_sync(0xffffffffu, f__q_0_s1.e[3], 1)") == 1
    assert loop.count("__shfl_down_sync(0xffffffffu, f__q_0_s1.e[0], 1)") == 1
    assert loop.count("*reinterpret_cast<nagare_v4*>(out_fn + z_0 + r_0 + xc) = ") == 1
    for ln in loop.splitlines():
        if "__shfl" in ln:
            assert ln.startswith("        T ") and "if" not in ln and "?" not in ln
    assert "if (w0 >= nx || j >= ny) return;" in body  # the only early exit: per warp
    fixed = generate(diffusion7, "float32", "fixed").split("_fixed_float_vec4(")[1]
    assert "if (upd_3) out_fn[z_0 + r_0 + xc + 3] = fn__v3;" in fixed  # row ends: element stores
    src = generate(mixed, "float32", "periodic")
    n = next(i for i, ln in enumerate(src.splitlines(), 1) if ln.strip().startswith("const T o2__v3 = "))
    assert output_at_line(src, n).startswith("o2 = ")  # compile errors in a vec kernel name the output

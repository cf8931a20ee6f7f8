"""The stencil framework on the CPU: tracing, NumPy evaluation, CUDA generation, user errors."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from nagare.engine.diffusion3d import reference as dref
from nagare.engine.stencil import Loop, StencilError, fmax, generate, sqrt, stencil
from nagare.engine.stencil.codegen import output_at_line
from nagare.engine.stencil.library import LIBRARY, diffusion7, wave2d
from nagare.engine.stencil.loops import format_compile_error
from nagare.engine.wave2d import reference as wref


@stencil(inputs=["a", "b"], outputs=["o1", "o2"], params=["s", "t"], halo=(2, 1, 1), ndim=3)
def mixed(a, b, s, t):
    return {"o1": sqrt(a[2, 0, 0] * a[-2, 1, 0] + 1.0) - b[0, -1, 1] / t,
            "o2": fmax(-a[0, 0, -1], s) ** 2 + 0.1 * b[1, 1, 0]}


def naive_mixed(a, b, s, t, boundary):
    """Point-by-point loops with explicit (x, y, z) offsets: an independent check of orientation."""
    nz, ny, nx = a.shape
    o1, o2 = np.zeros_like(a), np.zeros_like(a)
    T = a.dtype.type

    def at(arr, i, j, k):
        return arr[k % nz, j % ny, i % nx]

    for k in range(nz):
        for j in range(ny):
            for i in range(nx):
                if boundary == "fixed" and not (2 <= i < nx - 2 and 1 <= j < ny - 1 and 1 <= k < nz - 1):
                    continue
                root = np.sqrt(at(a, i + 2, j, k) * at(a, i - 2, j + 1, k) + T(1.0))
                o1[k, j, i] = root - at(b, i, j - 1, k + 1) / T(t)
                m = max(-at(a, i, j, k - 1), T(s))
                o2[k, j, i] = m * m + T(0.1) * at(b, i + 1, j + 1, k)
    return o1, o2


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_multi_array_stencil_matches_point_loops(boundary, dtype, rng):
    shape = (5, 6, 7)  # z, y, x: every axis different so a transposed offset cannot pass
    a = (rng.random(shape) + 0.5).astype(dtype)
    b = (rng.random(shape) + 0.5).astype(dtype)
    o1, o2 = np.zeros_like(a), np.zeros_like(a)
    Loop(mixed, shape, dtype, boundary=boundary)(a=a, b=b, o1=o1, o2=o2, s=0.3, t=1.7)
    w1, w2 = naive_mixed(a, b, 0.3, 1.7, boundary)
    np.testing.assert_allclose(o1, w1, rtol=4 * np.finfo(dtype).eps)
    np.testing.assert_allclose(o2, w2, rtol=4 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_diffusion7_host_is_bit_identical_to_the_array_reference(dtype, boundary, rng):
    f = rng.random((9, 10, 11)).astype(dtype)
    fn = f.copy()
    Loop(diffusion7, f.shape, dtype, boundary=boundary)(f=f, fn=fn, r=0.1)
    want = f.copy()
    (dref.diffuse_periodic if boundary == "periodic" else dref.diffuse_fixed)(np, f, want, dtype(0.1))
    np.testing.assert_array_equal(fn, want)


@pytest.mark.parametrize("boundary", ["periodic", "fixed"])
def test_wave2d_host_is_bit_identical_to_the_array_reference(boundary, rng):
    u, up = rng.random((12, 17)).astype(np.float32), rng.random((12, 17)).astype(np.float32)
    out = np.zeros_like(u)
    Loop(wave2d, u.shape, np.float32, boundary=boundary)(u=u, u_prev=up, u_next=out, c2=0.25)
    want = np.zeros_like(u)
    (wref.leapfrog_periodic if boundary == "periodic" else wref.leapfrog_fixed)(np, u, up, want, np.float32(0.25))
    np.testing.assert_array_equal(out, want)


def test_fixed_boundary_leaves_outer_points_untouched(rng):
    f = rng.random((6, 7, 8))
    fn = np.full_like(f, -7.0)
    Loop(diffusion7, f.shape, f.dtype, boundary="fixed")(f=f, fn=fn, r=0.1)
    inner = np.zeros(f.shape, bool)
    inner[1:-1, 1:-1, 1:-1] = True
    assert (fn[~inner] == -7.0).all()
    assert (fn[inner] != -7.0).all()


# ---- user errors: one line, before compiling, naming the user's line --------------------------
def _one_line(exc):
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_offset_beyond_halo():
    with pytest.raises(StencilError) as e:
        @stencil(inputs=["f"], outputs=["g"], halo=1, ndim=3)
        def bad(f):
            return f[2, 0, 0]
    msg = _one_line(e)
    assert "offset +2 along x" in msg and "beyond the declared halo 1" in msg and "test_stencil.py:" in msg


def test_wrong_number_of_offsets():
    with pytest.raises(StencilError) as e:
        @stencil(inputs=["f"], outputs=["g"], ndim=3)
        def bad(f):
            return f[1, 0]
    assert "has 2 offset(s); this 3D stencil needs 3" in _one_line(e)


def test_unknown_array_in_function():
    with pytest.raises(StencilError) as e:
        @stencil(inputs=["f"], outputs=["g"], params=["r"], ndim=2)
        def bad(f, h, r):
            return f[0, 0] + h[0, 0]
    msg = _one_line(e)
    assert "the function takes (f, h, r)" in msg and "not declared: h" in msg


def test_declared_input_missing_from_function():
    with pytest.raises(StencilError, match="missing: g"):
        @stencil(inputs=["f", "g"], outputs=["o"], ndim=2)
        def bad(f):
            return f[0, 0]


def test_wrong_number_of_returned_outputs():
    with pytest.raises(StencilError, match=r"returned 1 value\(s\) for 2 declared output\(s\)"):
        @stencil(inputs=["f"], outputs=["a", "b"], ndim=2)
        def bad(f):
            return (f[0, 0],)
    with pytest.raises(StencilError, match="returned one value for 2 declared outputs"):
        @stencil(inputs=["f"], outputs=["a", "b"], ndim=2)
        def bad2(f):
            return f[0, 0]
    with pytest.raises(StencilError, match="forget to return"):
        @stencil(inputs=["f"], outputs=["a"], ndim=2)
        def bad3(f):
            f[0, 0]


def test_branching_and_arrays_without_offset_are_rejected():
    with pytest.raises(StencilError, match="branch-free"):
        @stencil(inputs=["f"], outputs=["g"], ndim=2)
        def bad(f):
            return f[0, 0] if f[1, 0] > 0 else f[-1, 0]
    with pytest.raises(StencilError, match=r"write f\[0, 0\] for the centre point"):
        @stencil(inputs=["f"], outputs=["g"], ndim=2)
        def bad2(f):
            return 2 * f
    with pytest.raises(StencilError, match="NumPy functions cannot be applied"):
        @stencil(inputs=["f"], outputs=["g"], ndim=2)
        def bad3(f):
            return np.sqrt(f[0, 0])
    with pytest.raises(StencilError, match=r"only x\*\*2"):
        @stencil(inputs=["f"], outputs=["g"], ndim=2)
        def bad4(f):
            return f[0, 0] ** 3


def test_declaration_errors():
    with pytest.raises(StencilError, match="declared twice"):
        stencil(inputs=["f"], outputs=["f"], ndim=2)(lambda f: f[0, 0])
    with pytest.raises(StencilError, match="reserved"):
        stencil(inputs=["int"], outputs=["g"], ndim=2)(lambda f: 0.0)
    with pytest.raises(StencilError, match="ndim must be 2 or 3"):
        stencil(inputs=["f"], outputs=["g"], ndim=4)(lambda f: 0.0)


def test_call_time_errors(rng):
    f = rng.random((4, 5, 6))
    loop = Loop(diffusion7, f.shape, f.dtype)
    with pytest.raises(StencilError, match="missing argument"):
        loop(f=f, fn=np.zeros_like(f))
    with pytest.raises(StencilError, match="shares memory with input 'f'"):
        loop(f=f, fn=f, r=0.1)
    with pytest.raises(StencilError, match=r"array 'fn' is float32\(4, 5, 6\), expected float64"):
        loop(f=f, fn=np.zeros(f.shape, np.float32), r=0.1)
    with pytest.raises(StencilError, match="unknown argument"):
        loop(f=f, fn=np.zeros_like(f), r=0.1, q=1)
    with pytest.raises(StencilError, match="unknown loop engine"):
        Loop(diffusion7, f.shape, f.dtype, engine="gpu")
    with pytest.raises(StencilError, match="too few for halo 1"):
        Loop(diffusion7, (2, 5, 6), f.dtype, boundary="fixed")(f=np.zeros((2, 5, 6)), fn=np.zeros((2, 5, 6)), r=0.1)


# ---- generated CUDA ---------------------------------------------------------------------------
def test_generated_source_shape_and_comments():
    src = generate(diffusion7, np.float32, "periodic")
    for u in (1, 2, 4, 8):  # one kernel per unroll of the march
        assert f'extern "C" __global__ void nagare_diffusion7_periodic_float_u{u}(' in src
    assert "typedef float T;" in src and "#include" not in src
    # Per kernel: 2 queue-priming loads, and in the one-plane step 1 queue lead + 4 in-plane
    # neighbours (each distinct neighbour loaded once per point; the z-column is carried in registers).
    assert 'extern "C" __global__ void nagare_diffusion7_periodic_float_plain(' in src
    # … plus the plain kernel's 7 loads (one per neighbour, no march).
    # … and the tile kernel's one per-plane load: the prefetched queue lead (halo/x-y neighbours: shared memory).
    # … and in each vec kernel (V = 2, 4) the edge lanes' own x-neighbours (its rows are vector loads).
    assert src.count("= in_f[") == 4 * 7 + 7 + 1 + 2 * 2
    assert src.count("*reinterpret_cast<const nagare_v4*>(in_f + ") == 2 + 3  # queue priming, 3 rows per plane
    assert src.count("while (k < k1) {") == 4  # z-marching
    assert "// output fn = " in src and "library.py:" in src
    src2 = generate(wave2d, np.float64, "fixed")
    assert "typedef double T;" in src2 and "nagare_wrap" not in src2
    assert src2.count("while (j < j1) {") == 4


def test_compile_errors_point_at_the_users_expression():
    src = generate(mixed, np.float32, "periodic")
    lines = src.splitlines()
    n = next(i for i, ln in enumerate(lines, 1) if ln.strip().startswith("pout_o2[3 * nagare_plane]"))
    log = f"nagare_mixed.cu({n}): error: identifier \"fmax\" is undefined\n1 error detected"
    msg = format_compile_error(mixed, src, log)
    assert msg.startswith("stencil 'mixed' (test_stencil.py:")
    assert "in output o2 = " in msg and 'identifier "fmax" is undefined' in msg
    assert output_at_line(src, 3) is None


def test_fingerprint_follows_the_update():
    @stencil(inputs=["f"], outputs=["g"], ndim=2, name="same")
    def a(f):
        return f[1, 0]

    @stencil(inputs=["f"], outputs=["g"], ndim=2, name="same")
    def b(f):
        return f[-1, 0]

    assert a.fingerprint != b.fingerprint
    assert diffusion7.fingerprint == diffusion7.fingerprint


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("st,dtype,boundary", [(diffusion7, "float32", "periodic"), (wave2d, "float64", "fixed"),
                                               (mixed, "float32", "fixed")])
def test_generated_cuda_compiles_with_nvcc(st, dtype, boundary, tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(generate(st, dtype, boundary))
    res = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "--fmad=false", "-c", "-x", "cu", str(cu), "-o",
                          str(tmp_path / "k.o")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_library_names():
    assert set(LIBRARY) >= {"diffusion7", "wave2d"}

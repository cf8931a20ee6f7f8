"""The fast pair (variant pair = fast) against the exact pair on the CPU: sph.cuh's candidate() and
sph.cu's candidate_fast() compiled as C++ (the CUDA built-ins they use emulated), every particle
of a jittered block against every other (a brute-force candidate set, so the filters run too),
in every layout, both kernels, 2D and 3D, fp32 and fp64; and the unrolled Verlet walk and list-build search
against their one-at-a-time forms. The emulator has no SFU: its rsqrt and
reciprocals are correctly rounded, so this checks the algebra, the constants, the wall flag in the
density's sign and the loads; the SFU round-off itself is for the gpu tests (test_sph_gpu.py)."""
from __future__ import annotations

import ctypes
import itertools
from pathlib import Path

import numpy as np
import pytest

from tests.unit.cuda_emulator import PRELUDE, available, compile_shared

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")

SRC = Path(__file__).resolve().parents[2] / "shaders" / "cuda" / "sph"

# The CUDA vector types and SFU intrinsics the two candidate functions use, on the host.
EXTRA = """
#include <cmath>
using std::pow; using std::exp2; using std::log2; using std::ceil; using std::max;
struct float4 { float x, y, z, w; };
struct double2 { double x, y; };
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float exp2f(float x) { return std::exp2(x); }
inline float log2f(float x) { return std::log2(x); }
template <typename T> T atomicAdd(T* a, T v) { T o = *a; *a += v; return o; }
template <typename T> T atomicMax(T* a, T v) { T o = *a; *a = o > v ? o : v; return o; }
inline float __uint_as_float(unsigned) { return 0; }
inline unsigned __float_as_uint(float) { return 0; }
inline long long __double_as_longlong(double) { return 0; }
template <typename T> T __shfl_xor_sync(unsigned, T v, int) { return v; }
"""


def _wrapper(T: str, D: int, L: int, K: int) -> str:
    tag = f"{T}_{D}_{L}_{K}"
    return f"""
extern "C" void exact_{tag}(int n, const {T}* p, const {T}* pz, const {T}* v, const {T}* cs,
                           const signed char* kind_s, const {T}* prm, {T}* out) {{
    const SphParams<{T}> s = load_params(prm);
    for (int i = 0; i < n; ++i) {{
        const Self<{T}> a = load_self<{T}, {D}, {L}>(p, pz, v, cs, kind_s, n, i);
        Accum<{T}> acc{{0, 0, 0, 0, 0}};
        for (int j = 0; j < n; ++j) candidate<{T}, {D}, {L}, {K}>(i, j, n, p, pz, v, cs, kind_s, a, s, acc);
        out[5 * i] = acc.ax; out[5 * i + 1] = acc.ay; out[5 * i + 2] = acc.az;
        out[5 * i + 3] = acc.drho; out[5 * i + 4] = acc.mumax;
    }}
}}
extern "C" void fast_{tag}(int n, const {T}* p, const {T}* pz, const {T}* v, const {T}* cs,
                          const signed char* kind_s, const {T}* f, int fourtakas, {T}* out) {{
    const FastParams<{T}> s{{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], fourtakas}};
    for (int i = 0; i < n; ++i) {{
        const SelfFast<{T}> a = load_self_fast<{T}, {D}, {L}>(p, pz, v, cs, kind_s, n, i);
        Accum<{T}> acc{{0, 0, 0, 0, 0}};
        for (int j = 0; j < n; ++j) candidate_fast<{T}, {D}, {L}, {K}, true>(i, j, n, p, pz, v, cs, a, s, acc);
        out[5 * i] = acc.ax; out[5 * i + 1] = acc.ay; out[5 * i + 2] = acc.az;
        out[5 * i + 3] = acc.drho; out[5 * i + 4] = acc.mumax;
    }}
}}
extern "C" void walk_{tag}(int n, const {T}* p, const {T}* pz, const {T}* v, const {T}* cs,
                          const signed char* kind_s, const {T}* f, int fourtakas, const int* list,
                          const int* counts, int width, int stride, int unroll, {T}* out) {{
    const FastParams<{T}> s{{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], fourtakas}};
    for (int i = 0; i < n; ++i) {{
        const SelfFast<{T}> a = load_self_fast<{T}, {D}, {L}>(p, pz, v, cs, kind_s, n, i);
        Accum<{T}> acc{{0, 0, 0, 0, 0}};
        const int* li = list + (stride == 1 ? i * width : i);
        if (unroll == 1) verlet_walk_fast<{T}, {D}, {L}, {K}, 1>(li, stride, counts[i], n, p, pz, v, cs, a, s, acc);
        if (unroll == 2) verlet_walk_fast<{T}, {D}, {L}, {K}, 2>(li, stride, counts[i], n, p, pz, v, cs, a, s, acc);
        if (unroll == 4) verlet_walk_fast<{T}, {D}, {L}, {K}, 4>(li, stride, counts[i], n, p, pz, v, cs, a, s, acc);
        out[5 * i] = acc.ax; out[5 * i + 1] = acc.ay; out[5 * i + 2] = acc.az;
        out[5 * i + 3] = acc.drho; out[5 * i + 4] = acc.mumax;
    }}
}}
extern "C" void cands_{tag}(int n, const {T}* p, const {T}* pz, const int* skey, const int* start, int ncx,
                           int ncy, int ncz, int i, int unroll, int* js, {T}* xyz, int* count) {{
    int c = 0;
    auto f = [&](const int j, const {T} x, const {T} y, const {T} z) {{
        js[c] = j; xyz[3 * c] = x; xyz[3 * c + 1] = y; xyz[3 * c + 2] = z; ++c;
    }};
    if (unroll == 1) for_candidates_pos<{T}, {D}, {L}, 2, 1>(skey[i], ncx, ncy, ncz, start, p, pz, n, f);
    if (unroll == 4) for_candidates_pos<{T}, {D}, {L}, 2, 4>(skey[i], ncx, ncy, ncz, start, p, pz, n, f);
    *count = c;
}}
"""


COMBOS = list(itertools.product(["float", "double"], [2, 3], [0, 1, 2], [0, 1]))


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    # sph.cu's device code up to the interaction kernels (the kernels themselves use launch syntax
    # the host compiler need not see): its helpers, candidate() and candidate_fast().
    cu = (SRC / "sph.cu").read_text()
    cu = cu.replace('#include "sph.cuh"', (SRC / "sph.cuh").read_text().replace("#pragma once", ""))
    keep = []
    for block in cu.split("\ntemplate <"):
        head = block.split("{", 1)[0]
        if "__global__" in head:
            continue
        keep.append(block)
    body = "\ntemplate <".join(keep)
    body = body.replace("__launch_bounds__(SPH_BLOCK)", "")
    src = PRELUDE + EXTRA + body + "".join(_wrapper(*c) for c in COMBOS)
    return compile_shared(src, "sph_pair", tmp_path_factory)


def _state(D: int, dtype, rng):
    """A jittered block of fluid over two wall layers, near rest density, moving ~1 m/s: pairs at
    every distance up to r_c, approaching and receding, fluid–fluid, fluid–wall, wall–wall."""
    dp = 0.02
    h = 1.2 * np.sqrt(D) * dp
    m = 6 if D == 3 else 14
    grid = np.stack(np.meshgrid(*[np.arange(m)] * D, indexing="ij"), -1).reshape(-1, D) * dp
    pos = grid + rng.uniform(-0.2, 0.2, grid.shape) * dp
    kind = np.where(grid[:, -1] < 1.5 * dp, 1, 0).astype(np.int8)
    n = len(pos)
    rho0, gamma, g, H = 1000.0, 7.0, 9.81, m * dp
    c0 = 20 * np.sqrt(g * H)
    B = c0 * c0 * rho0 / gamma
    rho = rho0 * (1 + rng.uniform(-0.01, 0.01, n))
    rho[kind != 0] = np.maximum(rho[kind != 0], rho0)
    vel = rng.normal(0, 0.5, (n, D))
    vel[kind != 0] = 0
    press = B * ((rho / rho0) ** gamma - 1)
    cs = c0 * (rho / rho0) ** (0.5 * (gamma - 1))
    k = dict(h=h, rho0=rho0, gamma=gamma, c0=c0, B=B, g=g, mass=rho0 * dp ** D, alpha=0.01, delta=0.1,
             eta2=0.01 * h * h, rc2=4 * h * h)
    return pos.astype(dtype), vel.astype(dtype), rho.astype(dtype), press.astype(dtype), cs.astype(dtype), kind, k


def _layout(L: int, D: int, pos, vel, rho, press, mark):
    """The layout buffers as sph_gather writes them (mark: walls store −ρ, as with pair = fast)."""
    n, T = len(rho), rho.dtype
    r = rho.copy()
    r[mark] = -r[mark]
    x = np.zeros((n, 3), T)
    x[:, :D] = pos
    u = np.zeros((n, 3), T)
    u[:, :D] = vel
    if L == 1:
        p = np.concatenate([x, u, r[:, None], press[:, None]], 1).ravel()
        return p, np.zeros(1, T), np.zeros(1, T)
    if L == 2 and T == np.float32:
        p = np.concatenate([x, press[:, None]], 1).ravel()
        v = np.concatenate([u, r[:, None]], 1).ravel()
        return p, np.zeros(1, T), v
    v = np.concatenate([u.T.ravel(), r, press])
    if L == 2:  # fp64: double2 (x, y) + z
        return np.ascontiguousarray(x[:, :2]).ravel(), x[:, 2].copy(), v
    return x.T.ravel().copy(), np.zeros(1, T), v


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


@pytest.mark.parametrize("T,D,L,K", COMBOS)
def test_fast_pair_matches_exact_pair(lib, T, D, L, K):
    dtype = np.float32 if T == "float" else np.float64
    pos, vel, rho, press, cs, kind, k = _state(D, dtype, np.random.default_rng(7 + D + 10 * L + 100 * K))
    n = len(rho)
    h = k["h"]
    if K == 0:
        knorm = 7 / (4 * np.pi * h * h) if D == 2 else 21 / (16 * np.pi * h ** 3)
        cf = -5 * knorm / (h * h)
    else:
        knorm = 10 / (7 * np.pi * h * h) if D == 2 else 1 / (np.pi * h ** 3)
        cf = knorm / (h * h)
    kz = k["rho0"] * k["g"] / k["B"]
    prm = np.array([h, k["rc2"], knorm, k["rho0"], k["c0"], 0.5 * (k["gamma"] - 1), k["alpha"], k["eta2"], k["mass"],
                    k["delta"] * h * k["c0"], k["g"], kz, 1 / k["gamma"], 1.0], dtype)
    fpar = np.array([h, 1 / h, cf, k["eta2"], k["rc2"], k["mass"], k["alpha"], 2 * k["delta"] * h * k["c0"] * k["mass"],
                     k["rho0"], kz, 1 / k["gamma"], k["g"]], dtype)
    tag = f"{T}_{D}_{L}_{K}"
    want = np.zeros(5 * n, dtype)
    got = np.zeros(5 * n, dtype)
    p, pz, v = _layout(L, D, pos, vel, rho, press, np.zeros(n, bool))
    getattr(lib, f"exact_{tag}")(ctypes.c_int(n), _ptr(p), _ptr(pz), _ptr(v), _ptr(cs), _ptr(kind), _ptr(prm),
                                 _ptr(want))
    p, pz, v = _layout(L, D, pos, vel, rho, press, kind != 0)
    getattr(lib, f"fast_{tag}")(ctypes.c_int(n), _ptr(p), _ptr(pz), _ptr(v), _ptr(cs), _ptr(kind), _ptr(fpar),
                                ctypes.c_int(1), _ptr(got))
    want, got = want.reshape(n, 5).astype(np.float64), got.reshape(n, 5).astype(np.float64)
    assert np.all(np.isfinite(got))
    # Each sum runs over ~20-60 pairs of ~25 rounded operations in another order; the δ-term's
    # ψ = ρ_j − ρ_i − ρ0((1 + k dz)^(1/γ) − 1) cancels ρ ~ 1000 down to ~10, so its round-off is
    # ~ρ's ulp, not ψ's; hence bounds relative to each column's largest value: measured ≤ 4 ε
    # (ε the dtype's), bound 50 ε. A wrong constant or a lost term is off by far more.
    eps = np.finfo(dtype).eps
    for c, name in enumerate(["ax", "ay", "az", "drho", "mumax"]):
        if name == "az" and D == 2:
            continue
        scale = np.abs(want[:, c]).max()
        np.testing.assert_allclose(got[:, c], want[:, c], rtol=0, atol=50 * eps * scale, err_msg=name)


@pytest.mark.parametrize("T,D,L,K", COMBOS)
@pytest.mark.parametrize("stride", [1, "interleaved"])
def test_unrolled_list_walk_equals_fast_pair_bit_for_bit(lib, T, D, L, K, stride):
    """verlet_walk_fast (pair = fast-u2 / fast-u4) sums the same pairs in the same order with the
    same operations as the one-at-a-time walk (pair = fast), only loading ahead: equal to the bit.
    Lists as the Verlet
    build writes them (ascending j, no j == i, no wall–wall pair), of every length mod 4 (the tail
    loop), CSR rows (stride 1) or one list per column (stride n, the interleaved layout's shape)."""
    dtype = np.float32 if T == "float" else np.float64
    pos, vel, rho, press, cs, kind, k = _state(D, dtype, np.random.default_rng(3 + D + 10 * L + 100 * K))
    n = len(rho)
    h = k["h"]
    cf = (-5 if K == 0 else 1) * (7 / (4 * np.pi * h * h) if D == 2 else 21 / (16 * np.pi * h ** 3)) / (h * h)
    kz = k["rho0"] * k["g"] / k["B"]
    fpar = np.array([h, 1 / h, cf, k["eta2"], k["rc2"], k["mass"], k["alpha"], 2 * k["delta"] * h * k["c0"] * k["mass"],
                     k["rho0"], kz, 1 / k["gamma"], k["g"]], dtype)
    p, pz, v = _layout(L, D, pos, vel, rho, press, kind != 0)
    # candidates within 1.2 r_c (a skin: some beyond r_c), minus the dropped ones at random so the
    # counts cover every residue mod 4
    rng = np.random.default_rng(11)
    d2 = ((pos[:, None, :].astype(np.float64) - pos[None, :, :]) ** 2).sum(-1)
    keep = (d2 < 1.44 * k["rc2"]) & ~np.eye(n, dtype=bool) & ~((kind[:, None] != 0) & (kind[None, :] != 0))
    keep &= rng.random((n, n)) < 0.9
    counts = keep.sum(1).astype(np.int32)
    assert len(set(counts % 4)) == 4
    width = int(counts.max())
    rows = np.zeros((n, width), np.int32)
    for i in range(n):
        rows[i, :counts[i]] = np.flatnonzero(keep[i])
    lst, st = (rows.ravel(), 1) if stride == 1 else (np.ascontiguousarray(rows.T).ravel(), n)
    tag = f"{T}_{D}_{L}_{K}"
    outs = {}
    for u in (1, 2, 4):
        out = np.zeros(5 * n, dtype)
        getattr(lib, f"walk_{tag}")(ctypes.c_int(n), _ptr(p), _ptr(pz), _ptr(v), _ptr(cs), _ptr(kind), _ptr(fpar),
                                    ctypes.c_int(1), _ptr(lst), _ptr(counts), ctypes.c_int(width), ctypes.c_int(st),
                                    ctypes.c_int(u), _ptr(out))
        outs[u] = out
    assert np.any(outs[1] != 0)
    np.testing.assert_array_equal(outs[2], outs[1])
    np.testing.assert_array_equal(outs[4], outs[1])


@pytest.mark.parametrize("T,D,L", sorted({c[:3] for c in COMBOS}))
def test_unrolled_candidate_rows_keep_the_order(lib, T, D, L):
    """for_candidates_pos (the list build's search) with B = 4 hands the same candidates with the same
    positions in the same order as B = 1, and those are exactly the particles of the 5^D cells around
    i's cell (cells of R_c/2, reach 2), in key order: candidate counts of every residue mod 4."""
    dtype = np.float32 if T == "float" else np.float64
    rng = np.random.default_rng(5 + D + 10 * L)
    nc = [7, 6, 5][:D] + [1] * (3 - D)
    cell = 0.1
    n = 900 if D == 3 else 300
    pos = rng.uniform(0, 1, (n, D)) * np.array(nc[:D]) * cell
    ijk = np.minimum((pos / cell).astype(int), np.array(nc[:D]) - 1)
    key = ijk[:, 0] + nc[0] * (ijk[:, 1] + (nc[1] * ijk[:, 2] if D == 3 else 0))
    order = np.argsort(key, kind="stable")
    pos, key = pos[order].astype(dtype), key[order].astype(np.int32)
    start = np.searchsorted(key, np.arange(nc[0] * nc[1] * nc[2] + 1)).astype(np.int32)
    z = np.zeros(n, dtype)
    p, pz, v = _layout(L, D, pos, pos, z + 1, z, np.zeros(n, bool))
    tag = f"{T}_{D}_{L}_0"
    js, xyz, cnt = np.zeros(n, np.int32), np.zeros(3 * n, dtype), np.zeros(1, np.int32)
    seen = set()
    for i in range(0, n, 7):
        out = {}
        for b in (1, 4):
            getattr(lib, f"cands_{tag}")(ctypes.c_int(n), _ptr(p), _ptr(pz), _ptr(key), _ptr(start),
                                         ctypes.c_int(nc[0]), ctypes.c_int(nc[1]), ctypes.c_int(nc[2]), ctypes.c_int(i),
                                         ctypes.c_int(b), _ptr(js), _ptr(xyz), _ptr(cnt))
            out[b] = js[:cnt[0]].copy(), xyz[:3 * cnt[0]].reshape(-1, 3)[:, :D].copy()
        c = ijk[order][i]
        near = np.all(np.abs(ijk[order] - c) <= 2, axis=1)
        np.testing.assert_array_equal(out[1][0], np.flatnonzero(near))  # sorted order = key order
        np.testing.assert_array_equal(out[1][1], pos[out[1][0]])
        np.testing.assert_array_equal(out[4][0], out[1][0])
        np.testing.assert_array_equal(out[4][1], out[1][1])
        seen.add(len(out[1][0]) % 4)
    assert seen == {0, 1, 2, 3}

"""Why P0's split kernels lose on an HBM GPU: write-pattern probes of one level of leaves (GPU).

    python tools/amr3d_write_probe.py          # times each probe at P0's box and at 8192 leaves
    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        python tools/amr3d_write_probe.py ncu  # one launch of each at P0's box, for ncu

Kernels of ladder.cu (naive, inner, shell) beside probes that change one thing at a time:
naive_inner (naive's mapping, shell threads idle), inner_fullrow (the inner kernel writing whole
rows), inner_x (whole x-rows with the x-neighbour reads), copy_inner / copy_all (plain copies of
the inner points / of every point, no collision), split_fused (inner and shell blocks of each
leaf in one launch) and split_2launch (split as the engine runs it). Measured (docs/benchmarks/
amr3d-*-apart/README.md), copy_inner read 342 MB from DRAM for 187 MB of data
and ran at 55 % of copy_all's rate: partial 32-byte sector writes become read-modify-writes under
HBM's ECC. The fix is the apart storage (ladder.cu, storage.py). GB/s counts 216 bytes a point
(27 reads + 27 writes of fp32; P0's B = 220 adds 4 of flags the probes do not read).
"""
from __future__ import annotations

import sys

import numpy as np

PROBES = r'''
template <int M>
__global__ void probe_naive_inner(const float* __restrict__ src, float* __restrict__ dst, const int* __restrict__ nbr,
                                  int nleaf, float omega, float ax, float ay, float az)
{   // naive's mapping and gathers, but shell threads return: writes only inner points, like amr3d_inner
    constexpr int M3 = M * M * M;
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)nleaf * M3) return;
    const int L = (int)(t / M3), p = (int)(t % M3);
    const int i = p % M, j = (p / M) % M, k = p / (M * M);
    if (i == 0 || i == M - 1 || j == 0 || j == M - 1 || k == 0 || k == M - 1) return;
    const idx_t plane = (idx_t)nleaf * M3;
    float f[Q];
    amr3d::gather_any<M>(src, nbr, plane, L, i, j, k, f);
    d3q27::collide(f, omega, ax, ay, az);
    amr3d::store<M>(dst, plane, t, f);
}
template <int M>
__global__ void probe_inner_fullrow(const float* __restrict__ src, float* __restrict__ dst, int nleaf, float omega,
                                    float ax, float ay, float az)
{   // amr3d_inner, but the i = 0 / M-1 threads also store (their own point's values): whole rows written
    constexpr int N = M - 2, M3 = M * M * M;
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned)nleaf * (N * N * M)) return;
    const unsigned i = t % M;
    const unsigned row = t / M;
    const unsigned j = row % N + 1, k = (row / N) % N + 1, L = row / (N * N);
    const idx_t plane = (idx_t)nleaf * M3;
    const idx_t at = (idx_t)L * M3 + (k * M + j) * M + i;
    float f[Q];
    const float* s = src + at;
    if (i == 0 || i == M - 1) {
#pragma unroll
        for (int q = 0; q < Q; ++q, s += plane) f[q] = *s;
    } else {
#pragma unroll
        for (int q = 0; q < Q; ++q, s += plane) f[q] = s[-((d3q27::cz(q) * M + d3q27::cy(q)) * M + d3q27::cx(q))];
    }
    d3q27::collide(f, omega, ax, ay, az);
    amr3d::store<M>(dst, plane, at, f);
}
template <int M>
__global__ void probe_inner_x(const float* __restrict__ src, float* __restrict__ dst, const int* __restrict__ nbr,
                              int nleaf, float omega, float ax, float ay, float az)
{   // rows j, k in 1..M-2, every i: the x-face points read the x-neighbour leaf (correct values)
    constexpr int N = M - 2, M3 = M * M * M;
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned)nleaf * (N * N * M)) return;
    const int i = t % M;
    const unsigned row = t / M;
    const int j = row % N + 1, k = (row / N) % N + 1, L = row / (N * N);
    const idx_t plane = (idx_t)nleaf * M3;
    const int lm = nbr[L * 27 + 12], lp = nbr[L * 27 + 14];
    const idx_t at = (idx_t)L * M3 + (k * M + j) * M + i;
    float f[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        int si = i - d3q27::cx(q), leaf = L;
        if (si < 0) { si += M - 1; leaf = lm; } else if (si > M - 1) { si -= M - 1; leaf = lp; }
        f[q] = src[q * plane + (idx_t)leaf * M3 + ((k - d3q27::cz(q)) * M + (j - d3q27::cy(q))) * M + si];
    }
    d3q27::collide(f, omega, ax, ay, az);
    amr3d::store<M>(dst, plane, at, f);
}
template <int M>
__global__ void probe_copy_inner(const float* __restrict__ src, float* __restrict__ dst, int nleaf)
{   // plain copy of the inner points with amr3d_inner's mapping (no collision): memory pattern alone
    constexpr int N = M - 2, M3 = M * M * M;
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned)nleaf * (N * N * M)) return;
    const unsigned i = t % M;
    if (i == 0 || i == M - 1) return;
    const unsigned row = t / M;
    const unsigned j = row % N + 1, k = (row / N) % N + 1, L = row / (N * N);
    const idx_t plane = (idx_t)nleaf * M3;
    const idx_t at = (idx_t)L * M3 + (k * M + j) * M + i;
#pragma unroll
    for (int q = 0; q < Q; ++q) dst[q * plane + at] = src[q * plane + at];
}
template <int M>
__global__ void probe_copy_all(const float* __restrict__ src, float* __restrict__ dst, int nleaf)
{
    constexpr int M3 = M * M * M;
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)nleaf * M3) return;
    const idx_t plane = (idx_t)nleaf * M3;
#pragma unroll
    for (int q = 0; q < Q; ++q) dst[q * plane + t] = src[q * plane + t];
}

template <int M>
__global__ void probe_split_fused(const float* __restrict__ src, float* __restrict__ dst, const int* __restrict__ nbr,
                                  const int* __restrict__ shell, int ns, int bi, int bs, int nleaf,
                                  float omega, float ax, float ay, float az)
{   // P0's split in one launch: for each leaf, bi blocks of inner rows then bs blocks of shell points
    constexpr int N = M - 2, M3 = M * M * M;
    const int per = bi + bs;
    const int L = blockIdx.x / per, r = blockIdx.x % per;
    const idx_t plane = (idx_t)nleaf * M3;
    float f[Q];
    if (r < bi) {
        const unsigned t = r * blockDim.x + threadIdx.x;
        if (t >= (unsigned)(N * N * M)) return;
        const unsigned i = t % M;
        if (i == 0 || i == M - 1) return;
        const unsigned row = t / M;
        const unsigned j = row % N + 1, k = row / N + 1;
        const idx_t at = (idx_t)L * M3 + (k * M + j) * M + i;
        const float* s = src + at;
#pragma unroll
        for (int q = 0; q < Q; ++q, s += plane) f[q] = s[-((d3q27::cz(q) * M + d3q27::cy(q)) * M + d3q27::cx(q))];
        d3q27::collide(f, omega, ax, ay, az);
        amr3d::store<M>(dst, plane, at, f);
    } else {
        const int t = (r - bi) * blockDim.x + threadIdx.x;
        if (t >= ns) return;
        const int p = shell[t];
        const int i = p % M, j = (p / M) % M, k = p / (M * M);
        amr3d::gather_any<M>(src, nbr, plane, L, i, j, k, f);
        d3q27::collide(f, omega, ax, ay, az);
        amr3d::store<M>(dst, plane, (idx_t)L * M3 + p, f);
    }
}
'''

M, BLOCK = 17, 128


def _compile():
    import cupy as cp
    from nagare.engine.amr3d import gpu

    spec = gpu.kernel_spec(M)
    names = [f"amr3d_naive<{M}>", f"amr3d_inner<{M}>", f"amr3d_shell<{M}>", f"probe_naive_inner<{M}>",
             f"probe_inner_fullrow<{M}>", f"probe_inner_x<{M}>", f"probe_copy_inner<{M}>", f"probe_copy_all<{M}>",
             f"probe_split_fused<{M}>"]
    code = spec.code + "\nusing d3q27::idx_t; using d3q27::Q;\n" + PROBES
    mod = cp.RawModule(code=code, options=spec.nvrtc_options, name_expressions=names)
    return {n.split("<")[0]: mod.get_function(n) for n in names}


def probes(K, shape):
    """{name: (launch, points it updates)} on a periodic box of ``shape`` leaves of M³."""
    import cupy as cp
    from nagare.engine.amr3d import ladder

    def grid(n):
        return ((n + BLOCK - 1) // BLOCK,)

    nleaf, n, N = int(np.prod(shape)), int(np.prod(shape)) * M**3, M - 2
    nbr = cp.asarray(ladder.periodic_neighbours(shape))
    cp.random.seed(1)
    f = (np.float32(1 / 27) * (1 + 0.01 * cp.random.standard_normal(27 * n, dtype=cp.float32))).astype(cp.float32)
    fn = cp.empty_like(f)
    shell = cp.asarray(ladder.shell_list(M))
    ns, nl = int(shell.size), np.int32(nleaf)
    s = (np.float32(1.2), np.float32(0), np.float32(0), np.float32(0))
    rows = nleaf * N * N * M
    bi, bs = -(-N * N * M // BLOCK), -(-ns // BLOCK)

    def split():
        K["amr3d_inner"](grid(rows), (BLOCK,), (f, fn, nl, *s))
        K["amr3d_shell"](grid(nleaf * ns), (BLOCK,), (f, fn, nbr, shell, np.int32(ns), nl, *s))
    return {
        "naive": (lambda: K["amr3d_naive"](grid(n), (BLOCK,), (f, fn, nbr, nl, *s)), n),
        "inner": (lambda: K["amr3d_inner"](grid(rows), (BLOCK,), (f, fn, nl, *s)), nleaf * N**3),
        "shell": (lambda: K["amr3d_shell"](grid(nleaf * ns), (BLOCK,), (f, fn, nbr, shell, np.int32(ns), nl, *s)),
                  nleaf * ns),
        "naive_inner": (lambda: K["probe_naive_inner"](grid(n), (BLOCK,), (f, fn, nbr, nl, *s)), nleaf * N**3),
        "inner_fullrow": (lambda: K["probe_inner_fullrow"](grid(rows), (BLOCK,), (f, fn, nl, *s)), rows),
        "inner_x": (lambda: K["probe_inner_x"](grid(rows), (BLOCK,), (f, fn, nbr, nl, *s)), rows),
        "copy_inner": (lambda: K["probe_copy_inner"](grid(rows), (BLOCK,), (f, fn, nl)), nleaf * N**3),
        "copy_all": (lambda: K["probe_copy_all"](grid(n), (BLOCK,), (f, fn, nl)), n),
        "split_fused": (lambda: K["probe_split_fused"]((nleaf * (bi + bs),), (BLOCK,),
                                                       (f, fn, nbr, shell, np.int32(ns), np.int32(bi), np.int32(bs),
                                                        nl, *s)), n),
        "split_2launch": (split, n),
    }


def main(argv=None) -> int:
    import cupy as cp

    argv = sys.argv[1:] if argv is None else argv
    K = _compile()
    if argv[:1] == ["ncu"]:
        for go, _ in probes(K, (8, 8, 8)).values():
            go()
        cp.cuda.Device().synchronize()
        return 0
    for shape in ((8, 8, 8), (32, 16, 16)):
        runs = probes(K, shape)
        print(f"--- {int(np.prod(shape))} leaves of {M}^3")
        for name, (go, pts) in runs.items():
            for _ in range(3):
                go()
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            for _ in range(20):
                go()
            b.record()
            b.synchronize()
            ms = cp.cuda.get_elapsed_time(a, b) / 20
            print(f"{name:14s} {ms:8.4f} ms  {pts / 1e6:7.2f} M points  {pts / ms / 1e6:7.2f} G points/s  "
                  f"{pts * 216 / ms / 1e6:7.1f} GB/s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

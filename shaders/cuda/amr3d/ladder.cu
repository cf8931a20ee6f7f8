// P0's kernel ladder for one level of leaves (docs/amr3d.md "Kernel ladder"): one pull-stream +
// BGK step of every point of every leaf, in four forms that give the same bits:
//   amr3d_naive<M>            one thread per point, runtime branches for every neighbour case (§3.1)
//   amr3d_inner<M>            inner points only (indices 1..M-2): reads stay in the own leaf (§3.2)
//   amr3d_shell<M>            outer-shell points from a list, runtime branches (§3.2)
//   amr3d_shell_class<M,GI,GJ,GK>  one of the 26 shell classes, every access pattern resolved at
//                             compile time by read_stencil<...> (§3.4: 26 x 27 = 702 patterns)
//   amr3d_shell_sorted<M>     beyond P0: the 26 class bodies in one launch, each warp one class
//   amr3d_naive_fix<M,I>      beyond P0, on a tree level: naive with the level's interface fix-up
//                             inside (coupling.cu amr3d_fixup's pull for the interface points)
//   amr3d_inner_apart<M>, amr3d_shell_apart<M>
//                             beyond P0, for HBM: split's two kernels on the "apart" storage, where
//                             every leaf's inner block and its shell are stored in separate runs, so
//                             each kernel writes whole 32-byte sectors (see "The apart storage" below)
// With Kobayashi's CSM (NAGARE_CSM, d3q27.cuh) every kernel also takes the coefficient array C
// (NAGARE_CSM_PARAM) and collides point p with C[p]; the pre-pass kernels at the end of this file
// fill C before the rung runs (amr3d_csm_velocity, amr3d_csm_coefficient, amr3d_csm_copies).
// A mother-leaf (§3.3) on one level is a leaf of M = 2m-1 points (8 siblings, shared faces once),
// so the same templates serve it with M = 33.
//
// Storage: f[q][leaf][k][j][i] (i fastest), M^3 points a leaf; neighbouring leaves share their face
// nodes (each stores a copy): my index 0 is the left neighbour's M-1, so x-1 is its M-2.
// nbr[leaf*27 + slot(nx,ny,nz)]: the same-level neighbour leaf in each of the 26 directions (and
// the leaf itself at slot 13), periodic wrap already applied by the host.
#include "d3q27.cuh"
#include "fixgather.cuh"

using d3q27::idx_t;
using d3q27::Q;

namespace amr3d {

// Where direction q of point (i,j,k) pulls from: neighbour offset (nx,ny,nz) and the index in it.
template <int M>
__device__ __forceinline__ void source_of(int i, int j, int k, int q, int& nx, int& ny, int& nz,
                                          int& si, int& sj, int& sk)
{
    si = i - d3q27::cx(q); sj = j - d3q27::cy(q); sk = k - d3q27::cz(q);
    nx = ny = nz = 0;
    if (si < 0) { nx = -1; si += M - 1; } else if (si > M - 1) { nx = 1; si -= M - 1; }
    if (sj < 0) { ny = -1; sj += M - 1; } else if (sj > M - 1) { ny = 1; sj -= M - 1; }
    if (sk < 0) { nz = -1; sk += M - 1; } else if (sk > M - 1) { nz = 1; sk -= M - 1; }
}

// Stores walk one pointer from plane to plane (a 64-bit add each) instead of forming
// q * plane + at in 64-bit arithmetic 27 times.
template <int M, typename S = float>
__device__ __forceinline__ void store(S* __restrict__ dst, idx_t plane, idx_t at, const float f[Q])
{
    S* d = dst + at;
#pragma unroll
    for (int q = 0; q < Q; ++q, d += plane) d3q27::store_pop(d, 0, q, f[q]);
}

// The apart storage's index functions (the storage itself: "The apart storage" below).
// Rank of shell point (i,j,k) among the leaf's shell points in index order (k, then j, then i).
template <int M>
__device__ __forceinline__ int shell_rank(int i, int j, int k)
{
    constexpr int P = 4 * M - 4;  // shell points of a plane 0 < k < M-1: rows j = 0, M-1 and 2 a row between
    if (k == 0) return j * M + i;
    if (k == M - 1) return M * M + (M - 2) * P + j * M + i;
    const int r = M * M + (k - 1) * P;
    if (j == 0) return r + i;
    if (j == M - 1) return r + M + 2 * (M - 2) + i;
    return r + M + 2 * (j - 1) + (i == M - 1 ? 1 : 0);
}

// Where point (i,j,k) of leaf L lies in one direction's plane of the apart storage.
template <int M>
__device__ __forceinline__ idx_t apart_index(int L, int i, int j, int k, int nleaf)
{
    constexpr int N = M - 2, N3 = N * N * N, S = M * M * M - N3;
    if (i >= 1 && i <= N && j >= 1 && j <= N && k >= 1 && k <= N)
        return (idx_t)L * N3 + ((k - 1) * N + (j - 1)) * N + (i - 1);
    return (idx_t)nleaf * N3 + (idx_t)L * S + shell_rank<M>(i, j, k);
}

// Gather with runtime neighbour logic (naive, the listed shell, and with APART the apart storage's
// shell, whose points lie where apart_index says; nleaf is read only then); S: the storage
// (d3q27.cuh).
template <int M, typename S = float, bool APART = false>
__device__ __forceinline__ void gather_any(const S* __restrict__ src, const int* __restrict__ nbr,
                                           idx_t plane, int L, int i, int j, int k, float f[Q], int nleaf = 0)
{
    constexpr int M3 = M * M * M;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        int nx, ny, nz, si, sj, sk;
        source_of<M>(i, j, k, q, nx, ny, nz, si, sj, sk);
        const int leaf = (nx | ny | nz) ? nbr[L * 27 + d3q27::slot(nx, ny, nz)] : L;
        idx_t at;
        if constexpr (APART) at = apart_index<M>(leaf, si, sj, sk, nleaf);
        else at = (idx_t)leaf * M3 + (sk * M + sj) * M + si;
        f[q] = d3q27::load_pop(src, q * plane + at, q);
    }
}

// ---- the compile-time access patterns of §3.4 ---------------------------------------------------
// Shell class (GI,GJ,GK): a component -1 means index 0, +1 index M-1, 0 the range 1..M-2. Reading
// direction Q_ crosses into the neighbour on that axis only when the class sits on that face and the
// velocity points inwards from it, so the neighbour offset and index shift are constants.
template <int G, int C> struct Cross { static constexpr int n = (G == -1 && C == 1) ? -1 : (G == 1 && C == -1) ? 1 : 0; };

template <int M, int GI, int GJ, int GK, int Q_>
__device__ __forceinline__ void read_stencil(const float* __restrict__ src, const int* __restrict__ nrow,
                                             idx_t plane, int L, int i, int j, int k, float f[Q])
{
    if constexpr (Q_ < Q) {
        constexpr int CX = d3q27::cx(Q_), CY = d3q27::cy(Q_), CZ = d3q27::cz(Q_);
        constexpr int NX = Cross<GI, CX>::n, NY = Cross<GJ, CY>::n, NZ = Cross<GK, CZ>::n;
        constexpr int S = d3q27::slot(NX, NY, NZ);
        const int leaf = (S == 13) ? L : nrow[S];
        const int si = i - CX - NX * (M - 1), sj = j - CY - NY * (M - 1), sk = k - CZ - NZ * (M - 1);
        f[Q_] = src[Q_ * plane + (idx_t)leaf * (M * M * M) + (sk * M + sj) * M + si];
        read_stencil<M, GI, GJ, GK, Q_ + 1>(src, nrow, plane, L, i, j, k, f);
    }
}

// Points of class (GI,GJ,GK) in one leaf, and the r-th of them.
template <int M, int GI, int GJ, int GK> struct LeafBound {
    static constexpr int NI = GI ? 1 : M - 2, NJ = GJ ? 1 : M - 2, NK = GK ? 1 : M - 2;
    static constexpr int N = NI * NJ * NK;
    __device__ __forceinline__ static void point(int r, int& i, int& j, int& k)
    {
        i = GI == 0 ? r % NI + 1 : (GI < 0 ? 0 : M - 1);
        j = GJ == 0 ? (r / NI) % NJ + 1 : (GJ < 0 ? 0 : M - 1);
        k = GK == 0 ? r / (NI * NJ) + 1 : (GK < 0 ? 0 : M - 1);
    }
};

// Gathers the t-th point of class (GI,GJ,GK) (t over every leaf's points of the class) into f and
// returns the point's index in a direction's plane.
template <int M, int GI, int GJ, int GK>
__device__ __forceinline__ idx_t shell_class_gather(const float* __restrict__ src, const int* __restrict__ nbr,
                                                    int nleaf, idx_t t, float f[Q])
{
    using B = LeafBound<M, GI, GJ, GK>;
    const int L = (int)(t / B::N), r = (int)(t % B::N);
    int i, j, k;
    B::point(r, i, j, k);
    const idx_t plane = (idx_t)nleaf * (M * M * M);
    read_stencil<M, GI, GJ, GK, 0>(src, nbr + L * 27, plane, L, i, j, k, f);
    return (idx_t)L * (M * M * M) + (k * M + j) * M + i;
}

template <int M, int GI, int GJ, int GK>
__device__ __forceinline__ void shell_class_point(const float* __restrict__ src, float* __restrict__ dst,
                                                  const int* __restrict__ nbr, int nleaf, idx_t t,
                                                  float omega, float ax, float ay, float az NAGARE_CSM_PARAM)
{
    float f[Q];
    const idx_t at = shell_class_gather<M, GI, GJ, GK>(src, nbr, nleaf, t, f);
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT(at));
    store<M>(dst, (idx_t)nleaf * (M * M * M), at, f);
}

}  // namespace amr3d

// S = float, or fp16::half_bits for fp16 storage (beyond P0; d3q27.cuh load_pop/store_pop).
template <int M, typename S = float>
__global__ void amr3d_naive(const S* __restrict__ src, S* __restrict__ dst, const int* __restrict__ nbr,
                            int nleaf, float omega, float ax, float ay, float az NAGARE_CSM_PARAM)
{
    constexpr int M3 = M * M * M;
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)nleaf * M3) return;
    const int L = (int)(t / M3), p = (int)(t % M3);
    const int i = p % M, j = (p / M) % M, k = p / (M * M);
    const idx_t plane = (idx_t)nleaf * M3;
    float f[Q];
    amr3d::gather_any<M, S>(src, nbr, plane, L, i, j, k, f);
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT(t));
    amr3d::store<M, S>(dst, plane, t, f);
}

// Beyond P0, on one level of a tree: the naive kernel and the level's fix-up in one pass. A point
// with fix_of[t] = r >= 0 is interface point r of coupling.cu's fix-up (a pull source on another
// level or beyond a side) and pulls through its descriptors (fix_gather, the fix-up's own pull);
// every other point pulls as amr3d_naive. Then one collision and one store per point: the same
// bits as amr3d_naive followed by amr3d_fixup, without writing the interface points twice (the
// fix-up's scattered rewrites are partial 32-byte sectors, which HBM's ECC turns into DRAM
// read-modify-writes: docs/amr3d.md "Why split loses on HBM").
// S: float, or fp16::half_bits for fp16 storage (the interface buffers stay fp32).
template <int M, typename I, typename S = float>
__global__ void amr3d_naive_fix(const S* __restrict__ src, S* __restrict__ dst, const int* __restrict__ nbr,
                                int nleaf, const int* __restrict__ fix_of, const I* __restrict__ desc, int nfix,
                                const float* __restrict__ fine_buf, long long nfine,
                                const float* __restrict__ interp_buf, long long ninterp,
                                const float* __restrict__ link_buf, float omega, float ax, float ay, float az
                                NAGARE_CSM_PARAM)
{
    constexpr int M3 = M * M * M;
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)nleaf * M3) return;
    const idx_t plane = (idx_t)nleaf * M3;
    const int r = fix_of[t];
    float f[Q];
    if (r >= 0) {
        amr3d::fix_gather<I, S>(src, desc, nfix, r, fine_buf, nfine, interp_buf, ninterp, link_buf, f);
    } else {
        const int L = (int)(t / M3), p = (int)(t % M3);
        amr3d::gather_any<M, S>(src, nbr, plane, L, p % M, (p / M) % M, p / (M * M), f);
    }
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT(t));
    amr3d::store<M, S>(dst, plane, t, f);
}

// Inner points (1..M-2 on every axis), in whole x-rows: thread t covers index i = t % M of row
// (j, k) in 1..M-2, and the threads at i = 0 and M-1 (shell points) return. Rows j = 1..M-2 of one
// k-plane are contiguous in memory, so a warp reads and writes one contiguous run of each
// direction's plane. (Threads over the (M-2)^3 inner points alone give each warp about three
// partial row segments of M-2 floats: uncoalesced loads, and a smaller share of the DRAM bandwidth
// than the naive kernel's; figures in docs/benchmarks/amr3d-design-figures/README.md.)
template <int M>
__global__ void amr3d_inner(const float* __restrict__ src, float* __restrict__ dst, int nleaf, float omega,
                            float ax, float ay, float az NAGARE_CSM_PARAM)
{
    constexpr int N = M - 2, M3 = M * M * M;
    // 32-bit thread arithmetic (nleaf * N * N * M < 2^31: two fp32 buffers of that many points
    // would need 460 GB, far beyond any GPU and refused by the memory estimate), one 64-bit
    // pointer walked from plane to plane with the neighbour offset in the load's immediate: the
    // SASS then issues its first load after ~60 instructions instead of ~260.
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (unsigned)nleaf * (N * N * M)) return;
    const unsigned i = t % M;
    if (i == 0 || i == M - 1) return;
    const unsigned row = t / M;
    const unsigned j = row % N + 1, k = (row / N) % N + 1, L = row / (N * N);
    const idx_t plane = (idx_t)nleaf * M3;
    const idx_t at = (idx_t)L * M3 + (k * M + j) * M + i;
    float f[Q];
    const float* s = src + at;
#pragma unroll
    for (int q = 0; q < Q; ++q, s += plane) f[q] = s[-((d3q27::cz(q) * M + d3q27::cy(q)) * M + d3q27::cx(q))];
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT(at));
    amr3d::store<M>(dst, plane, at, f);
}

// Outer-shell points of every leaf from one list (shell[r] = point index in a leaf), runtime branches.
template <int M>
__global__ void amr3d_shell(const float* __restrict__ src, float* __restrict__ dst, const int* __restrict__ nbr,
                            const int* __restrict__ shell, int nshell, int nleaf, float omega, float ax, float ay,
                            float az NAGARE_CSM_PARAM)
{
    constexpr int M3 = M * M * M;
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)nleaf * nshell) return;
    const int L = (int)(t / nshell), p = shell[t % nshell];
    const int i = p % M, j = (p / M) % M, k = p / (M * M);
    const idx_t plane = (idx_t)nleaf * M3;
    float f[Q];
    amr3d::gather_any<M>(src, nbr, plane, L, i, j, k, f);
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT((idx_t)L * M3 + p));
    amr3d::store<M>(dst, plane, (idx_t)L * M3 + p, f);
}

template <int M, int GI, int GJ, int GK>
__global__ void amr3d_shell_class(const float* __restrict__ src, float* __restrict__ dst,
                                  const int* __restrict__ nbr, int nleaf, float omega, float ax, float ay, float az
                                  NAGARE_CSM_PARAM)
{
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)nleaf * amr3d::LeafBound<M, GI, GJ, GK>::N) return;
    amr3d::shell_class_point<M, GI, GJ, GK>(src, dst, nbr, nleaf, t, omega, ax, ay, az NAGARE_CSM_ARG);
}

// Beyond P0: the 26 class bodies in one launch. Segment c holds class c's points of every leaf,
// padded to a whole number of warps (seg[c] = first thread of class c, seg[26] = total), so every
// warp runs one class body: one launch instead of 26, no divergence. Only the gathers differ by
// class: the switch gathers, and one collision and one store follow it. (With the collision in
// every case, NVRTC inlined 26 copies of it into one function: with the MRT operator that one
// kernel took over 5 minutes and 11 GB of host memory to compile.)
#define NAGARE_CLASS(c, GI, GJ, GK)                                                                  \
    case c:                                                                                          \
        if (r >= (idx_t)nleaf * amr3d::LeafBound<M, GI, GJ, GK>::N) return;                          \
        at = amr3d::shell_class_gather<M, GI, GJ, GK>(src, nbr, nleaf, r, f);                        \
        break;

template <int M>
__global__ void amr3d_shell_sorted(const float* __restrict__ src, float* __restrict__ dst,
                                   const int* __restrict__ nbr, const long long* __restrict__ seg, int nleaf,
                                   float omega, float ax, float ay, float az NAGARE_CSM_PARAM)
{
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)seg[26]) return;
    int c = 0;
    while ((idx_t)seg[c + 1] <= t) ++c;  // 26 entries, warp-uniform
    const idx_t r = t - (idx_t)seg[c];
    float f[Q];
    idx_t at;
    switch (c) {  // the order of engine/amr3d/gpu.py SHELL_CLASSES: faces, edges, corners
        NAGARE_CLASS(0, -1, 0, 0) NAGARE_CLASS(1, 1, 0, 0) NAGARE_CLASS(2, 0, -1, 0)
        NAGARE_CLASS(3, 0, 1, 0) NAGARE_CLASS(4, 0, 0, -1) NAGARE_CLASS(5, 0, 0, 1)
        NAGARE_CLASS(6, -1, -1, 0) NAGARE_CLASS(7, 1, -1, 0) NAGARE_CLASS(8, -1, 1, 0)
        NAGARE_CLASS(9, 1, 1, 0) NAGARE_CLASS(10, -1, 0, -1) NAGARE_CLASS(11, 1, 0, -1)
        NAGARE_CLASS(12, -1, 0, 1) NAGARE_CLASS(13, 1, 0, 1) NAGARE_CLASS(14, 0, -1, -1)
        NAGARE_CLASS(15, 0, 1, -1) NAGARE_CLASS(16, 0, -1, 1) NAGARE_CLASS(17, 0, 1, 1)
        NAGARE_CLASS(18, -1, -1, -1) NAGARE_CLASS(19, 1, -1, -1) NAGARE_CLASS(20, -1, 1, -1)
        NAGARE_CLASS(21, 1, 1, -1) NAGARE_CLASS(22, -1, -1, 1) NAGARE_CLASS(23, 1, -1, 1)
        NAGARE_CLASS(24, -1, 1, 1) NAGARE_CLASS(25, 1, 1, 1)
        default: return;
    }
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT(at));
    amr3d::store<M>(dst, (idx_t)nleaf * (M * M * M), at, f);
}
#undef NAGARE_CLASS

// ---- The apart storage (beyond P0; docs/amr3d.md "Why split loses on HBM") ---------------------
// On HBM GPUs the split kernels above write a leaf's points in two interleaved sets (the inner
// kernel leaves i = 0 and M-1 of every row, rows j = 0 and M-1 and planes k = 0 and M-1 to the
// shell kernel), so most 32-byte sectors are written partly by each. HBM's ECC makes a partial
// sector a DRAM read-modify-write: a plain copy of the inner points with the inner kernel's mapping
// reads nearly twice its data from DRAM and runs at about half a whole-leaf copy's speed (ncu figures
// in docs/benchmarks/amr3d-design-figures/README.md). (P0's K20X wrote partial sectors with byte masks.)
// The apart storage keeps one direction's plane as [inner blocks of every leaf][shells of every
// leaf]: inner point (i,j,k) in 1..M-2 of leaf L at L*N^3 + ((k-1)*N + (j-1))*N + (i-1) (N = M-2),
// shell point at nleaf*N^3 + L*S + its rank in the shell's index order (S = M^3 - N^3, the order of
// ladder.shell_list). Each kernel's threads write one contiguous run. It is a permutation of the
// leaves' points (engine/amr3d/storage.py converts losslessly), so the bits are split's. Its index
// functions (shell_rank, apart_index) are with the gathers above.

// Inner points on the apart storage: thread t is the t-th stored inner point. A point whose pulls
// all stay in the inner block (indices 2..M-3) reads each direction at a constant offset from t;
// the block's outer layer reads its own leaf's shell run through apart_index (still one leaf:
// P0's inner kernel reads only its own leaf).
template <int M>
__global__ void amr3d_inner_apart(const float* __restrict__ src, float* __restrict__ dst, int nleaf, float omega,
                                  float ax, float ay, float az NAGARE_CSM_PARAM)
{
    constexpr int N = M - 2, N3 = N * N * N;
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;  // 32-bit: see amr3d_inner
    if (t >= (unsigned)nleaf * N3) return;
    const int L = t / N3, r = t % N3;
    const int i = r % N + 1, j = (r / N) % N + 1, k = r / (N * N) + 1;
    const idx_t plane = (idx_t)nleaf * (M * M * M);
    float f[Q];
    if (i > 1 && i < N && j > 1 && j < N && k > 1 && k < N) {
        const float* s = src + t;
#pragma unroll
        for (int q = 0; q < Q; ++q, s += plane) f[q] = s[-((d3q27::cz(q) * N + d3q27::cy(q)) * N + d3q27::cx(q))];
    } else {
#pragma unroll
        for (int q = 0; q < Q; ++q)
            f[q] = src[q * plane + amr3d::apart_index<M>(L, i - d3q27::cx(q), j - d3q27::cy(q), k - d3q27::cz(q), nleaf)];
    }
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT(t));  // (the CSM is refused on this storage)
    amr3d::store<M>(dst, plane, t, f);
}

// Shell points on the apart storage: thread t is the t-th stored shell point (leaf t / S, local
// point shell[t % S]); runtime neighbour branches as amr3d_shell, the writes one contiguous run.
template <int M>
__global__ void amr3d_shell_apart(const float* __restrict__ src, float* __restrict__ dst, const int* __restrict__ nbr,
                                  const int* __restrict__ shell, int nleaf, float omega, float ax, float ay,
                                  float az NAGARE_CSM_PARAM)
{
    constexpr int M3 = M * M * M, N3 = (M - 2) * (M - 2) * (M - 2), S = M3 - N3;
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)nleaf * S) return;
    const int L = (int)(t / S), p = shell[t % S];
    const int i = p % M, j = (p / M) % M, k = p / (M * M);
    const idx_t plane = (idx_t)nleaf * M3;
    float f[Q];
    amr3d::gather_any<M, float, true>(src, nbr, plane, L, i, j, k, f, nleaf);
    const idx_t at = (idx_t)nleaf * N3 + t;
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT(at));
    amr3d::store<M>(dst, plane, at, f);
}

// The uniform-grid comparison of P0's break-even figure: a periodic NX x NY x NZ D3Q27 lattice,
// one fused pull + BGK kernel, f[q][z][y][x]; S = float, or fp16::half_bits for fp16 storage.
template <typename S>
__global__ void d3q27_uniform(const S* __restrict__ src, S* __restrict__ dst, int nx, int ny, int nz,
                              float omega, float ax, float ay, float az NAGARE_CSM_PARAM)
{
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    const idx_t plane = (idx_t)nx * ny * nz;
    if (t >= plane) return;
    const int x = (int)(t % nx), y = (int)((t / nx) % ny), z = (int)(t / ((idx_t)nx * ny));
    float f[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        int sx = x - d3q27::cx(q), sy = y - d3q27::cy(q), sz = z - d3q27::cz(q);
        sx = sx < 0 ? sx + nx : (sx >= nx ? sx - nx : sx);
        sy = sy < 0 ? sy + ny : (sy >= ny ? sy - ny : sy);
        sz = sz < 0 ? sz + nz : (sz >= nz ? sz - nz : sz);
        f[q] = d3q27::load_pop(src, q * plane + ((idx_t)sz * ny + sy) * nx + sx, q);
    }
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT(t));  // (the CSM is refused on this storage)
#pragma unroll
    for (int q = 0; q < Q; ++q) d3q27::store_pop(dst, q * plane + t, q, f[q]);
}

#if NAGARE_CSM
// ---- Kobayashi's coherent-structure model: the pre-pass (engine/amr3d/collision.py) -------------
// Pass 1: the pre-collision velocity of every point (the pull of the naive kernel, d3q27::moments)
// into u[3][plane] — the caller's next buffer, whose planes 0..2 are free until the rung writes it
// (at a tree's interface points coupling.cu amr3d_csm_fix_velocity then writes the velocity of the
// fix-up's gather). One pre-pass serves every rung, so every rung gets the same C.
template <int M>
__global__ void amr3d_csm_velocity(const float* __restrict__ src, float* __restrict__ u, const int* __restrict__ nbr,
                                   int nleaf)
{
    constexpr int M3 = M * M * M;
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)nleaf * M3) return;
    const int L = (int)(t / M3), p = (int)(t % M3);
    const int i = p % M, j = (p / M) % M, k = p / (M * M);
    const idx_t plane = (idx_t)nleaf * M3;
    float f[Q];
    amr3d::gather_any<M>(src, nbr, plane, L, i, j, k, f);
    float rho, ux, uy, uz;
    d3q27::moments(f, rho, ux, uy, uz);
    u[t] = ux;
    u[plane + t] = uy;
    u[2 * plane + t] = uz;
}

namespace amr3d {
// d(component)/d(index) along one axis inside a leaf (collision.leaf_derivative): central inside,
// second-order one-sided at the leaf's faces, (-3u0 + 4u1 - u2)/2 written with differences (a uniform
// field gives exactly 0). A face node's copy in this leaf holds the same u as the neighbour's copy,
// so the leaf's own values define the gradient everywhere in it.
template <int M>
__device__ __forceinline__ float leaf_derivative(const float* __restrict__ c, idx_t at, int i, int stride)
{
    if (i == 0) return (4.f * (c[at + stride] - c[at]) - (c[at + 2 * stride] - c[at])) * 0.5f;
    if (i == M - 1) return (4.f * (c[at] - c[at - stride]) - (c[at] - c[at - 2 * stride])) * 0.5f;
    return (c[at + stride] - c[at - stride]) * 0.5f;
}
}  // namespace amr3d

// Pass 2: C = C1 |F|^(3/2) (1 - F), F = Q/E = -(A_ab A_ba)/(A_ab A_ab) clipped to [-1, 1] (0 where
// E = 0), A_ab = du_b/dx_a from the velocities of pass 1 (collision.csm_function / csm_from_function).
template <int M>
__global__ void amr3d_csm_coefficient(const float* __restrict__ u, float* __restrict__ coef, int nleaf)
{
    constexpr int M3 = M * M * M;
    const idx_t t = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (idx_t)nleaf * M3) return;
    const int p = (int)(t % M3);
    const int i = p % M, j = (p / M) % M, k = p / (M * M);
    const idx_t plane = (idx_t)nleaf * M3;
    float A[3][3];
#pragma unroll
    for (int b = 0; b < 3; ++b) {
        const float* c = u + b * plane;
        A[0][b] = amr3d::leaf_derivative<M>(c, t, i, 1);
        A[1][b] = amr3d::leaf_derivative<M>(c, t, j, M);
        A[2][b] = amr3d::leaf_derivative<M>(c, t, k, M * M);
    }
    float e = A[0][0] * A[0][0], s = A[0][0] * A[0][0];
#pragma unroll
    for (int a = 0; a < 3; ++a)
#pragma unroll
        for (int b = 0; b < 3; ++b)
            if (a + b > 0) {
                e = e + A[a][b] * A[a][b];
                s = s + A[a][b] * A[b][a];
            }
    float F = e > 0.f ? -s / e : 0.f;
    F = fminf(fmaxf(F, -1.f), 1.f);
    const float fa = fabsf(F);
    coef[t] = (float)(NAGARE_CSM_C1) * (fa * sqrtf(fa)) * (1.f - F);
}

// Pass 3: every copy of a shared node takes its owner's C (engine/amr3d/ladder.shared_copies; no
// owner is itself a copy), so the copies collide alike and stay equal.
__global__ void amr3d_csm_copies(float* __restrict__ coef, const long long* __restrict__ dst,
                                 const long long* __restrict__ src, int n)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    coef[dst[r]] = coef[src[r]];
}
#endif

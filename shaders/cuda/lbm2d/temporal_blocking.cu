// P1's temporal blocking for D2Q9 (Tominaga, Nakamura, Maekawa, IPSJ 2018), see
// docs/lbm2d-temporal-blocking.md for the geometry and the choices made where P1 is silent.
//
// One kernel template, lbm2d_tb<T, TS, TR, TX, TY, WS>:
//   block = TX x TY threads owns a TX x TY tile of the (9, ny, nx) SoA lattice;
//   the tile plus a halo of width TS (periodically wrapped in x and y) is loaded ONCE from global
//   memory into shared buffer 0; then `steps` (<= TS) time steps are taken in phases of at most
//   TR steps, ping-ponging between two shared buffers with one __syncthreads per phase; the tile
//   interior is written back. The valid region shrinks by one node per step on every side.
//   * stb  (s{TS}r0tb): TR = 1 — each step every thread loads the 9 values its node pulls from
//     shared memory, updates, and stores to the other buffer (sync every step).
//   * srtb (s{TS}r{TR}tb): each thread gathers the dependency cone of its node for TR steps from
//     shared memory into registers and advances TR steps there (redundantly recomputing its
//     neighbourhood), with no shared traffic or sync inside the phase.
//   * srtb-ws (WS = true): as srtb, but at every intermediate level a thread computes only the
//     column of its own x and receives the neighbouring columns from the lanes that own them
//     (__shfl_up/down_sync within a run of x-contiguous lanes). Lanes within TR-1 of the run's
//     ends get incomplete neighbourhoods; their results are discarded and those nodes are owned
//     by an overlapping run (P1 §3.3: "values at the warp edge are discarded").
// Tiles at the right/top edge of a domain whose size is not a multiple of the tile compute
// periodic images (the update is translation invariant) and write back only nodes < (nx, ny).
#include "tb_d2q9.cuh"

// Shared-memory layout (dynamic): S f[2][9][EY][EX], then unsigned char code[EY][EX].
template <int TS, int TX, int TY>
struct TBGeom {
    static constexpr int EX = TX + 2 * TS;
    static constexpr int EY = TY + 2 * TS;
    static constexpr int EXY = EX * EY;
};

// Advance the node at local (lx, ly) by R steps from the shared buffer `src` (valid wherever this
// node's cone of radius R lies), result in out[9]. Plain register cone (no shuffles).
template <typename S, typename T, int R, int EX, int EXY>
__device__ __forceinline__ void tb_cone(T out[9], const S* __restrict__ src, const unsigned char* __restrict__ sc,
                                        const int lx, const int ly, const TBParams<T>& p)
{
    if constexpr (R == 1) {
        tb_node<S>(out,
                [&](int i, int ex, int ey) { return TBConv<S, T>::ld(src[i * EXY + (ly + ey) * EX + lx + ex]); },
                [&](int ex, int ey) { return (int)sc[(ly + ey) * EX + lx + ex]; }, p);
    } else {
        // Level k (1..R) holds post-step-k values at offsets |dx|,|dy| <= R-k; P = 2R-1 is the
        // width of level 1. Two slots ping-pong; after full unrolling every index is a constant,
        // so the arrays live in registers (checked: ptxas reports no stack frame).
        constexpr int P = 2 * R - 1, C = R - 1;
        T v[2][P * P][9];
#pragma unroll
        for (int dy = -C; dy <= C; ++dy) {
#pragma unroll
            for (int dx = -C; dx <= C; ++dx) {
                tb_node<S>(v[1][(dy + C) * P + dx + C],
                        [&](int i, int ex, int ey) { return TBConv<S, T>::ld(src[i * EXY + (ly + dy + ey) * EX + lx + dx + ex]); },
                        [&](int ex, int ey) { return (int)sc[(ly + dy + ey) * EX + lx + dx + ex]; }, p);
            }
        }
#pragma unroll
        for (int k = 2; k <= R; ++k) {
            const int h = R - k;
#pragma unroll
            for (int dy = -h; dy <= h; ++dy) {
#pragma unroll
                for (int dx = -h; dx <= h; ++dx) {
                    tb_node<S>(v[k & 1][(dy + C) * P + dx + C],
                            [&](int i, int ex, int ey) { return v[(k - 1) & 1][(dy + ey + C) * P + dx + ex + C][i]; },
                            [&](int ex, int ey) { return (int)sc[(ly + dy + ey) * EX + lx + dx + ex]; }, p);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < 9; ++i) out[i] = v[R & 1][C * P + C][i];
    }
}

// As tb_cone, but each level computes only the dx = 0 column; columns dx = -1, +1 come from the
// neighbouring lanes of the same run of SEG x-contiguous lanes. A lane's result is therefore
// valid iff the lanes R-1 places to either side exist in its run. Must be called by all 32 lanes of the
// warp together (uniform control flow); lanes whose neighbourhood leaves the run get garbage,
// which the caller discards.
template <typename S, typename T, int R, int EX, int EXY, int SEG>
__device__ __forceinline__ void tb_cone_ws(T out[9], const S* __restrict__ src, const unsigned char* __restrict__ sc,
                                           const int lx, const int ly, const TBParams<T>& p)
{
    if constexpr (R == 1) {
        tb_cone<S, T, 1, EX, EXY>(out, src, sc, lx, ly, p);
    } else {
        constexpr int P = 2 * R - 1, C = R - 1;
        T v[2][P * P][9];
        // level 1, own column, straight from shared memory
#pragma unroll
        for (int dy = -C; dy <= C; ++dy) {
            tb_node<S>(v[1][(dy + C) * P + C],
                    [&](int i, int ex, int ey) { return TBConv<S, T>::ld(src[i * EXY + (ly + dy + ey) * EX + lx + ex]); },
                    [&](int ex, int ey) { return (int)sc[(ly + dy + ey) * EX + lx + ex]; }, p);
        }
#pragma unroll
        for (int k = 2; k <= R; ++k) {
            // level k needs level k-1 at columns -1, 0, +1: the side columns are the own columns
            // of lanes -1 and +1 (rows |dy| <= h1 = R-k+1)
            const int h1 = R - k + 1;
#pragma unroll
            for (int dy = -h1; dy <= h1; ++dy) {
#pragma unroll
                for (int i = 0; i < 9; ++i) {
                    const T c = v[(k - 1) & 1][(dy + C) * P + C][i];
                    v[(k - 1) & 1][(dy + C) * P + C + 1][i] = __shfl_down_sync(0xffffffffu, c, 1, SEG);
                    v[(k - 1) & 1][(dy + C) * P + C - 1][i] = __shfl_up_sync(0xffffffffu, c, 1, SEG);
                }
            }
            // level k, own column
            const int h = R - k;
#pragma unroll
            for (int dy = -h; dy <= h; ++dy) {
                tb_node<S>(v[k & 1][(dy + C) * P + C],
                        [&](int i, int ex, int ey) { return v[(k - 1) & 1][(dy + ey + C) * P + ex + C][i]; },
                        [&](int ex, int ey) { return (int)sc[(ly + dy + ey) * EX + lx + ex]; }, p);
            }
        }
#pragma unroll
        for (int i = 0; i < 9; ++i) out[i] = v[R & 1][C * P + C][i];
    }
}

// One phase: R steps from shared buffer src (valid on [done, E - done)) into dst (valid on
// [done + R, E - done - R) afterwards). No barrier inside; the caller syncs between phases.
template <typename S, typename T, int R, int TS, int TX, int TY, bool WS>
__device__ __forceinline__ void tb_phase(const S* __restrict__ src, S* __restrict__ dst, const unsigned char* __restrict__ sc,
                                         const int done, const TBParams<T>& p)
{
    using G = TBGeom<TS, TX, TY>;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int lo = done + R, hix = G::EX - done - R, hiy = G::EY - done - R;
    if constexpr (!WS) {
        for (int ly = lo + ty; ly < hiy; ly += TY) {
            for (int lx = lo + tx; lx < hix; lx += TX) {
                T out[9];
                tb_cone<S, T, R, G::EX, G::EXY>(out, src, sc, lx, ly, p);
#pragma unroll
                for (int i = 0; i < 9; ++i) dst[i * G::EXY + ly * G::EX + lx] = TBConv<S, T>::st(out[i]);
            }
        }
    } else {
        // Runs of SEG x-contiguous lanes (one warp row for TX >= 32, TX lanes for TX < 32). Each run
        // yields V = SEG - 2(R-1) valid nodes; consecutive runs overlap by 2(R-1) nodes. Loop trip
        // counts are block-uniform so every lane reaches every shuffle.
        constexpr int SEG = TX < 32 ? TX : 32;
        constexpr int NSEG = TX / SEG;
        constexpr int V = SEG - 2 * (R - 1);
        static_assert(V >= 1, "warp run too narrow for this register depth");
        const int lane = tx % SEG, run = tx / SEG;
        const int nyit = (hiy - lo + TY - 1) / TY;
        const int nxit = (hix - lo + NSEG * V - 1) / (NSEG * V);
        for (int jy = 0; jy < nyit; ++jy) {
            const int ly = lo + jy * TY + ty;
            const int lyr = min(ly, hiy - 1);
            for (int jx = 0; jx < nxit; ++jx) {
                const int lx = lo - (R - 1) + (jx * NSEG + run) * V + lane;
                // lanes past the end read a clamped node: valid lanes never depend on them
                const int lxr = min(lx, hix + R - 2);
                T out[9];
                tb_cone_ws<S, T, R, G::EX, G::EXY, SEG>(out, src, sc, lxr, lyr, p);
                const bool keep = ly < hiy && lx < hix && lane >= R - 1 && lane < SEG - (R - 1);
                if (keep) {
#pragma unroll
                    for (int i = 0; i < 9; ++i) dst[i * G::EXY + ly * G::EX + lx] = TBConv<S, T>::st(out[i]);
                }
            }
        }
    }
}

// Phase of r steps, 1 <= r <= R (r < TR only for the last phase of a block).
template <typename S, typename T, int R, int TS, int TX, int TY, bool WS>
__device__ __forceinline__ void tb_phase_dispatch(const int r, const S* __restrict__ src, S* __restrict__ dst,
                                                  const unsigned char* __restrict__ sc, const int done, const TBParams<T>& p)
{
    if (r == R) {
        tb_phase<S, T, R, TS, TX, TY, WS>(src, dst, sc, done, p);
    } else {
        if constexpr (R > 1) tb_phase_dispatch<S, T, R - 1, TS, TX, TY, WS>(r, src, dst, sc, done, p);
    }
}

// Advance `steps` (1 <= steps <= TS) time steps of the whole lattice: fsrc -> fdst (distinct arrays).
// S: storage type (global and shared memory), T: arithmetic type (S = T, or S = tb_half, T = float).
// code: the node codes of tb_d2q9.cuh (mask code + TB_EDGE bit), one byte per node.
template <typename S, typename T, int TS, int TR, int TX, int TY, bool WS>
__global__ void __launch_bounds__(TX * TY)
lbm2d_tb(const S* __restrict__ fsrc, S* __restrict__ fdst, const unsigned char* __restrict__ code,
         const int nx, const int ny, const int steps,
         const T omega, const T fx, const T fy, const T uwx, const T uwy)
{
    static_assert(TR >= 1 && TR <= TS, "need 1 <= TR <= TS");
    using G = TBGeom<TS, TX, TY>;
    extern __shared__ __align__(16) unsigned char tb_smem[];
    S* sf = reinterpret_cast<S*>(tb_smem);
    unsigned char* sc = tb_smem + 2 * 9 * G::EXY * sizeof(S);
    const TBParams<T> p{omega, fx, fy, uwx, uwy};

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x0 = blockIdx.x * TX - TS, y0 = blockIdx.y * TY - TS;
    const long long plane = (long long)nx * ny;

    // tile + halo, periodic wrap: each thread reduces its first column and row once (C++ % keeps
    // the sign of the dividend: one +n fixes it) and then steps by TX / TY, subtracting n while
    // past the end (more than once only when the tile + halo is wider than the domain).
    int wx0 = (x0 + tx) % nx;
    if (wx0 < 0) wx0 += nx;
    int wy = (y0 + ty) % ny;
    if (wy < 0) wy += ny;
    for (int ly = ty; ly < G::EY; ly += TY) {
        const long long row = (long long)wy * nx;
        int wx = wx0;
        for (int lx = tx; lx < G::EX; lx += TX) {
            const long long g = row + wx;
            const int l = ly * G::EX + lx;
            sc[l] = code[g];
#pragma unroll
            for (int i = 0; i < 9; ++i) sf[i * G::EXY + l] = fsrc[i * plane + g];
            for (wx += TX; wx >= nx;) wx -= nx;
        }
        for (wy += TY; wy >= ny;) wy -= ny;
    }

    int buf = 0;
    for (int done = 0; done < steps;) {  // block-uniform loop: the barrier is reached by all threads
        __syncthreads();
        const int r = min(TR, steps - done);
        tb_phase_dispatch<S, T, TR, TS, TX, TY, WS>(r, sf + buf * 9 * G::EXY, sf + (buf ^ 1) * 9 * G::EXY, sc, done, p);
        done += r;
        buf ^= 1;
    }
    __syncthreads();

    const int gx = blockIdx.x * TX + tx, gy = blockIdx.y * TY + ty;
    if (gx < nx && gy < ny) {
        const int l = (ty + TS) * G::EX + tx + TS;
        const long long g = (long long)gy * nx + gx;
#pragma unroll
        for (int i = 0; i < 9; ++i) fdst[i * plane + g] = sf[(buf * 9 + i) * G::EXY + l];
    }
}

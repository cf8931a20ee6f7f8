// Single-step D2Q9 kernels: two-kernel (stream, then collide), fused (pull stream + collide),
// fused in-place AA streaming, and the open-boundary pass. One thread per node, x fastest.
//
// Row ranges (the decomposed step's overlap, engine/lbm2d/decomp_adapter.py): every kernel ends in a
// template flag ROWS and two arguments row0, row1. With ROWS it updates rows [row0, row1) only, its
// grid covering row1 − row0 rows (grid y block b starts at row0 + b · blockDim.y); the periodic wrap
// and the plane size stay those of all ny rows. Without ROWS the arguments are ignored and the
// kernel is the whole-grid one of before (row0 = 0, row1 = ny folded in at compile time), so the
// undecomposed launches run unchanged code.
#include "d2q9.cuh"

using namespace d2q9;

template <bool ROWS>
__device__ __forceinline__ int first_row(int row0) { return ROWS ? row0 : 0; }
template <bool ROWS>
__device__ __forceinline__ int end_row(int row1, int ny) { return ROWS ? row1 : ny; }

// ---- two-kernel baseline: g ← stream(f) on fluid nodes (others copied), then collide(g) ---------
template <typename T, typename S, bool ROWS>
__global__ void lbm_stream(const S* __restrict__ f, S* __restrict__ g, const unsigned char* __restrict__ mask,
                           int nx, int ny, T uwx, T uwy, int row0, int row1) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = first_row<ROWS>(row0) + blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= end_row<ROWS>(row1, ny)) return;
    const idx_t n = idx_t(nx) * ny, here = idx_t(y) * nx + x;
    if (mask[here] != FLUID) {
#pragma unroll
        for (int i = 0; i < Q; ++i) g[i * n + here] = f[i * n + here];
        return;
    }
    T v[Q];
    pull<T, S>(f, mask, x, y, nx, ny, uwx, uwy, v);
#pragma unroll
    for (int i = 0; i < Q; ++i) Store<T, S>::store(g, i * n + here, i, v[i]);
}

template <typename T, typename S, bool TRT, bool ROWS>
__global__ void lbm_collide(S* __restrict__ g, const unsigned char* __restrict__ mask, int nx, int ny,
                            T omega, T omega_minus, T fx, T fy, int row0, int row1) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = first_row<ROWS>(row0) + blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= end_row<ROWS>(row1, ny)) return;
    const idx_t n = idx_t(nx) * ny, here = idx_t(y) * nx + x;
    if (mask[here] != FLUID) return;
    T v[Q];
#pragma unroll
    for (int i = 0; i < Q; ++i) v[i] = Store<T, S>::load(g, i * n + here, i);
    collide<T, TRT, Shifted<S>::value>(v, omega, omega_minus, fx, fy);
#pragma unroll
    for (int i = 0; i < Q; ++i) Store<T, S>::store(g, i * n + here, i, v[i]);
}

// ---- node classes for the fused kernels -------------------------------------------------------
// cls[node] (engine/lbm2d/engine.py node_classes): FAST = fluid whose eight upstream neighbours are
// all non-bounce nodes, EDGE = fluid with at least one solid / moving-wall upstream neighbour,
// FIXED = any non-fluid node. It replaces the mask read of the naive kernel (same one byte per
// node), and lets every thread issue its nine population loads *before* it knows its class:
// the loads of a FAST node no longer wait for nine mask bytes, so a warp keeps 9 independent
// loads in flight instead of a chain of mask→population round trips. EDGE nodes patch the bounced
// directions afterwards; FIXED nodes are rare and take the slow copy.
enum NodeClass : unsigned char { FAST = 0, EDGE = 1, FIXED = 2 };

// The node indices x − c_i of a thread's node with periodic wrap (every index is in range, so the
// speculative loads are always legal).
struct Upstream {
    idx_t row[3];  // rows (y − cy) · nx for cy = −1, 0, +1
    int col[3];    // columns x − cx for cx = −1, 0, +1
    __device__ __forceinline__ Upstream(int x, int y, int nx, int ny) {
        const int ym = y == 0 ? ny - 1 : y - 1, yp = y == ny - 1 ? 0 : y + 1;
        row[0] = idx_t(yp) * nx;  // cy = −1 pulls from y + 1
        row[1] = idx_t(y) * nx;
        row[2] = idx_t(ym) * nx;
        col[0] = x == nx - 1 ? 0 : x + 1;  // cx = −1 pulls from x + 1
        col[1] = x;
        col[2] = x == 0 ? nx - 1 : x - 1;
    }
    __device__ __forceinline__ idx_t src(int i) const { return row[cy(i) + 1] + col[cx(i) + 1]; }
};

// Bounce-back patch of an EDGE node: directions whose upstream node is solid or a moving wall take
// the node's own outgoing population f_opp(i)(x) (+ the moving-wall term), exactly as pull() does.
template <typename T, typename S>
__device__ __forceinline__ void bounce_patch(const S* __restrict__ f, const unsigned char* __restrict__ mask,
                                             const Upstream& up, idx_t n, idx_t here, T uwx, T uwy, T g[Q]) {
#pragma unroll
    for (int i = 1; i < Q; ++i) {
        const unsigned char m = mask[up.src(i)];
        if (m == SOLID || m == MOVING_WALL) {
            const T b = Store<T, S>::load(f, opp(i) * n + here, opp(i));
            g[i] = m == MOVING_WALL ? b + wall_term<T>(i, uwx, uwy) : b;
        }
    }
}

// ---- segment classes --------------------------------------------------------------------------
// seg[y · nseg + x / SEG] (engine/lbm2d/engine.py segment_classes) is the largest node class of the
// SEG nodes of row y from x on: FAST for a segment of plain fluid, the common case away from walls
// and obstacles. The fused kernels read a node's own class byte only in segments that are not
// FAST, which cuts the class traffic from 1 byte per node (1.4 % of the 72 bytes of an fp32
// update, 2.7 % of fp16's 36) to 1/64 byte; the segment bytes stay in L2.
constexpr int SEG = 64;

__device__ __forceinline__ unsigned char segment_class(const unsigned char* __restrict__ seg, int x, int y, int nx) {
    const int nseg = (nx + SEG - 1) / SEG;
    return seg[idx_t(y) * nseg + x / SEG];
}

// Optional cache hints on the fused kernels' population accesses, for measurement (fused_bench
// --hints): -DNAGARE_LD_CS / -DNAGARE_ST_CS use ld/st.global.cs (evict-first: each population is
// read once and written once per step). Default: plain accesses. Host code (the CPU emulator)
// always takes the plain path.
template <typename V>
__device__ __forceinline__ V ld_pop(const V* p) {
#if defined(__CUDA_ARCH__) && defined(NAGARE_LD_CS)
    V v;  // Vec is aligned to its size, so it may be viewed as 32-bit words (or one 16-bit one)
    unsigned* r = reinterpret_cast<unsigned*>(&v);
    if constexpr (sizeof(V) == 16) {
        asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "l"(p));
    } else if constexpr (sizeof(V) == 8) {
        asm volatile("ld.global.cs.v2.u32 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
    } else if constexpr (sizeof(V) == 4) {
        asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(r[0]) : "l"(p));
    } else {
        asm volatile("ld.global.cs.u16 %0, [%1];" : "=h"(*reinterpret_cast<unsigned short*>(&v)) : "l"(p));
    }
    return v;
#else
    return *p;
#endif
}

template <typename V>
__device__ __forceinline__ void st_pop(V* p, const V& v) {
#if defined(__CUDA_ARCH__) && defined(NAGARE_ST_CS)
    const unsigned* r = reinterpret_cast<const unsigned*>(&v);
    if constexpr (sizeof(V) == 16) {
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                     : "memory");
    } else if constexpr (sizeof(V) == 8) {
        asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(r[0]), "r"(r[1]) : "memory");
    } else if constexpr (sizeof(V) == 4) {
        asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(r[0]) : "memory");
    } else {
        asm volatile("st.global.cs.u16 [%0], %1;" ::"l"(p), "h"(*reinterpret_cast<const unsigned short*>(&v))
                     : "memory");
    }
#else
    *p = v;
#endif
}

// A 16-byte population store through a pointer the compiler cannot classify (lbm_fused_pipe's
// opaque bases): st.global explicitly, where a plain store would become a generic ST.
template <typename V>
__device__ __forceinline__ void st_pop_global(V* p, const V& v) {
    static_assert(sizeof(V) == 16, "16-byte vectors");
#if defined(__CUDA_ARCH__)
    const unsigned* r = reinterpret_cast<const unsigned*>(&v);
#if defined(NAGARE_ST_CS)
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
#else
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
#endif
#else
    *p = v;
#endif
}

// ---- fused: one read and one write of the 9 populations per node --------------------------------
// NPT nodes per thread, blockDim.x apart along x (coalescing kept): NPT × 9 loads in flight.
template <typename T, typename S, bool TRT, int NPT, bool ROWS>
__global__ void lbm_fused(const S* __restrict__ f, S* __restrict__ g, const unsigned char* __restrict__ mask,
                          const unsigned char* __restrict__ cls, const unsigned char* __restrict__ seg, int nx,
                          int ny, T omega, T omega_minus, T fx, T fy, T uwx, T uwy, int row0, int row1) {
    const int y = first_row<ROWS>(row0) + blockIdx.y * blockDim.y + threadIdx.y;
    const int x0 = blockIdx.x * blockDim.x * NPT + threadIdx.x;
    if (y >= end_row<ROWS>(row1, ny)) return;
    const idx_t n = idx_t(nx) * ny;
    T v[NPT][Q];
    unsigned char c[NPT];
#pragma unroll
    for (int k = 0; k < NPT; ++k) {  // every load of every node first
        const int x = x0 + k * blockDim.x;
        if (x >= nx) break;
        const Upstream up(x, y, nx, ny);
        c[k] = segment_class(seg, x, y, nx);
        if (c[k] != FAST) c[k] = cls[up.row[1] + x];
#pragma unroll
        for (int i = 0; i < Q; ++i) v[k][i] = Store<T, S>::load(f, i * n + up.src(i), i);
    }
#pragma unroll
    for (int k = 0; k < NPT; ++k) {
        const int x = x0 + k * blockDim.x;
        if (x >= nx) break;
        const idx_t here = idx_t(y) * nx + x;
        if (c[k] == FIXED) {
#pragma unroll
            for (int i = 0; i < Q; ++i) g[i * n + here] = f[i * n + here];
            continue;
        }
        if (c[k] == EDGE) bounce_patch<T, S>(f, mask, Upstream(x, y, nx, ny), n, here, uwx, uwy, v[k]);
        collide<T, TRT, Shifted<S>::value>(v[k], omega, omega_minus, fx, fy);
#pragma unroll
        for (int i = 0; i < Q; ++i) Store<T, S>::store(g, i * n + here, i, v[k][i]);
    }
}

// ---- fused, W x-adjacent nodes per thread with vector loads and warp shuffles -------------------
// Lane l of a warp owns the nodes x0 … x0 + W − 1, x0 = W·(global thread x): a warp covers 32·W
// consecutive nodes of one row, and every global population access is one aligned W-element vector
// (W = 2: float2 / two fp16 in 32 bits; W = 4: float4 / four fp16 in 64 bits; W = 8: eight fp16).
// Directions with c_x = 0 pull their vector straight from the upstream row; c_x = ±1 pull a vector
// shifted by one node, which is the lane's own aligned vector plus one element of the neighbouring lane's
// (__shfl_up/down_sync, P1 §3.3's exchange applied to streaming) — only the warp's edge lane loads
// that element itself. Compared with one node per thread this divides the load/store instructions
// by W and removes the misaligned warp accesses (5 sectors for 4 sectors of data) that kept L2
// busy. Needs nx % W == 0 and blockDim.x a multiple of 32 (a warp never spans two rows); the engine
// falls back to lbm_fused otherwise.
template <typename S, int W> struct alignas(W * sizeof(S)) Vec { S e[W]; };

// W values of direction i into storage: element by element, except fp16 on sm_80+ where one
// cvt.rn.f16x2.f32 rounds two values at once (the same round-to-nearest-even as float_to_half_rn).
template <typename T, typename S, int W>
__device__ __forceinline__ Vec<S, W> pack(const T vals[W], int i) {
    Vec<S, W> o;
#pragma unroll
    for (int k = 0; k < W; ++k) Store<T, S>::store(&o.e[k], 0, i, vals[k]);
    return o;
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <>
__device__ __forceinline__ Vec<half_bits, 2> pack<float, half_bits, 2>(const float vals[2], int) {
    Vec<half_bits, 2> o;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(*reinterpret_cast<unsigned*>(&o)) : "f"(vals[1]), "f"(vals[0]));
    return o;
}
template <>
__device__ __forceinline__ Vec<half_bits, 4> pack<float, half_bits, 4>(const float vals[4], int) {
    Vec<half_bits, 4> o;
    unsigned* r = reinterpret_cast<unsigned*>(&o);
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r[0]) : "f"(vals[1]), "f"(vals[0]));
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r[1]) : "f"(vals[3]), "f"(vals[2]));
    return o;
}
template <>
__device__ __forceinline__ Vec<half_bits, 8> pack<float, half_bits, 8>(const float vals[8], int) {
    Vec<half_bits, 8> o;
    unsigned* r = reinterpret_cast<unsigned*>(&o);
#pragma unroll
    for (int k = 0; k < 4; ++k) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r[k]) : "f"(vals[2 * k + 1]), "f"(vals[2 * k]));
    return o;
}
#endif

template <typename T, typename S, bool TRT, int W, bool ROWS>
__global__ void lbm_fused_vec(const S* __restrict__ f, S* __restrict__ g, const unsigned char* __restrict__ mask,
                              const unsigned char* __restrict__ cls, const unsigned char* __restrict__ seg, int nx,
                              int ny, T omega, T omega_minus, T fx, T fy, T uwx, T uwy, int row0, int row1) {
    static_assert(W == 2 || W == 4 || W == 8, "vector width 2, 4 or 8");
    const int y = first_row<ROWS>(row0) + blockIdx.y * blockDim.y + threadIdx.y;
    if (y >= end_row<ROWS>(row1, ny)) return;  // uniform per warp (a warp is one row), so the shuffles below stay full
    const int lane = threadIdx.x & 31;
    const int x0 = W * (blockIdx.x * blockDim.x + threadIdx.x);
    const bool active = x0 < nx;
    const int xc = active ? x0 : nx - W;  // idle lanes load a valid vector and store nothing
    const idx_t n = idx_t(nx) * ny;
    const Upstream up(xc, y, nx, ny);
    const idx_t here = up.row[1] + xc;
    Vec<unsigned char, W> c = {};  // all FAST unless the segment says otherwise (W divides SEG)
    if (segment_class(seg, xc, y, nx) != FAST) c = *reinterpret_cast<const Vec<unsigned char, W>*>(cls + here);
    const int xl = xc == 0 ? nx - 1 : xc - 1, xr = xc + W >= nx ? xc + W - nx : xc + W;
    T v[W][Q];
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const S* fi = f + i * n + up.row[cy(i) + 1];
        const Vec<S, W> p = ld_pop(reinterpret_cast<const Vec<S, W>*>(fi + xc));
        T e[W];
#pragma unroll
        for (int k = 0; k < W; ++k) e[k] = Store<T, S>::load(&p.e[k], 0, i);
        if (cx(i) == 0) {
#pragma unroll
            for (int k = 0; k < W; ++k) v[k][i] = e[k];
        } else if (cx(i) == 1) {  // node x0 + k pulls column x0 + k − 1
            const T left = __shfl_up_sync(0xffffffffu, e[W - 1], 1);
            v[0][i] = lane == 0 ? Store<T, S>::load(fi, xl, i) : left;
#pragma unroll
            for (int k = 1; k < W; ++k) v[k][i] = e[k - 1];
        } else {  // c_x = −1: node x0 + k pulls column x0 + k + 1
            const T right = __shfl_down_sync(0xffffffffu, e[0], 1);
#pragma unroll
            for (int k = 0; k < W - 1; ++k) v[k][i] = e[k + 1];
            v[W - 1][i] = (lane == 31 || xc + W >= nx) ? Store<T, S>::load(fi, xr, i) : right;
        }
    }
    if (!active) return;  // after the last shuffle
    bool any_fixed = false;
#pragma unroll
    for (int k = 0; k < W; ++k) {
        if (c.e[k] == FIXED) {
            any_fixed = true;
            continue;
        }
        if (c.e[k] == EDGE) bounce_patch<T, S>(f, mask, Upstream(xc + k, y, nx, ny), n, here + k, uwx, uwy, v[k]);
        collide<T, TRT, Shifted<S>::value>(v[k], omega, omega_minus, fx, fy);
    }
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        T vals[W];
#pragma unroll
        for (int k = 0; k < W; ++k) vals[k] = v[k][i];
        Vec<S, W> out = pack<T, S, W>(vals, i);
        if (any_fixed) {  // copy the raw storage of FIXED nodes (rare: never in a FAST segment)
#pragma unroll
            for (int k = 0; k < W; ++k)
                if (c.e[k] == FIXED) out.e[k] = f[i * n + here + k];
        }
        st_pop(reinterpret_cast<Vec<S, W>*>(g + i * n + here), out);
    }
}

// ---- fused fp16, W x-adjacent nodes per thread, populations kept packed -------------------------
// The fp16 kernel moves half the bytes of the fp32 one, so it must keep twice the nodes' loads in
// flight to reach the same fraction of the copy bandwidth. lbm_fused_vec<float, half_bits, …> converts
// each loaded value to fp32 at once (9·W live floats: 36 registers at W = 4, 72 at W = 8, which caps
// occupancy or spills). Here the populations stay two fp16 to a 32-bit register from the load to the
// store (9·W/2 registers: W = 8 — one 16-byte access per population row, as fp32's W = 4 — costs 36),
// and each pair of nodes is unpacked, collided and packed back in turn. The c_x = ±1 shift by one
// node is a funnel of two words (the high half of one and the low half of the next); the word across
// the lane boundary comes by one shuffle, the warp's edge lanes load that half themselves. Same
// arithmetic per node as lbm_fused_vec on fp16 (shifted populations, d2q9.cuh collide), so the two
// give identical bits. Needs nx % W == 0 and blockDim.x a multiple of 32, like lbm_fused_vec.
template <int W> struct alignas(2 * W) HalfWords { unsigned w[W / 2]; };  // W fp16, little-endian

// (high half of a, low half of b): the fp16 pair one node to the right of a's pair.
__device__ __forceinline__ unsigned half_funnel(unsigned a, unsigned b) { return (a >> 16) | (b << 16); }
__device__ __forceinline__ float half_lo(unsigned v) { return half_to_float(half_bits(v & 0xffffu)); }
__device__ __forceinline__ float half_hi(unsigned v) { return half_to_float(half_bits(v >> 16)); }
__device__ __forceinline__ unsigned pack_halves(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned r;  // one cvt rounds both (round-to-nearest-even, as float_to_half_rn)
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return unsigned(float_to_half_rn(lo)) | (unsigned(float_to_half_rn(hi)) << 16);
#endif
}

// Streaming of one direction i for the packed kernels: raw is the thread's aligned W-node vector of
// the upstream row; c_x = ±1 shift it by one node, the word across the lane boundary coming by one
// shuffle. At the warp's edges (edge_left for c_x = +1 / edge_right for c_x = −1) the column beyond
// comes from edge(): a word whose high half is column x0 − 1 (c_x = +1) or whose low half is column
// x0 + W (c_x = −1). Called by every lane (the shuffles), edge() only where it is needed.
template <int W, typename Edge>
__device__ __forceinline__ void packed_stream(int i, const HalfWords<W>& raw, bool edge_left, bool edge_right,
                                              Edge edge, unsigned (&pi)[W / 2]) {
    constexpr int M = W / 2;
    if (cx(i) == 0) {
#pragma unroll
        for (int m = 0; m < M; ++m) pi[m] = raw.w[m];
    } else if (cx(i) == 1) {  // node x0 + k pulls column x0 + k − 1: the pairs shift right by one
        unsigned left = __shfl_up_sync(0xffffffffu, raw.w[M - 1], 1);  // its high half: column x0 − 1
        if (edge_left) left = edge();
        pi[0] = half_funnel(left, raw.w[0]);
#pragma unroll
        for (int m = 1; m < M; ++m) pi[m] = half_funnel(raw.w[m - 1], raw.w[m]);
    } else {  // c_x = −1: node x0 + k pulls column x0 + k + 1
        unsigned right = __shfl_down_sync(0xffffffffu, raw.w[0], 1);  // its low half: column x0 + W
        if (edge_right) right = edge();
#pragma unroll
        for (int m = 0; m < M - 1; ++m) pi[m] = half_funnel(raw.w[m], raw.w[m + 1]);
        pi[M - 1] = half_funnel(raw.w[M - 1], right);
    }
}

// The pair loop of packed_collide_store: one pair of nodes at a time is unpacked (18 live floats,
// not 9·W), collided and packed back. CLASSES: apply the node classes c (bounce-back patch for EDGE,
// FIXED nodes left alone; returns whether there was a FIXED one); without, every node is plain fluid
// (a FAST segment) and there are no per-node tests — the same operations on the same values, so the
// same bits. Those tests and their branch bookkeeping were ~70 of ~1,240 instructions per row of
// lbm_fused_pipe (nvcc 13.0, sm_90).
template <bool TRT, int W, bool CLASSES>
__device__ __forceinline__ bool packed_collide_pairs(unsigned (&p)[Q][W / 2], const Vec<unsigned char, W>& c,
                                                     const half_bits* __restrict__ f,
                                                     const unsigned char* __restrict__ mask, int xc, int y, int nx,
                                                     int ny, idx_t n, idx_t here, float omega, float omega_minus,
                                                     float fx, float fy, float uwx, float uwy) {
    bool any_fixed = false;
#pragma unroll
    for (int m = 0; m < W / 2; ++m) {
        float a[Q], b[Q];
#pragma unroll
        for (int i = 0; i < Q; ++i) {
            a[i] = half_lo(p[i][m]);
            b[i] = half_hi(p[i][m]);
        }
        if constexpr (CLASSES) {
            const unsigned char ca = c.e[2 * m], cb = c.e[2 * m + 1];
            any_fixed = any_fixed || ca == FIXED || cb == FIXED;
            if (ca == EDGE) bounce_patch<float, half_bits>(f, mask, Upstream(xc + 2 * m, y, nx, ny), n, here + 2 * m, uwx, uwy, a);
            if (cb == EDGE) bounce_patch<float, half_bits>(f, mask, Upstream(xc + 2 * m + 1, y, nx, ny), n, here + 2 * m + 1, uwx, uwy, b);
            if (ca != FIXED) collide<float, TRT, true>(a, omega, omega_minus, fx, fy);
            if (cb != FIXED) collide<float, TRT, true>(b, omega, omega_minus, fx, fy);
        } else {
            collide<float, TRT, true>(a, omega, omega_minus, fx, fy);
            collide<float, TRT, true>(b, omega, omega_minus, fx, fy);
        }
#pragma unroll
        for (int i = 0; i < Q; ++i) p[i][m] = pack_halves(a[i], b[i]);
    }
    return any_fixed;
}

// The second half of the packed kernels (lbm_fused_packed, lbm_fused_pipe): p[i][m] holds the streamed
// populations of the thread's W nodes (two fp16 to a word); they collide pair by pair, then one
// W-wide store per direction goes through store(i, vector). FIXED nodes keep their own raw storage.
// `fast`: the thread's segment is plain fluid (c all FAST).
template <bool TRT, int W, typename Store>
__device__ __forceinline__ void packed_collide_store(unsigned (&p)[Q][W / 2], const Vec<unsigned char, W>& c,
                                                     bool fast, const half_bits* __restrict__ f, Store store,
                                                     const unsigned char* __restrict__ mask, int xc, int y, int nx,
                                                     int ny, idx_t n, idx_t here, float omega, float omega_minus, float fx,
                                                     float fy, float uwx, float uwy) {
    constexpr int M = W / 2;
    const bool any_fixed =
        fast ? packed_collide_pairs<TRT, W, false>(p, c, f, mask, xc, y, nx, ny, n, here, omega, omega_minus, fx, fy, uwx, uwy)
             : packed_collide_pairs<TRT, W, true>(p, c, f, mask, xc, y, nx, ny, n, here, omega, omega_minus, fx, fy, uwx, uwy);
    if (any_fixed) {  // FIXED nodes keep their own raw storage (rare: never in a FAST segment)
#pragma unroll
        for (int i = 0; i < Q; ++i)
#pragma unroll
            for (int k = 0; k < W; ++k) {
                if (c.e[k] != FIXED) continue;
                const unsigned h = f[i * n + here + k];
                p[i][k / 2] = k % 2 ? (p[i][k / 2] & 0xffffu) | (h << 16) : (p[i][k / 2] & 0xffff0000u) | h;
            }
    }
    // One test for the whole row, not one per direction: the per-direction test and its address
    // arithmetic were ~10 instructions per direction in lbm_fused_pipe's SASS (nvcc 13.0, sm_90).
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        HalfWords<W> out;
#pragma unroll
        for (int m = 0; m < M; ++m) out.w[m] = p[i][m];
        store(i, out);
    }
}

template <bool TRT, int W, bool ROWS>
__global__ void lbm_fused_packed(const half_bits* __restrict__ f, half_bits* __restrict__ g,
                                 const unsigned char* __restrict__ mask, const unsigned char* __restrict__ cls,
                                 const unsigned char* __restrict__ seg, int nx, int ny, float omega,
                                 float omega_minus, float fx, float fy, float uwx, float uwy, int row0, int row1) {
    static_assert(W == 2 || W == 4 || W == 8, "vector width 2, 4 or 8");
    constexpr int M = W / 2;  // 32-bit words per population row of the thread
    // The setup below is lbm_fused_vec's, written out: sharing it through a struct made ptxas give
    // this kernel 108 registers instead of 96 (one block fewer per SM) — checked with nvcc 13.0.
    const int y = first_row<ROWS>(row0) + blockIdx.y * blockDim.y + threadIdx.y;
    if (y >= end_row<ROWS>(row1, ny)) return;  // uniform per warp (a warp is one row): the shuffles stay full
    const int lane = threadIdx.x & 31;
    const int x0 = W * (blockIdx.x * blockDim.x + threadIdx.x);
    const bool active = x0 < nx;
    const int xc = active ? x0 : nx - W;  // idle lanes load a valid vector and store nothing
    const idx_t n = idx_t(nx) * ny;
    const Upstream up(xc, y, nx, ny);
    const idx_t here = up.row[1] + xc;
    Vec<unsigned char, W> c = {};  // all FAST unless the segment says otherwise (W divides SEG)
    const bool fast = segment_class(seg, xc, y, nx) == FAST;
    if (!fast) c = *reinterpret_cast<const Vec<unsigned char, W>*>(cls + here);
    const int xl = xc == 0 ? nx - 1 : xc - 1, xr = xc + W >= nx ? xc + W - nx : xc + W;
    unsigned p[Q][M];  // p[i][m]: direction i of nodes xc + 2m (low half) and xc + 2m + 1 (high half)
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const half_bits* fi = f + i * n + up.row[cy(i) + 1];
        const HalfWords<W> raw = ld_pop(reinterpret_cast<const HalfWords<W>*>(fi + xc));
        // the edge lanes' column beyond the warp: x0 − 1 as a high half, x0 + W as a low half
        packed_stream<W>(i, raw, lane == 0, lane == 31 || xc + W >= nx,
                         [&] { return cx(i) == 1 ? unsigned(fi[xl]) << 16 : unsigned(fi[xr]); }, p[i]);
    }
    if (!active) return;  // after the last shuffle
    packed_collide_store<TRT, W>(
        p, c, fast, f, [&](int i, const HalfWords<W>& v) { st_pop(reinterpret_cast<HalfWords<W>*>(g + i * n + here), v); },
        mask, xc, y, nx, ny, n, here, omega, omega_minus, fx, fy, uwx, uwy);
}

// ---- fused fp16, packed, rows streamed through a cp.async pipeline ------------------------------
// lbm_fused_packed is latency-bound (ncu: docs/decisions.md D8): a warp
// issues its nine 16-byte loads, then computes its 256 nodes with nothing in flight, and the five
// warps per scheduler that 96 registers allow do not cover the wait (DRAM 70 % of peak). Here each
// warp owns a strip of 32·8 = 256 columns and marches down a run of `rows` rows; the populations of
// the next STAGES − 1 rows are copied global → shared memory with cp.async (sm_80+) while the
// current row is computed, so every warp keeps loads in flight all the time and no register holds
// them. A lane copies exactly the bytes it reads back (its own 16-byte vector per direction, its
// edge column, its segment-class word), so cp.async.wait_group alone orders the accesses: no
// barrier. The streaming, collision and stores are lbm_fused_packed's (packed_stream,
// packed_collide_store): identical bits. Launch: blockDim = (32 · warps, 1, 1), grid
// (ceil(strips / warps), ceil(ny / rows)) with strips = ceil(nx / 256), dynamic shared memory
// warps · STAGES · sizeof(PipeStage); nx % 8 == 0, and the segment-class array padded to a
// multiple of 4 bytes (whole words are copied).
constexpr int PIPE_W = 8;  // nodes per lane: one 16-byte vector of fp16 per direction
struct PipeStage {         // one row of one warp in shared memory (5,888 bytes)
    HalfWords<PIPE_W> vec[Q][32];  // [direction][lane]: 16-byte slots, conflict-free
    unsigned edge[Q][32];          // the lane's edge column (c_x = ±1 directions of edge lanes only)
    unsigned seg[32];              // the 4-byte word holding the lane's segment-class byte
};

// Shared-memory destinations of the copies as 32-bit .shared window addresses, taken once per thread
// and offset by constants: converting each slot's generic pointer (cvta) in the row loop cost ~20
// 64-bit instructions per copied row in the first version's SASS (nvcc 13.0, sm_90). The host
// emulator and pre-sm_80 builds use plain byte pointers and synchronous copies (same results).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
typedef unsigned smem_addr;
__device__ __forceinline__ smem_addr smem_address(void* p) {
    return static_cast<smem_addr>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void copy_async16(smem_addr dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void copy_async4(smem_addr dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void copy_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
#else
typedef unsigned char* smem_addr;
__device__ __forceinline__ smem_addr smem_address(void* p) { return static_cast<unsigned char*>(p); }
__device__ __forceinline__ void copy_async16(smem_addr dst, const void* src) {
    *reinterpret_cast<HalfWords<PIPE_W>*>(dst) = *static_cast<const HalfWords<PIPE_W>*>(src);
}
__device__ __forceinline__ void copy_async4(smem_addr dst, const void* src) {
    *reinterpret_cast<unsigned*>(dst) = *static_cast<const unsigned*>(src);
}
__device__ __forceinline__ void copy_async_commit() {}
template <int N>
__device__ __forceinline__ void copy_async_wait() {}
#endif

// A pointer the compiler cannot see into: `opaque(f + xc) + offset` then stays one IMAD.WIDE.U32 per
// address instead of being re-associated into a 64-bit (xc + offset) sum, a shift and a 64-bit add.
template <typename P>
__device__ __forceinline__ P* opaque(P* p) {
#if defined(__CUDA_ARCH__)
    asm("" : "+l"(p));
#endif
    return p;
}

// I: the type of element offsets within the lattice. The engine passes `unsigned` when 9·nx·ny
// fits in 32 bits (every grid up to 21,845²): each address is then one IMAD.WIDE.U32 from a
// per-lane base pointer instead of a 64-bit multiply-add chain; idx_t beyond that.
template <bool TRT, int STAGES, typename I, bool ROWS>
__global__ void lbm_fused_pipe(const half_bits* __restrict__ f, half_bits* __restrict__ g,
                               const unsigned char* __restrict__ mask, const unsigned char* __restrict__ cls,
                               const unsigned char* __restrict__ seg, int nx, int ny, float omega, float omega_minus,
                               float fx, float fy, float uwx, float uwy, int rows, int row0, int row1) {
    static_assert(STAGES >= 2, "at least one row in flight while one is computed");
    constexpr int W = PIPE_W, M = W / 2;
    constexpr unsigned STAGE_BYTES = sizeof(PipeStage);
    extern __shared__ __align__(16) unsigned char tb_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int strip = blockIdx.x * (blockDim.x >> 5) + warp;
    if (strip * 32 * W >= nx) return;  // a whole warp beyond the last strip
    const int y_begin = first_row<ROWS>(row0) + blockIdx.y * rows, y_last = end_row<ROWS>(row1, ny);
    const int y_end = y_begin + rows < y_last ? y_begin + rows : y_last;
    PipeStage* stage = reinterpret_cast<PipeStage*>(tb_smem) + warp * STAGES;
    const int x0 = W * (strip * 32 + lane);
    const bool active = x0 < nx;
    const int xc = active ? x0 : nx - W;  // idle lanes copy a valid vector and store nothing
    const idx_t n = idx_t(nx) * ny;
    const I plane = I(n), width = I(nx);
    const int nseg = (nx + SEG - 1) / SEG;
    const int xl = xc == 0 ? nx - 1 : xc - 1, xr = xc + W >= nx ? xc + W - nx : xc + W;
    const bool edge_left = lane == 0, edge_right = lane == 31 || xc + W >= nx;
    // Per-lane bases: the lane's vector, its edge words (the word whose high half is column xl,
    // xl odd as nx is even / whose low half is xr), its segment-class word; rows and planes are
    // added as element offsets.
    const half_bits* const f_vec = opaque(f + xc);
    const half_bits* const f_left = opaque(f + (xl - 1));
    const half_bits* const f_right = opaque(f + xr);
    half_bits* const g_vec = opaque(g + xc);
    const smem_addr s_vec = smem_address(&stage[0].vec[0][lane]);
    const smem_addr s_edge = smem_address(&stage[0].edge[0][lane]);
    const smem_addr s_seg = smem_address(&stage[0].seg[lane]);

    // Row y into stage slot k: each direction's upstream vector, the edge column, the segment word.
    auto issue = [&](int y, int k) {
        const int ym = y == 0 ? ny - 1 : y - 1, yp = y == ny - 1 ? 0 : y + 1;
        const I row[3] = {I(yp) * width, I(y) * width, I(ym) * width};  // cy = −1, 0, +1
        const unsigned slot = unsigned(k) * STAGE_BYTES;
#pragma unroll
        for (int i = 0; i < Q; ++i) {
            const I at = I(i) * plane + row[cy(i) + 1];
            copy_async16(s_vec + (slot + i * 32 * sizeof(HalfWords<W>)), f_vec + at);
            if (cx(i) == 1 && edge_left) copy_async4(s_edge + (slot + i * 32 * 4), f_left + at);
            if (cx(i) == -1 && edge_right) copy_async4(s_edge + (slot + i * 32 * 4), f_right + at);
        }
        copy_async4(s_seg + slot, seg + ((I(y) * I(nseg) + I(xc / SEG)) & ~I(3)));
    };

    int slot = 0;
#pragma unroll
    for (int k = 0; k < STAGES - 1; ++k) {  // prologue: the first STAGES − 1 rows in flight
        if (y_begin + k < y_end) issue(y_begin + k, k);
        copy_async_commit();  // (empty groups too: the wait below counts groups)
    }
    for (int y = y_begin; y < y_end; ++y) {
        // Row y + STAGES − 1 goes into the slot this lane read last iteration (its values are used).
        const int ahead = slot == 0 ? STAGES - 1 : slot - 1;
        if (y + STAGES - 1 < y_end) issue(y + STAGES - 1, ahead);
        copy_async_commit();
        copy_async_wait<STAGES - 1>();  // this lane's copies of row y have landed
        const PipeStage& s = stage[slot];
        slot = slot + 1 == STAGES ? 0 : slot + 1;

        const I row = I(y) * width;
        Vec<unsigned char, W> c = {};  // all FAST unless the segment says otherwise (W divides SEG)
        const unsigned si = unsigned(y) * unsigned(nseg) + unsigned(xc / SEG);  // byte within the copied word
        const bool fast = ((s.seg[lane] >> (8 * (si & 3u))) & 0xffu) == FAST;
        if (!fast) c = *reinterpret_cast<const Vec<unsigned char, W>*>(cls + (idx_t(y) * nx + xc));
        unsigned p[Q][M];
#pragma unroll
        for (int i = 0; i < Q; ++i)
            packed_stream<W>(i, s.vec[i][lane], edge_left, edge_right, [&] { return s.edge[i][lane]; }, p[i]);
        if (active)
            packed_collide_store<TRT, W>(
                p, c, fast, f,
                [&](int i, const HalfWords<W>& v) {
                    st_pop_global(reinterpret_cast<HalfWords<W>*>(g_vec + (I(i) * plane + row)), v);
                },
                mask, xc, y, nx, ny, n, idx_t(y) * nx + xc, omega, omega_minus, fx, fy, uwx, uwy);
    }
}

// ---- fused, in-place AA streaming (Bailey et al. 2009): one lattice A ---------------------------
// Two layouts of the same canonical state f_i(x) (post-collision):
//   layout P: A[opp(i)][x]      = f_i(x)
//   layout Q: A[i][x + c_i]     = f_i(x)
// FROM_P advances a P state and leaves a Q state; !FROM_P advances Q and leaves P. Each thread reads
// exactly the slots it writes (bounce-back reads a solid neighbour's slot that no other thread
// touches), so the update is race-free in place. The speculative FROM_P load of a bounced
// direction reads slot A[opp(i)][x − c_i], which only this thread writes (after its loads), so it
// is race-free too and its value is discarded. Non-fluid nodes are not touched; their canonical
// values never change and the host keeps them (engine/lbm2d/engine.py).
template <typename T, typename S, bool TRT, bool FROM_P, bool ROWS>
__global__ void lbm_fused_aa(S* __restrict__ A, const unsigned char* __restrict__ mask,
                             const unsigned char* __restrict__ cls, int nx, int ny, T omega, T omega_minus, T fx,
                             T fy, T uwx, T uwy, int row0, int row1) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = first_row<ROWS>(row0) + blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= end_row<ROWS>(row1, ny)) return;
    const idx_t n = idx_t(nx) * ny;
    const Upstream up(x, y, nx, ny);
    const idx_t here = up.row[1] + x;
    const unsigned char c = cls[here];
    T v[Q];
#pragma unroll
    for (int i = 0; i < Q; ++i)  // f_i(x − c_i)
        v[i] = FROM_P ? Store<T, S>::load(A, opp(i) * n + up.src(i), i) : Store<T, S>::load(A, i * n + here, i);
    if (c == FIXED) return;
    if (c == EDGE) {
#pragma unroll
        for (int i = 1; i < Q; ++i) {
            const unsigned char m = mask[up.src(i)];
            if (m == SOLID || m == MOVING_WALL) {  // f_opp(i)(x), the node's own outgoing population
                const T b = FROM_P ? Store<T, S>::load(A, i * n + here, opp(i))
                                   : Store<T, S>::load(A, opp(i) * n + up.src(i), opp(i));
                v[i] = m == MOVING_WALL ? b + wall_term<T>(i, uwx, uwy) : b;
            }
        }
    }
    collide<T, TRT, Shifted<S>::value>(v, omega, omega_minus, fx, fy);
    // Downstream nodes x + c_i: row (y + cy), column (x + cx) — the upstream table mirrored.
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        if (FROM_P) {
            const idx_t dst = up.row[1 - cy(i)] + up.col[1 - cx(i)];
            Store<T, S>::store(A, i * n + dst, i, v[i]);
        } else {
            Store<T, S>::store(A, opp(i) * n + here, i, v[i]);
        }
    }
}

// ---- open boundaries (after a two-lattice step): Guo's non-equilibrium extrapolation ------------
template <typename T>
__device__ __forceinline__ void feq_all(T rho, T ux, T uy, T out[Q]) {
    const T usq = ux * ux + uy * uy;
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const T cu = T(cx(i)) * ux + T(cy(i)) * uy;
        out[i] = w<T>(i) * rho * (T(1) + T(3) * cu + T(4.5) * cu * cu - T(1.5) * usq);
    }
}

template <typename T, typename S, bool ROWS>
__global__ void lbm_open_boundaries(S* __restrict__ f, const unsigned char* __restrict__ mask, int nx, int ny,
                                    T u_in, int row0, int row1) {
    const int y = first_row<ROWS>(row0) + blockIdx.x * blockDim.x + threadIdx.x;
    if (y >= end_row<ROWS>(row1, ny)) return;
    const idx_t n = idx_t(nx) * ny;
#pragma unroll 1
    for (int side = 0; side < 2; ++side) {
        const int x = side == 0 ? 0 : nx - 1, xn = side == 0 ? 1 : nx - 2;
        if (mask[idx_t(y) * nx + x] != (side == 0 ? INLET : OUTLET)) continue;
        const idx_t here = idx_t(y) * nx + x, nb = idx_t(y) * nx + xn;
        T g[Q];
#pragma unroll
        for (int i = 0; i < Q; ++i) g[i] = load_f<T, S>(f, i * n + nb, i);
        const T rho = g[0] + g[1] + g[2] + g[3] + g[4] + g[5] + g[6] + g[7] + g[8];
        const T ux = (g[1] - g[3] + g[5] - g[6] - g[7] + g[8]) / rho;
        const T uy = (g[2] - g[4] + g[5] + g[6] - g[7] - g[8]) / rho;
        T en[Q], eb[Q];
        feq_all<T>(rho, ux, uy, en);
        if (side == 0) feq_all<T>(rho, u_in, T(0), eb);
        else feq_all<T>(T(1), ux, uy, eb);
#pragma unroll
        for (int i = 0; i < Q; ++i) store_f<T, S>(f, i * n + here, i, eb[i] + (g[i] - en[i]));
    }
}

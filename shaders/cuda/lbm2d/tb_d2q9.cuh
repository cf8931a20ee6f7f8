// Per-node D2Q9 update used by the temporal-blocking kernels (temporal_blocking.cu).
// Semantics (binding, shared by every lbm2d variant): state = post-collision populations;
// one step = pull-stream with half-way bounce-back (mask 1) / moving-wall bounce-back (mask 2),
// then BGK collision with Guo forcing. Nodes with mask != 0 are copied through unchanged.
// Directions, weights and the collision are d2q9.cuh's (the single-step kernels' code), so the
// arithmetic is the same operations in the same order as engine/lbm2d/reference.py.
//
// The node update reads its inputs through two accessors, so the same arithmetic serves shared
// memory (STB), register cones (SRTB) and shuffled registers (SRTB-WS):
//   get(i, ex, ey): previous post-collision f_i at the node offset (ex, ey) from this node,
//   code(ex, ey):   node code (below) at that offset.
// Every call site unrolls the direction loops, so i, ex, ey are compile-time constants there.
#pragma once
#include "d2q9.cuh"

// Storage type S vs arithmetic type T: S = T (fp32, fp64), or S = tb_half (IEEE binary16 bits in
// an unsigned short) with T = float: fp16 storage, fp32 arithmetic, values rounded to half after
// every step wherever they live. Unlike d2q9::Store, the halves hold f_i itself (not f_i − w_i).
// The conversions are d2q9.cuh's (one PTX cvt each on the device, _Float16 on the host emulator).
typedef d2q9::half_bits tb_half;

template <typename S, typename T>
struct TBConv {
    static __device__ __forceinline__ T ld(S v) { return T(v); }
    static __device__ __forceinline__ S st(T v) { return S(v); }
    static __device__ __forceinline__ T round(T v) { return v; }
};
template <>
struct TBConv<tb_half, float> {
    static __device__ __forceinline__ float ld(tb_half v) { return d2q9::half_to_float(v); }
    static __device__ __forceinline__ tb_half st(float v) { return d2q9::float_to_half_rn(v); }
    static __device__ __forceinline__ float round(float v) { return d2q9::half_to_float(d2q9::float_to_half_rn(v)); }
};

// Node codes (one byte per node; built once on the host by temporal_blocking.node_codes from the
// mask): bits 0-6 are the mask code, bit 7 (TB_EDGE) marks a fluid node with at least one solid or
// moving-wall upstream neighbour x − c_i (periodic wrap). So a node reads one byte to know that it
// is a plain fluid node (code 0: nine pulls, no per-direction mask lookups), non-fluid (copy), or
// an edge node that looks its upstream neighbours' mask codes up.
enum : int { TB_MASK = 0x7f, TB_EDGE = 0x80 };

template <typename T>
struct TBParams {
    T omega;    // 1/tau
    T fx, fy;   // body-force density
    T uwx, uwy; // moving-wall velocity (mask code 2)
};

// One full step of one node: pull-stream (with bounce-back) then collide; non-fluid nodes copy
// through. Results are rounded to the storage type S (a no-op unless S is narrower than T).
template <typename S, typename T, typename Get, typename Code>
__device__ __forceinline__ void tb_node(T out[9], Get get, Code code, const TBParams<T>& p)
{
    using namespace d2q9;
    const int c = code(0, 0);
#pragma unroll
    for (int i = 0; i < 9; ++i) out[i] = get(i, -cx(i), -cy(i));  // pull (speculative unless c == 0)
    if (c != 0) {  // rare: one test on the common path
        if (c & TB_MASK) {  // non-fluid: copied through
#pragma unroll
            for (int i = 0; i < 9; ++i) out[i] = get(i, 0, 0);
            return;
        }
        // TB_EDGE: patch the bounced directions exactly as d2q9::pull does (the wall term is
        // d2q9::wall_term itself; its products by 0/±1 run only in warps holding an edge node)
#pragma unroll
        for (int i = 1; i < 9; ++i) {
            const int ms = code(-cx(i), -cy(i)) & TB_MASK;
            if (ms == SOLID) {
                out[i] = get(opp(i), 0, 0);
            } else if (ms == MOVING_WALL) {
                out[i] = get(opp(i), 0, 0) + wall_term<T>(i, p.uwx, p.uwy);
            }  // else fluid (inlet/outlet codes never reach these kernels)
        }
    }
    collide_bgk<T>(out, p.omega, p.fx, p.fy);
#pragma unroll
    for (int i = 0; i < 9; ++i) out[i] = TBConv<S, T>::round(out[i]);
}

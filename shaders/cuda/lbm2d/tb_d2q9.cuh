// Per-node D2Q9 update used by the temporal-blocking kernels (temporal_blocking.cu).
// Semantics (binding, shared by every lbm2d variant): state = post-collision populations;
// one step = pull-stream with half-way bounce-back (mask 1) / moving-wall bounce-back (mask 2),
// then BGK collision with Guo forcing. Nodes with mask != 0 are copied through unchanged.
// Directions: c = (0,0),(1,0),(0,1),(-1,0),(0,-1),(1,1),(-1,1),(-1,-1),(1,-1); opp = 0,3,4,1,2,7,8,5,6.
//
// The node update reads its inputs through two accessors, so the same arithmetic serves shared
// memory (STB), register cones (SRTB) and shuffled registers (SRTB-WS):
//   get(i, ex, ey): previous post-collision f_i at the node offset (ex, ey) from this node,
//   msk(ex, ey):    mask code at that offset.
// Every call site unrolls the direction loops, so i, ex, ey are compile-time constants there.
#pragma once

// Storage type S vs arithmetic type T: S = T (fp32, fp64), or S = tb_half (IEEE binary16 bits in
// an unsigned short) with T = float: fp16 storage, fp32 arithmetic, values rounded to half after
// every step wherever they live. The conversions are single PTX cvt instructions, so no
// cuda_fp16.h is needed under NVRTC (CuPy's bundled fp16 headers vary with the toolkit).
typedef unsigned short tb_half;
#ifndef NAGARE_EMU
__device__ __forceinline__ float tb_half_to_float(tb_half h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ tb_half tb_float_to_half(float f)
{
    tb_half h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif

template <typename S, typename T>
struct TBConv {
    static __device__ __forceinline__ T ld(S v) { return T(v); }
    static __device__ __forceinline__ S st(T v) { return S(v); }
    static __device__ __forceinline__ T round(T v) { return v; }
};
template <>
struct TBConv<tb_half, float> {
    static __device__ __forceinline__ float ld(tb_half v) { return tb_half_to_float(v); }
    static __device__ __forceinline__ tb_half st(float v) { return tb_float_to_half(v); }
    static __device__ __forceinline__ float round(float v) { return tb_half_to_float(tb_float_to_half(v)); }
};

__device__ __forceinline__ constexpr int tb_cx(int i) { return (i == 1 || i == 5 || i == 8) ? 1 : ((i == 3 || i == 6 || i == 7) ? -1 : 0); }
__device__ __forceinline__ constexpr int tb_cy(int i) { return (i == 2 || i == 5 || i == 6) ? 1 : ((i == 4 || i == 7 || i == 8) ? -1 : 0); }
__device__ __forceinline__ constexpr int tb_opp(int i) { return i == 0 ? 0 : (i <= 4 ? ((i + 1) % 4) + 1 : ((i - 3) % 4) + 5); }

template <typename T>
__device__ __forceinline__ T tb_w(int i) { return i == 0 ? T(4) / T(9) : (i <= 4 ? T(1) / T(9) : T(1) / T(36)); }

template <typename T>
struct TBParams {
    T omega;  // 1/tau
    T fcoef;  // 1 - 1/(2 tau), Guo forcing prefactor
    T fx, fy; // body-force density
    T uwx, uwy; // moving-wall velocity (mask code 2)
};

// BGK collision with Guo forcing, in place on the pulled populations f.
template <typename T>
__device__ __forceinline__ void tb_collide(T f[9], const TBParams<T>& p)
{
    T rho = T(0), mx = T(0), my = T(0);
#pragma unroll
    for (int i = 0; i < 9; ++i) {
        rho += f[i];
        mx += T(tb_cx(i)) * f[i];
        my += T(tb_cy(i)) * f[i];
    }
    const T ux = (mx + T(0.5) * p.fx) / rho;
    const T uy = (my + T(0.5) * p.fy) / rho;
    const T usq = ux * ux + uy * uy;
#pragma unroll
    for (int i = 0; i < 9; ++i) {
        const T cx = T(tb_cx(i)), cy = T(tb_cy(i));
        const T cu = cx * ux + cy * uy;
        const T w = tb_w<T>(i);
        const T feq = w * rho * (T(1) + T(3) * cu + T(4.5) * cu * cu - T(1.5) * usq);
        const T force = p.fcoef * w * (T(3) * ((cx - ux) * p.fx + (cy - uy) * p.fy) + T(9) * cu * (cx * p.fx + cy * p.fy));
        f[i] = f[i] - p.omega * (f[i] - feq) + force;
    }
}

// One full step of one node: pull-stream (with bounce-back) then collide; solid nodes copy through.
// Results are rounded to the storage type S (a no-op unless S is narrower than T).
template <typename S, typename T, typename Get, typename Msk>
__device__ __forceinline__ void tb_node(T out[9], Get get, Msk msk, const TBParams<T>& p)
{
    if (msk(0, 0) != 0) {
#pragma unroll
        for (int i = 0; i < 9; ++i) out[i] = get(i, 0, 0);
        return;
    }
#pragma unroll
    for (int i = 0; i < 9; ++i) {
        const int ms = msk(-tb_cx(i), -tb_cy(i));
        if (ms == 1) {
            out[i] = get(tb_opp(i), 0, 0);
        } else if (ms == 2) {
            out[i] = get(tb_opp(i), 0, 0) + T(6) * tb_w<T>(i) * (T(tb_cx(i)) * p.uwx + T(tb_cy(i)) * p.uwy);
        } else {  // fluid (inlet/outlet codes never reach these kernels)
            out[i] = get(i, -tb_cx(i), -tb_cy(i));
        }
    }
    tb_collide(out, p);
#pragma unroll
    for (int i = 0; i < 9; ++i) out[i] = TBConv<S, T>::round(out[i]);
}

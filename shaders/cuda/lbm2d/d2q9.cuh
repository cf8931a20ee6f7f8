// D2Q9 per-point device functions shared by every lbm2d kernel (two-kernel, fused, AA, and the
// temporal-blocking kernels). The semantics are docs/lbm2d.md "Step semantics"; the arithmetic
// order matches engine/lbm2d/reference.py so fp32 variants agree with NumPy to round-off.
//
// Storage: S is the type in global memory (float, double, or `unsigned short` holding IEEE fp16
// bits — converted with PTX cvt, fp16.cuh, so no CUDA header is needed under NVRTC). T is the
// arithmetic type.
// fp16 storage holds the *shifted* populations f_i − w_i (DDF shifting, as FluidX3D does):
// the deviations from the rest equilibrium are O(u), so fp16's 11-bit mantissa is spent on the
// part that carries the flow instead of on the constant w_i. The kernels compute on the shifted
// values too (Shifted<S>): streaming and bounce-back move values (shift-invariant, w_i = w_opp(i)),
// and the BGK collision takes ρ = Σ(f_i − w_i) + 1 and f_eq − w_i — so no +w_i / −w_i per
// population and step, which the fp16 kernel (half the bytes, the same arithmetic) cannot afford.
// Only TRT, the open boundaries and the moments pass add w_i back (load_f / store_f).
#pragma once
#include "fp16.cuh"

namespace d2q9 {

// 64-bit index without <cstddef> (NVRTC gets no host headers): 8192² × 9 exceeds 2³¹.
typedef unsigned long long idx_t;

constexpr int Q = 9;
enum Node : unsigned char { FLUID = 0, SOLID = 1, MOVING_WALL = 2, INLET = 3, OUTLET = 4 };

// c = [(0,0),(1,0),(0,1),(-1,0),(0,-1),(1,1),(-1,1),(-1,-1),(1,-1)]; opp = [0,3,4,1,2,7,8,5,6]
__device__ __forceinline__ constexpr int cx(int i) {
    return (i == 1 || i == 5 || i == 8) ? 1 : (i == 3 || i == 6 || i == 7) ? -1 : 0;
}
__device__ __forceinline__ constexpr int cy(int i) {
    return (i == 2 || i == 5 || i == 6) ? 1 : (i == 4 || i == 7 || i == 8) ? -1 : 0;
}
__device__ __forceinline__ constexpr int opp(int i) {
    return i == 0 ? 0 : (i <= 4 ? ((i + 1) & 3) + 1 : ((i - 3) & 3) + 5);
}
template <typename T>
__device__ __forceinline__ T w(int i) {
    return i == 0 ? T(4.0 / 9.0) : (i <= 4 ? T(1.0 / 9.0) : T(1.0 / 36.0));
}

// ---- storage conversions ---------------------------------------------------------------------
template <typename T, typename S> struct Store {
    __device__ static __forceinline__ T load(const S* p, idx_t idx, int) { return T(p[idx]); }
    __device__ static __forceinline__ void store(S* p, idx_t idx, int, T v) { p[idx] = S(v); }
};
using fp16::half_bits;
using fp16::half_to_float;
using fp16::float_to_half_rn;
template <> struct Store<float, half_bits> {  // raw: the stored (shifted) value
    __device__ static __forceinline__ float load(const half_bits* p, idx_t idx, int) { return half_to_float(p[idx]); }
    __device__ static __forceinline__ void store(half_bits* p, idx_t idx, int, float v) { p[idx] = float_to_half_rn(v); }
};

// Whether storage S holds f_i − w_i (and the kernels compute on shifted values).
template <typename S> struct Shifted { static constexpr bool value = false; };
template <> struct Shifted<half_bits> { static constexpr bool value = true; };

// f_i itself from / to storage (w_i added back / taken off where S is shifted).
template <typename T, typename S>
__device__ __forceinline__ T load_f(const S* p, idx_t idx, int i) {
    const T v = Store<T, S>::load(p, idx, i);
    return Shifted<S>::value ? v + w<T>(i) : v;
}
template <typename T, typename S>
__device__ __forceinline__ void store_f(S* p, idx_t idx, int i, T v) {
    Store<T, S>::store(p, idx, i, Shifted<S>::value ? v - w<T>(i) : v);
}

// ---- physics ---------------------------------------------------------------------------------
// c_i · (a, b) with the velocity set's 0/±1 components written out (no multiplications by 0 or ±1,
// which IEEE arithmetic may not drop): the same expressions as reference.c_dot.
template <typename T>
__device__ __forceinline__ T c_dot(int i, T a, T b) {
    return i == 0 ? T(0) : i == 1 ? a : i == 2 ? b : i == 3 ? -a : i == 4 ? -b
         : i == 5 ? a + b : i == 6 ? b - a : i == 7 ? -(a + b) : a - b;
}

// BGK collision with Guo forcing, in place on g[9] (the streamed populations of one node), in a
// form that costs ~80 operations per node instead of the ~150 of the textbook one (this is what
// keeps the fp16-storage kernel, which moves half the bytes for the same arithmetic, from being
// issue-bound; the temporal-blocking kernels gain the same). With R = ωρ, a = 1 − 1.5 u²,
// P_i = 3(1 − ω/2) c_i·F and cu3 = 3 c_i·u,
//   ω f_eq,i + (1 − ω/2) S_i = w_i (K + even_i ± odd_i),   K = R a − 3(1 − ω/2) u·F,
//   even_i = cu3 (R/2 · cu3 + P_i),   odd_i = R cu3 + P_i,
// where S_i = w_i(3(c_i·F − u·F) + 9 (c_i·u)(c_i·F)) is Guo's source. A direction i and its
// opposite have cu3 and P of opposite sign, so they share even_i and take ±odd_i: each pair costs
// seven operations. reference.collide_bgk does the same operations in the same order.
// SHIFTED: g holds f_i − w_i (fp16 storage); ρ = Σ g_i + 1 and K takes − ω (f_eq − w_i relaxes the
// shifted value; Σ c_i w_i = 0 keeps the momentum unchanged).
template <typename T, bool SHIFTED = false>
__device__ __forceinline__ void collide_bgk(T g[Q], T omega, T fx, T fy) {
    T rho = g[0] + g[1] + g[2] + g[3] + g[4] + g[5] + g[6] + g[7] + g[8];
    if (SHIFTED) rho = rho + T(1);
    const T jx = g[1] - g[3] + g[5] - g[6] - g[7] + g[8];
    const T jy = g[2] - g[4] + g[5] + g[6] - g[7] - g[8];
    const T inv = T(1) / rho;
    const T ux = (jx + T(0.5) * fx) * inv;
    const T uy = (jy + T(0.5) * fy) * inv;
    const T a = T(1) - T(1.5) * (ux * ux + uy * uy);
    const T pref3 = T(3) * (T(1) - T(0.5) * omega);
    const T R = omega * rho;
    T K = R * a - pref3 * (ux * fx + uy * fy);
    if (SHIFTED) K = K - omega;
    const T half_R = T(0.5) * R;
    const T omc = T(1) - omega;
    const T U = T(3) * ux, V = T(3) * uy;
    g[0] = omc * g[0] + w<T>(0) * K;
#pragma unroll
    for (int pair = 0; pair < 4; ++pair) {
        const int i = pair < 2 ? pair + 1 : pair + 3;  // i = 1, 2, 5, 6; their opposites j = 3, 4, 7, 8
        const int j = opp(i);
        const T cu3 = c_dot<T>(i, U, V);
        const T P = pref3 * c_dot<T>(i, fx, fy);
        const T even = K + cu3 * (half_R * cu3 + P);
        const T odd = R * cu3 + P;
        g[i] = omc * g[i] + w<T>(i) * (even + odd);
        g[j] = omc * g[j] + w<T>(i) * (even - odd);
    }
}

// TRT collision (Ginzburg): the even part of f − feq relaxes with ω⁺ = 1/τ (sets ν), the odd part
// with ω⁻ (Λ = (1/ω⁺ − ½)(1/ω⁻ − ½) = 3/16 by default); the Guo source is split the same way.
// Same operation order as reference.collide (trt branch).
template <typename T>
__device__ __forceinline__ void collide_trt(T g[Q], T omega, T omega_minus, T fx, T fy) {
    const T rho = g[0] + g[1] + g[2] + g[3] + g[4] + g[5] + g[6] + g[7] + g[8];
    const T jx = g[1] - g[3] + g[5] - g[6] - g[7] + g[8];
    const T jy = g[2] - g[4] + g[5] + g[6] - g[7] - g[8];
    const T ux = (jx + T(0.5) * fx) / rho;
    const T uy = (jy + T(0.5) * fy) / rho;
    const T usq = ux * ux + uy * uy;
    T neq[Q];
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const T cu = T(cx(i)) * ux + T(cy(i)) * uy;
        neq[i] = g[i] - w<T>(i) * rho * (T(1) + T(3) * cu + T(4.5) * cu * cu - T(1.5) * usq);
    }
    const T pref_p = T(1) - T(0.5) * omega, pref_m = T(1) - T(0.5) * omega_minus;
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const int j = opp(i);
        const T cxi = T(cx(i)), cyi = T(cy(i));
        const T neq_p = T(0.5) * (neq[i] + neq[j]);
        const T neq_m = T(0.5) * (neq[i] - neq[j]);
        const T cu = cxi * ux + cyi * uy;
        const T cF = cxi * fx + cyi * fy;
        const T even = w<T>(i) * (T(-3) * (ux * fx + uy * fy) + T(9) * cu * cF);
        const T odd = w<T>(i) * T(3) * cF;
        g[i] = g[i] - omega * neq_p - omega_minus * neq_m + pref_p * even + pref_m * odd;
    }
}

// One collision entry point for the kernels: BGK, or TRT when TRT is true; SHIFTED as collide_bgk
// (TRT collides f = g + w_i and shifts back: the same operations as reference.step_shifted).
template <typename T, bool TRT, bool SHIFTED = false>
__device__ __forceinline__ void collide(T g[Q], T omega, T omega_minus, T fx, T fy) {
    if (TRT) {
        if (SHIFTED) {
#pragma unroll
            for (int i = 0; i < Q; ++i) g[i] = g[i] + w<T>(i);
        }
        collide_trt<T>(g, omega, omega_minus, fx, fy);
        if (SHIFTED) {
#pragma unroll
            for (int i = 0; i < Q; ++i) g[i] = g[i] - w<T>(i);
        }
    } else {
        collide_bgk<T, SHIFTED>(g, omega, fx, fy);
    }
}

// Moving-wall correction 6 w_i ρ0 (c_i·u_wall), ρ0 = 1.
template <typename T>
__device__ __forceinline__ T wall_term(int i, T uwx, T uwy) {
    return T(6) * w<T>(i) * (T(cx(i)) * uwx + T(cy(i)) * uwy);
}

__device__ __forceinline__ int wrap(int a, int n) { return a < 0 ? a + n : (a >= n ? a - n : a); }

// Pull-stream of node (x, y) from a two-lattice SoA array f (plane stride n = nx·ny) into g[9]:
// periodic wrap, half-way bounce-back from solid sources, moving-wall correction.
template <typename T, typename S>
__device__ __forceinline__ void pull(const S* __restrict__ f, const unsigned char* __restrict__ mask,
                                     int x, int y, int nx, int ny, T uwx, T uwy, T g[Q]) {
    const idx_t n = idx_t(nx) * ny;
    const idx_t here = idx_t(y) * nx + x;
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const idx_t src = idx_t(wrap(y - cy(i), ny)) * nx + wrap(x - cx(i), nx);
        const unsigned char m = mask[src];
        if (m == SOLID || m == MOVING_WALL) {
            const T b = Store<T, S>::load(f, opp(i) * n + here, opp(i));
            g[i] = m == MOVING_WALL ? b + wall_term<T>(i, uwx, uwy) : b;
        } else {
            g[i] = Store<T, S>::load(f, i * n + src, i);
        }
    }
}

}  // namespace d2q9

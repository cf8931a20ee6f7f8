// D3Q27 per-point device functions shared by every amr3d kernel (P0 §2).
//
// The velocity set is data in one place, engine/amr3d/d3q27.py: the host prepends it to the source
// as #define D3Q27_CX {...} / D3Q27_CY / D3Q27_CZ / D3Q27_W (engine/amr3d/ladder.velocity_prelude),
// so the reference, these kernels and the CPU emulator of the tests read one table. Inside
// unrolled loops the table reads are compile-time constants.
//
// Collision (same operations, same order as engine/amr3d/reference.py's collide()):
//   rho = sum f,  u = sum f c / rho,  f_eq = w rho (1 + 3 c.u + 9/2 (c.u)^2 - 3/2 u.u),
//   f*  = f - omega (f - f_eq) + 3 w rho (c.a)            (P0's body-force term, Δt = 1 per level)
// The operator is chosen at compile time (engine/amr3d/collision.py writes the macros into the
// prelude), so every kernel that calls d3q27::collide gets it without edits to its body:
//   neither macro     P0's BGK, the code (and bits) of before
//   NAGARE_MRT        Suga et al.'s D3Q27 MRT written as BGK plus a correction over the 18 moments
//                     whose rate is not omega (tables D3Q27_MRT_M/_N/_S from collision.basis)
//   NAGARE_SMAGORINSKY  Smagorinsky's eddy viscosity: omega_e from |Pi^neq| of the pre-collision
//                     populations, NAGARE_CS2 = C_s^2 (BGK: all populations; MRT: shear moments)
//   NAGARE_CSM        Kobayashi's coherent-structure model: the same omega_e with C_s^2 replaced by
//                     a coefficient per point, C = C1 |F_CS|^(3/2) (1 - F_CS), computed before the
//                     collision by a pre-pass over the level (ladder.cu amr3d_csm_velocity and
//                     amr3d_csm_coefficient, coupling.cu amr3d_csm_fix_velocity); collide takes it
//                     as a sixth argument. Kernels that collide declare the coefficient array with
//                     NAGARE_CSM_PARAM and pass a point's value with NAGARE_CSM_AT(point); without
//                     NAGARE_CSM both expand to nothing, so the other models' kernels are unchanged.
#pragma once
#include "fp16.cuh"

#ifndef D3Q27_CX
#error "amr3d kernels need the velocity set: compile through engine/amr3d/ladder.velocity_prelude"
#endif

namespace d3q27 {

typedef unsigned long long idx_t;  // 64-bit offsets: 8192 leaves x 17^3 x 27 is close to 2^31
constexpr int Q = 27;

__device__ __forceinline__ constexpr int cx(int q) { constexpr int t[Q] = D3Q27_CX; return t[q]; }
__device__ __forceinline__ constexpr int cy(int q) { constexpr int t[Q] = D3Q27_CY; return t[q]; }
__device__ __forceinline__ constexpr int cz(int q) { constexpr int t[Q] = D3Q27_CZ; return t[q]; }
__device__ __forceinline__ constexpr float w(int q) { constexpr double t[Q] = D3Q27_W; return (float)t[q]; }

// Slot of a neighbour offset (nx, ny, nz) in {-1,0,1}^3 in a leaf's 27-entry neighbour row
// (x fastest; slot 13 is the leaf itself).
__device__ __forceinline__ constexpr int slot(int nx, int ny, int nz) { return (nz + 1) * 9 + (ny + 1) * 3 + (nx + 1); }

// Density and velocity of 27 gathered populations (the one place both collisions take them from;
// the sums in this order, so BGK's bits are those of before).
__device__ __forceinline__ void moments(const float f[Q], float& rho, float& ux, float& uy, float& uz)
{
    float r = 0.f, mx = 0.f, my = 0.f, mz = 0.f;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        r += f[q];
        mx += cx(q) * f[q];
        my += cy(q) * f[q];
        mz += cz(q) * f[q];
    }
    const float inv = 1.f / r;
    rho = r;
    ux = mx * inv;
    uy = my * inv;
    uz = mz * inv;
}

#ifndef NAGARE_MRT
#define NAGARE_MRT 0
#endif
#ifndef NAGARE_SMAGORINSKY
#define NAGARE_SMAGORINSKY 0
#endif
#ifndef NAGARE_CSM
#define NAGARE_CSM 0
#endif
#if NAGARE_CSM
#if NAGARE_SMAGORINSKY
#error "NAGARE_CSM and NAGARE_SMAGORINSKY are two sub-grid models: define one"
#endif
#ifndef NAGARE_CSM_C1
#error "NAGARE_CSM needs NAGARE_CSM_C1: compile through engine/amr3d/ladder.velocity_prelude(..., model)"
#endif
// the kernels' coefficient array C[point] (one float a point of the level's leaf grid)
#define NAGARE_CSM_PARAM , const float* __restrict__ csm_c
#define NAGARE_CSM_ARG , csm_c
#define NAGARE_CSM_AT(p) , csm_c[p]
#else
#define NAGARE_CSM_PARAM
#define NAGARE_CSM_ARG
#define NAGARE_CSM_AT(p)
#endif

#if NAGARE_MRT || NAGARE_SMAGORINSKY || NAGARE_CSM
#if NAGARE_MRT
#ifndef D3Q27_MRT_M
#error "NAGARE_MRT needs the moment tables: compile through engine/amr3d/ladder.velocity_prelude(..., model)"
#endif
// Rows of the orthogonal integer moment basis whose rate differs from omega, their squared norms
// and their (fixed) rates.
constexpr int MRT_ROWS = D3Q27_MRT_ROWS;
__device__ __forceinline__ constexpr int mrt_m(int k, int q) { constexpr int t[MRT_ROWS * Q] = D3Q27_MRT_M; return t[k * Q + q]; }
__device__ __forceinline__ constexpr int mrt_n(int k) { constexpr int t[MRT_ROWS] = D3Q27_MRT_N; return t[k]; }
__device__ __forceinline__ constexpr double mrt_s(int k) { constexpr double t[MRT_ROWS] = D3Q27_MRT_S; return t[k]; }
#endif
#if NAGARE_SMAGORINSKY && !defined(NAGARE_CS2)
#error "NAGARE_SMAGORINSKY needs NAGARE_CS2 (C_s^2): compile through engine/amr3d/ladder.velocity_prelude(..., model)"
#endif

// MRT and/or Smagorinsky (or CSM, with the point's coefficient csm) with P0's body force, in place on
// the 27 gathered populations (engine/amr3d/collision.py collide_kernels: the same operations in the
// same order).
#if NAGARE_CSM
__device__ __forceinline__ void collide(float f[Q], float omega, float ax, float ay, float az, float csm)
#else
__device__ __forceinline__ void collide(float f[Q], float omega, float ax, float ay, float az)
#endif
{
    float rho, ux, uy, uz;
    moments(f, rho, ux, uy, uz);
    const float usq = 1.5f * (ux * ux + uy * uy + uz * uz);
    float d[Q];  // f - f_eq
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const float cu = cx(q) * ux + cy(q) * uy + cz(q) * uz;
        d[q] = f[q] - w(q) * rho * (1.f + 3.f * cu + 4.5f * cu * cu - usq);
    }
    float om = omega;
#if NAGARE_SMAGORINSKY || NAGARE_CSM
    {
        // Pi^neq = sum c c (f - f_eq); omega_e = 2 omega / (1 + sqrt(1 + 18 sqrt2 C_s^2 omega^2 |Pi^neq| / rho))
        // (collision.py derives it; C_s = 0 or Pi^neq below round-off gives omega bit for bit)
        float pxx = 0.f, pyy = 0.f, pzz = 0.f, pxy = 0.f, pxz = 0.f, pyz = 0.f;
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            if (cx(q) != 0) pxx += d[q];
            if (cy(q) != 0) pyy += d[q];
            if (cz(q) != 0) pzz += d[q];
            if (cx(q) * cy(q) != 0) pxy += (float)(cx(q) * cy(q)) * d[q];
            if (cx(q) * cz(q) != 0) pxz += (float)(cx(q) * cz(q)) * d[q];
            if (cy(q) * cz(q) != 0) pyz += (float)(cy(q) * cz(q)) * d[q];
        }
        const float pn = sqrtf(pxx * pxx + pyy * pyy + pzz * pzz + 2.f * (pxy * pxy + pxz * pxz + pyz * pyz));
#if NAGARE_CSM
        const float k = 18.f * 1.41421356237309515f * csm;  // C of the point in place of C_s^2
#else
        constexpr float k = 18.f * 1.41421356237309515f * (float)(NAGARE_CS2);
#endif
        const float x = k * pn * (1.f / rho) * omega * omega;
        om = (omega + omega) / (1.f + sqrtf(1.f + x));
    }
#endif
#if NAGARE_MRT
    // lambda_k Delta m_k over the rows whose rate s_k is not omega: lambda_k = (s_k - omega)/N_k
    float dm[MRT_ROWS];
#pragma unroll
    for (int k = 0; k < MRT_ROWS; ++k) {
        float acc = 0.f;
#pragma unroll
        for (int q = 0; q < Q; ++q)
            if (mrt_m(k, q) != 0) acc += (float)mrt_m(k, q) * d[q];
        dm[k] = acc * (((float)mrt_s(k) - om) * (1.f / (float)mrt_n(k)));
    }
#endif
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const float ca = cx(q) * ax + cy(q) * ay + cz(q) * az;
        float post = f[q] - om * d[q];
#if NAGARE_MRT
        float corr = 0.f;
#pragma unroll
        for (int k = 0; k < MRT_ROWS; ++k)
            if (mrt_m(k, q) != 0) corr += (float)mrt_m(k, q) * dm[k];
        post = post - corr;
#endif
        f[q] = post + 3.f * w(q) * rho * ca;
    }
}
#else
// BGK collision with P0's body force, in place on the 27 gathered populations.
__device__ __forceinline__ void collide(float f[Q], float omega, float ax, float ay, float az)
{
    float rho, ux, uy, uz;
    moments(f, rho, ux, uy, uz);
    const float usq = 1.5f * (ux * ux + uy * uy + uz * uz);
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const float cu = cx(q) * ux + cy(q) * uy + cz(q) * uz;
        const float feq = w(q) * rho * (1.f + 3.f * cu + 4.5f * cu * cu - usq);
        const float ca = cx(q) * ax + cy(q) * ay + cz(q) * az;
        f[q] = f[q] - omega * (f[q] - feq) + 3.f * w(q) * rho * ca;
    }
}
#endif

// ---- storage of a population (beyond P0: fp16 storage, as lbm2d's) ------------------------------
// float: the value itself. fp16 (fp16::half_bits): the shifted population f_q − w_q in IEEE half
// (DDF shifting: the deviations from rest are O(u), so the 11-bit mantissa carries the flow, not
// the constant w_q); the arithmetic stays fp32 — load adds w_q back, store takes it off and
// rounds to nearest even. For float both are plain accesses, so the fp32 kernels' code and bits
// are those of before.
__device__ __forceinline__ float load_pop(const float* p, idx_t i, int) { return p[i]; }
__device__ __forceinline__ float load_pop(const fp16::half_bits* p, idx_t i, int q)
{
    return fp16::half_to_float(p[i]) + w(q);
}
__device__ __forceinline__ void store_pop(float* p, idx_t i, int, float v) { p[i] = v; }
__device__ __forceinline__ void store_pop(fp16::half_bits* p, idx_t i, int q, float v)
{
    p[i] = fp16::float_to_half_rn(v - w(q));
}

}  // namespace d3q27

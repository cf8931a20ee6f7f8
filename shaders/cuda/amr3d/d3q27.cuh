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
#pragma once

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

// BGK collision with P0's body force, in place on the 27 gathered populations.
__device__ __forceinline__ void collide(float f[Q], float omega, float ax, float ay, float az)
{
    float rho = 0.f, mx = 0.f, my = 0.f, mz = 0.f;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        rho += f[q];
        mx += cx(q) * f[q];
        my += cy(q) * f[q];
        mz += cz(q) * f[q];
    }
    const float inv = 1.f / rho;
    const float ux = mx * inv, uy = my * inv, uz = mz * inv;
    const float usq = 1.5f * (ux * ux + uy * uy + uz * uz);
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const float cu = cx(q) * ux + cy(q) * uy + cz(q) * uz;
        const float feq = w(q) * rho * (1.f + 3.f * cu + 4.5f * cu * cu - usq);
        const float ca = cx(q) * ax + cy(q) * ay + cz(q) * az;
        f[q] = f[q] - omega * (f[q] - feq) + 3.f * w(q) * rho * ca;
    }
}

}  // namespace d3q27

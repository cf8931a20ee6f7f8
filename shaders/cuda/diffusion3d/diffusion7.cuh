// 7-point explicit diffusion update of one point (P2's test problem).
// fn = f + r * ((f[x-1] + f[x+1]) + (f[y-1] + f[y+1]) + (f[z-1] + f[z+1]) - 6 f),  r = kappa dt / dx^2.
// The summation order matches the NumPy reference (engine/diffusion3d/reference.py) so that the
// two agree to round-off.
#pragma once

template <typename T>
__device__ __forceinline__ T diffusion7_point(T c, T xm, T xp, T ym, T yp, T zm, T zp, T r)
{
    return c + r * (((xm + xp) + (ym + yp)) + (zm + zp) - T(6) * c);
}

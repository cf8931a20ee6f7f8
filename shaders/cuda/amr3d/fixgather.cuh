// The interface points' pull through gather descriptors (docs/amr3d.md "Level coupling"), shared
// by coupling.cu's fix-up kernels and ladder.cu's fused naive kernel (amr3d_naive_fix).
// desc[q * n + r] >= 0 is an index into src; < 0 is -1 - j: j < nfine an entry of the fine buffer,
// then ninterp entries of the interpolated buffer, then the link buffer.
#pragma once
#include "d3q27.cuh"

namespace amr3d {
using d3q27::idx_t;
using d3q27::Q;

// The pre-collision populations of interface point r through its descriptors (the fix-up's pull).
template <typename I>
__device__ __forceinline__ void fix_gather(const float* __restrict__ src, const I* __restrict__ desc, int n, int r,
                                           const float* __restrict__ fine_buf, long long nfine,
                                           const float* __restrict__ interp_buf, long long ninterp,
                                           const float* __restrict__ link_buf, float f[Q])
{
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const long long d = desc[(idx_t)q * n + r];
        if (d >= 0) {
            f[q] = src[d];
        } else {
            const long long j = -1 - d;
            f[q] = j < nfine ? fine_buf[j] : (j - nfine < ninterp ? interp_buf[j - nfine] : link_buf[j - nfine - ninterp]);
        }
    }
}
}  // namespace amr3d

// The interface points' pull through gather descriptors (docs/amr3d.md "Level coupling"), shared
// by coupling.cu's fix-up kernels and ladder.cu's fused naive kernel (amr3d_naive_fix).
// desc[q * n + r] >= 0 is an index into src; < 0 is -1 - j: j < nfine an entry of the fine buffer,
// then ninterp entries of the interpolated buffer, then the link buffer.
// S: the level's storage, float or fp16 (d3q27.cuh load_pop). A descriptor into src names the
// population q itself (same-level pull), its opposite (a wall's bounce-back) or its mirror image (a
// free-slip side): all three have |c|² and so the weight w_q of q, so loading it as direction q
// adds back the shift it was stored with. The interface buffers are fp32 (tree_stepper.py).
#pragma once
#include "d3q27.cuh"

namespace amr3d {
using d3q27::idx_t;
using d3q27::Q;

// The pre-collision populations of interface point r through its descriptors (the fix-up's pull).
template <typename I, typename S = float>
__device__ __forceinline__ void fix_gather(const S* __restrict__ src, const I* __restrict__ desc, int n, int r,
                                           const float* __restrict__ fine_buf, long long nfine,
                                           const float* __restrict__ interp_buf, long long ninterp,
                                           const float* __restrict__ link_buf, float f[Q])
{
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const long long d = desc[(idx_t)q * n + r];
        if (d >= 0) {
            f[q] = d3q27::load_pop(src, (idx_t)d, q);
        } else {
            const long long j = -1 - d;
            f[q] = j < nfine ? fine_buf[j] : (j - nfine < ninterp ? interp_buf[j - nfine] : link_buf[j - nfine - ninterp]);
        }
    }
}
}  // namespace amr3d

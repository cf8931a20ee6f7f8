// IEEE fp16 storage without CUDA headers (NVRTC gets none): the bits as `unsigned short`,
// converted with PTX cvt on the GPU and with _Float16 in host C++ (the CPU emulation in
// tests/unit), so both round to nearest even alike. Used by lbm2d (d2q9.cuh) and amr3d (d3q27.cuh).
#pragma once

namespace fp16 {

typedef unsigned short half_bits;
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float half_to_float(half_bits h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ half_bits float_to_half_rn(float f) {
    half_bits h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#else
inline float half_to_float(half_bits h) {
    _Float16 v;
    __builtin_memcpy(&v, &h, 2);
    return float(v);
}
inline half_bits float_to_half_rn(float f) {
    _Float16 v = _Float16(f);
    half_bits h;
    __builtin_memcpy(&h, &v, 2);
    return h;
}
#endif

}  // namespace fp16

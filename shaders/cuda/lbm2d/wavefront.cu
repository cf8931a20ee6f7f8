// Wavefront temporal blocking for D2Q9 (beyond P1): lbm2d_wave<S, T, TS, TX, RUN>.
// See docs/lbm2d-temporal-blocking.md ("wavefront") for the geometry and why it exists.
//
// P1's tiles (temporal_blocking.cu) pay for ts steps with a halo recomputed on all four sides of a
// small tile (1.3-2.4x redundant updates at ts = 4) and with one barrier per step. Here a block of
// TX threads owns a strip of TX - 2 TS columns and marches along y through RUN rows, one thread per
// column. Time level k of row r is computed once, at iteration j = r + 2k of the march, from level
// k - 1 of rows r - 1, r, r + 1, which were computed at iterations <= j - 1. So one barrier per
// iteration (per row, not per step) suffices, every level of an iteration is independent work for
// the scheduler, and the only redundancy is the 2 TS columns of the strip's x-halo (TX / (TX - 2 TS))
// plus TS - 1 rows per level at the ends of a run ((RUN + TS - 1) / RUN).
//
// Shared memory: level k = 0 .. TS-1 keeps a ring of 4 rows x 9 populations x TX (row r in slot
// r & 3; the writes of iteration j go to slots no level reads in iteration j, and the barrier
// orders them before the reads of iteration j + 1), plus a ring of CR rows of node codes (CR a
// power of two > 2 TS + 2: level `steps` looks back to row j - 2 TS - 1). Level 0 is the global
// input: each thread loads its column of row j into registers at the top of iteration j, the level
// computations of the iteration hide the latency, and the values go to the ring at its end.
// Level `steps` (<= TS) is not stored in shared memory: its row goes straight to global memory.
//
// Columns: thread x holds global column bx (TX - 2 TS) - TS + x (periodic wrap); level k is valid on
// threads [k, TX - k). The x +- 1 reads of threads 0 and TX - 1 are clamped to their own column:
// they produce garbage that only ever feeds invalid threads. Only threads [TS, TX - TS) write, and
// only columns < nx (a last strip past the right edge wraps onto columns another block owns).
// Node semantics are tb_node's (tb_d2q9.cuh), shared with stb/srtb: results are bit-identical.
#include "tb_d2q9.cuh"

template <int TS>
struct WaveCodeRing {
    static constexpr int rows()
    {
        int r = 1;
        while (r <= 2 * TS + 2) r <<= 1;
        return r;
    }
    static constexpr int CR = rows();
};

template <typename S, typename T, int TS, int TX, int RUN>
__global__ void __launch_bounds__(TX)
lbm2d_wave(const S* __restrict__ fsrc, S* __restrict__ fdst, const unsigned char* __restrict__ code,
           const int nx, const int ny, const int steps,
           const T omega, const T fx, const T fy, const T uwx, const T uwy)
{
    static_assert(TS >= 1 && TX > 2 * TS && RUN >= 1, "need TX > 2 TS");
    constexpr int LEVEL = 4 * 9 * TX;  // elements of one level's ring
    constexpr int CR = WaveCodeRing<TS>::CR;
    extern __shared__ __align__(16) unsigned char tb_smem[];
    S* ring = reinterpret_cast<S*>(tb_smem);                              // [TS][4][9][TX]
    unsigned char* cring = tb_smem + (size_t)TS * LEVEL * sizeof(S);      // [CR][TX]
    const TBParams<T> p{omega, fx, fy, uwx, uwy};

    const int x = threadIdx.x;
    const int xl = x > 0 ? x - 1 : 0, xr = x < TX - 1 ? x + 1 : TX - 1;
    const int gxu = blockIdx.x * (TX - 2 * TS) - TS + x;  // unwrapped global column
    int gx = gxu % nx;
    if (gx < 0) gx += nx;
    const bool writer = x >= TS && x < TX - TS && gxu < nx;
    const int y0 = blockIdx.y * RUN;
    const int last = (y0 + RUN < ny ? y0 + RUN : ny) - 1;  // last output row of this block
    const long long plane = (long long)nx * ny;

    // Level k covers rows [y0 - (steps - k), last + (steps - k)] (the cone of the output rows).
    for (int j = y0 - steps; j <= last + 2 * steps; ++j) {  // block-uniform: every thread reaches the barrier
        const bool load = j <= last + steps;
        S in[9];
        unsigned char cin = 0;
        if (load) {
            int wy = j % ny;
            if (wy < 0) wy += ny;
            const long long g = (long long)wy * nx + gx;
            cin = code[g];
#pragma unroll
            for (int i = 0; i < 9; ++i) in[i] = fsrc[i * plane + g];
        }
#pragma unroll
        for (int k = 1; k <= TS; ++k) {
            const int r = j - 2 * k;
            if (k <= steps && r >= y0 - (steps - k) && r <= last + (steps - k)) {
                const S* src = ring + (k - 1) * LEVEL;
                T out[9];
                tb_node<S>(out,
                        [&](int i, int ex, int ey) {
                            return TBConv<S, T>::ld(src[(((r + ey) & 3) * 9 + i) * TX + (ex < 0 ? xl : ex > 0 ? xr : x)]);
                        },
                        [&](int ex, int ey) {
                            return (int)cring[((r + ey) & (CR - 1)) * TX + (ex < 0 ? xl : ex > 0 ? xr : x)];
                        }, p);
                if (k < steps) {
                    S* dst = ring + k * LEVEL + (r & 3) * 9 * TX + x;
#pragma unroll
                    for (int i = 0; i < 9; ++i) dst[i * TX] = TBConv<S, T>::st(out[i]);
                } else if (writer && r >= y0) {  // r <= last here: level `steps` has no cone margin
                    const long long g = (long long)r * nx + gx;
#pragma unroll
                    for (int i = 0; i < 9; ++i) fdst[i * plane + g] = TBConv<S, T>::st(out[i]);
                }
            }
        }
        if (load) {
            S* dst = ring + (j & 3) * 9 * TX + x;
#pragma unroll
            for (int i = 0; i < 9; ++i) dst[i * TX] = in[i];
            cring[(j & (CR - 1)) * TX + x] = cin;
        }
        __syncthreads();
    }
}

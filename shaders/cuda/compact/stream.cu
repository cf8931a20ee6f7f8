// The compact derivative streamed through blocks of 32 lines × L rows: every thread loads all its R rows at
// once (R + 4 values with the stencil's reach: every load in flight together), solves them in registers
// and exchanges two affine carries a direction with the other warps of its block through shared memory.
// Host side, the NumPy mirror of every operation and the reasoning: engine/compact/solvers/stream.py.
// Compiled after window.cu (one NVRTC unit): the right-hand side is window.cu's compact_window_rhs (the same
// operations as schemes.rhs, P4's closure rows included).
//
// Block (32, W): threadIdx.x = the line in a group of 32 adjacent lines (y-lines of a row-major field: 32
// adjacent x-columns, so every load and store of a warp is one row segment of 128 (fp32) or 256 (fp64)
// contiguous bytes); threadIdx.y = k, the warp's chunk of R rows: rows a + kR .. a + kR + R - 1 of the
// block's window [a, b) (win[4 blockIdx.x ..] = a, o0, o1, b; unwrapped rows: a periodic line wraps them).
// grid (windows, line groups). x-lines (STAGED: contiguous, no groups) go through a shared tile a warp,
// 32 lines × (R + 4) rows, loaded and stored as whole row runs of each line.
// Per thread, its R rows (slot j = row a + kR + j; rows >= b take no part):
//   1. r_j, the right-hand side (FUSED: from f in slots j .. j+4; else f itself);
//   2. forward sweep from 0: g0_j = r_j - l_j g0_{j-1}, with P = Π(-l_j); (g0 of the last row, P) to shared
//      memory; barrier; the carry into the chunk c = the fold of the earlier warps' (g0, P) from 0
//      (c = g0_q + P_q c, q = 0 .. k-1); g_j = g0_j + P_j c (P_j = Π(-l) up to row j);
//   3. back substitution from 0: x0_j = (g_j - u_j x0_{j+1}) inv_d_j, with Q = Π(-(u_j inv_d_j)); (x0 of
//      the first row, Q) to shared memory; barrier; d = the fold of the later warps' (x0, Q) from 0 (q =
//      W-1 down to k+1); x_j = x0_j + Q_j d (Q_j = the product from the chunk's last row down to row j);
//   4. the rows in [o0, o1) stored.
// The block's first sweep starts from 0 at a, the last from 0 at b: the window's halos (o0 - a, b - o1) are
// long enough for those truncations to fall below round-off, or the window starts/ends at a closed line's
// end, where the sweeps are exact (l_0 = 0, u_{n-1} = 0). Factors: fac = window.cu's packed plan (l |
// inv_d | u | mu | inv_t | the 5 converged values); rows lo <= i < hi read the converged values.
// Compiled with --fmad=false: the mirror's bits. in may not be out (a window's halo rows are other windows'
// outputs): the host gives an in-place call a work array.

#ifndef NAGARE_COMPACT_STREAM
#define NAGARE_COMPACT_STREAM

#ifndef NAGARE_STREAM_MAX_THREADS
#define NAGARE_STREAM_MAX_THREADS 512
#endif

// The row after w (periodic: wrapped; closed: the index itself — a closed window never leaves [0, n)).
template <bool PERIODIC>
__device__ __forceinline__ int compact_stream_next(int w, int n)
{
    return PERIODIC ? (w == n - 1 ? 0 : w + 1) : w + 1;
}

// The row before w.
template <bool PERIODIC>
__device__ __forceinline__ int compact_stream_prev(int w, int n)
{
    return PERIODIC ? (w == 0 ? n - 1 : w - 1) : w - 1;
}

// Factor q (0 l, 1 inv_d, 2 u) of row w: a periodic line's rows are all the converged ones (the plan's
// bands are constant there), a closed line's from window.cu's rule.
template <typename T, bool PERIODIC>
__device__ __forceinline__ T compact_stream_fac(const T* __restrict__ fac, const T* ic, int q, int w, int n, int lo,
                                                int hi)
{
    return PERIODIC ? ic[q] : compact_window_fac(fac, ic, q, w, n, lo, hi);
}

// A warp's 32 lines × rows r0 - 2 .. r0 + R + 1 into its tile (line j's rows at tile[j · (R + 5) + t]): load
// instruction `it` reads values lane + 32 it of the tile in line-major order, runs of a line's consecutive
// values. WRAP: a periodic window crossing the line's end (wrapped rows); else rows outside [0, n) read 0.
template <typename T, bool WRAP, int R>
__device__ __forceinline__ void compact_stream_stage(T* tile, const T* __restrict__ first, nagare_window_i64 ss,
                                                     int lane, int valid, int r0, int b, int n)
{
#pragma unroll
    for (int it = 0; it < R + 4; ++it) {
        const int e = lane + 32 * it, j = e / (R + 4), t = e % (R + 4);
        const int row = r0 - 2 + t;
        T x = T(0);
        if (j < valid && row < b + 2 && (WRAP || (row >= 0 && row < n)))
            x = first[(nagare_window_i64)j * ss + (WRAP ? compact_window_wrap(row, n) : row)];
        tile[j * (R + 5) + t] = x;
    }
}

template <typename T, bool PERIODIC, bool FUSED, bool DISS, bool STAGED, int R>
__global__ void __launch_bounds__(R >= 32 ? NAGARE_STREAM_MAX_THREADS : 2 * NAGARE_STREAM_MAX_THREADS)
compact_stream(const T* __restrict__ in, T* __restrict__ out, const T* __restrict__ fac, const T* __restrict__ coef,
               const int* __restrict__ win, int n, int nsys, nagare_window_i64 sys_stride,
               nagare_window_i64 elem_stride, int per, nagare_window_i64 group_stride, int lo, int hi)
{
#ifndef NAGARE_EMU
    extern __shared__ __align__(16) unsigned char nagare_smem[];
#endif
    constexpr int PITCH = R + 5;  // the tile's row of one line: odd (fp32) / 10 banks apart (fp64): conflict-free
    const int W = blockDim.y, k = threadIdx.y, lane = threadIdx.x;
    const int a = win[4 * blockIdx.x], o0 = win[4 * blockIdx.x + 1], o1 = win[4 * blockIdx.x + 2];
    const int b = win[4 * blockIdx.x + 3];
    const int line0 = blockIdx.y * 32, line = line0 + lane;
    const int valid = min(32, nsys - line0);  // lines of this group that exist
    T* const carry_v = reinterpret_cast<T*>(nagare_smem);  // [W][32]: a chunk's end value
    T* const carry_p = carry_v + W * 32;                     // [W][32]: its product
    T* const tile = carry_p + W * 32 + k * 32 * PITCH;       // STAGED: this warp's 32 × PITCH tile
    const int r0 = a + k * R;  // the row of slot 0
    const nagare_window_i64 es = elem_stride;
    // a lane past the last line computes on the last line's values and stores nothing
    const T* __restrict__ base = in + compact_window_line(min(line, nsys - 1), sys_stride, per, group_stride);
    T ic[3];
#pragma unroll
    for (int q = 0; q < 3; ++q) ic[q] = fac[5 * n + q];

    // 0. the rows r0 - 2 .. r0 + R + 1 into v (rows outside [a - 2, b + 2), and a closed line's rows outside
    // [0, n), read 0)
    T v[R + 4];
    // a periodic window wraps at most in the blocks at a line's ends: every other one takes the linear rows
    const bool wraps = PERIODIC && (r0 - 2 < 0 || r0 + R + 2 > n);
    if (STAGED) {
        const T* __restrict__ first = in + (nagare_window_i64)line0 * sys_stride;
        if (wraps) compact_stream_stage<T, true, R>(tile, first, sys_stride, lane, valid, r0, b, n);
        else compact_stream_stage<T, false, R>(tile, first, sys_stride, lane, valid, r0, b, n);
        __syncwarp();
#pragma unroll
        for (int t = 0; t < R + 4; ++t) v[t] = tile[lane * PITCH + t];
    } else if (wraps) {
        int w = compact_window_wrap(r0 - 2, n);
#pragma unroll
        for (int t = 0; t < R + 4; ++t) {
            v[t] = r0 - 2 + t < b + 2 ? base[(nagare_window_i64)w * es] : T(0);
            w = compact_stream_next<true>(w, n);
        }
    } else {
        const T* __restrict__ p = base + (nagare_window_i64)(r0 - 2) * es;
#pragma unroll
        for (int t = 0; t < R + 4; ++t) {
            const int row = r0 - 2 + t;
            v[t] = (row < b + 2 && (PERIODIC || (row >= 0 && row < n))) ? p[(nagare_window_i64)t * es] : T(0);
        }
    }

    // 1. the right-hand side, in place (r_j into slot j: slot j's f is no longer needed by r_{j+1} ..)
    {
        int w = PERIODIC ? compact_window_wrap(r0, n) : r0;
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const int row = r0 + j;
            if (row < b) {
                if (FUSED)
                    v[j] = compact_window_rhs<T, PERIODIC, DISS>(base, es, w, n, coef, v[j], v[j + 1], v[j + 2],
                                                                 v[j + 3], v[j + 4]);
                else
                    v[j] = v[j + 2];
            } else {
                v[j] = T(0);
            }
            w = compact_stream_next<PERIODIC>(w, n);
        }
    }

    // 2. forward sweep from 0, the carry from the earlier warps, the correction
    const int wr0 = PERIODIC ? compact_window_wrap(r0, n) : r0;
    {
        T g = T(0), p = T(1);
        int w = wr0;
#pragma unroll
        for (int j = 0; j < R; ++j) {
            if (r0 + j < b) {
                const T l = compact_stream_fac<T, PERIODIC>(fac, ic, 0, w, n, lo, hi);
                g = v[j] - l * g;
                p = p * (-l);
                v[j] = g;
            }
            w = compact_stream_next<PERIODIC>(w, n);
        }
        carry_v[k * 32 + lane] = g;
        carry_p[k * 32 + lane] = p;
    }
    __syncthreads();
    {
        T c = T(0);
        for (int q = 0; q < k; ++q) c = carry_v[q * 32 + lane] + carry_p[q * 32 + lane] * c;
        T p = T(1);
        int w = wr0;
#pragma unroll
        for (int j = 0; j < R; ++j) {
            if (r0 + j < b) {
                p = p * (-compact_stream_fac<T, PERIODIC>(fac, ic, 0, w, n, lo, hi));
                v[j] = v[j] + p * c;
            }
            w = compact_stream_next<PERIODIC>(w, n);
        }
    }
    __syncthreads();  // every warp has read the forward carries

    // 3. back substitution from 0, the carry from the later warps, the correction (rows go down from the
    // chunk's last slot)
    const int wlast = PERIODIC ? compact_window_wrap(r0 + R - 1, n) : r0 + R - 1;
    {
        T x = T(0), q = T(1);
        int w = wlast;
#pragma unroll
        for (int j = R - 1; j >= 0; --j) {
            if (r0 + j < b) {
                const T u = compact_stream_fac<T, PERIODIC>(fac, ic, 2, w, n, lo, hi);
                const T id = compact_stream_fac<T, PERIODIC>(fac, ic, 1, w, n, lo, hi);
                x = (v[j] - u * x) * id;
                q = q * (-(u * id));
                v[j] = x;
            }
            w = compact_stream_prev<PERIODIC>(w, n);
        }
        carry_v[k * 32 + lane] = x;
        carry_p[k * 32 + lane] = q;
    }
    __syncthreads();
    {
        T d = T(0);
        for (int q = W - 1; q > k; --q) d = carry_v[q * 32 + lane] + carry_p[q * 32 + lane] * d;
        T q = T(1);
        int w = wlast;
#pragma unroll
        for (int j = R - 1; j >= 0; --j) {
            if (r0 + j < b) {
                const T u = compact_stream_fac<T, PERIODIC>(fac, ic, 2, w, n, lo, hi);
                const T id = compact_stream_fac<T, PERIODIC>(fac, ic, 1, w, n, lo, hi);
                q = q * (-(u * id));
                v[j] = v[j] + q * d;
            }
            w = compact_stream_prev<PERIODIC>(w, n);
        }
    }

    // 4. the rows of [o0, o1)
    if (STAGED) {
        __syncwarp();  // every lane has read its rows of the tile (step 0)
#pragma unroll
        for (int j = 0; j < R; ++j) tile[lane * PITCH + j] = v[j];
        __syncwarp();
        T* const dst0 = out + (nagare_window_i64)line0 * sys_stride;
#pragma unroll
        for (int it = 0; it < R; ++it) {
            const int e = lane + 32 * it, j = e / R, t = e % R;
            const int row = r0 + t;
            if (j < valid && row >= o0 && row < o1) {
                const int w = PERIODIC ? compact_window_wrap(row, n) : row;
                dst0[(nagare_window_i64)j * sys_stride + w] = tile[j * PITCH + t];
            }
        }
    } else if (line < nsys) {
        T* const dst = out + compact_window_line(line, sys_stride, per, group_stride);
        int w = wr0;
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const int row = r0 + j;
            if (row >= o0 && row < o1) dst[(nagare_window_i64)w * es] = v[j];
            w = compact_stream_next<PERIODIC>(w, n);
        }
    }
}

#endif

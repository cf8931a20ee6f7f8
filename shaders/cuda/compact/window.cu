// The compact derivative in independent segments: each thread solves S rows of one line from the
// right-hand side on its segment and a halo around it, long enough that the truncated sweeps differ
// from the whole line's by less than round-off. Host side, the NumPy mirror of every operation and the
// reasoning (the decay rates, the halo's length, S): engine/compact/solvers/window.py.
//
// Block (32, WARPS): threadIdx.x = the line in a group of 32 adjacent lines (for the y-lines of a
// row-major field, 32 adjacent x-columns: every load and store of a warp is one row segment of 128
// (fp32) or 256 (fp64) contiguous bytes), threadIdx.y = the segment; grid (line groups, segment groups).
// y-lines read their rows straight from memory, 8 rows ahead (compact_window_stream); x-lines (STAGED)
// through a shared tile a warp (compact_window_staged). No block barriers: a thread leaves as soon as it
// has no segment or (not STAGED) no line; STAGED warps stay whole for their __syncwarp. Per thread,
// segment [s0, s1):
//   1. backward elimination h_i = r_i - mu_i h_{i+1} from 0 at row b-1 down to s1 (the right halo);
//   2. forward sweep g_i = r_i - l_i g_{i-1} from 0 at row a up to s1-1, g of the segment's rows kept in
//      shared memory (slot k of every thread of the block side by side: conflict-free);
//   3. the twist x_{s1} = (h_{s1} - l_{s1} g_{s1-1}) inv_t_{s1} (0 where s1 is a closed line's end), then
//      back substitution x_i = (g_i - u_i x_{i+1}) inv_d_i down the segment, stored.
// Periodic lines wrap every index (a window longer than the line wraps more than once); closed lines
// start a halo at the end when it would reach the unconverged rows next to P4's closures (the host's
// plan: a = 0, b = n there). r_i is the right-hand side (FUSED: computed from f in the same order as
// schemes.rhs, from a five-value register window that slides one row a step: one load a row), else
// the line's own value.
// fac = [l | inv_d | u | mu | inv_t | 5 converged values], each band n long; rows lo <= i < hi read the
// converged values (one address for the whole warp) instead of their bands (periodic: lo = 0, hi = n).
// coef = [A/2, B/4, delta d, delta e / 2, 2, c0, c1, c2, c3, pa, 1/h] (solvers/scan.py: coefficients).
// Compiled with --fmad=false: the mirror's bits. in may not be out (a halo reads rows a neighbouring
// segment writes): the host gives an in-place call a work array.

#ifndef NAGARE_COMPACT_WINDOW
#define NAGARE_COMPACT_WINDOW

typedef long long nagare_window_i64;

__device__ __forceinline__ int compact_window_wrap(int i, int n)
{
    const int w = i % n;
    return w < 0 ? w + n : w;
}

// A thread's factor k (0 l, 1 inv_d, 2 u, 3 mu, 4 inv_t) of row i: the converged value held in a register
// (ic, read once) on rows lo <= i < hi, its band's row elsewhere.
template <typename T>
__device__ __forceinline__ T compact_window_fac(const T* __restrict__ fac, const T* ic, int k, int i, int n, int lo,
                                                int hi)
{
    return (i >= lo && i < hi) ? ic[k] : fac[k * n + i];
}

// f at row j of the line (j may be up to 3 rows outside [0, n): periodic lines wrap, closed ones read 0)
template <typename T, bool PERIODIC>
__device__ __forceinline__ T compact_window_f(const T* __restrict__ base, nagare_window_i64 es, int j, int n)
{
    if (PERIODIC) {
        if (j < 0) j += n;
        if (j >= n) j -= n;
    } else if (j < 0 || j >= n) {
        return T(0);
    }
    return base[(nagare_window_i64)j * es];
}

#ifndef NAGARE_WINDOW_AHEAD
// Rows a thread's loads run ahead of its sweep: each load is issued this many rows before its value is
// used, so a thread keeps that many loads in flight instead of one behind a dependent chain of
// arithmetic (the bytes in flight an SM needs: latency × bandwidth, ~25 KiB on a 4 TB/s card).
#define NAGARE_WINDOW_AHEAD 8
#endif

// The rows of one line in order (DIR = +1 up, -1 down) from `row` on, AHEAD rows loaded ahead in a register
// ring: take(j) for j = 0, 1, .., AHEAD-1, 0, .. (unrolled: j a constant) returns the next row's value and
// loads the one AHEAD rows after it. Rows outside a closed line read 0; a periodic line's wrap.
template <typename T, bool PERIODIC, int DIR>
struct compact_window_stream {
    T q[NAGARE_WINDOW_AHEAD];
    int nxt;  // the next row to load (periodic: wrapped; closed: may leave [0, n))

    __device__ __forceinline__ void step(int n)
    {
        if (PERIODIC) nxt = DIR > 0 ? (nxt == n - 1 ? 0 : nxt + 1) : (nxt == 0 ? n - 1 : nxt - 1);
        else nxt += DIR;
    }

    __device__ __forceinline__ T load(const T* __restrict__ base, nagare_window_i64 es, int n) const
    {
        return (PERIODIC || (nxt >= 0 && nxt < n)) ? base[(nagare_window_i64)nxt * es] : T(0);
    }

    __device__ __forceinline__ void start(const T* __restrict__ base, nagare_window_i64 es, int row, int n)
    {
        nxt = PERIODIC ? compact_window_wrap(row, n) : row;
#pragma unroll
        for (int j = 0; j < NAGARE_WINDOW_AHEAD; ++j) {
            q[j] = load(base, es, n);
            step(n);
        }
    }

    __device__ __forceinline__ T take(int j, const T* __restrict__ base, nagare_window_i64 es, int n)
    {
        const T v = q[j];
        q[j] = load(base, es, n);
        step(n);
        return v;
    }
};

// The same rows of 32 contiguous lines at once, for a warp whose lanes are those lines (x-lines of a row-
// major field, STAGED): the warp loads 32 rows of the 32 lines a chunk — one load instruction per line,
// the lanes its 32 consecutive values (256 bytes fp64) — into registers, writes them transposed into its
// shared tile (row-major, rows padded to 33 values: the transposed writes hit different banks) and each lane
// reads its line's rows from the tile. The next chunk's loads are issued before the current one is used:
// 32 rows a lane in flight. Every lane of the warp takes the same rows (the segment is the warp's), lanes
// past the last line load nothing and are never stored.
template <typename T, bool PERIODIC, int DIR>
struct compact_window_staged {
    T ld[32];
    T* tile;
    const T* __restrict__ line0;  // the warp's first line
    nagare_window_i64 ss;         // line to line
    int valid, lane, nxt, pos;    // lines that exist, this lane, the chunk in flight's first row, next row read

    __device__ __forceinline__ void fetch(int n)
    {
        int r = nxt + DIR * lane;
        bool ok = true;
        if (PERIODIC) r = compact_window_wrap(r, n);
        else ok = r >= 0 && r < n;
#pragma unroll
        for (int j = 0; j < 32; ++j) ld[j] = (ok && j < valid) ? line0[(nagare_window_i64)j * ss + r] : T(0);
        nxt = PERIODIC ? compact_window_wrap(nxt + 32 * DIR, n) : nxt + 32 * DIR;
    }

    __device__ __forceinline__ void commit()
    {
        __syncwarp();  // every lane has read the tile's last chunk
#pragma unroll
        for (int j = 0; j < 32; ++j) tile[lane * 33 + j] = ld[j];
        __syncwarp();
    }

    __device__ __forceinline__ void start(const T* __restrict__, nagare_window_i64, int row, int n)
    {
        nxt = row;
        fetch(n);
        commit();
        fetch(n);
        pos = 0;
    }

    __device__ __forceinline__ T take(int, const T* __restrict__, nagare_window_i64, int n)
    {
        if (pos == 32) {
            commit();
            fetch(n);
            pos = 0;
        }
        return tile[(pos++) * 33 + lane];
    }
};

template <typename T, bool PERIODIC, int DIR>
__device__ __forceinline__ void compact_window_stage(compact_window_stream<T, PERIODIC, DIR>&, T*, const T*,
                                                     nagare_window_i64, int)
{
}
template <typename T, bool PERIODIC, int DIR>
__device__ __forceinline__ void compact_window_stage(compact_window_staged<T, PERIODIC, DIR>& st, T* tile,
                                                     const T* line0, nagare_window_i64 ss, int valid)
{
    st.tile = tile;
    st.line0 = line0;
    st.ss = ss;
    st.valid = valid < 32 ? valid : 32;
    st.lane = threadIdx.x;
}

template <typename T, bool PERIODIC, int DIR, bool STAGED>
struct compact_window_rows {
    typedef compact_window_stream<T, PERIODIC, DIR> type;
};
template <typename T, bool PERIODIC, int DIR>
struct compact_window_rows<T, PERIODIC, DIR, true> {
    typedef compact_window_staged<T, PERIODIC, DIR> type;
};

// The right-hand side of row i from its window f[i-2 .. i+2] (schemes.interior's order), or P4's
// closure rows (schemes.closure_rows') read directly at a closed line's first and last two rows.
template <typename T, bool PERIODIC, bool DISS>
__device__ __forceinline__ T compact_window_rhs(const T* __restrict__ base, nagare_window_i64 es, int i, int n,
                                                const T* __restrict__ coef, T fm2, T fm1, T c, T fp1, T fp2)
{
    const T ih = coef[10];
    if (!PERIODIC && (i < 2 || i > n - 3)) {
        const T c0 = coef[5], c1 = coef[6], c2 = coef[7], c3 = coef[8], pa = coef[9];
#define NAGARE_F(k) base[(nagare_window_i64)(k) * es]
        if (i == 0)
            return (((c0 * NAGARE_F(0) + c1 * NAGARE_F(1)) + c2 * NAGARE_F(2)) + c3 * NAGARE_F(3)) * ih;
        if (i == 1) return pa * (NAGARE_F(2) - NAGARE_F(0)) * ih;
        if (i == n - 2) return pa * (NAGARE_F(n - 1) - NAGARE_F(n - 3)) * ih;
        return -((((c0 * NAGARE_F(n - 1) + c1 * NAGARE_F(n - 2)) + c2 * NAGARE_F(n - 3)) + c3 * NAGARE_F(n - 4))) * ih;
#undef NAGARE_F
    }
    T r = coef[0] * (fp1 - fm1) + coef[1] * (fp2 - fm2);
    if (DISS) {
        const T two = coef[4];
        r = r + (coef[2] * ((fp1 + fm1) - two * c) + coef[3] * ((fp2 + fm2) - two * c));
    }
    return r * ih;
}

// Where line s starts: s · sys_stride, or — lines in groups of `per` (group_stride != 0: the y-lines of a
// stack of variables, one group per variable) — (s / per) · group_stride + (s % per) · sys_stride.
__device__ __forceinline__ nagare_window_i64 compact_window_line(int s, nagare_window_i64 sys_stride, int per,
                                                                 nagare_window_i64 group_stride)
{
    if (group_stride == 0) return (nagare_window_i64)s * sys_stride;
    return (nagare_window_i64)(s / per) * group_stride + (nagare_window_i64)(s % per) * sys_stride;
}

#ifndef NAGARE_WINDOW_MAX_THREADS
#define NAGARE_WINDOW_MAX_THREADS 256
#endif
// Dynamic shared memory: S values a thread (g of its segment), blockDim.x · blockDim.y · S values; STAGED
// (contiguous lines: elem_stride 1, no groups) a 32 × 33 tile a warp after them.
template <typename T, bool PERIODIC, bool FUSED, bool DISS, bool STAGED>
__global__ void __launch_bounds__(NAGARE_WINDOW_MAX_THREADS)
compact_window(const T* __restrict__ in, T* __restrict__ out, const T* __restrict__ fac, const T* __restrict__ coef,
               int n, int nsys, nagare_window_i64 sys_stride, nagare_window_i64 elem_stride, int per,
               nagare_window_i64 group_stride, int seg, int halo_f, int halo_b, int lo, int hi)
{
#ifndef NAGARE_EMU
    extern __shared__ __align__(16) unsigned char nagare_smem[];
#endif
    const int line = blockIdx.x * blockDim.x + threadIdx.x;
    const int sg = blockIdx.y * blockDim.y + threadIdx.y;
    const int s0 = sg * seg;
    if (s0 >= n || (!STAGED && line >= nsys)) return;  // STAGED: whole warps only (the tile is shared)
    const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    T* const keep = reinterpret_cast<T*>(nagare_smem) + tid;  // slot k at keep[k · threads]
    const nagare_window_i64 es = elem_stride;
    // a lane past the last line (STAGED only) computes on the last line's values and stores nothing
    const T* __restrict__ base = in + compact_window_line(min(line, nsys - 1), sys_stride, per, group_stride);
    const int line0 = blockIdx.x * blockDim.x;
    T* const tile = reinterpret_cast<T*>(nagare_smem) + (nagare_window_i64)threads * seg + threadIdx.y * 32 * 33;
    const int s1 = min(n, s0 + seg);
    int a = s0 - halo_f, b = s1 + halo_b;
    if (!PERIODIC) {
        // lo = hi = 0: no converged interior (a short line) — no truncation at all, the whole line
        if (a <= lo || hi <= lo) a = 0;
        if (b >= hi) b = n;
    }
    const bool twist = PERIODIC || s1 < n;
    T ic[5];
#pragma unroll
    for (int k = 0; k < 5; ++k) ic[k] = fac[5 * n + k];
    constexpr int AHEAD = NAGARE_WINDOW_AHEAD;

    // 1. backward elimination over the right halo, rows b-1 down to s1. FUSED: the window f[w-2 .. w+2]
    // slides down a row a step, its new bottom value from the stream (rows b-4, b-5, ..)
    T h = T(0);
    if (twist) {
        int w = compact_window_wrap(b - 1, n);
        T fm2 = T(0), fm1 = T(0), c = T(0), fp1 = T(0), fp2 = T(0);
        if (FUSED) {
            fm2 = compact_window_f<T, PERIODIC>(base, es, w - 2, n);
            fm1 = compact_window_f<T, PERIODIC>(base, es, w - 1, n);
            c = compact_window_f<T, PERIODIC>(base, es, w, n);
            fp1 = compact_window_f<T, PERIODIC>(base, es, w + 1, n);
            fp2 = compact_window_f<T, PERIODIC>(base, es, w + 2, n);
        }
        typename compact_window_rows<T, PERIODIC, -1, STAGED>::type st;
        if (STAGED) compact_window_stage(st, tile, in + (nagare_window_i64)line0 * sys_stride, sys_stride, nsys - line0);
        st.start(base, es, FUSED ? b - 4 : b - 1, n);
        const int count = b - s1;
        for (int k0 = 0; k0 < count; k0 += AHEAD) {
#pragma unroll
            for (int j = 0; j < AHEAD; ++j) {
                if (k0 + j >= count) break;
                T r;
                if (FUSED) {
                    r = compact_window_rhs<T, PERIODIC, DISS>(base, es, w, n, coef, fm2, fm1, c, fp1, fp2);
                    fp2 = fp1;
                    fp1 = c;
                    c = fm1;
                    fm1 = fm2;
                    fm2 = st.take(j, base, es, n);
                } else {
                    r = st.take(j, base, es, n);
                }
                h = r - compact_window_fac(fac, ic, 3, w, n, lo, hi) * h;
                w = w == 0 ? n - 1 : w - 1;
            }
        }
    }

    // 2. forward sweep, rows a up to s1-1; g of rows s0 .. s1-1 kept. FUSED: the window slides up, its new
    // top value from the stream (rows a+3, a+4, ..)
    T g = T(0);
    {
        int w = compact_window_wrap(a, n);
        T fm2 = T(0), fm1 = T(0), c = T(0), fp1 = T(0), fp2 = T(0);
        if (FUSED) {
            fm2 = compact_window_f<T, PERIODIC>(base, es, w - 2, n);
            fm1 = compact_window_f<T, PERIODIC>(base, es, w - 1, n);
            c = compact_window_f<T, PERIODIC>(base, es, w, n);
            fp1 = compact_window_f<T, PERIODIC>(base, es, w + 1, n);
            fp2 = compact_window_f<T, PERIODIC>(base, es, w + 2, n);
        }
        typename compact_window_rows<T, PERIODIC, 1, STAGED>::type st;
        if (STAGED) compact_window_stage(st, tile, in + (nagare_window_i64)line0 * sys_stride, sys_stride, nsys - line0);
        st.start(base, es, FUSED ? a + 3 : a, n);
        const int count = s1 - a;
        for (int k0 = 0; k0 < count; k0 += AHEAD) {
#pragma unroll
            for (int j = 0; j < AHEAD; ++j) {
                if (k0 + j >= count) break;
                const int i = a + k0 + j;
                T r;
                if (FUSED) {
                    r = compact_window_rhs<T, PERIODIC, DISS>(base, es, w, n, coef, fm2, fm1, c, fp1, fp2);
                    fm2 = fm1;
                    fm1 = c;
                    c = fp1;
                    fp1 = fp2;
                    fp2 = st.take(j, base, es, n);
                } else {
                    r = st.take(j, base, es, n);
                }
                g = r - compact_window_fac(fac, ic, 0, w, n, lo, hi) * g;
                if (i >= s0) keep[(i - s0) * threads] = g;
                w = w == n - 1 ? 0 : w + 1;
            }
        }
    }

    // 3. the twist at s1, then back substitution down the segment
    T xn = T(0);
    if (twist) {
        const int w1 = s1 == n ? 0 : s1;
        xn = (h - compact_window_fac(fac, ic, 0, w1, n, lo, hi) * g) * compact_window_fac(fac, ic, 4, w1, n, lo, hi);
    }
    if (line >= nsys) return;
    T* const dst = out + compact_window_line(line, sys_stride, per, group_stride);
    for (int i = s1 - 1; i >= s0; --i) {
        xn = (keep[(i - s0) * threads] - compact_window_fac(fac, ic, 2, i, n, lo, hi) * xn)
             * compact_window_fac(fac, ic, 1, i, n, lo, hi);
        dst[(nagare_window_i64)i * es] = xn;
    }
}

#endif

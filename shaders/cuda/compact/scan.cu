// The compact derivative as one pass over memory: Thomas' two sweeps run by a team of threads per
// line as parallel scans, with the explicit right-hand side computed in the same launch ("fused").
// Host side, the NumPy mirror of every operation and the reasoning: engine/compact/solvers/scan.py.
//
// One block per line (system). The line is read once, coalesced, into shared memory (padded index
// i + i / C: thread t's chunk of C rows starts C + 1 values after thread t-1's, so the chunk reads
// below are free of bank conflicts); thread t owns rows [t C, t C + C) in registers:
//   1. v = the right-hand side r(f)/h of its rows (FUSED; else the line is the right-hand side);
//   2. forward sweep g_i = v_i - l_i g_{i-1} within the chunk from g = 0 before it, then the true
//      values g_i += pf_i * G, G = g of the row before the chunk — G comes from a scan over the
//      chunks of the affine maps G_out = b + a G_in (a = pf at the chunk's last row, b = its local g);
//   3. back substitution x_i = (g_i - u_i x_{i+1}) inv_d_i within the chunk from x = 0 after it, then
//      x_i += pb_i * X, X = x of the row after the chunk, by the same scan run from the other end;
//   4. periodic lines: Sherman–Morrison, x_i -= q (x_0 + r x_{n-1}) z_i (folded into the stores instead,
//      one barrier fewer, it spilled more registers and measured slower);
//   5. the result goes back through shared memory and out coalesced.
// pf_i = prod_{k=start..i} (-l_k), pb_i = prod_{k=i..end} (-u_k inv_d_k) depend only on the matrix and
// C: computed on the host in float64, like l, inv_d and u. Rows past n pad the last chunks with
// l = -1, u = inv_d = 0, z = 0 and a zero right-hand side, which carries the last row's values through
// exactly, so the loops need no bounds. Away from the ends the factors are the same for every row
// (converged; z negligible): chunks there read one set of interior values, ic.
// fac = [l | inv_d | u | pf | pb | z | r q | ic], each band team·C long, ic 3 + 2C values.
// coef = [A/2, B/4, delta d, delta e / 2, 2, c0, c1, c2, c3, pa, 1/h] cast to T as NumPy casts them.
// Compiled with --fmad=false; every sum in the order of the NumPy mirror, so the two agree bit for bit.

#ifndef NAGARE_COMPACT_SCAN
#define NAGARE_COMPACT_SCAN

typedef long long nagare_scan_i64;

#ifndef NAGARE_BLOCK_SHARED
#ifdef NAGARE_EMU
#define NAGARE_BLOCK_SHARED static
#else
#define NAGARE_BLOCK_SHARED __shared__
#endif
#endif

// The exclusive carry of thread t for the composition of affine maps x -> b + a x over the team, in
// thread order (REV: from the last thread down): the composed map of the threads before t applied
// to 0. Within a warp a Hillis–Steele scan by shuffles; across warps a fold over the warp totals
// (whole-team sequential, so the order is fixed). wa/wb: one slot per warp.
template <typename T, bool REV>
__device__ __forceinline__ T compact_scan_carry(T a, T b, T* wa, T* wb)
{
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int rl = REV ? 31 - lane : lane;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const T bp = REV ? __shfl_down_sync(full, b, off) : __shfl_up_sync(full, b, off);
        const T ap = REV ? __shfl_down_sync(full, a, off) : __shfl_up_sync(full, a, off);
        if (rl >= off) {
            b = b + a * bp;
            a = a * ap;
        }
    }
    if (rl == 31) {
        wa[warp] = a;
        wb[warp] = b;
    }
    __syncthreads();
    T pb = T(0);
    if (REV) {
        for (int w = nw - 1; w > warp; --w) pb = wb[w] + wa[w] * pb;
    } else {
        for (int w = 0; w < warp; ++w) pb = wb[w] + wa[w] * pb;
    }
    const T full_b = b + a * pb;
    const T next = REV ? __shfl_down_sync(full, full_b, 1) : __shfl_up_sync(full, full_b, 1);
    return rl == 0 ? pb : next;
}

// The explicit right-hand side of rows s .. s+C-1 (schemes.rhs: interior sums in schemes.interior's order,
// P4's closure rows in schemes.closure_rows'). The interior rows read a window w = f[s-2 .. s+C+1] of
// C + 4 values once (periodic lines wrap it). `line` is the padded shared line: f_i at i + i / C.
template <typename T, int C>
__device__ __forceinline__ int compact_scan_at(int i)
{
    return i + i / C;
}

template <typename T, int C, bool PERIODIC, bool DISS>
__device__ __forceinline__ void compact_scan_rhs(const T* line, int s, int n, const T* coef, T* v)
{
    static_assert(C >= 2, "the window's offsets below assume chunks of two rows or more");
#define NAGARE_P(k) compact_scan_at<T, C>(k)
    if (s >= 2 && s + C + 2 <= n) {
        // The window lies inside the line (every chunk but the first and the last): no wrap, no
        // closure rows, no bounds, and the window at immediate offsets from one base — padded, with
        // s = t C, the indices of f[s-2 .. s+C+1] are s + t + {-3, -2, 0 .. C-1, C+1, C+2}. The
        // coefficients are read once. The same operations in the same order as below.
        const T* b = line + NAGARE_P(s);
        T w[C + 4];
        w[0] = b[-3];
        w[1] = b[-2];
#pragma unroll
        for (int k = 0; k < C; ++k) w[k + 2] = b[k];
        w[C + 2] = b[C + 1];
        w[C + 3] = b[C + 2];
        const T ca = coef[0], cb = coef[1], ih = coef[10];
        T cd = T(0), ce = T(0), two = T(0);
        if (DISS) {
            cd = coef[2];
            ce = coef[3];
            two = coef[4];
        }
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const T fm2 = w[j], fm1 = w[j + 1], fp1 = w[j + 3], fp2 = w[j + 4];
            T r = ca * (fp1 - fm1) + cb * (fp2 - fm2);
            if (DISS) {
                const T c = w[j + 2];
                r = r + (cd * ((fp1 + fm1) - two * c) + ce * ((fp2 + fm2) - two * c));
            }
            v[j] = r * ih;
        }
        return;
    }
    T w[C + 4];
#pragma unroll
    for (int k = 0; k < C + 4; ++k) {
        int i = s - 2 + k;
        if (PERIODIC) {
            if (i < 0) i += n;
            if (i >= n) i -= n;
        }
        w[k] = (i >= 0 && i < n) ? line[NAGARE_P(i)] : T(0);
    }
    const T ih = coef[10];
#pragma unroll
    for (int j = 0; j < C; ++j) {
        const int i = s + j;
        if (i >= n) {
            v[j] = T(0);
            continue;
        }
        if (!PERIODIC && (i < 2 || i > n - 3)) {
            const T c0 = coef[5], c1 = coef[6], c2 = coef[7], c3 = coef[8], pa = coef[9];
            if (i == 0)
                v[j] = (((c0 * line[NAGARE_P(0)] + c1 * line[NAGARE_P(1)]) + c2 * line[NAGARE_P(2)])
                        + c3 * line[NAGARE_P(3)]) * ih;
            else if (i == 1)
                v[j] = pa * (line[NAGARE_P(2)] - line[NAGARE_P(0)]) * ih;
            else if (i == n - 2)
                v[j] = pa * (line[NAGARE_P(n - 1)] - line[NAGARE_P(n - 3)]) * ih;
            else
                v[j] = -((((c0 * line[NAGARE_P(n - 1)] + c1 * line[NAGARE_P(n - 2)]) + c2 * line[NAGARE_P(n - 3)])
                          + c3 * line[NAGARE_P(n - 4)])) * ih;
            continue;
        }
        const T fm2 = w[j], fm1 = w[j + 1], fp1 = w[j + 3], fp2 = w[j + 4];
        T r = coef[0] * (fp1 - fm1) + coef[1] * (fp2 - fm2);
        if (DISS) {
            const T c = w[j + 2], two = coef[4];
            r = r + (coef[2] * ((fp1 + fm1) - two * c) + coef[3] * ((fp2 + fm2) - two * c));
        }
        v[j] = r * ih;
    }
#undef NAGARE_P
}

// The sweeps of one chunk, in the NumPy mirror's order. STEP = 1: per-row factors (the bands, at
// the chunk's rows); STEP = 0: one value for every row (an interior chunk's converged l, 1/D, u).
// pf and pb are per row in both cases. Immediate offsets only: no runtime stride.
// Forward: g_i = v_i - l_i g_{i-1} from 0; returns the chunk map's slope pf at its last row.
template <typename T, int C, int STEP>
__device__ __forceinline__ T compact_scan_forward(T* v, const T* __restrict__ l, const T* __restrict__ pf)
{
#pragma unroll
    for (int j = 1; j < C; ++j) v[j] = v[j] - l[j * STEP] * v[j - 1];
    return pf[C - 1];
}

// The incoming g applied, then back substitution x_i = (g_i - u_i x_{i+1}) / D_i from 0; returns
// the reverse chunk map's slope pb at the chunk's first row.
template <typename T, int C, int STEP>
__device__ __forceinline__ T compact_scan_back(T* v, T gin, const T* __restrict__ pf, const T* __restrict__ inv_d,
                                               const T* __restrict__ up, const T* __restrict__ pb)
{
#pragma unroll
    for (int j = 0; j < C; ++j) v[j] = v[j] + pf[j] * gin;
    v[C - 1] = v[C - 1] * inv_d[(C - 1) * STEP];
#pragma unroll
    for (int j = C - 2; j >= 0; --j) v[j] = (v[j] - up[j * STEP] * v[j + 1]) * inv_d[j * STEP];
    return pb[0];
}

// The outgoing x applied: x_i += pb_i X.
template <typename T, int C>
__device__ __forceinline__ void compact_scan_apply(T* v, const T* __restrict__ pb, T xout)
{
#pragma unroll
    for (int j = 0; j < C; ++j) v[j] = v[j] + pb[j] * xout;
}

// One line's solve from its padded shared copy `line` (team = blockDim.x threads, thread t owning rows
// [t C, t C + C)), the results written back over it: the right-hand side (FUSED) or the line itself, the
// forward sweep and its carry, back substitution and its carry, Sherman–Morrison (PERIODIC). wa0/wb0 and
// wa1/wb1: this team's warp-total slots of the two scans; ends: its two slots for x_0 and x_{n-1}.
// The caller has synchronised the block after filling the line, and does again before reading it back.
// Shared by compact_scan (one launch per line or tile) and compact_tile (tile.cu: persistent blocks).
template <typename T, int C, bool PERIODIC, bool FUSED, bool DISS>
__device__ __forceinline__ void compact_scan_solve_line(T* line, const T* __restrict__ fac, const T* __restrict__ coef,
                                                        int n, int t_lo, int t_hi, T* wa0, T* wb0, T* wa1, T* wb1,
                                                        T* ends)
{
    const int t = threadIdx.x, team = blockDim.x, np = team * C, s = t * C;
    // Interior chunks read the converged factors ic (uniform addresses, immediate offsets); the
    // others their rows of the bands. Two code paths instead of one with a runtime stride: the
    // stride's address arithmetic cost more than the loads.
    const bool inner = t >= t_lo && t < t_hi;
    const T* __restrict__ ic = fac + 6 * np + 2;
    T v[C];
    if (FUSED) {
        compact_scan_rhs<T, C, PERIODIC, DISS>(line, s, n, coef, v);
    } else {
#pragma unroll
        for (int j = 0; j < C; ++j) v[j] = s + j < n ? line[s + t + j] : T(0);
    }
    // forward sweep: local from 0, then the chunk's incoming g by a scan over the chunks
    T a_out;
    if (inner) a_out = compact_scan_forward<T, C, 0>(v, ic, ic + 3);
    else a_out = compact_scan_forward<T, C, 1>(v, fac + s, fac + 3 * np + s);
    const T gin = compact_scan_carry<T, false>(a_out, v[C - 1], wa0, wb0);
    // back substitution: local from 0, then the chunk's outgoing x by the reverse scan
    T a_in;
    if (inner) a_in = compact_scan_back<T, C, 0>(v, gin, ic + 3, ic + 1, ic + 2, ic + 3 + C);
    else a_in = compact_scan_back<T, C, 1>(v, gin, fac + 3 * np + s, fac + np + s, fac + 2 * np + s, fac + 4 * np + s);
    const T xout = compact_scan_carry<T, true>(a_in, v[0], wa1, wb1);
    if (inner) compact_scan_apply<T, C>(v, ic + 3 + C, xout);
    else compact_scan_apply<T, C>(v, fac + 4 * np + s, xout);
    if (PERIODIC) {
        const T r = fac[6 * np], q = fac[6 * np + 1];
        T* const e = ends;
#pragma unroll
        for (int j = 0; j < C; ++j) {
            if (s + j == 0) e[0] = v[j];
            if (s + j == n - 1) e[1] = v[j];
        }
        __syncthreads();
        const T sm = q * (e[0] + r * e[1]);
        if (!inner) {  // z vanishes (below 1e-18) on interior chunks
            const T* __restrict__ z = fac + 5 * np + s;
#pragma unroll
            for (int j = 0; j < C; ++j) v[j] = v[j] - sm * z[j];
        }
    }
    // every thread read the line before the scans' barriers: its storage is free for the results
    // (rows past n land in the padding: never stored)
#pragma unroll
    for (int j = 0; j < C; ++j) line[s + t + j] = v[j];
}

#ifndef NAGARE_SCAN_MAX_THREADS
// 40 registers a thread for 8 rows a thread (team <= 512: three such blocks an SM, six of 256): the
// kernel is latency-bound, and the bound measured faster than the 64 the compiler takes unbounded
// (docs/benchmarks/compact-scan-h100-2026-11-26b)
#define NAGARE_SCAN_MAX_THREADS 512
#endif
#ifndef NAGARE_SCAN_MIN_BLOCKS
// fp64 tiles of strided lines (W > 1) take 64 (two 512-thread blocks an SM): at 40 they spilled and
// ran slower (docs/benchmarks/compact-scan-h100-2026-11-27); fp32 tiles do not spill at 40 and gained
// nothing from more
#define NAGARE_SCAN_MIN_BLOCKS (C <= 8 ? (W > 1 && sizeof(T) == 8 ? 2 : 3) : 1)
#endif
// Block: team = blockDim.x threads (a multiple of 32, team·C >= n, team·W at most 512).
// Dynamic shared memory: W lines of team·C + team values, + 128 / (W·sizeof T) between lines when
// W > 1 (scan.tile_pad). in may be out (a line is read before any write).
// Threads t_lo <= t < t_hi own interior chunks, whose factors are the converged interior values
// ic = [l, 1/D, u, pf(C), pb(C)] (after fac's bands: solvers/scan.py) — read by the whole warp at one
// address, instead of six bands' worth of per-row loads (L1 traffic that bounds the kernel).
// One line (W lines) per block (blockIdx.x). Measured slower: a persistent grid (the resident blocks
// looping over lines) with the next line's loads in flight during the current line's work — in
// registers (128 registers a thread) or by cp.async into a second shared line (spills under the
// register bound); cp.async for the one line, no gain (docs/benchmarks/compact-scan-h100-2026-11-26, -26b).
//
// W > 1 (strided lines side by side, sys_stride = 1: the y-lines of a row-major field): a block is W
// teams (threadIdx.y = the line in the tile, blockDim = (team, W)) that solve W adjacent lines, each in
// its own padded shared line. The loads and stores are shared out over the tile's rows instead: thread L
// = t + team·y moves row L / W + k·team of line L % W, so a warp moves 32 / W rows of W adjacent values
// each — whole 32-byte sectors when W·sizeof(T) = 32, where one line per block moves 8 (fp64) or 4 (fp32)
// bytes of every sector it touches. Lines past nsys in the last tile are neither read nor written.
// The lines lie 128 / (W·sizeof T) values further apart than their length (a multiple of 32): the W
// lines a warp's row segments fall in then start on different banks (without it, 4-way (fp64) and
// 8-way (fp32) bank conflicts in those loads and stores).
// Where line s starts: s · sys_stride, or — tiles (W > 1) of lines in groups of `per` (group_stride != 0:
// the y-lines of a stack of variables, one group per variable) — (s / per) · group_stride + (s % per) ·
// sys_stride. One-line blocks ignore groups (scan.DeviceScan launches them a group at a time): the
// grouped address there cost the contiguous kernel 8 more bytes of spills under its register bound.
template <int W>
__device__ __forceinline__ nagare_scan_i64 compact_scan_line(int s, nagare_scan_i64 sys_stride, int per,
                                                             nagare_scan_i64 group_stride)
{
    if (W == 1 || group_stride == 0) return (nagare_scan_i64)s * sys_stride;
    return (nagare_scan_i64)(s / per) * group_stride + (nagare_scan_i64)(s % per) * sys_stride;
}

template <typename T, int C, bool PERIODIC, bool FUSED, bool DISS, int W>
__global__ void __launch_bounds__(NAGARE_SCAN_MAX_THREADS, NAGARE_SCAN_MIN_BLOCKS)
compact_scan(const T* in, T* out, const T* __restrict__ fac, const T* __restrict__ coef, int n, int nsys,
             nagare_scan_i64 sys_stride, nagare_scan_i64 elem_stride, int t_lo, int t_hi, int per,
             nagare_scan_i64 group_stride)
{
#ifndef NAGARE_EMU
    extern __shared__ __align__(16) unsigned char nagare_smem[];
#endif
    NAGARE_BLOCK_SHARED T wa[2][32];  // per line of the tile: nw slots from y·nw (W·nw <= 16)
    NAGARE_BLOCK_SHARED T wb[2][32];
    NAGARE_BLOCK_SHARED T ends[2 * W];
    const int sys0 = blockIdx.x * W;
    if (sys0 >= nsys) return;  // whole blocks: every thread of a block leaves or none
    const int t = threadIdx.x, team = blockDim.x, np = team * C;
    const int y = W == 1 ? 0 : (int)threadIdx.y, nw = team >> 5;
    const int ls = np + team + (W == 1 ? 0 : 128 / (W * (int)sizeof(T)));  // line to line, in values
    T* const tile = reinterpret_cast<T*>(nagare_smem);
    T* const line = tile + y * ls;  // this team's line
    {
        // the rows this thread moves: line lc of the tile, rows r0 + k·team (W = 1: its own line, rows
        // t + k·team); worked out again for the stores (not kept through the solve: registers)
        const int lw = t + team * y, lc = W == 1 ? 0 : lw % W, r0 = W == 1 ? t : lw / W;
        const bool moves = W == 1 || sys0 + lc < nsys;
        // all C loads of a thread in flight at once (a loop over i < n would wait for each in turn);
        // one 64-bit address computed once and stepped (per-element 64-bit index products were a
        // fifth of the kernel's instructions)
        const T* src = in + compact_scan_line<W>(sys0 + lc, sys_stride, per, group_stride) + (nagare_scan_i64)r0 * elem_stride;
        const nagare_scan_i64 hop = (nagare_scan_i64)team * elem_stride;
        T* const dstl = tile + lc * ls;
        T ld[C];
#pragma unroll
        for (int k = 0; k < C; ++k) {
            ld[k] = moves && r0 + k * team < n ? *src : T(0);
            src += hop;
        }
#pragma unroll
        for (int k = 0; k < C; ++k) {
            const int i = r0 + k * team;
            if (moves && i < n) dstl[i + i / C] = ld[k];
        }
        __syncthreads();
    }

    compact_scan_solve_line<T, C, PERIODIC, FUSED, DISS>(line, fac, coef, n, t_lo, t_hi, wa[0] + y * nw, wb[0] + y * nw,
                                                         wa[1] + y * nw, wb[1] + y * nw, ends + 2 * y);
    __syncthreads();
    const int lw = t + team * y, lc = W == 1 ? 0 : lw % W, r0 = W == 1 ? t : lw / W;
    if (W == 1 || sys0 + lc < nsys) {
        T* dst = out + compact_scan_line<W>(sys0 + lc, sys_stride, per, group_stride) + (nagare_scan_i64)r0 * elem_stride;
        const nagare_scan_i64 hop = (nagare_scan_i64)team * elem_stride;
        const T* const srcl = tile + lc * ls;
#pragma unroll
        for (int k = 0; k < C; ++k) {
            const int i = r0 + k * team;
            if (i < n) *dst = srcl[i + i / C];
            dst += hop;
        }
    }
}

#endif

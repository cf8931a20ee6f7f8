// The fused compact derivative (and the scan solve) with persistent blocks that keep the next tile's
// bytes in flight while they solve the current one: ``solver = scan-tile``. Host side and the reasoning:
// engine/compact/solvers/tile.py; the arithmetic is scan.cu's (compact_scan_solve_line, the same
// operations in the same order), so the result equals scan.py's NumPy mirror bit for bit.
//
// Why: compact_scan runs a line per block in phases — load, barrier, right-hand side, two scans with
// barriers, store — and a block has no bytes in flight outside its load phase. At 3 resident blocks an
// SM the loads of the SM come in bursts, too few bytes in flight on average to cover the DRAM latency at
// several TB/s of bandwidth (latency-bound: docs/compact.md, "Solvers"). Here a block owns a tile of W lines
// at a time and loops over the tiles (tile = blockIdx.x, + gridDim.x, ...): before it solves tile k it
// issues the asynchronous copies (cp.async: global to shared without registers) of tile k + gridDim.x
// into its second buffer, so each resident block has a whole tile in flight for the whole of its solve.
//
// Layout: two buffers of W padded lines (line y at y·ls, f_i of a line at i + i / C: scan.cu's layout;
// ls = team·C + team + 128 / (W·sizeof T) when W > 1, so a warp's row segments start on different banks).
// Who moves what: contiguous lines (elem_stride 1) — team y moves its own line, a warp 32 consecutive
// values of it (coalesced); strided lines (the y-lines of a row-major field, sys_stride 1) — thread
// L = t + team·y moves rows L / W + k·team of line L % W, so a warp moves 32 / W rows of W adjacent
// values: W·sizeof(T) contiguous bytes of each row (tile.py picks W).
// Lines in groups (group_stride != 0, a stack's y-lines): line s at (s / per)·group_stride +
// (s % per)·sys_stride. Lines past nsys in the last tile are neither read nor written. in may be out: a
// block prefetches other lines than the ones it stores, and a tile's lines are read before they are written.

#ifndef NAGARE_COMPACT_TILE
#define NAGARE_COMPACT_TILE

// Compiled after scan.cu (tile.py: one NVRTC unit of both files), whose device functions it calls.

// One element global -> shared without passing through registers (cp.async, sm_80+); the emulation
// and older devices copy directly (the same values land in the same places).
template <typename T>
__device__ __forceinline__ void compact_tile_copy(T* dst, const T* src)
{
#if !defined(NAGARE_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned d;  // the shared-window address (PTX rather than __cvta_generic_to_shared: NVRTC needs no header)
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(d) : "l"(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(sizeof(T)) : "memory");
#else
    *dst = *src;
#endif
}

__device__ __forceinline__ void compact_tile_commit()
{
#if !defined(NAGARE_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// This thread's copies landed (the caller's barrier then makes every thread's visible).
__device__ __forceinline__ void compact_tile_wait()
{
#if !defined(NAGARE_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

__device__ __forceinline__ nagare_scan_i64 compact_tile_line(int s, nagare_scan_i64 sys_stride, int per,
                                                             nagare_scan_i64 group_stride)
{
    if (group_stride == 0) return (nagare_scan_i64)s * sys_stride;
    return (nagare_scan_i64)(s / per) * group_stride + (nagare_scan_i64)(s % per) * sys_stride;
}

// The line of the tile (lc) and the first row (r0) this thread moves; rows r0 + k·team after it.
template <int W>
__device__ __forceinline__ void compact_tile_mover(nagare_scan_i64 elem_stride, int& lc, int& r0)
{
    const int t = threadIdx.x, team = blockDim.x, y = W == 1 ? 0 : (int)threadIdx.y;
    if (W == 1 || elem_stride == 1) {
        lc = y;
        r0 = t;
    } else {
        const int lw = t + team * y;
        lc = lw % W;
        r0 = lw / W;
    }
}

// Issue this thread's copies of tile `tile` into buf (no wait).
template <typename T, int C, int W>
__device__ __forceinline__ void compact_tile_fetch(const T* in, T* buf, int tile, int n, int nsys, int ls,
                                                   nagare_scan_i64 sys_stride, nagare_scan_i64 elem_stride, int per,
                                                   nagare_scan_i64 group_stride)
{
    int lc, r0;
    compact_tile_mover<W>(elem_stride, lc, r0);
    const int line = tile * W + lc, team = blockDim.x;
    if (line >= nsys) return;
    const T* src = in + compact_tile_line(line, sys_stride, per, group_stride) + (nagare_scan_i64)r0 * elem_stride;
    const nagare_scan_i64 hop = (nagare_scan_i64)team * elem_stride;
    T* const dst = buf + lc * ls;
    for (int i = r0; i < n; i += team) {
        compact_tile_copy(dst + i + i / C, src);
        src += hop;
    }
}

#ifndef NAGARE_TILE_MAX_THREADS
// 64 registers a thread for 8-row chunks (blocks of up to 1024 threads; the two buffers' shared memory
// allows two or three 512-thread blocks an SM): no spills. Longer chunks (lines past 4096 points) keep up
// to 128 in blocks of up to 512: they spill at 64.
#define NAGARE_TILE_MAX_THREADS (C <= 8 ? 1024 : 512)
#endif

// Block: (team, W) threads, team a multiple of 32, team·C >= n, team·W <= NAGARE_TILE_MAX_THREADS.
// Grid: at most the tiles (ceil(nsys / W)); each block solves tiles blockIdx.x, + gridDim.x, ...
// Dynamic shared memory: two buffers of W·ls values. Arguments as compact_scan's (scan.cu).
template <typename T, int C, bool PERIODIC, bool FUSED, bool DISS, int W>
__global__ void __launch_bounds__(NAGARE_TILE_MAX_THREADS, 1)
compact_tile(const T* in, T* out, const T* __restrict__ fac, const T* __restrict__ coef, int n, int nsys,
             nagare_scan_i64 sys_stride, nagare_scan_i64 elem_stride, int t_lo, int t_hi, int per,
             nagare_scan_i64 group_stride)
{
#ifndef NAGARE_EMU
    extern __shared__ __align__(16) unsigned char nagare_smem[];
#endif
    NAGARE_BLOCK_SHARED T wa[2][32];  // per line of the tile: nw slots from y·nw (W·nw <= 32)
    NAGARE_BLOCK_SHARED T wb[2][32];
    NAGARE_BLOCK_SHARED T ends[2 * W];
    const int tiles = (nsys + W - 1) / W;
    int tile = blockIdx.x;
    if (tile >= tiles) return;  // whole blocks: every thread of a block leaves or none
    const int team = blockDim.x, y = W == 1 ? 0 : (int)threadIdx.y, nw = team >> 5;
    const int ls = team * C + team + (W == 1 ? 0 : 128 / (W * (int)sizeof(T)));  // line to line, in values
    T* const buffers = reinterpret_cast<T*>(nagare_smem);
    const int tile_values = W * ls;
    int lc, r0;
    compact_tile_mover<W>(elem_stride, lc, r0);
    compact_tile_fetch<T, C, W>(in, buffers, tile, n, nsys, ls, sys_stride, elem_stride, per, group_stride);
    compact_tile_commit();
    for (int cur = 0; tile < tiles; tile += gridDim.x, cur ^= 1) {
        T* const buf = buffers + cur * tile_values;
        compact_tile_wait();
        // the tile's copies are visible to every thread, and the other buffer's last reads (the stores
        // of the tile before) are done: it may be refilled
        __syncthreads();
        const int next = tile + (int)gridDim.x;
        if (next < tiles)
            compact_tile_fetch<T, C, W>(in, buffers + (cur ^ 1) * tile_values, next, n, nsys, ls, sys_stride,
                                        elem_stride, per, group_stride);
        compact_tile_commit();
        compact_scan_solve_line<T, C, PERIODIC, FUSED, DISS>(buf + y * ls, fac, coef, n, t_lo, t_hi, wa[0] + y * nw,
                                                             wb[0] + y * nw, wa[1] + y * nw, wb[1] + y * nw,
                                                             ends + 2 * y);
        __syncthreads();
        const int line = tile * W + lc;
        if (line < nsys) {
            T* dst = out + compact_tile_line(line, sys_stride, per, group_stride) + (nagare_scan_i64)r0 * elem_stride;
            const nagare_scan_i64 hop = (nagare_scan_i64)team * elem_stride;
            const T* const src = buf + lc * ls;
            for (int i = r0; i < n; i += team) {
                *dst = src[i + i / C];
                dst += hop;
            }
        }
    }
}

#endif

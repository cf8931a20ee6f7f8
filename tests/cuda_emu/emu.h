// Host C++20 emulation of the few CUDA features temporal_blocking.cu and lbm_fused_pair use, for checking its
// indexing, barriers and shuffles on a machine without a GPU: each CUDA thread of a block is a fiber
// (ucontext, its own stack), __syncthreads a barrier over the block's fibers, __shfl_{up,down}_sync a
// per-warp exchange slot + barrier. Fibers switch only at those barriers, so a block costs no OS
// threads and no futex wake-ups (an OS thread per CUDA thread made these tests minutes long); the
// order the waiting fibers resume in alternates (ascending, then descending thread id) from one
// barrier to the next, so a read of shared memory that another thread writes in the same phase
// meets the unwritten value on one side or the other. Blocks run one after another, so one static
// shared-memory array serves them all.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sys/mman.h>
#include <ucontext.h>
#include <vector>

#define NAGARE_EMU 1
// (fp16 conversions: d2q9.cuh has host versions via _Float16 when __CUDA_ARCH__ is not defined)

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n)

struct dim3e { int x = 0, y = 0, z = 0; };
// Set by the scheduler before it resumes a fiber: the running CUDA thread's coordinates.
inline dim3e threadIdx, blockIdx, blockDim, gridDim;
alignas(16) inline unsigned char tb_smem[400000];

inline int min(int a, int b) { return a < b ? a : b; }

struct EmuBarrier {
    int expected = 0, arrived = 0;
    unsigned generation = 0;
};

struct EmuBlock {
    int nthreads = 0;
    EmuBarrier block_bar;
    std::vector<EmuBarrier> warp_bar;
    std::vector<double> slots;  // one per thread
};
inline EmuBlock* emu_block = nullptr;
inline int emu_tid = 0;

// The fiber scheduler of the running block.
struct EmuFiber {
    ucontext_t ctx;
    dim3e tid;
    bool done = false;
};
inline ucontext_t emu_sched_ctx;
inline std::vector<EmuFiber>* emu_fibers = nullptr;
inline int emu_current = 0;
inline unsigned long emu_progress = 0;  // arrivals and finished fibers: a round without any is a deadlock

inline void emu_yield() { swapcontext(&(*emu_fibers)[emu_current].ctx, &emu_sched_ctx); }

inline void emu_arrive_and_wait(EmuBarrier& bar)
{
    ++emu_progress;
    if (++bar.arrived == bar.expected) {  // the last one in releases the others and runs on
        bar.arrived = 0;
        ++bar.generation;
        return;
    }
    const unsigned gen = bar.generation;
    while (bar.generation == gen) emu_yield();
}

inline void __syncthreads() { emu_arrive_and_wait(emu_block->block_bar); }

template <typename T>
inline T emu_shfl(T v, int src_lane_in_warp, bool ok)
{
    const int warp = emu_tid / 32, lane = emu_tid % 32;
    emu_block->slots[emu_tid] = (double)v;
    emu_arrive_and_wait(emu_block->warp_bar[warp]);
    const T r = ok ? (T)emu_block->slots[warp * 32 + src_lane_in_warp] : v;
    emu_arrive_and_wait(emu_block->warp_bar[warp]);
    (void)lane;
    return r;
}
template <typename T>
inline T __shfl_down_sync(unsigned, T v, int d, int width = 32)
{
    const int lane = emu_tid % 32, sub = lane % width;
    return emu_shfl(v, lane + d, sub + d < width);
}
template <typename T>
inline T __shfl_up_sync(unsigned, T v, int d, int width = 32)
{
    const int lane = emu_tid % 32, sub = lane % width;
    return emu_shfl(v, lane - d, sub - d >= 0);
}

// Fiber stacks, reserved once and reused by every block (pages are committed only when touched).
constexpr size_t EMU_STACK = 1 << 20;
struct EmuStacks {
    char* base = nullptr;
    size_t count = 0;
    char* get(size_t n)
    {
        if (n > count) {
            if (base) munmap(base, count * EMU_STACK);
            void* p = mmap(nullptr, n * EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
            if (p == MAP_FAILED) { std::fprintf(stderr, "emu: cannot map %zu fiber stacks\n", n); std::abort(); }
            base = static_cast<char*>(p);
            count = n;
        }
        return base;
    }
};
inline EmuStacks emu_stacks;

template <typename F>
struct EmuEntry {
    static inline F* body = nullptr;
    static void run()
    {
        (*body)();
        (*emu_fibers)[emu_current].done = true;  // back to the scheduler through uc_link
        ++emu_progress;
    }
};

// One block of bx × by × bz fibers running ``body``, thread ids x fastest (warps are runs of 32
// consecutive linear ids, as on the device); ``smem`` is NaN-poisoned first (reads of unwritten
// shared memory show up).
template <typename F>
void emu_run_block(int bi, int bj, int bk, int bx, int by, int bz, unsigned char* smem, size_t smem_bytes, F& body)
{
    const int n = bx * by * bz;
    EmuBlock blk;
    blk.nthreads = n;
    blk.block_bar.expected = n;
    for (int w = 0; w * 32 < n; ++w) blk.warp_bar.push_back(EmuBarrier{std::min(32, n - w * 32), 0, 0});
    blk.slots.assign(n, 0.0);
    emu_block = &blk;
    std::memset(smem, 0xff, smem_bytes);
    std::vector<EmuFiber> fibers(n);
    char* stacks = emu_stacks.get(n);
    EmuEntry<F>::body = &body;
    for (int t = 0; t < n; ++t) {
        EmuFiber& f = fibers[t];
        f.tid = {t % bx, (t / bx) % by, t / (bx * by)};
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = stacks + (size_t)t * EMU_STACK;
        f.ctx.uc_stack.ss_size = EMU_STACK;
        f.ctx.uc_link = &emu_sched_ctx;
        makecontext(&f.ctx, &EmuEntry<F>::run, 0);
    }
    emu_fibers = &fibers;
    blockIdx = {bi, bj, bk};
    blockDim = {bx, by, bz};
    int live = n;
    bool ascending = true;
    while (live > 0) {
        int finished = 0;
        const unsigned long before = emu_progress;
        for (int k = 0; k < n; ++k) {
            const int t = ascending ? k : n - 1 - k;
            EmuFiber& f = fibers[t];
            if (f.done) continue;
            emu_current = t;
            emu_tid = t;
            threadIdx = f.tid;
            swapcontext(&emu_sched_ctx, &f.ctx);
            finished += f.done;
        }
        live -= finished;
        if (live > 0 && emu_progress == before) {
            std::fprintf(stderr, "emu: block (%d, %d, %d) deadlocked: %d threads wait at a barrier that the others "
                                 "never reach\n", bi, bj, bk, live);
            std::abort();
        }
        ascending = !ascending;
    }
    emu_fibers = nullptr;
    emu_block = nullptr;
}

template <typename F>
void emu_launch3(int gx, int gy, int gz, int bx, int by, int bz, unsigned char* smem, size_t smem_bytes, F body)
{
    gridDim = {gx, gy, gz};
    for (int bk = 0; bk < gz; ++bk)
        for (int bj = 0; bj < gy; ++bj)
            for (int bi = 0; bi < gx; ++bi) emu_run_block(bi, bj, bk, bx, by, bz, smem, smem_bytes, body);
}

template <typename F>
void emu_launch(int gx, int gy, int bx, int by, F body)
{
    emu_launch3(gx, gy, 1, bx, by, 1, tb_smem, sizeof(tb_smem), body);
}

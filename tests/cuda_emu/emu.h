// Host C++20 emulation of the few CUDA features temporal_blocking.cu and lbm_fused_pair use, for checking its
// indexing, barriers and shuffles on a machine without a GPU: one std::thread per CUDA thread,
// std::barrier for __syncthreads, a per-warp exchange slot + barrier for __shfl_{up,down}_sync.
// Blocks run one after another, so one static shared-memory array serves them all.
#pragma once
#include <algorithm>
#include <barrier>
#include <cstring>
#include <memory>
#include <thread>
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
inline thread_local dim3e threadIdx, blockIdx, blockDim, gridDim;
alignas(16) inline unsigned char tb_smem[400000];

inline int min(int a, int b) { return a < b ? a : b; }

struct EmuBlock {
    int nthreads = 0;
    std::unique_ptr<std::barrier<>> block_bar;
    std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
    std::vector<double> slots;  // one per thread
};
inline EmuBlock* emu_block = nullptr;
inline thread_local int emu_tid = 0;
inline thread_local int emu_tx_dim = 0;

inline void __syncthreads() { emu_block->block_bar->arrive_and_wait(); }

template <typename T>
inline T emu_shfl(T v, int src_lane_in_warp, bool ok)
{
    const int warp = emu_tid / 32, lane = emu_tid % 32;
    emu_block->slots[emu_tid] = (double)v;
    emu_block->warp_bar[warp]->arrive_and_wait();
    const T r = ok ? (T)emu_block->slots[warp * 32 + src_lane_in_warp] : v;
    emu_block->warp_bar[warp]->arrive_and_wait();
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

template <typename F>
void emu_launch(int gx, int gy, int bx, int by, F body)
{
    const int n = bx * by;
    for (int bj = 0; bj < gy; ++bj)
        for (int bi = 0; bi < gx; ++bi) {
            EmuBlock blk;
            blk.nthreads = n;
            blk.block_bar = std::make_unique<std::barrier<>>(n);
            for (int w = 0; w * 32 < n; ++w)
                blk.warp_bar.push_back(std::make_unique<std::barrier<>>(std::min(32, n - w * 32)));
            blk.slots.assign(n, 0.0);
            emu_block = &blk;
            std::memset(tb_smem, 0xff, sizeof(tb_smem));  // NaN-poison: reads of unwritten shared memory show up
            std::vector<std::thread> th;
            for (int ty = 0; ty < by; ++ty)
                for (int tx = 0; tx < bx; ++tx)
                    th.emplace_back([=] {
                        threadIdx = {tx, ty, 0};
                        blockIdx = {bi, bj, 0};
                        blockDim = {bx, by, 1};
                        gridDim = {gx, gy, 1};
                        emu_tid = ty * bx + tx;
                        body();
                    });
            for (auto& t : th) t.join();
        }
}

// Runs lbm_fused_vec<T, S, TRT, W>, or lbm_fused_packed<TRT, W> with -DEMU_PACKED=1, or
// lbm_fused_pipe<TRT, EMU_PIPE, EMU_PIPE_INDEX> with -DEMU_PIPE=stages (lbm2d.cu; chosen with -D) on the host emulator
// (one fiber per CUDA thread, real warp shuffles through emu.h), ping-pong as LBM2D._step_cuda,
// with the open-boundary pass after each step when asked. Usage:
//   fused_vec_emu nx ny nsteps bx by open in.bin mask.bin cls.bin seg.bin out.bin omega omega_minus fx fy uwx uwy u_in
// For the pipe kernel `by` is the rows each warp marches (its blocks are one row of bx threads).
// With -DEMU_ROWS=1 the ROWS instances run, each step launched over the decomposed overlap's row
// ranges in turn (edge rows, interior, ghost rows: engine/lbm2d/decomp_adapter.py), grids sized to each range.
#include "emu.h"
#include <cstdio>
#include <cstdlib>
#include "lbm2d.cu"
using S = EMU_S;
using T = EMU_T;
constexpr bool TRT = EMU_TRT;
constexpr int W = EMU_W;
#ifndef EMU_PACKED
#define EMU_PACKED 0
#endif
#ifndef EMU_PIPE
#define EMU_PIPE 0
#endif
#ifndef EMU_ROWS
#define EMU_ROWS 0
#endif
#ifndef EMU_PIPE_INDEX  // lbm_fused_pipe's offset type (the engine's choice for grids of < 2^32 / 9 nodes)
#define EMU_PIPE_INDEX unsigned
#endif

int main(int argc, char** argv)
{
    if (argc != 19) return 3;
    const int nx = atoi(argv[1]), ny = atoi(argv[2]), nsteps = atoi(argv[3]);
    const int bx = atoi(argv[4]), by = atoi(argv[5]), open = atoi(argv[6]);
    const T om = T(atof(argv[12])), omm = T(atof(argv[13])), fx = T(atof(argv[14])), fy = T(atof(argv[15]));
    const T uwx = T(atof(argv[16])), uwy = T(atof(argv[17])), uin = T(atof(argv[18]));
    const size_t nseg = (size_t)ny * ((nx + SEG - 1) / SEG);
    const size_t n = (size_t)9 * nx * ny, nodes = (size_t)nx * ny;
    std::vector<S> a(n), b(n);
    std::vector<unsigned char> mask(nodes), cls(nodes), seg((nseg + 3) / 4 * 4);  // whole words (engine.py)
    FILE* fp = fopen(argv[7], "rb"); if (fread(a.data(), sizeof(S), n, fp) != n) return 2; fclose(fp);
    fp = fopen(argv[8], "rb"); if (fread(mask.data(), 1, nodes, fp) != nodes) return 2; fclose(fp);
    fp = fopen(argv[9], "rb"); if (fread(cls.data(), 1, nodes, fp) != nodes) return 2; fclose(fp);
    fp = fopen(argv[10], "rb"); if (fread(seg.data(), 1, nseg, fp) != nseg) return 2; fclose(fp);
    const int gx = (nx + W * bx - 1) / (W * bx);
    [[maybe_unused]] const int rows = by;  // the pipe kernel's rows per warp
    constexpr bool ROWS = EMU_ROWS != 0;
    std::vector<std::pair<int, int>> ranges = {{0, ny}};
    if (ROWS) ranges = {{1, 2}, {ny - 2, ny - 1}, {2, ny - 2}, {0, 1}, {ny - 1, ny}};
    S* src = a.data();
    S* dst = b.data();
    for (int s = 0; s < nsteps; ++s) {
        for (auto [r0, r1] : ranges) {
            const int gy = (r1 - r0 + by - 1) / by;
#if EMU_PIPE
            emu_launch(gx, gy, bx, 1, [&] {
                lbm_fused_pipe<TRT, EMU_PIPE, EMU_PIPE_INDEX, ROWS>(src, dst, mask.data(), cls.data(), seg.data(), nx,
                                                                    ny, om, omm, fx, fy, uwx, uwy, rows, r0, r1);
            });
#else
            emu_launch(gx, gy, bx, by, [&] {
#if EMU_PACKED
                lbm_fused_packed<TRT, W, ROWS>(src, dst, mask.data(), cls.data(), seg.data(), nx, ny, om, omm, fx, fy,
                                               uwx, uwy, r0, r1);
#else
                lbm_fused_vec<T, S, TRT, W, ROWS>(src, dst, mask.data(), cls.data(), seg.data(), nx, ny, om, omm, fx,
                                                  fy, uwx, uwy, r0, r1);
#endif
            });
#endif
            if (open)
                emu_launch((r1 - r0 + 127) / 128, 1, 128, 1,
                           [&] { lbm_open_boundaries<T, S, ROWS>(dst, mask.data(), nx, ny, uin, r0, r1); });
        }
        std::swap(src, dst);
    }
    fp = fopen(argv[11], "wb"); fwrite(src, sizeof(S), n, fp); fclose(fp);
    return 0;
}

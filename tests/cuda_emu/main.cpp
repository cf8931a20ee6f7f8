// Runs lbm2d_tb<S, T, TS, TR, TX, TY, WS> (chosen with -D) on the host emulator, with the same launch
// sequence as engine/lbm2d/temporal_blocking.py: blocks of TS steps, a last shorter block,
// ping-pong so the result lands in the output. With -DEMU_WAVE it runs lbm2d_wave<S, T, TS, TX, RUN = TY>
// (wavefront.cu) instead: blocks of TX threads, one per strip of TX - 2 TS columns and TY rows. Usage: emu nx ny nsteps in.bin code.bin out.bin tau fx fy uwx uwy
// (code.bin: temporal_blocking.node_codes of the mask)
#include "emu.h"
#include <cstdio>
#include <cstdlib>
#include "kernel_src.cu"
using S = EMU_S;
using T = EMU_T;
constexpr int TS = EMU_TS, TR = EMU_TR, TX = EMU_TX, TY = EMU_TY;
constexpr bool WS = EMU_WS;

int main(int argc, char** argv)
{
    const int nx = atoi(argv[1]), ny = atoi(argv[2]), nsteps = atoi(argv[3]);
    const double tau = atof(argv[7]);
    const T omega = T(1.0 / tau);
    const T fx = T(atof(argv[8])), fy = T(atof(argv[9])), uwx = T(atof(argv[10])), uwy = T(atof(argv[11]));
    const size_t n = (size_t)9 * nx * ny;
    std::vector<S> a(n), b(n), c(n);
    std::vector<unsigned char> code((size_t)nx * ny);
    FILE* fp = fopen(argv[4], "rb"); if (fread(a.data(), sizeof(S), n, fp) != n) return 2; fclose(fp);
    fp = fopen(argv[5], "rb"); if (fread(code.data(), 1, code.size(), fp) != code.size()) return 2; fclose(fp);
    std::vector<int> blocks;
    for (int k = 0; k < nsteps / TS; ++k) blocks.push_back(TS);
    if (nsteps % TS) blocks.push_back(nsteps % TS);
    const S* src = a.data();
#ifdef EMU_WAVE
    const int gx = (nx + TX - 2 * TS - 1) / (TX - 2 * TS), gy = (ny + TY - 1) / TY;
#else
    const int gx = (nx + TX - 1) / TX, gy = (ny + TY - 1) / TY;
#endif
    for (size_t j = 0; j < blocks.size(); ++j) {
        S* dst = ((blocks.size() - 1 - j) % 2 == 0) ? b.data() : c.data();
        const int steps = blocks[j];
#ifdef EMU_WAVE
        (void)WS;
        emu_launch(gx, gy, TX, 1, [&] {
            lbm2d_wave<S, T, TS, TX, TY>(src, dst, code.data(), nx, ny, steps, omega, fx, fy, uwx, uwy);
        });
#else
        emu_launch(gx, gy, TX, TY, [&] {
            lbm2d_tb<S, T, TS, TR, TX, TY, WS>(src, dst, code.data(), nx, ny, steps, omega, fx, fy, uwx, uwy);
        });
#endif
        src = dst;
    }
    fp = fopen(argv[6], "wb"); fwrite(b.data(), sizeof(S), n, fp); fclose(fp);
    return 0;
}

// Single-step D2Q9 kernels: two-kernel (stream, then collide), fused (pull stream + collide),
// fused in-place AA streaming, and the open-boundary pass. One thread per node, x fastest.
#include "d2q9.cuh"

using namespace d2q9;

// ---- two-kernel baseline: g ← stream(f) on fluid nodes (others copied), then collide(g) ---------
template <typename T, typename S>
__global__ void lbm_stream(const S* __restrict__ f, S* __restrict__ g, const unsigned char* __restrict__ mask,
                           int nx, int ny, T uwx, T uwy) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;
    const idx_t n = idx_t(nx) * ny, here = idx_t(y) * nx + x;
    if (mask[here] != FLUID) {
#pragma unroll
        for (int i = 0; i < Q; ++i) g[i * n + here] = f[i * n + here];
        return;
    }
    T v[Q];
    pull<T, S>(f, mask, x, y, nx, ny, uwx, uwy, v);
#pragma unroll
    for (int i = 0; i < Q; ++i) Store<T, S>::store(g, i * n + here, i, v[i]);
}

template <typename T, typename S, bool TRT>
__global__ void lbm_collide(S* __restrict__ g, const unsigned char* __restrict__ mask, int nx, int ny,
                            T omega, T omega_minus, T fx, T fy) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;
    const idx_t n = idx_t(nx) * ny, here = idx_t(y) * nx + x;
    if (mask[here] != FLUID) return;
    T v[Q];
#pragma unroll
    for (int i = 0; i < Q; ++i) v[i] = Store<T, S>::load(g, i * n + here, i);
    collide<T, TRT>(v, omega, omega_minus, fx, fy);
#pragma unroll
    for (int i = 0; i < Q; ++i) Store<T, S>::store(g, i * n + here, i, v[i]);
}

// ---- fused: one read and one write of the 9 populations per node --------------------------------
template <typename T, typename S, bool TRT>
__global__ void lbm_fused(const S* __restrict__ f, S* __restrict__ g, const unsigned char* __restrict__ mask,
                          int nx, int ny, T omega, T omega_minus, T fx, T fy, T uwx, T uwy) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;
    const idx_t n = idx_t(nx) * ny, here = idx_t(y) * nx + x;
    if (mask[here] != FLUID) {
#pragma unroll
        for (int i = 0; i < Q; ++i) g[i * n + here] = f[i * n + here];
        return;
    }
    T v[Q];
    pull<T, S>(f, mask, x, y, nx, ny, uwx, uwy, v);
    collide<T, TRT>(v, omega, omega_minus, fx, fy);
#pragma unroll
    for (int i = 0; i < Q; ++i) Store<T, S>::store(g, i * n + here, i, v[i]);
}

// ---- fused, in-place AA streaming (Bailey et al. 2009): one lattice A ---------------------------
// Two layouts of the same canonical state f_i(x) (post-collision):
//   layout P: A[opp(i)][x]      = f_i(x)
//   layout Q: A[i][x + c_i]     = f_i(x)
// FROM_P advances a P state and leaves a Q state; !FROM_P advances Q and leaves P. Each thread reads
// exactly the slots it writes (bounce-back reads a solid neighbour's slot that no other thread
// touches), so the update is race-free in place. Non-fluid nodes are not touched; their canonical
// values never change and the host keeps them (engine/lbm2d/engine.py).
template <typename T, typename S, bool TRT, bool FROM_P>
__global__ void lbm_fused_aa(S* __restrict__ A, const unsigned char* __restrict__ mask, int nx, int ny,
                             T omega, T omega_minus, T fx, T fy, T uwx, T uwy) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;
    const idx_t n = idx_t(nx) * ny, here = idx_t(y) * nx + x;
    if (mask[here] != FLUID) return;
    T v[Q];
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const idx_t src = idx_t(wrap(y - cy(i), ny)) * nx + wrap(x - cx(i), nx);
        const unsigned char m = mask[src];
        if (m == SOLID || m == MOVING_WALL) {  // f_opp(i)(x), the node's own outgoing population
            const T b = FROM_P ? Store<T, S>::load(A, i * n + here, opp(i))
                               : Store<T, S>::load(A, opp(i) * n + src, opp(i));
            v[i] = m == MOVING_WALL ? b + wall_term<T>(i, uwx, uwy) : b;
        } else {  // f_i(x − c_i)
            v[i] = FROM_P ? Store<T, S>::load(A, opp(i) * n + src, i) : Store<T, S>::load(A, i * n + here, i);
        }
    }
    collide<T, TRT>(v, omega, omega_minus, fx, fy);
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        if (FROM_P) {
            const idx_t dst = idx_t(wrap(y + cy(i), ny)) * nx + wrap(x + cx(i), nx);
            Store<T, S>::store(A, i * n + dst, i, v[i]);
        } else {
            Store<T, S>::store(A, opp(i) * n + here, i, v[i]);
        }
    }
}

// ---- open boundaries (after a two-lattice step): Guo's non-equilibrium extrapolation ------------
template <typename T>
__device__ __forceinline__ void feq_all(T rho, T ux, T uy, T out[Q]) {
    const T usq = ux * ux + uy * uy;
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const T cu = T(cx(i)) * ux + T(cy(i)) * uy;
        out[i] = w<T>(i) * rho * (T(1) + T(3) * cu + T(4.5) * cu * cu - T(1.5) * usq);
    }
}

template <typename T, typename S>
__global__ void lbm_open_boundaries(S* __restrict__ f, const unsigned char* __restrict__ mask, int nx, int ny,
                                    T u_in) {
    const int y = blockIdx.x * blockDim.x + threadIdx.x;
    if (y >= ny) return;
    const idx_t n = idx_t(nx) * ny;
#pragma unroll 1
    for (int side = 0; side < 2; ++side) {
        const int x = side == 0 ? 0 : nx - 1, xn = side == 0 ? 1 : nx - 2;
        if (mask[idx_t(y) * nx + x] != (side == 0 ? INLET : OUTLET)) continue;
        const idx_t here = idx_t(y) * nx + x, nb = idx_t(y) * nx + xn;
        T g[Q];
#pragma unroll
        for (int i = 0; i < Q; ++i) g[i] = Store<T, S>::load(f, i * n + nb, i);
        const T rho = g[0] + g[1] + g[2] + g[3] + g[4] + g[5] + g[6] + g[7] + g[8];
        const T ux = (g[1] - g[3] + g[5] - g[6] - g[7] + g[8]) / rho;
        const T uy = (g[2] - g[4] + g[5] + g[6] - g[7] - g[8]) / rho;
        T en[Q], eb[Q];
        feq_all<T>(rho, ux, uy, en);
        if (side == 0) feq_all<T>(rho, u_in, T(0), eb);
        else feq_all<T>(T(1), ux, uy, eb);
#pragma unroll
        for (int i = 0; i < Q; ++i) Store<T, S>::store(f, i * n + here, i, eb[i] + (g[i] - en[i]));
    }
}

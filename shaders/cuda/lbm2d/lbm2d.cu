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

// ---- node classes for the fused kernels -------------------------------------------------------
// cls[node] (engine/lbm2d/engine.py node_classes): FAST = fluid whose eight upstream neighbours are
// all non-bounce nodes, EDGE = fluid with at least one solid / moving-wall upstream neighbour,
// FIXED = any non-fluid node. It replaces the mask read of the naive kernel (same one byte per
// node), and lets every thread issue its nine population loads *before* it knows its class:
// the loads of a FAST node no longer wait for nine mask bytes, so a warp keeps 9 independent
// loads in flight instead of a chain of mask→population round trips. EDGE nodes patch the bounced
// directions afterwards; FIXED nodes are rare and take the slow copy.
enum NodeClass : unsigned char { FAST = 0, EDGE = 1, FIXED = 2 };

// The node indices x − c_i of a thread's node with periodic wrap (every index is in range, so the
// speculative loads are always legal).
struct Upstream {
    idx_t row[3];  // rows (y − cy) · nx for cy = −1, 0, +1
    int col[3];    // columns x − cx for cx = −1, 0, +1
    __device__ __forceinline__ Upstream(int x, int y, int nx, int ny) {
        const int ym = y == 0 ? ny - 1 : y - 1, yp = y == ny - 1 ? 0 : y + 1;
        row[0] = idx_t(yp) * nx;  // cy = −1 pulls from y + 1
        row[1] = idx_t(y) * nx;
        row[2] = idx_t(ym) * nx;
        col[0] = x == nx - 1 ? 0 : x + 1;  // cx = −1 pulls from x + 1
        col[1] = x;
        col[2] = x == 0 ? nx - 1 : x - 1;
    }
    __device__ __forceinline__ idx_t src(int i) const { return row[cy(i) + 1] + col[cx(i) + 1]; }
};

// Bounce-back patch of an EDGE node: directions whose upstream node is solid or a moving wall take
// the node's own outgoing population f_opp(i)(x) (+ the moving-wall term), exactly as pull() does.
template <typename T, typename S>
__device__ __forceinline__ void bounce_patch(const S* __restrict__ f, const unsigned char* __restrict__ mask,
                                             const Upstream& up, idx_t n, idx_t here, T uwx, T uwy, T g[Q]) {
#pragma unroll
    for (int i = 1; i < Q; ++i) {
        const unsigned char m = mask[up.src(i)];
        if (m == SOLID || m == MOVING_WALL) {
            const T b = Store<T, S>::load(f, opp(i) * n + here, opp(i));
            g[i] = m == MOVING_WALL ? b + wall_term<T>(i, uwx, uwy) : b;
        }
    }
}

// ---- fused: one read and one write of the 9 populations per node --------------------------------
// NPT nodes per thread, blockDim.x apart along x (coalescing kept): NPT × 9 loads in flight.
template <typename T, typename S, bool TRT, int NPT>
__global__ void lbm_fused(const S* __restrict__ f, S* __restrict__ g, const unsigned char* __restrict__ mask,
                          const unsigned char* __restrict__ cls, int nx, int ny, T omega, T omega_minus, T fx,
                          T fy, T uwx, T uwy) {
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int x0 = blockIdx.x * blockDim.x * NPT + threadIdx.x;
    if (y >= ny) return;
    const idx_t n = idx_t(nx) * ny;
    T v[NPT][Q];
    unsigned char c[NPT];
#pragma unroll
    for (int k = 0; k < NPT; ++k) {  // every load of every node first
        const int x = x0 + k * blockDim.x;
        if (x >= nx) break;
        const Upstream up(x, y, nx, ny);
        c[k] = cls[up.row[1] + x];
#pragma unroll
        for (int i = 0; i < Q; ++i) v[k][i] = Store<T, S>::load(f, i * n + up.src(i), i);
    }
#pragma unroll
    for (int k = 0; k < NPT; ++k) {
        const int x = x0 + k * blockDim.x;
        if (x >= nx) break;
        const idx_t here = idx_t(y) * nx + x;
        if (c[k] == FIXED) {
#pragma unroll
            for (int i = 0; i < Q; ++i) g[i * n + here] = f[i * n + here];
            continue;
        }
        if (c[k] == EDGE) bounce_patch<T, S>(f, mask, Upstream(x, y, nx, ny), n, here, uwx, uwy, v[k]);
        collide<T, TRT>(v[k], omega, omega_minus, fx, fy);
#pragma unroll
        for (int i = 0; i < Q; ++i) Store<T, S>::store(g, i * n + here, i, v[k][i]);
    }
}

// ---- fused, two x-adjacent nodes per thread with vector loads and warp shuffles -----------------
// Lane l of a warp owns the pair (x0, x0 + 1), x0 = 2·(global thread x): a warp covers 64
// consecutive nodes of one row, and every global access is one aligned 2-element vector (float2,
// double2, or two fp16 in 32 bits). Directions with c_x = 0 pull their pair straight from the
// upstream row; c_x = ±1 pull a pair shifted by one node, which is the lane's own aligned pair
// plus one element of the neighbouring lane's pair (__shfl_up/down_sync, P1 §3.3's exchange
// applied to streaming) — only the warp's edge lane loads that element itself. Compared with one
// node per thread this halves the load/store instructions and removes the misaligned warp
// accesses (5 sectors for 4 sectors of data) that kept L2 busy. Needs nx even and blockDim.x a
// multiple of 32 (a warp never spans two rows); the engine falls back to lbm_fused otherwise.
template <typename S> struct alignas(2 * sizeof(S)) Pair { S a, b; };

template <typename T, typename S, bool TRT>
__global__ void lbm_fused_pair(const S* __restrict__ f, S* __restrict__ g, const unsigned char* __restrict__ mask,
                               const unsigned char* __restrict__ cls, int nx, int ny, T omega, T omega_minus,
                               T fx, T fy, T uwx, T uwy) {
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (y >= ny) return;  // uniform per warp (a warp is one row), so the shuffles below stay full
    const int lane = threadIdx.x & 31;
    const int x0 = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    const bool active = x0 < nx;
    const int xc = active ? x0 : nx - 2;  // idle lanes load a valid pair and store nothing
    const idx_t n = idx_t(nx) * ny;
    const Upstream up(xc, y, nx, ny);
    const idx_t here = up.row[1] + xc;
    const Pair<unsigned char> c = *reinterpret_cast<const Pair<unsigned char>*>(cls + here);
    const int xl = xc == 0 ? nx - 1 : xc - 1, xr = xc + 2 >= nx ? xc + 2 - nx : xc + 2;
    T v[2][Q];
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const S* fi = f + i * n + up.row[cy(i) + 1];
        const Pair<S> p = *reinterpret_cast<const Pair<S>*>(fi + xc);
        const T a = Store<T, S>::load(&p.a, 0, i), b = Store<T, S>::load(&p.b, 0, i);
        if (cx(i) == 0) {
            v[0][i] = a;
            v[1][i] = b;
        } else if (cx(i) == 1) {  // nodes pull columns x0 − 1 and x0
            const T left = __shfl_up_sync(0xffffffffu, b, 1);
            v[0][i] = lane == 0 ? Store<T, S>::load(fi, xl, i) : left;
            v[1][i] = a;
        } else {  // c_x = −1: nodes pull columns x0 + 1 and x0 + 2
            const T right = __shfl_down_sync(0xffffffffu, a, 1);
            v[0][i] = b;
            v[1][i] = (lane == 31 || xc + 2 >= nx) ? Store<T, S>::load(fi, xr, i) : right;
        }
    }
    if (!active) return;  // after the last shuffle
    S out[2][Q];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const unsigned char ck = k == 0 ? c.a : c.b;
        if (ck == FIXED) {  // copy the raw storage (fp16 bits must not go through the w_i shift)
#pragma unroll
            for (int i = 0; i < Q; ++i) out[k][i] = f[i * n + here + k];
            continue;
        }
        if (ck == EDGE) bounce_patch<T, S>(f, mask, Upstream(xc + k, y, nx, ny), n, here + k, uwx, uwy, v[k]);
        collide<T, TRT>(v[k], omega, omega_minus, fx, fy);
#pragma unroll
        for (int i = 0; i < Q; ++i) Store<T, S>::store(&out[k][i], 0, i, v[k][i]);
    }
#pragma unroll
    for (int i = 0; i < Q; ++i) *reinterpret_cast<Pair<S>*>(g + i * n + here) = Pair<S>{out[0][i], out[1][i]};
}

// ---- fused, in-place AA streaming (Bailey et al. 2009): one lattice A ---------------------------
// Two layouts of the same canonical state f_i(x) (post-collision):
//   layout P: A[opp(i)][x]      = f_i(x)
//   layout Q: A[i][x + c_i]     = f_i(x)
// FROM_P advances a P state and leaves a Q state; !FROM_P advances Q and leaves P. Each thread reads
// exactly the slots it writes (bounce-back reads a solid neighbour's slot that no other thread
// touches), so the update is race-free in place. The speculative FROM_P load of a bounced
// direction reads slot A[opp(i)][x − c_i], which only this thread writes (after its loads), so it
// is race-free too and its value is discarded. Non-fluid nodes are not touched; their canonical
// values never change and the host keeps them (engine/lbm2d/engine.py).
template <typename T, typename S, bool TRT, bool FROM_P>
__global__ void lbm_fused_aa(S* __restrict__ A, const unsigned char* __restrict__ mask,
                             const unsigned char* __restrict__ cls, int nx, int ny, T omega, T omega_minus, T fx,
                             T fy, T uwx, T uwy) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;
    const idx_t n = idx_t(nx) * ny;
    const Upstream up(x, y, nx, ny);
    const idx_t here = up.row[1] + x;
    const unsigned char c = cls[here];
    T v[Q];
#pragma unroll
    for (int i = 0; i < Q; ++i)  // f_i(x − c_i)
        v[i] = FROM_P ? Store<T, S>::load(A, opp(i) * n + up.src(i), i) : Store<T, S>::load(A, i * n + here, i);
    if (c == FIXED) return;
    if (c == EDGE) {
#pragma unroll
        for (int i = 1; i < Q; ++i) {
            const unsigned char m = mask[up.src(i)];
            if (m == SOLID || m == MOVING_WALL) {  // f_opp(i)(x), the node's own outgoing population
                const T b = FROM_P ? Store<T, S>::load(A, i * n + here, opp(i))
                                   : Store<T, S>::load(A, opp(i) * n + up.src(i), opp(i));
                v[i] = m == MOVING_WALL ? b + wall_term<T>(i, uwx, uwy) : b;
            }
        }
    }
    collide<T, TRT>(v, omega, omega_minus, fx, fy);
    // Downstream nodes x + c_i: row (y + cy), column (x + cx) — the upstream table mirrored.
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        if (FROM_P) {
            const idx_t dst = up.row[1 - cy(i)] + up.col[1 - cx(i)];
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

// Passive tracers on the GPU: one kernel per tracer update instead of ~80 array operations, the
// velocity field straight from the populations in one pass, or the update reading the populations
// itself. Same operations, in the same order, as engine/lbm2d/tracers.py (Tracers.advance /
// velocity / _sources) and LBM2D.macroscopic, so the array path and this path agree to round-off.
#include "d2q9.cuh"

using namespace d2q9;

// ρ and u = (Σ f_i c_i − F/2)/ρ at one node of a post-collision two-lattice state (f canonical, or
// fp16-shifted storage), u zero at solid and moving-wall nodes: LBM2D.macroscopic at one node. The
// moments pass and the lattice tracer update both call it, so they see the same bits.
template <typename T, typename S>
__device__ __forceinline__ void node_velocity(const S* __restrict__ f, const unsigned char* __restrict__ mask,
                                              idx_t n, idx_t here, T fx, T fy, T& ux, T& uy, T& rho) {
    T g[Q];
#pragma unroll
    for (int i = 0; i < Q; ++i) g[i] = load_f<T, S>(f, i * n + here, i);
    rho = g[0] + g[1] + g[2] + g[3] + g[4] + g[5] + g[6] + g[7] + g[8];
    const T jx = g[1] - g[3] + g[5] - g[6] - g[7] + g[8];
    const T jy = g[2] - g[4] + g[5] + g[6] - g[7] - g[8];
    const unsigned char m = mask[here];
    const bool solid = m == SOLID || m == MOVING_WALL;
    ux = solid ? T(0) : (jx + T(0.5) * -fx) / rho;
    uy = solid ? T(0) : (jy + T(0.5) * -fy) / rho;
}

// The moments of the whole lattice in one pass, without LBM2D.macroscopic's ~25 whole-lattice
// temporaries (the display path calls it for every published frame).
template <typename T, typename S>
__global__ void lbm_velocity(const S* __restrict__ f, const unsigned char* __restrict__ mask, int nx, int ny,
                             T fx, T fy, T* __restrict__ ux, T* __restrict__ uy, T* __restrict__ rho_out) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;
    const idx_t n = idx_t(nx) * ny, here = idx_t(y) * nx + x;
    T u, v, rho;
    node_velocity<T, S>(f, mask, n, here, fx, fy, u, v, rho);
    ux[here] = u;
    uy[here] = v;
    if (rho_out) rho_out[here] = rho;
}

// Products and differences that the compiler may not contract into FMAs: the vorticity kernel
// must give the bits of the array path (reference.vorticity: separate rounded operations).
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// The vorticity ω = ½(uy[x+1] − uy[x−1]) − ½(ux[y+1] − ux[y−1]) (periodic wrap, 0 on solid
// nodes) straight from the populations: one pass instead of the moments pass and ~10 whole-lattice
// array operations (four rolls, differences, products, a where), the app's default field, asked
// for at every published frame. Each node's neighbours' velocities are recomputed from their
// populations (the lattice rows stay in L1/L2), with node_velocity: the same bits as lbm_velocity.
template <typename T, typename S>
__global__ void lbm_vorticity(const S* __restrict__ f, const unsigned char* __restrict__ mask,
                              const bool* __restrict__ solid, int nx, int ny, T fx, T fy, T* __restrict__ out) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;
    const idx_t n = idx_t(nx) * ny, here = idx_t(y) * nx + x;
    if (solid[here]) {
        out[here] = T(0);
        return;
    }
    const int xe = x + 1 == nx ? 0 : x + 1, xw = x == 0 ? nx - 1 : x - 1;
    const int yn = y + 1 == ny ? 0 : y + 1, ys = y == 0 ? ny - 1 : y - 1;
    T u, v, rho, uy_e, uy_w, ux_n, ux_s;
    node_velocity<T, S>(f, mask, n, idx_t(y) * nx + xe, fx, fy, u, uy_e, rho);
    node_velocity<T, S>(f, mask, n, idx_t(y) * nx + xw, fx, fy, u, uy_w, rho);
    node_velocity<T, S>(f, mask, n, idx_t(yn) * nx + x, fx, fy, ux_n, v, rho);
    node_velocity<T, S>(f, mask, n, idx_t(ys) * nx + x, fx, fy, ux_s, v, rho);
    const T half = T(0.5);
    out[here] = mul_rn(half, uy_e - uy_w) - mul_rn(half, ux_n - ux_s);
}

// Node velocities from arrays (ux, uy) of the moments pass ...
template <typename U> struct ArrayNodes {
    const U* __restrict__ ux;
    const U* __restrict__ uy;
    __device__ __forceinline__ void get(idx_t here, U& u, U& v) const { u = ux[here]; v = uy[here]; }
};
// ... or straight from the populations: no whole-lattice pass per tracer update (each tracer reads
// its 4 nodes twice; the lattice stays in L2), so the update is one small kernel after the step,
// and the CUDA graph of a batch captures it with the steps.
template <typename T, typename S> struct LatticeNodes {
    const S* __restrict__ f;
    const unsigned char* __restrict__ mask;
    idx_t n;
    T fx, fy;
    __device__ __forceinline__ void get(idx_t here, T& u, T& v) const {
        T rho;
        node_velocity<T, S>(f, mask, n, here, fx, fy, u, v, rho);
    }
};

// Bilinear interpolation of the node velocities at (px, py), clamped to the box (Tracers.velocity).
template <typename U, typename Nodes>
__device__ __forceinline__ void tracer_velocity(const Nodes& nodes, int nx, int ny, float px, float py, float& vx,
                                                float& vy) {
    const float x = fminf(fmaxf(px, 0.0f), float(nx - 1)), y = fminf(fmaxf(py, 0.0f), float(ny - 1));
    // on the last node line the last cell, at t = 1 (its i0 + 1 must stay in the row)
    const int i0 = min(int(floorf(x)), nx - 2), j0 = min(int(floorf(y)), ny - 2), i1 = i0 + 1, j1 = j0 + 1;
    const U tx = U(x - float(i0)), ty = U(y - float(j0));
    const idx_t r0 = idx_t(j0) * nx, r1 = idx_t(j1) * nx;
    const U a = (U(1) - tx) * (U(1) - ty), b = tx * (U(1) - ty), c = (U(1) - tx) * ty, d = tx * ty;
    U u00, v00, u01, v01, u10, v10, u11, v11;
    nodes.get(r0 + i0, u00, v00);
    nodes.get(r0 + i1, u01, v01);
    nodes.get(r1 + i0, u10, v10);
    nodes.get(r1 + i1, u11, v11);
    vx = float(a * u00 + b * u01 + c * u10 + d * u11);
    vy = float(a * v00 + b * v01 + c * v10 + d * v11);
}

// Release position of release number k (Tracers._sources): golden-ratio sequence on a line, or a
// small jitter disc around one of npts points (pts: x0, y0, x1, y1, … as box fractions).
__device__ __forceinline__ void tracer_source(double k, int nx, int ny, int line, double lx0, double ly0, double lx1,
                                              double ly1, const double* __restrict__ pts, int npts, float& sx,
                                              float& sy) {
    const double golden = 0.6180339887498949;
    const double frac = fmod(k * golden, 1.0);
    if (line) {
        sx = float((lx0 + (lx1 - lx0) * frac) * (nx - 1));
        sy = float((ly0 + (ly1 - ly0) * frac) * (ny - 1));
    } else {
        const int idx = int(fmod(k, double(npts)));
        const double ang = 2 * 3.141592653589793 * fmod(k * golden * golden, 1.0);
        sx = float(pts[2 * idx] * (nx - 1) + 0.5 * frac * cos(ang));
        sy = float(pts[2 * idx + 1] * (ny - 1) + 0.5 * frac * sin(ang));
    }
}

// One tracer update of length dt (Tracers.advance): midpoint rule in the frozen field, recycle the
// tracers that left the box or sit in a solid node, and (re)release the ring slots
// [cursor, cursor + m) — all with release number released + j.
//
// The ring's (cursor, released) live in device memory, two slots used in turn: this update reads
// ring_in and thread 0 writes the next update's values to ring_out (the other slot). No scalar
// that changes from update to update is a kernel argument, so a CUDA graph that captured the
// update replays it correctly at any later update, and the host never reads the counters.
template <typename U, typename Nodes>
__device__ __forceinline__ void tracer_update(const Nodes& nodes, float* __restrict__ pos, float* __restrict__ age,
                                              const bool* __restrict__ solid, int n, int nx, int ny, float dt,
                                              const long long* __restrict__ ring_in, long long* __restrict__ ring_out,
                                              int m, int line, double lx0, double ly0, double lx1, double ly1,
                                              const double* __restrict__ pts, int npts) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int cursor = int(ring_in[0]);
    const double released = double(ring_in[1]);
    if (j == 0) {
        ring_out[0] = (ring_in[0] + m) % n;
        ring_out[1] = ring_in[1] + n;
    }
    if (j >= n) return;
    float px = pos[2 * j], py = pos[2 * j + 1], a = age[j];
    const bool active = a >= 0.0f;
    if (active) {
        float vx, vy;
        tracer_velocity<U>(nodes, nx, ny, px, py, vx, vy);
        const float mx = px + 0.5f * dt * vx, my = py + 0.5f * dt * vy;
        tracer_velocity<U>(nodes, nx, ny, mx, my, vx, vy);
        px = px + dt * vx;
        py = py + dt * vy;
        a = a + dt;
    }
    const bool out = px < 0.0f || px > float(nx - 1) || py < 0.0f || py > float(ny - 1);
    const int xi = min(max(int(rintf(px)), 0), nx - 1), yi = min(max(int(rintf(py)), 0), ny - 1);
    const bool dead = active && (out || solid[idx_t(yi) * nx + xi]);
    int ring = j - cursor;
    if (ring < 0) ring += n;
    if (dead || ring < m) {
        tracer_source(released + double(j), nx, ny, line, lx0, ly0, lx1, ly1, pts, npts, px, py);
        a = 0.0f;
    }
    pos[2 * j] = px;
    pos[2 * j + 1] = py;
    age[j] = a;
}

// The update in a velocity field (ux, uy) of the moments pass (any stepper).
template <typename U>
__global__ void tracer_advance(float* __restrict__ pos, float* __restrict__ age, const U* __restrict__ ux,
                               const U* __restrict__ uy, const bool* __restrict__ solid, int n, int nx, int ny,
                               float dt, const long long* __restrict__ ring_in, long long* __restrict__ ring_out,
                               int m, int line, double lx0, double ly0, double lx1, double ly1,
                               const double* __restrict__ pts, int npts) {
    const ArrayNodes<U> nodes{ux, uy};
    tracer_update<U>(nodes, pos, age, solid, n, nx, ny, dt, ring_in, ring_out, m, line, lx0, ly0, lx1, ly1, pts, npts);
}

// The update reading the velocity from the stored two-lattice state f itself (the single-step
// CUDA steppers: after every tracers.every-th step, inside the batch's CUDA graph).
template <typename T, typename S>
__global__ void tracer_advance_lattice(float* __restrict__ pos, float* __restrict__ age, const S* __restrict__ f,
                                       const unsigned char* __restrict__ mask, T fx, T fy,
                                       const bool* __restrict__ solid, int n, int nx, int ny, float dt,
                                       const long long* __restrict__ ring_in, long long* __restrict__ ring_out, int m,
                                       int line, double lx0, double ly0, double lx1, double ly1,
                                       const double* __restrict__ pts, int npts) {
    const LatticeNodes<T, S> nodes{f, mask, idx_t(nx) * ny, fx, fy};
    tracer_update<T>(nodes, pos, age, solid, n, nx, ny, dt, ring_in, ring_out, m, line, lx0, ly0, lx1, ly1, pts, npts);
}

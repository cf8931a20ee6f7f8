// Batched tridiagonal solvers for compact finite differences (P4): one matrix, many right-hand
// sides. Everything that depends only on the matrix is precomputed on the host in float64 and cast
// (engine/compact/tridiag.py: Factors; solvers/reduction.py: Schedule); the kernels only move right-hand sides.
//
// System s, element i lives at base[s * sys_stride + i * elem_stride]:
//   x-direction lines of a (ny, nx) array: sys_stride = nx, elem_stride = 1  (contiguous systems)
//   y-direction lines:                     sys_stride = 1,  elem_stride = nx (interleaved systems)
// d and x may be the same array (in place).
//
// Operation order matches the NumPy versions in tridiag.py term by term (compiled without FMA
// contraction, --fmad=false), so host and device agree to the last bit where no FMA is involved.

#ifndef NAGARE_COMPACT_TRIDIAG
#define NAGARE_COMPACT_TRIDIAG

typedef long long nagare_i64;

// The CPU emulation (tests/unit/test_compact_emulated.py) runs each CUDA thread as a std::thread:
// block-shared arrays are function statics there, and the dynamic shared memory a global array.
#ifdef NAGARE_EMU
#define NAGARE_BLOCK_SHARED static
#else
#define NAGARE_BLOCK_SHARED __shared__
#endif

// ---- Thomas: one thread per system ----------------------------------------------------------------
// fac = [l(n) | inv_d(n) | upper(n) | z(n) | w(n) | r | q]. Periodic (Sherman–Morrison): the forward
// sweep accumulates y_0 = Σ w_i g_i, so the correction s = q (y_0 + r y_{n-1}) is known before the
// back substitution, which writes x_i = y_i - s z_i directly (two sweeps, as the plain algorithm).
template <typename T, bool PERIODIC>
__global__ void compact_thomas(const T* d, T* x, const T* __restrict__ fac, int n, int nsys,
                               nagare_i64 sys_stride, nagare_i64 elem_stride)
{
    const int sys = blockIdx.x * blockDim.x + threadIdx.x;
    if (sys >= nsys) return;
    const T* __restrict__ l = fac;
    const T* __restrict__ inv_d = fac + n;
    const T* __restrict__ up = fac + 2 * n;
    const T* __restrict__ z = fac + 3 * n;
    const T* __restrict__ w = fac + 4 * n;
    const T r = fac[5 * n], q = fac[5 * n + 1];
    const T* din = d + (nagare_i64)sys * sys_stride;
    T* xo = x + (nagare_i64)sys * sys_stride;
    T g = din[0];
    xo[0] = g;
    T acc = w[0] * g;
    for (int i = 1; i < n; ++i) {
        g = din[(nagare_i64)i * elem_stride] - l[i] * g;
        xo[(nagare_i64)i * elem_stride] = g;
        if (PERIODIC) acc = acc + w[i] * g;
    }
    T y = g * inv_d[n - 1];
    T s = T(0);
    if (PERIODIC) {
        s = q * (acc + r * y);
        xo[(nagare_i64)(n - 1) * elem_stride] = y - s * z[n - 1];
    } else {
        xo[(nagare_i64)(n - 1) * elem_stride] = y;
    }
    for (int i = n - 2; i >= 0; --i) {
        const nagare_i64 at = (nagare_i64)i * elem_stride;
        y = (xo[at] - up[i] * y) * inv_d[i];
        xo[at] = PERIODIC ? y - s * z[i] : y;
    }
}

// ---- CR / PCR / CR-PCR hybrid: one block per system, the right-hand side in shared memory -----------
// sched = [k1c(lc*n) | k2c(lc*n) | ca(n) | cc(n) | cinvb(n) | k1p(p*n) | k2p(p*n) | pinvb(n)]
// per   = [z(n) | r | q] (periodic only). Shared memory: 2n values (PCR ping-pong).
// CR level lev (stride s = 2^lev) updates the equations i = (m+1)·2s - 1 (thread m: reduction-style
// indexing with shifts, as P4 improved it); PCR runs on the equations left, i = (j+1)·2^lc - 1;
// the back substitution solves, level by level, i = (2m+1)·s - 1.
template <typename T, bool PERIODIC>
__global__ void compact_reduce(const T* d, T* x, const T* __restrict__ sched, const T* __restrict__ per,
                               int n, int lc, int p, int nsys, nagare_i64 sys_stride, nagare_i64 elem_stride)
{
#ifndef NAGARE_EMU
    extern __shared__ __align__(16) unsigned char nagare_smem[];
#endif
    T* buf = reinterpret_cast<T*>(nagare_smem);
    T* buf2 = buf + n;
    const int sys = blockIdx.x;
    if (sys >= nsys) return;
    const int tid = threadIdx.x, nt = blockDim.x;
    const T* din = d + (nagare_i64)sys * sys_stride;
    T* xo = x + (nagare_i64)sys * sys_stride;
    for (int i = tid; i < n; i += nt) buf[i] = din[(nagare_i64)i * elem_stride];
    __syncthreads();
    const T* __restrict__ k1c = sched;
    const T* __restrict__ k2c = k1c + (nagare_i64)lc * n;
    const T* __restrict__ ca = k2c + (nagare_i64)lc * n;
    const T* __restrict__ cc = ca + n;
    const T* __restrict__ cinvb = cc + n;
    const T* __restrict__ k1p = cinvb + n;
    const T* __restrict__ k2p = k1p + (nagare_i64)p * n;
    const T* __restrict__ pinvb = k2p + (nagare_i64)p * n;
    // CR forward reduction
    for (int lev = 0; lev < lc; ++lev) {
        const int s = 1 << lev;
        const int cnt = n >> (lev + 1);
        for (int m = tid; m < cnt; m += nt) {
            const int i = ((m + 1) << (lev + 1)) - 1;
            const int ip = i + s;
            const T right = ip < n ? buf[ip] : T(0);
            buf[i] = buf[i] - (k1c[lev * n + i] * buf[i - s] + k2c[lev * n + i] * right);
        }
        __syncthreads();
    }
    // PCR on the reduced system
    const int m_left = n >> lc;
    T* cur = buf;
    T* nxt = buf2;
    for (int st = 0; st < p; ++st) {
        const int t = 1 << st;
        for (int j = tid; j < m_left; j += nt) {
            const int i = ((j + 1) << lc) - 1;
            const T left = j - t >= 0 ? cur[i - (t << lc)] : T(0);
            const T right = j + t < m_left ? cur[i + (t << lc)] : T(0);
            nxt[i] = cur[i] - (k1p[st * n + i] * left + k2p[st * n + i] * right);
        }
        __syncthreads();
        T* tmp = cur; cur = nxt; nxt = tmp;
    }
    for (int j = tid; j < m_left; j += nt) {
        const int i = ((j + 1) << lc) - 1;
        buf[i] = cur[i] * pinvb[i];
    }
    __syncthreads();
    // CR back substitution
    for (int lev = lc - 1; lev >= 0; --lev) {
        const int s = 1 << lev;
        const int cnt = ((n >> lev) + 1) >> 1;
        for (int m = tid; m < cnt; m += nt) {
            const int i = ((2 * m + 1) << lev) - 1;
            const T left = i - s >= 0 ? buf[i - s] : T(0);
            const T right = i + s < n ? buf[i + s] : T(0);
            buf[i] = (buf[i] - (ca[i] * left + cc[i] * right)) * cinvb[i];
        }
        __syncthreads();
    }
    if (PERIODIC) {
        const T s = per[n + 1] * (buf[0] + per[n] * buf[n - 1]);
        for (int i = tid; i < n; i += nt) xo[(nagare_i64)i * elem_stride] = buf[i] - s * per[i];
    } else {
        for (int i = tid; i < n; i += nt) xo[(nagare_i64)i * elem_stride] = buf[i];
    }
}

// ---- Sherman–Morrison correction after a solver of A' (cuSPARSE gtsv2), contiguous systems ---------
template <typename T>
__global__ void compact_periodic_fix(T* x, const T* __restrict__ per, int n, int nsys, nagare_i64 sys_stride)
{
    const nagare_i64 k = (nagare_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (nagare_i64)n * nsys) return;
    const int sys = (int)(k / n), i = (int)(k % n);
    if (i == 0 || i == n - 1) return;  // every thread reads y_0 and y_{n-1}: corrected by the next pass
    T* xs = x + (nagare_i64)sys * sys_stride;
    const T s = per[n + 1] * (xs[0] + per[n] * xs[n - 1]);
    xs[i] = xs[i] - s * per[i];
}

template <typename T>
__global__ void compact_periodic_fix_ends(T* x, const T* __restrict__ per, int n, int nsys, nagare_i64 sys_stride)
{
    const int sys = blockIdx.x * blockDim.x + threadIdx.x;
    if (sys >= nsys) return;
    T* xs = x + (nagare_i64)sys * sys_stride;
    const T y0 = xs[0], yn = xs[n - 1];
    const T s = per[n + 1] * (y0 + per[n] * yn);
    xs[0] = y0 - s * per[0];
    xs[n - 1] = yn - s * per[n - 1];
}

// ---- tiled transpose (ny, nx) -> (nx, ny) ------------------------------------------------------------
#define NAGARE_TT 32
template <typename T>
__global__ void compact_transpose(const T* __restrict__ a, T* __restrict__ b, int ny, int nx)
{
    NAGARE_BLOCK_SHARED T tile[NAGARE_TT][NAGARE_TT + 1];
    const int x0 = blockIdx.x * NAGARE_TT, y0 = blockIdx.y * NAGARE_TT;
    for (int j = threadIdx.y; j < NAGARE_TT; j += blockDim.y) {
        const int y = y0 + j, x = x0 + threadIdx.x;
        if (y < ny && x < nx) tile[j][threadIdx.x] = a[(nagare_i64)y * nx + x];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < NAGARE_TT; j += blockDim.y) {
        const int x = x0 + j, y = y0 + threadIdx.x;
        if (y < ny && x < nx) b[(nagare_i64)x * ny + y] = tile[threadIdx.x][j];
    }
}

#endif

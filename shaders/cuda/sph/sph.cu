// SPH on the GPU (P3): cell-linked list build (keys, sort by CuPy, cell starts), the interaction
// over cells or Verlet lists, and the Verlet list build in P3's four phases with the
// warp-interleaved layout. One thread per particle, particles processed in cell-sorted order.
// Canonical arrays (pos/vel (n, DIM) row-major, rho, kind) are in the engine's particle order;
// the layout buffers (p, pz, v) and kind_s are in sorted order; results are scattered back to
// canonical order through `order`, so the engine never sees the sort.
#include "sph.cuh"

// ---- cell-linked list ------------------------------------------------------------------------
// Cell of each particle, clamped into the grid (clamping keeps the search exact, see neighbours.py).
template <typename T, int DIM>
__global__ void sph_cell_keys(const int n, const T* __restrict__ pos, const T lox, const T loy, const T loz,
                              const T cell, const int ncx, const int ncy, const int ncz, int* __restrict__ key)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int cx = min(max((int)floor((pos[DIM * i] - lox) / cell), 0), ncx - 1);
    const int cy = min(max((int)floor((pos[DIM * i + 1] - loy) / cell), 0), ncy - 1);
    const int cz = DIM == 3 ? min(max((int)floor((pos[DIM * i + 2] - loz) / cell), 0), ncz - 1) : 0;
    key[i] = cx + ncx * (cy + ncy * cz);
}

// start[c] = first sorted index whose key is >= c, for c in [0, ncells]; so the particles of cells
// c0..c1 (one row of the stencil: consecutive keys) are the contiguous range [start[c0], start[c1+1]).
__global__ void sph_cell_starts(const int n, const int ncells, const int* __restrict__ skey, int* __restrict__ start)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > n) return;
    const int lo = i == 0 ? 0 : skey[i - 1] + 1;
    const int hi = i == n ? ncells : skey[i];
    for (int c = lo; c <= hi; ++c) start[c] = i;
}

// Sorted layout buffers from the canonical state; the pressure is computed once per particle here.
template <typename T, int DIM, int LAYOUT>
__global__ void sph_gather(const int n, const int* __restrict__ order, const T* __restrict__ pos,
                           const T* __restrict__ vel, const T* __restrict__ rho, const signed char* __restrict__ kind,
                           const T B, const T rho0, const T gamma, T* __restrict__ p, T* __restrict__ pz,
                           T* __restrict__ v, signed char* __restrict__ kind_s)
{
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n) return;
    const int i = order[s];
    const T x = pos[DIM * i], y = pos[DIM * i + 1], z = DIM == 3 ? pos[DIM * i + 2] : T(0);
    const T vx = vel[DIM * i], vy = vel[DIM * i + 1], vz = DIM == 3 ? vel[DIM * i + 2] : T(0);
    const T r = rho[i];
    const T press = B * (pow(r / rho0, gamma) - T(1));
    kind_s[s] = kind[i];
    if (LAYOUT == SPH_AOS) {
        T* q = p + 8 * s;
        q[0] = x; q[1] = y; q[2] = z; q[3] = vx; q[4] = vy; q[5] = vz; q[6] = r; q[7] = press;
        return;
    }
    if (LAYOUT == SPH_PACKED) {
        if constexpr (sizeof(T) == 4) {
            reinterpret_cast<float4*>(p)[s] = make_float4(x, y, z, 0.0f);
        } else {
            reinterpret_cast<double2*>(p)[s] = make_double2(x, y);
            pz[s] = z;
        }
    } else {
        p[s] = x; p[n + s] = y; p[2 * n + s] = z;
    }
    v[s] = vx; v[n + s] = vy; v[2 * n + s] = vz; v[3 * n + s] = r; v[4 * n + s] = press;
}

template <typename T, int DIM, int LAYOUT>
__device__ __forceinline__ Self<T> load_self(const T* p, const T* pz, const T* v, const signed char* kind_s,
                                             const int n, const int i, const SphParams<T>& s)
{
    Self<T> a;
    load_pos<T, LAYOUT, DIM>(p, pz, n, i, a.x, a.y, a.z);
    load_vel<T, LAYOUT, DIM>(p, v, n, i, a.vx, a.vy, a.vz, a.rho, a.press);
    a.cs = s.c0 * pow(a.rho / s.rho0, s.csexp);
    a.fluid = kind_s[i] == 0;
    return a;
}

template <typename T, int DIM>
__device__ __forceinline__ void store(const int i, const int* __restrict__ order, const Accum<T>& acc,
                                      const bool fluid, const T gravity, T* __restrict__ ace,
                                      T* __restrict__ arho, T* __restrict__ mu)
{
    const int o = order[i];
    ace[DIM * o] = acc.ax;
    if (DIM == 3) {
        ace[DIM * o + 1] = acc.ay;
        ace[DIM * o + 2] = acc.az - (fluid ? gravity : T(0));
    } else {
        ace[DIM * o + 1] = acc.ay - (fluid ? gravity : T(0));
    }
    arho[o] = acc.drho;
    mu[i] = acc.mumax;
}

// Visit every j in the (2*REACH+1)^DIM cells around i's cell: f(j).
template <int DIM, int REACH, typename F>
__device__ __forceinline__ void for_candidates(const int key, const int ncx, const int ncy, const int ncz,
                                               const int* __restrict__ start, F&& f)
{
    const int cx = key % ncx, cy = (key / ncx) % ncy, cz = DIM == 3 ? key / (ncx * ncy) : 0;
    const int x0 = max(cx - REACH, 0), x1 = min(cx + REACH, ncx - 1);
    const int z0 = DIM == 3 ? max(cz - REACH, 0) : 0, z1 = DIM == 3 ? min(cz + REACH, ncz - 1) : 0;
    for (int z = z0; z <= z1; ++z) {
        for (int y = max(cy - REACH, 0); y <= min(cy + REACH, ncy - 1); ++y) {
            const int row = ncx * (y + ncy * z);
            const int j1 = start[row + x1 + 1];
            for (int j = start[row + x0]; j < j1; ++j) f(j);
        }
    }
}

// ---- interaction over cells (cell-full: REACH 1, cell-half: REACH 2) -------------------------
template <typename T, int DIM, int LAYOUT, int KERNEL, int REACH>
__global__ void sph_interact_cells(const int n, const T* __restrict__ p, const T* __restrict__ pz,
                                   const T* __restrict__ v, const signed char* __restrict__ kind_s,
                                   const int* __restrict__ skey, const int* __restrict__ start,
                                   const int ncx, const int ncy, const int ncz, const int* __restrict__ order,
                                   const T* __restrict__ prm, T* __restrict__ ace, T* __restrict__ arho,
                                   T* __restrict__ mu)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const SphParams<T> s = load_params(prm);
    const Self<T> a = load_self<T, DIM, LAYOUT>(p, pz, v, kind_s, n, i, s);
    Accum<T> acc{T(0), T(0), T(0), T(0), T(0)};
    for_candidates<DIM, REACH>(skey[i], ncx, ncy, ncz, start, [&](const int j) {
        if (j == i) return;
        const bool fluidj = kind_s[j] == 0;
        if (!a.fluid && !fluidj) return;
        T xj, yj, zj;
        load_pos<T, LAYOUT, DIM>(p, pz, n, j, xj, yj, zj);
        const T dx = a.x - xj, dy = a.y - yj, dz = a.z - zj;
        const T r2 = dx * dx + dy * dy + (DIM == 3 ? dz * dz : T(0));
        if (r2 >= s.rc2) return;
        T vxj, vyj, vzj, rhoj, pressj;
        load_vel<T, LAYOUT, DIM>(p, v, n, j, vxj, vyj, vzj, rhoj, pressj);
        pair<T, KERNEL, DIM>(a, dx, dy, dz, r2, vxj, vyj, vzj, rhoj, pressj, fluidj, s, acc);
    });
    store<T, DIM>(i, order, acc, a.fluid, s.gravity, ace, arho, mu);
}

// ---- Verlet lists (P3 §3) --------------------------------------------------------------------
// Phases 1+2: count each list (pairs within R_c that can interact; boundary-boundary pairs never
// do, so they are left out) and the warp's longest list by warp shuffle.
template <typename T, int DIM, int LAYOUT, int REACH>
__global__ void sph_verlet_count(const int n, const T* __restrict__ p, const T* __restrict__ pz,
                                 const signed char* __restrict__ kind_s, const int* __restrict__ skey,
                                 const int* __restrict__ start, const int ncx, const int ncy, const int ncz,
                                 const T R2, int* __restrict__ counts, int* __restrict__ warp_max)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    int c = 0;
    if (i < n) {
        T x, y, z;
        load_pos<T, LAYOUT, DIM>(p, pz, n, i, x, y, z);
        const bool fluid = kind_s[i] == 0;
        for_candidates<DIM, REACH>(skey[i], ncx, ncy, ncz, start, [&](const int j) {
            if (j == i || (!fluid && kind_s[j] != 0)) return;
            T xj, yj, zj;
            load_pos<T, LAYOUT, DIM>(p, pz, n, j, xj, yj, zj);
            const T dx = x - xj, dy = y - yj, dz = z - zj;
            if (dx * dx + dy * dy + (DIM == 3 ? dz * dz : T(0)) < R2) ++c;
        });
        counts[i] = c;
    }
    int m = c;
    for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31) == 0 && i < n) warp_max[i >> 5] = m;  // lane 0 has the warp's lowest i
}

// Phase 4: fill. WARP_INTERLEAVED: element k of lane l's list at base[warp] + 32k + l, so the 32
// threads of a warp read their k-th neighbours in one coalesced access; else at base[i] + k.
template <typename T, int DIM, int LAYOUT, int REACH, bool WARP_INTERLEAVED>
__global__ void sph_verlet_fill(const int n, const T* __restrict__ p, const T* __restrict__ pz,
                                const signed char* __restrict__ kind_s, const int* __restrict__ skey,
                                const int* __restrict__ start, const int ncx, const int ncy, const int ncz,
                                const T R2, const long long* __restrict__ base, int* __restrict__ list)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T x, y, z;
    load_pos<T, LAYOUT, DIM>(p, pz, n, i, x, y, z);
    const bool fluid = kind_s[i] == 0;
    const long long b = WARP_INTERLEAVED ? base[i >> 5] + (i & 31) : base[i];
    const int stride = WARP_INTERLEAVED ? 32 : 1;
    long long k = 0;
    for_candidates<DIM, REACH>(skey[i], ncx, ncy, ncz, start, [&](const int j) {
        if (j == i || (!fluid && kind_s[j] != 0)) return;
        T xj, yj, zj;
        load_pos<T, LAYOUT, DIM>(p, pz, n, j, xj, yj, zj);
        const T dx = x - xj, dy = y - yj, dz = z - zj;
        if (dx * dx + dy * dy + (DIM == 3 ? dz * dz : T(0)) < R2) list[b + stride * (k++)] = j;
    });
}

template <typename T, int DIM, int LAYOUT, int KERNEL, bool WARP_INTERLEAVED>
__global__ void sph_interact_verlet(const int n, const T* __restrict__ p, const T* __restrict__ pz,
                                    const T* __restrict__ v, const signed char* __restrict__ kind_s,
                                    const int* __restrict__ counts, const long long* __restrict__ base,
                                    const int* __restrict__ list, const int* __restrict__ order,
                                    const T* __restrict__ prm, T* __restrict__ ace, T* __restrict__ arho,
                                    T* __restrict__ mu)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const SphParams<T> s = load_params(prm);
    const Self<T> a = load_self<T, DIM, LAYOUT>(p, pz, v, kind_s, n, i, s);
    Accum<T> acc{T(0), T(0), T(0), T(0), T(0)};
    const long long b = WARP_INTERLEAVED ? base[i >> 5] + (i & 31) : base[i];
    const int stride = WARP_INTERLEAVED ? 32 : 1;
    const int cnt = counts[i];
    for (int k = 0; k < cnt; ++k) {
        const int j = list[b + (long long)stride * k];
        T xj, yj, zj;
        load_pos<T, LAYOUT, DIM>(p, pz, n, j, xj, yj, zj);
        const T dx = a.x - xj, dy = a.y - yj, dz = a.z - zj;
        const T r2 = dx * dx + dy * dy + (DIM == 3 ? dz * dz : T(0));
        if (r2 >= s.rc2) continue;
        T vxj, vyj, vzj, rhoj, pressj;
        load_vel<T, LAYOUT, DIM>(p, v, n, j, vxj, vyj, vzj, rhoj, pressj);
        pair<T, KERNEL, DIM>(a, dx, dy, dz, r2, vxj, vyj, vzj, rhoj, pressj, kind_s[j] == 0, s, acc);
    }
    store<T, DIM>(i, order, acc, a.fluid, s.gravity, ace, arho, mu);
}

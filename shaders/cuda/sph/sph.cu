// SPH on the GPU (P3): cell-linked list build (keys, sort by CuPy, cell starts), the interaction
// over cells or Verlet lists, and the Verlet list build in P3's four phases with the
// warp-interleaved layout. One thread per particle, particles processed in cell-sorted order.
// Canonical arrays (pos/vel (n, DIM) row-major, rho, kind) are in the engine's particle order;
// the layout buffers (p, pz, v) and kind_s are in sorted order; results are scattered back to
// canonical order through `order`, so the engine never sees the sort.
//
// No host synchronisation inside a step: the interaction kernels fold max|a|, max c and max|mu| into
// per-block maxima (one atomicMax per block and value), the integration kernels compute the CFL
// time step from them on the device, and the Verlet lists carry a device-side validity test (the
// largest travelled distance since the build, kept by the integration kernels) with an exact
// fallback search, so the host may decide rebuilds late without ever missing a pair.
#include "sph.cuh"

#define SPH_BLOCK 128  // engine/sph/gpu.py BLOCK: whole warps (warp-interleaved lists), block reductions

template <typename T> struct SphBits;
template <> struct SphBits<float> {
    typedef unsigned int U;
    static __device__ __forceinline__ U of(const float x) { return __float_as_uint(x); }
};
template <> struct SphBits<double> {
    typedef unsigned long long U;
    static __device__ __forceinline__ U of(const double x) { return (unsigned long long)__double_as_longlong(x); }
};

// dst[k] = max(dst[k], max over the block of v[k]) for non-negative values (their IEEE bit patterns
// order like the values, so an unsigned atomicMax is a float max): warp shuffles, shared memory,
// then one atomic per block and value. Every thread of the block must call it.
template <typename T, int NV>
__device__ __forceinline__ void block_max(T (&v)[NV], T* __restrict__ dst)
{
    __shared__ T part[NV][SPH_BLOCK / 32];
#pragma unroll
    for (int k = 0; k < NV; ++k)
        for (int off = 16; off > 0; off >>= 1) v[k] = fmax(v[k], __shfl_xor_sync(0xffffffffu, v[k], off));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < NV; ++k) part[k][warp] = v[k];
    }
    __syncthreads();
    if (threadIdx.x < NV) {
        T m = part[threadIdx.x][0];
        for (int w = 1; w < SPH_BLOCK / 32; ++w) m = fmax(m, part[threadIdx.x][w]);
        atomicMax(reinterpret_cast<typename SphBits<T>::U*>(dst) + threadIdx.x, SphBits<T>::of(m));
    }
}

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

// Sorted layout buffers from the canonical state; the pressure and the sound speed are computed
// once per particle here (the pair loop reads c_j instead of a pow per pair).
template <typename T, int DIM, int LAYOUT>
__global__ void __launch_bounds__(SPH_BLOCK) sph_gather(
    const int n, const int* __restrict__ order, const T* __restrict__ pos, const T* __restrict__ vel,
    const T* __restrict__ rho, const signed char* __restrict__ kind, const T B, const T rho0, const T gamma,
    const T c0, const T csexp, const int mark_walls, T* __restrict__ p, T* __restrict__ pz, T* __restrict__ v,
    T* __restrict__ cs, signed char* __restrict__ kind_s)
{
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n) return;
    const int i = order[s];
    const T x = pos[DIM * i], y = pos[DIM * i + 1], z = DIM == 3 ? pos[DIM * i + 2] : T(0);
    const T vx = vel[DIM * i], vy = vel[DIM * i + 1], vz = DIM == 3 ? vel[DIM * i + 2] : T(0);
    const T rho_i = rho[i];
    const T press = B * (pow(rho_i / rho0, gamma) - T(1));
    const signed char k = kind[i];
    kind_s[s] = k;
    cs[s] = c0 * pow(rho_i / rho0, csexp);
    // mark_walls (the fast pair): walls store −ρ, so the pair loop reads j's kind from its density
    const T r = mark_walls && k != 0 ? -rho_i : rho_i;
    if (LAYOUT == SPH_AOS) {
        T* q = p + 8 * s;
        q[0] = x; q[1] = y; q[2] = z; q[3] = vx; q[4] = vy; q[5] = vz; q[6] = r; q[7] = press;
        return;
    }
    if (LAYOUT == SPH_PACKED) {
        if constexpr (sizeof(T) == 4) {
            reinterpret_cast<float4*>(p)[s] = make_float4(x, y, z, press);
            reinterpret_cast<float4*>(v)[s] = make_float4(vx, vy, vz, r);
            return;
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
__device__ __forceinline__ Self<T> load_self(const T* p, const T* pz, const T* v, const T* cs,
                                             const signed char* kind_s, const int n, const int i)
{
    Self<T> a;
    load_pos<T, LAYOUT, DIM>(p, pz, n, i, a.x, a.y, a.z);
    load_vel<T, LAYOUT, DIM>(p, v, n, i, a.vx, a.vy, a.vz, a.rho, a.press);
    a.cs = cs[i];
    a.fluid = kind_s[i] == 0;
    return a;
}

// Results to canonical order; rv = the values the CFL step needs: |a|^2 (fluid, gravity included,
// as reference.cfl_dt), c_i, max |mu| over i's pairs.
template <typename T, int DIM>
__device__ __forceinline__ void store(const int i, const int* __restrict__ order, const Accum<T>& acc,
                                      const Self<T>& a, const T gravity, T* __restrict__ ace,
                                      T* __restrict__ arho, T (&rv)[3])
{
    const int o = order[i];
    const T ax = acc.ax;
    const T ay = DIM == 3 ? acc.ay : acc.ay - (a.fluid ? gravity : T(0));
    const T az = DIM == 3 ? acc.az - (a.fluid ? gravity : T(0)) : T(0);
    ace[DIM * o] = ax;
    ace[DIM * o + 1] = ay;
    if (DIM == 3) ace[DIM * o + 2] = az;
    arho[o] = acc.drho;
    rv[0] = a.fluid ? (DIM == 3 ? ax * ax + ay * ay + az * az : ax * ax + ay * ay) : T(0);
    rv[1] = a.cs;
    rv[2] = acc.mumax;
}

// Visit every j in the (2*reach+1)^DIM cells around i's cell: f(j).
template <int DIM, typename F>
__device__ __forceinline__ void for_candidates_r(const int key, const int reach, const int ncx, const int ncy,
                                                 const int ncz, const int* __restrict__ start, F&& f)
{
    const int cx = key % ncx, cy = (key / ncx) % ncy, cz = DIM == 3 ? key / (ncx * ncy) : 0;
    const int x0 = max(cx - reach, 0), x1 = min(cx + reach, ncx - 1);
    const int z0 = DIM == 3 ? max(cz - reach, 0) : 0, z1 = DIM == 3 ? min(cz + reach, ncz - 1) : 0;
    for (int z = z0; z <= z1; ++z) {
        for (int y = max(cy - reach, 0); y <= min(cy + reach, ncy - 1); ++y) {
            const int row = ncx * (y + ncy * z);
            const int j1 = start[row + x1 + 1];
            for (int j = start[row + x0]; j < j1; ++j) f(j);
        }
    }
}

template <int DIM, int REACH, typename F>
__device__ __forceinline__ void for_candidates(const int key, const int ncx, const int ncy, const int ncz,
                                               const int* __restrict__ start, F&& f)
{
    for_candidates_r<DIM>(key, REACH, ncx, ncy, ncz, start, f);
}

// One candidate j of particle i (a cell search): the distance test, then the pair.
template <typename T, int DIM, int LAYOUT, int KERNEL>
__device__ __forceinline__ void candidate(const int i, const int j, const int n, const T* __restrict__ p,
                                          const T* __restrict__ pz, const T* __restrict__ v,
                                          const T* __restrict__ cs, const signed char* __restrict__ kind_s,
                                          const Self<T>& a, const SphParams<T>& s, Accum<T>& acc)
{
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
    pair<T, KERNEL, DIM>(a, dx, dy, dz, r2, vxj, vyj, vzj, rhoj, pressj, cs, j, fluidj, s, acc);
}

// ---- interaction over cells (cell-full: REACH 1, cell-half: REACH 2) -------------------------
template <typename T, int DIM, int LAYOUT, int KERNEL, int REACH>
__global__ void __launch_bounds__(SPH_BLOCK) sph_interact_cells(
    const int n, const T* __restrict__ p, const T* __restrict__ pz, const T* __restrict__ v,
    const T* __restrict__ cs, const signed char* __restrict__ kind_s, const int* __restrict__ skey,
    const int* __restrict__ start, const int ncx, const int ncy, const int ncz, const int* __restrict__ order,
    const T* __restrict__ prm, T* __restrict__ ace, T* __restrict__ arho, T* __restrict__ red)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    T rv[3] = {T(0), T(0), T(0)};
    if (i < n) {
        const SphParams<T> s = load_params(prm);
        const Self<T> a = load_self<T, DIM, LAYOUT>(p, pz, v, cs, kind_s, n, i);
        Accum<T> acc{T(0), T(0), T(0), T(0), T(0)};
        for_candidates<DIM, REACH>(skey[i], ncx, ncy, ncz, start, [&](const int j) {
            candidate<T, DIM, LAYOUT, KERNEL>(i, j, n, p, pz, v, cs, kind_s, a, s, acc);
        });
        store<T, DIM>(i, order, acc, a, s.gravity, ace, arho, rv);
    }
    block_max<T, 3>(rv, red);
}

// ---- Verlet lists (P3 §3) --------------------------------------------------------------------
// Visit every j in the (2*REACH+1)^DIM cells around i's cell with its position: f(j, xj, yj, zj).
// The build is latency-bound on these loads like the interaction on its gathers, so with B > 1 each
// row's positions (consecutive j) are loaded B at a time before f sees the first of them; the
// candidates reach f in the same order for every B, so the lists are the same.
template <typename T, int DIM, int LAYOUT, int REACH, int B, typename F>
__device__ __forceinline__ void for_candidates_pos(const int key, const int ncx, const int ncy, const int ncz,
                                                   const int* __restrict__ start, const T* __restrict__ p,
                                                   const T* __restrict__ pz, const int n, F&& f)
{
    const int cx = key % ncx, cy = (key / ncx) % ncy, cz = DIM == 3 ? key / (ncx * ncy) : 0;
    const int x0 = max(cx - REACH, 0), x1 = min(cx + REACH, ncx - 1);
    const int z0 = DIM == 3 ? max(cz - REACH, 0) : 0, z1 = DIM == 3 ? min(cz + REACH, ncz - 1) : 0;
    for (int z = z0; z <= z1; ++z) {
        for (int y = max(cy - REACH, 0); y <= min(cy + REACH, ncy - 1); ++y) {
            const int row = ncx * (y + ncy * z);
            const int j1 = start[row + x1 + 1];
            int j = start[row + x0];
            if (B > 1) {
                for (; j + B <= j1; j += B) {
                    T xs[B], ys[B], zs[B];
#pragma unroll
                    for (int u = 0; u < B; ++u) load_pos<T, LAYOUT, DIM>(p, pz, n, j + u, xs[u], ys[u], zs[u]);
#pragma unroll
                    for (int u = 0; u < B; ++u) f(j + u, xs[u], ys[u], zs[u]);
                }
            }
            for (; j < j1; ++j) {
                T xj, yj, zj;
                load_pos<T, LAYOUT, DIM>(p, pz, n, j, xj, yj, zj);
                f(j, xj, yj, zj);
            }
        }
    }
}

// Phases 1+2: count each list (pairs within R_c that can interact; boundary-boundary pairs never
// do, so they are left out) and the warp's longest list by warp shuffle. Squared distances first;
// a wall i reads j's kind only for candidates within R_c.
template <typename T, int DIM, int LAYOUT, int REACH, int B>
__global__ void __launch_bounds__(SPH_BLOCK) sph_verlet_count(
    const int n, const T* __restrict__ p, const T* __restrict__ pz, const signed char* __restrict__ kind_s,
    const int* __restrict__ skey, const int* __restrict__ start, const int ncx, const int ncy, const int ncz,
    const T R2, int* __restrict__ counts, int* __restrict__ warp_max)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    int c = 0;
    if (i < n) {
        T x, y, z;
        load_pos<T, LAYOUT, DIM>(p, pz, n, i, x, y, z);
        const bool fluid = kind_s[i] == 0;
        for_candidates_pos<T, DIM, LAYOUT, REACH, B>(skey[i], ncx, ncy, ncz, start, p, pz, n,
                                                     [&](const int j, const T xj, const T yj, const T zj) {
            const T dx = x - xj, dy = y - yj, dz = z - zj;
            if (dx * dx + dy * dy + (DIM == 3 ? dz * dz : T(0)) < R2 && j != i && (fluid || kind_s[j] == 0)) ++c;
        });
        counts[i] = c;
    }
    int m = c;
    for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31) == 0 && i < n) warp_max[i >> 5] = m;  // lane 0 has the warp's lowest i
}

// Phase 4: fill. WARP_INTERLEAVED: element k of lane l's list at base[warp] + 32k + l, so the 32
// threads of a warp read their k-th neighbours in one coalesced access; else at base[i] + k.
template <typename T, int DIM, int LAYOUT, int REACH, bool WARP_INTERLEAVED, int B>
__global__ void __launch_bounds__(SPH_BLOCK) sph_verlet_fill(
    const int n, const T* __restrict__ p, const T* __restrict__ pz, const signed char* __restrict__ kind_s,
    const int* __restrict__ skey, const int* __restrict__ start, const int ncx, const int ncy, const int ncz,
    const T R2, const long long* __restrict__ base, int* __restrict__ list)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T x, y, z;
    load_pos<T, LAYOUT, DIM>(p, pz, n, i, x, y, z);
    const bool fluid = kind_s[i] == 0;
    const long long b = WARP_INTERLEAVED ? base[i >> 5] + (i & 31) : base[i];
    const int stride = WARP_INTERLEAVED ? 32 : 1;
    int k = 0;  // one particle's list length (a few hundred at most)
    for_candidates_pos<T, DIM, LAYOUT, REACH, B>(skey[i], ncx, ncy, ncz, start, p, pz, n,
                                                 [&](const int j, const T xj, const T yj, const T zj) {
        const T dx = x - xj, dy = y - yj, dz = z - zj;
        if (dx * dx + dy * dy + (DIM == 3 ? dz * dz : T(0)) < R2 && j != i && (fluid || kind_s[j] == 0))
            list[b + (long long)stride * (k++)] = j;
    });
}

// One-pass build (variant verlet_build = one-pass): phases 1, 2 and 4 in one search. Every list
// gets the same room, cap entries (interleaved: per-warp regions of 32·cap, element k of lane l at
// 32·cap·warp + 32k + l; per-particle: cap·i + k), so no scan is needed before the fill. Entries
// past cap are counted, not written; the largest count lands in *max_count, and when it exceeds
// cap the host enlarges cap and runs this kernel again (then every list is written whole).
template <typename T, int DIM, int LAYOUT, int REACH, bool WARP_INTERLEAVED, int B>
__global__ void __launch_bounds__(SPH_BLOCK) sph_verlet_fill_cap(
    const int n, const T* __restrict__ p, const T* __restrict__ pz, const signed char* __restrict__ kind_s,
    const int* __restrict__ skey, const int* __restrict__ start, const int ncx, const int ncy, const int ncz,
    const T R2, const int cap, int* __restrict__ list, int* __restrict__ counts, int* __restrict__ warp_max,
    int* __restrict__ max_count)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    int c = 0;
    if (i < n) {
        T x, y, z;
        load_pos<T, LAYOUT, DIM>(p, pz, n, i, x, y, z);
        const bool fluid = kind_s[i] == 0;
        const long long b = WARP_INTERLEAVED ? 32LL * cap * (i >> 5) + (i & 31) : (long long)cap * i;
        const int stride = WARP_INTERLEAVED ? 32 : 1;
        for_candidates_pos<T, DIM, LAYOUT, REACH, B>(skey[i], ncx, ncy, ncz, start, p, pz, n,
                                                     [&](const int j, const T xj, const T yj, const T zj) {
            const T dx = x - xj, dy = y - yj, dz = z - zj;
            if (dx * dx + dy * dy + (DIM == 3 ? dz * dz : T(0)) < R2 && j != i && (fluid || kind_s[j] == 0)) {
                if (c < cap) list[b + (long long)stride * c] = j;
                ++c;
            }
        });
        counts[i] = c;
    }
    int m = c;
    for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31) == 0 && i < n) {
        warp_max[i >> 5] = m;
        atomicMax(max_count, m);
    }
}

// The interaction over the lists. The lists hold every pair within r_c while no particle has
// travelled more than half the skin since the build (*dmax <= half_skin, kept on the device by
// the integration kernels). When the host's rebuild decision came late, the kernel searches the
// build's cells instead, with the reach widened by twice the largest travel (two particles now
// closer than r_c were closer than r_c + 2·dmax at the build; clamped cell indices are 1-Lipschitz),
// so no pair is ever missed, and counts the launch in *stale_launches.
template <typename T, int DIM, int LAYOUT, int KERNEL, bool WARP_INTERLEAVED>
__global__ void __launch_bounds__(SPH_BLOCK) sph_interact_verlet(
    const int n, const T* __restrict__ p, const T* __restrict__ pz, const T* __restrict__ v,
    const T* __restrict__ cs, const signed char* __restrict__ kind_s, const int* __restrict__ counts,
    const long long* __restrict__ base, const int* __restrict__ list, const int* __restrict__ order,
    const T* __restrict__ prm, T* __restrict__ ace, T* __restrict__ arho, T* __restrict__ red,
    const T* __restrict__ dmax, const T half_skin, const int* __restrict__ skey, const int* __restrict__ start,
    const int ncx, const int ncy, const int ncz, const T cell, int* __restrict__ stale_launches)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    T rv[3] = {T(0), T(0), T(0)};
    if (i < n) {
        const SphParams<T> s = load_params(prm);
        const Self<T> a = load_self<T, DIM, LAYOUT>(p, pz, v, cs, kind_s, n, i);
        Accum<T> acc{T(0), T(0), T(0), T(0), T(0)};
        const T travel = *dmax;
        if (travel <= half_skin) {
            const long long b = WARP_INTERLEAVED ? base[i >> 5] + (i & 31) : base[i];
            const int stride = WARP_INTERLEAVED ? 32 : 1;
            const int cnt = counts[i];
            for (int k = 0; k < cnt; ++k) {
                // The lists hold no j == i and no boundary–boundary pair (sph_verlet_count/fill),
                // so candidate()'s own filters never fire here: the same work as a cell candidate.
                const int j = list[b + (long long)stride * k];
                candidate<T, DIM, LAYOUT, KERNEL>(i, j, n, p, pz, v, cs, kind_s, a, s, acc);
            }
        } else {  // also for a NaN travel
            const int ncmax = max(ncx, max(ncy, ncz));
            const T want = ceil((sqrt(s.rc2) + T(2) * travel) / cell) + T(1);
            const int reach = want < T(ncmax) ? (int)want : ncmax;
            for_candidates_r<DIM>(skey[i], reach, ncx, ncy, ncz, start, [&](const int j) {
                candidate<T, DIM, LAYOUT, KERNEL>(i, j, n, p, pz, v, cs, kind_s, a, s, acc);
            });
            if (i == 0) atomicAdd(stale_launches, 1);
        }
        store<T, DIM>(i, order, acc, a, s.gravity, ace, arho, rv);
    }
    block_max<T, 3>(rv, red);
}

// ---- the fast pair (variant pair = fast; sph.cuh pair_fast) ----------------------------------
// Its constants come as kernel arguments (constant bank), not from prm[] into registers.
#define SPH_FAST_ARGS(T) const T f_h, const T f_invh, const T f_cf, const T f_eta2, const T f_rc2, const T f_mass, \
    const T f_alpha, const T f_dcoef, const T f_rho0, const T f_kz, const T f_inva, const T f_gravity, \
    const int f_fourtakas
#define SPH_FAST_MAKE(T) FastParams<T>{f_h, f_invh, f_cf, f_eta2, f_rc2, f_mass, f_alpha, f_dcoef, f_rho0, f_kz, \
    f_inva, f_gravity, f_fourtakas}

template <typename T, int DIM, int LAYOUT>
__device__ __forceinline__ SelfFast<T> load_self_fast(const T* p, const T* pz, const T* v, const T* cs,
                                                      const signed char* kind_s, const int n, const int i)
{
    SelfFast<T> a;
    T rho;
    load_pos<T, LAYOUT, DIM>(p, pz, n, i, a.x, a.y, a.z);
    load_vel<T, LAYOUT, DIM>(p, v, n, i, a.vx, a.vy, a.vz, rho, a.press);
    a.rho = fabs(rho);
    a.invrho = FastMath<T>::rcp(a.rho);
    a.cs = cs[i];
    a.fluid = kind_s[i] == 0;
    return a;
}

// One candidate j of particle i: the filters a cell search needs (FILTER), the distance test first
// on squared distances, then j's velocity and density only for pairs within r_c.
template <typename T, int DIM, int LAYOUT, int KERNEL, bool FILTER>
__device__ __forceinline__ void candidate_fast(const int i, const int j, const int n, const T* __restrict__ p,
                                               const T* __restrict__ pz, const T* __restrict__ v,
                                               const T* __restrict__ cs, const SelfFast<T>& a,
                                               const FastParams<T>& s, Accum<T>& acc)
{
    if (FILTER && j == i) return;
    T xj, yj, zj;
    load_pos<T, LAYOUT, DIM>(p, pz, n, j, xj, yj, zj);
    const T dx = a.x - xj, dy = a.y - yj, dz = a.z - zj;
    const T r2 = dx * dx + dy * dy + (DIM == 3 ? dz * dz : T(0));
    if (r2 >= s.rc2) return;
    T vxj, vyj, vzj, rhoj, pressj;
    load_vel<T, LAYOUT, DIM>(p, v, n, j, vxj, vyj, vzj, rhoj, pressj);
    const bool fluidj = rhoj > T(0);
    if (FILTER && !a.fluid && !fluidj) return;  // boundary–boundary pairs never interact
    pair_fast<T, KERNEL, DIM>(a, dx, dy, dz, r2, vxj, vyj, vzj, fabs(rhoj), pressj, cs, j, fluidj, s, acc);
}

template <typename T, int DIM>
__device__ __forceinline__ void store_fast(const int i, const int* __restrict__ order, const Accum<T>& acc,
                                           const SelfFast<T>& a, const T gravity, T* __restrict__ ace,
                                           T* __restrict__ arho, T (&rv)[3])
{
    Self<T> b;
    b.fluid = a.fluid;
    b.cs = a.cs;
    store<T, DIM>(i, order, acc, b, gravity, ace, arho, rv);
}

template <typename T, int DIM, int LAYOUT, int KERNEL, int REACH>
__global__ void __launch_bounds__(SPH_BLOCK) sph_interact_cells_fast(
    const int n, const T* __restrict__ p, const T* __restrict__ pz, const T* __restrict__ v,
    const T* __restrict__ cs, const signed char* __restrict__ kind_s, const int* __restrict__ skey,
    const int* __restrict__ start, const int ncx, const int ncy, const int ncz, const int* __restrict__ order,
    SPH_FAST_ARGS(T), T* __restrict__ ace, T* __restrict__ arho, T* __restrict__ red)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    T rv[3] = {T(0), T(0), T(0)};
    if (i < n) {
        const FastParams<T> s = SPH_FAST_MAKE(T);
        const SelfFast<T> a = load_self_fast<T, DIM, LAYOUT>(p, pz, v, cs, kind_s, n, i);
        Accum<T> acc{T(0), T(0), T(0), T(0), T(0)};
        for_candidates<DIM, REACH>(skey[i], ncx, ncy, ncz, start, [&](const int j) {
            candidate_fast<T, DIM, LAYOUT, KERNEL, true>(i, j, n, p, pz, v, cs, a, s, acc);
        });
        store_fast<T, DIM>(i, order, acc, a, s.gravity, ace, arho, rv);
    }
    block_max<T, 3>(rv, red);
}

// The list walk of the fast Verlet interaction, U neighbours at a time. The kernel is latency-bound
// on the neighbours' gathers (ncu: L1TEX stalls, < 1 eligible warp per scheduler), so the next
// group's list indices are loaded before the current group is computed, and the U positions and the
// velocities of those within r_c are all issued before the first pair uses them: U gathers per
// thread in flight instead of one. The pairs are summed in list order, as U = 1 does, so the result
// is the same to the bit. The lists hold no j == i and no boundary–boundary pair: no filters.
template <typename T, int DIM, int LAYOUT, int KERNEL, int U>
__device__ __forceinline__ void verlet_walk_fast(const int* __restrict__ li, const int stride, const int cnt,
                                                 const int n, const T* __restrict__ p, const T* __restrict__ pz,
                                                 const T* __restrict__ v, const T* __restrict__ cs,
                                                 const SelfFast<T>& a, const FastParams<T>& s, Accum<T>& acc)
{
    int k = 0;
    if (U > 1 && cnt >= U) {
        int jn[U];
#pragma unroll
        for (int u = 0; u < U; ++u) jn[u] = li[stride * u];
        for (; k + U <= cnt; k += U) {
            int j[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                j[u] = jn[u];
                // the next group's indices (clamped into the list: the tail re-reads them)
                jn[u] = li[stride * min(k + U + u, cnt - 1)];
            }
            T dx[U], dy[U], dz[U], r2[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                T xj, yj, zj;
                load_pos<T, LAYOUT, DIM>(p, pz, n, j[u], xj, yj, zj);
                dx[u] = a.x - xj; dy[u] = a.y - yj; dz[u] = a.z - zj;
            }
            // c_j too (the viscosity of approaching pairs reads it): loaded with the velocity rather
            // than after the pair's vr is known, one dependent load fewer
            T vxj[U], vyj[U], vzj[U], rhoj[U], pj[U], csj[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                r2[u] = dx[u] * dx[u] + dy[u] * dy[u] + (DIM == 3 ? dz[u] * dz[u] : T(0));
                vxj[u] = vyj[u] = vzj[u] = pj[u] = csj[u] = T(0);
                rhoj[u] = T(1);
                if (r2[u] < s.rc2) {
                    load_vel<T, LAYOUT, DIM>(p, v, n, j[u], vxj[u], vyj[u], vzj[u], rhoj[u], pj[u]);
                    csj[u] = cs[j[u]];
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (r2[u] < s.rc2)  // csj + u: pair_fast reads c_j as cs[j], here from the register copy
                    pair_fast<T, KERNEL, DIM>(a, dx[u], dy[u], dz[u], r2[u], vxj[u], vyj[u], vzj[u], fabs(rhoj[u]),
                                              pj[u], csj, u, rhoj[u] > T(0), s, acc);
        }
    }
    for (; k < cnt; ++k) candidate_fast<T, DIM, LAYOUT, KERNEL, false>(0, li[stride * k], n, p, pz, v, cs, a, s, acc);
}

// sph_interact_verlet with the fast pair: the same list walk and stale-list fallback. U: neighbours
// per step of the list walk (verlet_walk_fast); MINB: the launch bound's blocks per SM (1: none
// beyond the block size; more caps the registers for occupancy, see gpu.py PAIR_SHAPE).
template <typename T, int DIM, int LAYOUT, int KERNEL, bool WARP_INTERLEAVED, int U, int MINB>
__global__ void __launch_bounds__(SPH_BLOCK, MINB) sph_interact_verlet_fast(
    const int n, const T* __restrict__ p, const T* __restrict__ pz, const T* __restrict__ v,
    const T* __restrict__ cs, const signed char* __restrict__ kind_s, const int* __restrict__ counts,
    const long long* __restrict__ base, const int* __restrict__ list, const int* __restrict__ order,
    SPH_FAST_ARGS(T), T* __restrict__ ace, T* __restrict__ arho, T* __restrict__ red,
    const T* __restrict__ dmax, const T half_skin, const int* __restrict__ skey, const int* __restrict__ start,
    const int ncx, const int ncy, const int ncz, const T cell, int* __restrict__ stale_launches)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    T rv[3] = {T(0), T(0), T(0)};
    if (i < n) {
        const FastParams<T> s = SPH_FAST_MAKE(T);
        const SelfFast<T> a = load_self_fast<T, DIM, LAYOUT>(p, pz, v, cs, kind_s, n, i);
        Accum<T> acc{T(0), T(0), T(0), T(0), T(0)};
        const T travel = *dmax;
        if (travel <= half_skin) {
            const int* __restrict__ li = list + (WARP_INTERLEAVED ? base[i >> 5] + (i & 31) : base[i]);
            verlet_walk_fast<T, DIM, LAYOUT, KERNEL, U>(li, WARP_INTERLEAVED ? 32 : 1, counts[i], n, p, pz, v, cs,
                                                        a, s, acc);
        } else {  // also for a NaN travel
            const int ncmax = max(ncx, max(ncy, ncz));
            const T want = ceil((sqrt(s.rc2) + T(2) * travel) / cell) + T(1);
            const int reach = want < T(ncmax) ? (int)want : ncmax;
            for_candidates_r<DIM>(skey[i], reach, ncx, ncy, ncz, start, [&](const int j) {
                candidate_fast<T, DIM, LAYOUT, KERNEL, true>(i, j, n, p, pz, v, cs, a, s, acc);
            });
            if (i == 0) atomicAdd(stale_launches, 1);
        }
        store_fast<T, DIM>(i, order, acc, a, s.gravity, ace, arho, rv);
    }
    block_max<T, 3>(rv, red);
}

// ---- time integration (canonical order), the CFL step on the device --------------------------
// Δt = cfl·min(√(h/max|a|), h/(c_max + max|μ|)) from the interaction's maxima (reference.cfl_dt),
// or dt_fixed > 0. Evaluated by every thread (a few flops) so no kernel waits for another.
template <typename T>
__device__ __forceinline__ double sph_cfl_dt(const T* __restrict__ red, const double h, const double cfl,
                                             const double dt_fixed)
{
    if (dt_fixed > 0.0) return dt_fixed;
    const double amax = (double)sqrt(red[0]);
    const double dt_cv = h / ((double)red[1] + (double)red[2]);
    return cfl * (amax > 0.0 ? fmin(sqrt(h / amax), dt_cv) : dt_cv);
}

// Piston (kind 2) at time t: x = x0 + A sin(ωt), vx = Aω cos(ωt) (geometry.piston_motion).
template <typename T, int DIM>
__device__ __forceinline__ void sph_piston(const int i, const double t, const double amp, const double omega,
                                           const T* __restrict__ pos0, T* __restrict__ pos, T* __restrict__ vel)
{
    pos[DIM * i] = pos0[DIM * i] + T(amp * sin(omega * t));
    vel[DIM * i] = T(amp * omega * cos(omega * t));
}

// Travelled distance since the list build, and its block maximum folded into *dmax.
template <typename T>
__device__ __forceinline__ void sph_travel(const int i, const bool active, const T moved2, const int track,
                                           T* __restrict__ travelled, T* __restrict__ dmax)
{
    if (!track) return;  // uniform over the launch
    T v[1] = {T(0)};
    if (active) {
        const T d = travelled[i] + sqrt(moved2);
        travelled[i] = d;
        v[0] = d;
    }
    block_max<T, 1>(v, dmax);
}

// st (double): st[0], st[1] the time (the current one at st[par]), st[2] the last Δt.
// Verlet (DualSPHysics): v^{n+1} = v^{n-1} + 2Δt a, ρ likewise, r += Δt v + Δt²/2 a; every
// `euler`-th step v^{n+1} = v^n + Δt a. The new v, ρ are written over v^{n-1}, ρ^{n-1} (the host
// swaps the names). Walls keep v, take ρ ≥ ρ0; the piston follows its motion.
template <typename T, int DIM>
__global__ void __launch_bounds__(SPH_BLOCK) sph_integrate_verlet(
    const int n, T* __restrict__ pos, const T* __restrict__ vel, T* __restrict__ vel_m1,
    const T* __restrict__ rho, T* __restrict__ rho_m1, const T* __restrict__ ace, const T* __restrict__ arho,
    const signed char* __restrict__ kind, const T* __restrict__ pos0, const T* __restrict__ red,
    T* __restrict__ red_next, const double h, const double cfl, const double dt_fixed, const int euler,
    double* __restrict__ st, const int par, const double amp, const double omega, const T rho0,
    const int track, T* __restrict__ travelled, T* __restrict__ dmax)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double dt = sph_cfl_dt(red, h, cfl, dt_fixed);
    const T d = T(dt);
    T moved2 = T(0);
    if (i < n) {
        const signed char k = kind[i];
        const bool fluid = k == 0;
#pragma unroll
        for (int c = 0; c < DIM; ++c) {
            const T a = ace[DIM * i + c], vi = vel[DIM * i + c];
            const T vn = euler ? vi + d * a : vel_m1[DIM * i + c] + T(2) * d * a;
            vel_m1[DIM * i + c] = fluid ? vn : vi;
            if (fluid) {
                const T x = pos[DIM * i + c];
                const T xn = x + d * vi + (T(0.5) * d * d) * a;
                pos[DIM * i + c] = xn;
                moved2 += (xn - x) * (xn - x);
            }
        }
        const T rn = euler ? rho[i] + d * arho[i] : rho_m1[i] + T(2) * d * arho[i];
        rho_m1[i] = fluid ? rn : max(rn, rho0);
        if (k == 2) {
            const T x = pos[DIM * i];
            sph_piston<T, DIM>(i, st[par] + dt, amp, omega, pos0, pos, vel_m1);
            moved2 = (pos[DIM * i] - x) * (pos[DIM * i] - x);
        }
    }
    sph_travel<T>(i, i < n, moved2, track, travelled, dmax);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        st[1 - par] = st[par] + dt;
        st[2] = dt;
        red_next[0] = T(0); red_next[1] = T(0); red_next[2] = T(0);
    }
}

// Symplectic (DualSPHysics), predictor: saves r^n, v^n, ρ^n (pos_save, vel_m1, rho_m1), then
// ρ^{n+1/2} = ρ^n + Δt/2 dρ/dt (walls ≥ ρ0), v^{n+1/2} = v^n + Δt/2 a, r^{n+1/2} = r^n + Δt/2 v^n (fluid).
template <typename T, int DIM>
__global__ void __launch_bounds__(SPH_BLOCK) sph_symplectic_predict(
    const int n, T* __restrict__ pos, T* __restrict__ vel, T* __restrict__ rho, T* __restrict__ pos_save,
    T* __restrict__ vel_m1, T* __restrict__ rho_m1, const T* __restrict__ ace, const T* __restrict__ arho,
    const signed char* __restrict__ kind, const T* __restrict__ pos0, const T* __restrict__ red,
    T* __restrict__ red_next, const double h, const double cfl, const double dt_fixed, double* __restrict__ st,
    const int par, const double amp, const double omega, const T rho0, const int track,
    T* __restrict__ travelled, T* __restrict__ dmax)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double dt = sph_cfl_dt(red, h, cfl, dt_fixed);
    const T half = T(0.5 * dt);
    T moved2 = T(0);
    if (i < n) {
        const signed char k = kind[i];
        const bool fluid = k == 0;
#pragma unroll
        for (int c = 0; c < DIM; ++c) {
            const T x = pos[DIM * i + c], vi = vel[DIM * i + c];
            pos_save[DIM * i + c] = x;
            vel_m1[DIM * i + c] = vi;
            if (fluid) {
                vel[DIM * i + c] = vi + half * ace[DIM * i + c];
                const T xn = x + half * vi;
                pos[DIM * i + c] = xn;
                moved2 += (xn - x) * (xn - x);
            }
        }
        const T r = rho[i];
        rho_m1[i] = r;
        const T rh = r + half * arho[i];
        rho[i] = fluid ? rh : max(rh, rho0);
        if (k == 2) {
            const T x = pos[DIM * i];
            sph_piston<T, DIM>(i, st[par] + 0.5 * dt, amp, omega, pos0, pos, vel);
            moved2 = (pos[DIM * i] - x) * (pos[DIM * i] - x);
        }
    }
    sph_travel<T>(i, i < n, moved2, track, travelled, dmax);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        st[2] = dt;
        red_next[0] = T(0); red_next[1] = T(0); red_next[2] = T(0);
    }
}

// Symplectic corrector: ε = −(dρ/dt / ρ^{n+1/2}) Δt, ρ^{n+1} = ρ^n (2−ε)/(2+ε) (walls ≥ ρ0),
// v^{n+1} = v^n + Δt a (fluid), r^{n+1} = r^n + Δt/2 (v^n + v^{n+1}); v^{n-1}, ρ^{n-1} := the new values.
template <typename T, int DIM>
__global__ void __launch_bounds__(SPH_BLOCK) sph_symplectic_correct(
    const int n, T* __restrict__ pos, T* __restrict__ vel, T* __restrict__ rho, const T* __restrict__ pos_save,
    T* __restrict__ vel_m1, T* __restrict__ rho_m1, const T* __restrict__ ace, const T* __restrict__ arho,
    const signed char* __restrict__ kind, const T* __restrict__ pos0, double* __restrict__ st, const int par,
    const double amp, const double omega, const T rho0, const int track, T* __restrict__ travelled,
    T* __restrict__ dmax)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double dt = st[2];
    const T d = T(dt);
    T moved2 = T(0);
    if (i < n) {
        const signed char k = kind[i];
        const bool fluid = k == 0;
#pragma unroll
        for (int c = 0; c < DIM; ++c) {
            const T v0 = vel_m1[DIM * i + c];
            const T vn = fluid ? v0 + d * ace[DIM * i + c] : v0;
            vel[DIM * i + c] = vn;
            vel_m1[DIM * i + c] = vn;
            if (fluid) {
                const T x = pos[DIM * i + c];
                const T xn = pos_save[DIM * i + c] + d * T(0.5) * (v0 + vn);
                pos[DIM * i + c] = xn;
                moved2 += (xn - x) * (xn - x);
            }
        }
        const T eps = -(arho[i] / rho[i]) * d;
        T rn = rho_m1[i] * (T(2) - eps) / (T(2) + eps);
        rn = fluid ? rn : max(rn, rho0);
        rho[i] = rn;
        rho_m1[i] = rn;
        if (k == 2) {
            const T x = pos[DIM * i];
            sph_piston<T, DIM>(i, st[par] + dt, amp, omega, pos0, pos, vel);
            vel_m1[DIM * i] = vel[DIM * i];
            moved2 = (pos[DIM * i] - x) * (pos[DIM * i] - x);
        }
    }
    sph_travel<T>(i, i < n, moved2, track, travelled, dmax);
    if (blockIdx.x == 0 && threadIdx.x == 0) st[1 - par] = st[par] + dt;
}

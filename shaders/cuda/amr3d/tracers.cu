// Passive tracers on the octree (engine/amr3d/tracers.py, docs/amr3d.md "Tracers"): a Heun step of
// every tracer in two launches, reading the tree stepper's per-level buffers directly. The array code
// needs ~136-180 small CuPy launches for the same step, and their host issue time is the whole cost
// of the tracers phase (docs/benchmarks/amr3d-design-figures/README.md).
//
//   amr3d_tracer_begin<P, S>   before the fluid step: k1 = u(x) of every alive tracer, into k1
//                              (Tracers.begin); thread 0 snapshots the step and cursor counters
//   amr3d_tracer_finish<P, S>  after the fluid step: k2 = u(x + dt k1), the move, the parking (not
//                              finite, beyond a walled side, solid indicator >= 1/2), ages, the release
//                              of ring row `cursor`, the trail sample, and the counters (Tracers._move)
//
// P: the positions' type (float / double), S: the buffers' (float / double). The velocity at a point
// is the array code's (stencil -> node_velocity -> interpolate) operation for operation and in the
// order NumPy sums: rho in NumPy's pairwise order (numpy_sum27), the momentum from the 13 opposite
// pairs in pair order (in the promoted type of S and P, as NumPy's d * pair_c), u = j * (1/rho), the
// trilinear sum in CORNERS order. The array code rounds every operation on its own, so this module is
// compiled with --fmad=false (no product contracted into an FMA): the bits of the array code on NumPy.
// (On CuPy the array code's reductions sum in CuPy's own tree order: a few ulps of the velocity.)
//
// Counters: the step and ring cursor stay in device memory (nothing here is read back by the host).
// Every thread of the finish needs their values of before the step while thread 0 writes the new
// ones; there is no grid-wide barrier, so the begin launch copies them into `snap` first.
//
// Level buffers: levels[l] is the address of level l's current buffer (Q, n_l m^3), first[l] the
// canonical point id of its first point (TreeStepper.populations' mapping); a point id's level is
// the last l with first[l] <= id (searchsorted), found once per tracer: the 8 stencil nodes lie in one
// leaf, and every level starts at a leaf boundary.

#ifndef AMR3D_TRACER_PAIR
#error "tracers.cu needs the pair tables: compile through engine/amr3d/tracer_kernels.kernel_spec"
#endif

namespace amr3d_tracers {

typedef long long i64;
constexpr int Q = 27;
constexpr int PAIRS = 13;

__device__ __forceinline__ constexpr int pair(int p) { constexpr int t[PAIRS] = AMR3D_TRACER_PAIR; return t[p]; }
__device__ __forceinline__ constexpr int pair_opp(int p)
{
    constexpr int t[PAIRS] = AMR3D_TRACER_PAIR_OPP;
    return t[p];
}
__device__ __forceinline__ constexpr int pair_c(int p, int a)
{
    constexpr int t[3][PAIRS] = {AMR3D_TRACER_PAIR_CX, AMR3D_TRACER_PAIR_CY, AMR3D_TRACER_PAIR_CZ};
    return t[a][p];
}

__device__ __forceinline__ float tfloor(float v) { return floorf(v); }
__device__ __forceinline__ double tfloor(double v) { return floor(v); }

// NumPy's isfinite without the device / host library difference: NaN fails both comparisons.
__device__ __forceinline__ bool finite(float v) { return v >= -3.402823466e+38f && v <= 3.402823466e+38f; }
__device__ __forceinline__ bool finite(double v)
{
    return v >= -1.7976931348623157e+308 && v <= 1.7976931348623157e+308;
}

// NumPy's NaN (np.float32(np.nan), np.nan): parked positions carry exactly the array code's bits.
__device__ __forceinline__ float quiet_nan(float)
{
    union { unsigned int u; float f; } v = {0x7fc00000u};
    return v.f;
}
__device__ __forceinline__ double quiet_nan(double)
{
    union { unsigned long long u; double f; } v = {0x7ff8000000000000ull};
    return v.f;
}

// xp.clip: NaN passes through (both comparisons fail), as in NumPy and CuPy.
template <typename T>
__device__ __forceinline__ T clip(T v, T lo, T hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Lookup (tracers.py) as the kernels see it.
template <typename P> struct Domain {
    const int* __restrict__ leaf_of_cell;  // (Bz, By, Bx)
    const P* __restrict__ origin;          // (L, 3)
    const P* __restrict__ inv_spacing;     // (L,)
    P cell;
    int cells[3];
    int m;
    P period[3];
    int periodic;  // bit a: axis a wraps

    // wrap(): [0, D) on a periodic axis, untouched on a walled one
    __device__ __forceinline__ P wrap(int a, P x) const
    {
        if (!((periodic >> a) & 1)) return x;
        const P D = period[a];
        const P w = x - D * tfloor(x / D);
        return w >= D ? w - D : w;  // a tiny negative x rounds to D
    }

    // stencil(): the leaf, the point id of the lower node (x, y, z) and the 8 weights, CORNERS order
    // (corner k = (k & 1, k >> 1 & 1, k >> 2): z slowest), each the product fx * fy * fz in that order.
    __device__ __forceinline__ void stencil(const P p[3], i64& leaf, i64& base, P w[8]) const
    {
        i64 c[3];
#pragma unroll
        for (int a = 0; a < 3; ++a) c[a] = clip((i64)tfloor(p[a] / cell), (i64)0, (i64)(cells[a] - 1));
        leaf = leaf_of_cell[(c[2] * cells[1] + c[1]) * cells[0] + c[0]];
        const P s = inv_spacing[leaf];
        P t[3];
        i64 i0[3];
#pragma unroll
        for (int a = 0; a < 3; ++a) {
            const P local = clip((p[a] - origin[3 * leaf + a]) * s, P(0), P(m - 1));
            i0[a] = clip((i64)tfloor(local), (i64)0, (i64)(m - 2));
            t[a] = local - P(i0[a]);
        }
        base = leaf * m * m * m + i0[0] + i0[1] * m + i0[2] * m * m;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const P fx = (k & 1) ? t[0] : P(1) - t[0];
            const P fy = (k >> 1 & 1) ? t[1] : P(1) - t[1];
            const P fz = (k >> 2) ? t[2] : P(1) - t[2];
            w[k] = fx * fy * fz;
        }
    }

    __device__ __forceinline__ i64 corner(int k) const { return (k & 1) + (k >> 1 & 1) * m + (k >> 2) * m * m; }
};

template <typename P>
__device__ __forceinline__ Domain<P> domain(const int* leaf_of_cell, const P* origin, const P* inv_spacing, P cell,
                                            int cx, int cy, int cz, int m, P dx, P dy, P dz, int periodic)
{
    return Domain<P>{leaf_of_cell, origin, inv_spacing, cell, {cx, cy, cz}, m, {dx, dy, dz}, periodic};
}

// rho as the array code sums it on NumPy: the stepper's gather hands f (27, 8, N) with q fastest in
// memory, so add.reduce over q runs NumPy's pairwise loop (eight running sums over blocks of eight,
// combined as a tree, then the remainder in order), not q = 0..26 in order.
template <typename S> __device__ __forceinline__ S numpy_sum27(const S g[Q])
{
    S r[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) r[k] = g[k];
#pragma unroll
    for (int b = 8; b < 24; b += 8) {
#pragma unroll
        for (int k = 0; k < 8; ++k) r[k] = r[k] + g[b + k];
    }
    S s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
#pragma unroll
    for (int q = 24; q < Q; ++q) s = s + g[q];
    return s;
}

// The stepper's current buffers (TreeStepper.level_buffers).
template <typename S> struct Levels {
    const unsigned long long* __restrict__ ptr;
    const i64* __restrict__ first;
    int n;
    i64 points;  // every level's points together: the end of the last level
    // mother leaves (mothers.py): the storage index of each canonical point id within its level's
    // buffer, and each level's plane (stored points); unused where mapped = 0 (leaves of m^3)
    const i64* __restrict__ plane;
    const i64* __restrict__ map;
    int mapped;
};

// Trilinear velocity at p (wrapped) from the populations at the 8 stencil nodes
// (velocity_from_populations: stencil, the populations gather, node_velocity, interpolate).
template <typename P, typename S>
__device__ __forceinline__ void velocity(const Domain<P>& d, const Levels<S>& lv, const P p[3], P v[3])
{
    typedef decltype(P() * S()) J;  // NumPy's promotion of d (S) * pair_c (P)
    i64 leaf, base;
    P w[8];
    d.stencil(p, leaf, base, w);
    const i64 id = leaf * d.m * d.m * d.m;
    int l = 0;
    while (l + 1 < lv.n && l + 1 < AMR3D_TRACER_MAX_LEVELS && lv.first[l + 1] <= id) ++l;
    const i64 plane = lv.mapped ? lv.plane[l] : (l + 1 < lv.n ? lv.first[l + 1] : lv.points) - lv.first[l];
    const S* __restrict__ f = reinterpret_cast<const S*>(lv.ptr[l]);
    const i64 local = base - lv.first[l];
    J acc[3];
    for (int k = 0; k < 8; ++k) {
        const i64 at = lv.mapped ? lv.map[base + d.corner(k)] : local + d.corner(k);
        S g[Q];
#pragma unroll
        for (int q = 0; q < Q; ++q) g[q] = f[q * plane + at];
        const S rho = numpy_sum27(g);
        J j[3];
#pragma unroll
        for (int p = 0; p < PAIRS; ++p) {
            const J dp = J(S(g[pair(p)] - g[pair_opp(p)]));
#pragma unroll
            for (int a = 0; a < 3; ++a) {
                const J term = dp * J(P(pair_c(p, a)));  // exact (c is 0 or +-1), signed zeros included
                j[a] = p == 0 ? term : j[a] + term;
            }
        }
        const J inv = J(S(1) / rho);
        const J wk = J(w[k]);
#pragma unroll
        for (int a = 0; a < 3; ++a) {
            const J term = wk * (j[a] * inv);
            acc[a] = k == 0 ? term : acc[a] + term;
        }
    }
#pragma unroll
    for (int a = 0; a < 3; ++a) v[a] = P(acc[a]);
}

// The solid indicator (1 at solid nodes) interpolated at p: Σ w_k s_k in CORNERS order.
template <typename P>
__device__ __forceinline__ P solid_at(const Domain<P>& d, const P* __restrict__ solid, const P p[3])
{
    i64 leaf, base;
    P w[8];
    d.stencil(p, leaf, base, w);
    P acc = w[0] * solid[base];
#pragma unroll
    for (int k = 1; k < 8; ++k) acc = acc + w[k] * solid[base + d.corner(k)];
    return acc;
}

}  // namespace amr3d_tracers

// k1 (n, 3) of every alive tracer at its position (the others: untouched, never read); snap = the
// counters (step, cursor) of before this coarse step, for the finish.
template <typename P, typename S>
__global__ void amr3d_tracer_begin(const P* __restrict__ pos, const bool* __restrict__ alive, int n,
                                   const unsigned long long* __restrict__ levels, const long long* __restrict__ first,
                                   int n_levels, long long points, const long long* __restrict__ planes,
                                   const long long* __restrict__ map, int mapped, const int* __restrict__ leaf_of_cell,
                                   const P* __restrict__ origin, const P* __restrict__ inv_spacing, P cell,
                                   int cells_x, int cells_y, int cells_z, int m, P period_x, P period_y, P period_z,
                                   int periodic, const long long* __restrict__ step,
                                   const long long* __restrict__ cursor, long long* __restrict__ snap,
                                   P* __restrict__ k1)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
        snap[0] = step[0];
        snap[1] = cursor[0];
    }
    if (i >= n || !alive[i]) return;
    const amr3d_tracers::Domain<P> d = amr3d_tracers::domain(
        leaf_of_cell, origin, inv_spacing, cell, cells_x, cells_y, cells_z, m, period_x, period_y, period_z, periodic);
    const amr3d_tracers::Levels<S> lv{levels, first, n_levels, points, planes, map, mapped};
    const P x[3] = {pos[3 * (long long)i], pos[3 * (long long)i + 1], pos[3 * (long long)i + 2]};
    P v[3];
    amr3d_tracers::velocity<P, S>(d, lv, x, v);  // positions are stored wrapped
#pragma unroll
    for (int a = 0; a < 3; ++a) k1[3 * (long long)i + a] = v[a];
}

// The rest of the step (Tracers.finish + _move), a thread per tracer slot i = row * n_seeds + seed:
// x' = wrap(x + (dt/2)(k1 + k2)), parked unless finite, inside the walled sides and off the solid;
// age += dt while alive; ring row snap[1] released at the seeds when snap[0] % release_every == 0
// (position, age 0, alive, and the whole trail at the seed); the trail sample of the final position
// when snap[0] % trail_every == 0; thread 0 writes the new step and cursor.
template <typename P, typename S>
__global__ void amr3d_tracer_finish(P* __restrict__ pos, bool* __restrict__ alive, double* __restrict__ age,
                                    P* __restrict__ trail, int n, const unsigned long long* __restrict__ levels,
                                    const long long* __restrict__ first, int n_levels, long long points,
                                    const long long* __restrict__ planes, const long long* __restrict__ map,
                                    int mapped, const int* __restrict__ leaf_of_cell, const P* __restrict__ origin,
                                    const P* __restrict__ inv_spacing, P cell, int cells_x, int cells_y, int cells_z,
                                    int m, P period_x, P period_y, P period_z, int periodic,
                                    const P* __restrict__ solid, int has_solid, const P* __restrict__ k1,
                                    const long long* __restrict__ snap, long long* __restrict__ step,
                                    long long* __restrict__ cursor, const P* __restrict__ seeds, int n_seeds,
                                    int capacity, int release_every, int trail_every, int trail_length, P dt,
                                    P half_dt, double dt_age)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const long long s0 = snap[0], c0 = snap[1];
    const bool release = s0 % release_every == 0;
    if (i == 0) {
        step[0] = s0 + 1;
        cursor[0] = release ? (c0 + 1) % capacity : c0;
    }
    if (i >= n) return;
    const long long at = 3 * (long long)i;
    bool live = alive[i];
    P out[3];
    if (live) {
        const amr3d_tracers::Domain<P> d = amr3d_tracers::domain(leaf_of_cell, origin, inv_spacing, cell, cells_x,
                                                                 cells_y, cells_z, m, period_x, period_y, period_z,
                                                                 periodic);
        const amr3d_tracers::Levels<S> lv{levels, first, n_levels, points, planes, map, mapped};
        P x[3], k[3], y[3], k2[3];
#pragma unroll
        for (int a = 0; a < 3; ++a) {
            x[a] = pos[at + a];
            k[a] = k1[at + a];
            y[a] = d.wrap(a, x[a] + dt * k[a]);
        }
        amr3d_tracers::velocity<P, S>(d, lv, y, k2);
        bool ok = true;
#pragma unroll
        for (int a = 0; a < 3; ++a) {
            out[a] = d.wrap(a, x[a] + half_dt * (k[a] + k2[a]));
            ok = ok && amr3d_tracers::finite(out[a]);
            if (!((periodic >> a) & 1)) ok = ok && out[a] >= P(0) && out[a] <= d.period[a];
        }
        if (ok && has_solid) ok = amr3d_tracers::solid_at(d, solid, out) < P(0.5);
        live = ok;
    }
    double a_new = age[i] + (live ? dt_age : 0.0);
    if (!live) {
#pragma unroll
        for (int a = 0; a < 3; ++a) out[a] = amr3d_tracers::quiet_nan(P());
    }
    const long long plane = 3 * (long long)n;
    if (release && i / n_seeds == c0) {
        const int s = i % n_seeds;
#pragma unroll
        for (int a = 0; a < 3; ++a) out[a] = seeds[3 * s + a];
        a_new = 0.0;
        live = true;
        for (int t = 0; t < trail_length; ++t) {
#pragma unroll
            for (int a = 0; a < 3; ++a) trail[t * plane + at + a] = out[a];
        }
    }
#pragma unroll
    for (int a = 0; a < 3; ++a) pos[at + a] = out[a];
    age[i] = a_new;
    alive[i] = live;
    if (s0 % trail_every == 0) {
        const long long row = (s0 / trail_every) % trail_length;
#pragma unroll
        for (int a = 0; a < 3; ++a) trail[row * plane + at + a] = out[a];
    }
}

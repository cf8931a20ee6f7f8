// The pointwise part of one compact Navier–Stokes evaluation of dU/dt (engine/compact/navier_stokes.py,
// `pointwise = fused`): everything between and after the compact derivative passes that the `array`
// reference does as dozens of whole-array (or single-line) operations, in three kernels:
//
//   ns_euler     primitives u, v (and T = γp/ρ when viscous), p and the Euler fluxes F, G
//   ns_viscous   (viscous only, after the gradients of u, v, T) τxx, τyy, τxy and their flux terms
//   ns_combine   out = -(DF + DG), with the boundary lines of every bounded side finished in the same
//                launch: Poinsot & Lele's characteristic terms (nscbc.py), extrapolated and held sides
//
// Why: at P4's 512² the array code's "other" phase was most of a step, launch- and host-bound
// (docs/benchmarks/compact-grouped-h100-2026-11-26). One thread per grid point.
//
// Every expression performs the reference's operations in the reference's order and precision (the
// constants arrive already cast to T, as NumPy casts a Python float against a T array), compiled without
// FMA contraction (--fmad=false): the kernels reproduce the NumPy code bit for bit (tested through the
// g++ emulation, tests/unit/test_compact_ns_fused.py).
//
// Layout: every stack is C-contiguous (nv, ny, nx); variable v of a stack starts at v * npts.

#ifndef NAGARE_COMPACT_NS_POINTWISE
#define NAGARE_COMPACT_NS_POINTWISE

typedef long long nagare_ns_i64;

// Side kinds as engine/compact/ns_pointwise.py passes them (periodic sides are not processed).
#define NAGARE_SIDE_PERIODIC 0
#define NAGARE_SIDE_NSCBC 1
#define NAGARE_SIDE_EXTRAPOLATE 2
#define NAGARE_SIDE_HOLD 3

// ---- (1) primitives and Euler fluxes ---------------------------------------------------------------
// P = (u, v, T), F = (ρu, ρu² + p, ρuv, (ρE + p)u), G = (ρv, ρuv, ρv² + p, (ρE + p)v); gm1 = T(γ - 1).
// As the array code: 1/ρ once, u = ρu·(1/ρ) (a product, not a quotient), p = (γ-1)(ρE - ½(ρu·u + ρv·v)).
template <typename T, bool VISCOUS>
__global__ void ns_euler(const T* __restrict__ U, T* __restrict__ P, T* __restrict__ p, T* __restrict__ F,
                         T* __restrict__ G, T gm1, T gamma, nagare_ns_i64 npts)
{
    const nagare_ns_i64 k = (nagare_ns_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= npts) return;
    const T rho = U[k], mx = U[npts + k], my = U[2 * npts + k], e = U[3 * npts + k];
    const T inv = T(1) / rho;
    const T u = mx * inv, v = my * inv;
    const T ruu = mx * u, rvv = my * v;
    const T pr = gm1 * (e - T(0.5) * (ruu + rvv));
    P[k] = u;
    P[npts + k] = v;
    if (VISCOUS) P[2 * npts + k] = (pr * inv) * gamma;
    p[k] = pr;
    const T ruv = mx * v;  // the array code's F[2] = ρu·v, copied to G[1]
    const T hh = e + pr;
    F[k] = mx;
    F[npts + k] = ruu + pr;
    F[2 * npts + k] = ruv;
    F[3 * npts + k] = hh * u;
    G[k] = my;
    G[npts + k] = ruv;
    G[2 * npts + k] = rvv + pr;
    G[3 * npts + k] = hh * v;
}

// ---- (2) viscous stresses and their flux terms -----------------------------------------------------
// GX = (u_x, v_x, T_x), GY = (u_y, v_y, T_y); τ = (τxx, τyy, τxy) is kept for the characteristic
// boundaries (ns_combine differentiates τ_nn along the normal). two_thirds = T(2/3).
template <typename T>
__global__ void ns_viscous(const T* __restrict__ P, const T* __restrict__ GX, const T* __restrict__ GY,
                           T* __restrict__ tau, T* __restrict__ F, T* __restrict__ G, T mu, T kappa, T two_thirds,
                           nagare_ns_i64 npts)
{
    const nagare_ns_i64 k = (nagare_ns_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= npts) return;
    const T u = P[k], v = P[npts + k];
    const T ux = GX[k], vx = GX[npts + k], tx = GX[2 * npts + k];
    const T uy = GY[k], vy = GY[npts + k], ty = GY[2 * npts + k];
    const T div = ux + vy;
    const T txx = mu * (T(2) * ux - two_thirds * div);
    const T tyy = mu * (T(2) * vy - two_thirds * div);
    const T txy = mu * (uy + vx);
    tau[k] = txx;
    tau[npts + k] = tyy;
    tau[2 * npts + k] = txy;
    F[npts + k] = F[npts + k] - txx;
    F[2 * npts + k] = F[2 * npts + k] - txy;
    F[3 * npts + k] = F[3 * npts + k] - ((u * txx + v * txy) + kappa * tx);
    G[npts + k] = G[npts + k] - txy;
    G[2 * npts + k] = G[2 * npts + k] - tyy;
    G[3 * npts + k] = G[3 * npts + k] - ((u * txy + v * tyy) + kappa * ty);
}

// ---- (3) out = -(DF + DG) and the boundary lines --------------------------------------------------
// Constants of nscbc.py, each already T: the one-sided 4th-order first-derivative weights c0..c4
// (ONE_SIDED) and per side the factor -s/h; gamma, sigma, the domain lengths, p∞, γ - 1.
template <typename T>
struct NagareNsConst {
    T c0, c1, c2, c3, c4, gamma, sigma, p_inf, gm1;
};

// ∂f/∂n at the boundary point q of a side whose line runs into the domain by `step` per point.
template <typename T>
__device__ __forceinline__ T nagare_ns_dn(const T* f, nagare_ns_i64 q, nagare_ns_i64 step, T scale,
                                          const NagareNsConst<T>& k)
{
    const T r = k.c0 * f[q] + k.c1 * f[q + step] + k.c2 * f[q + 2 * step] + k.c3 * f[q + 3 * step]
              + k.c4 * f[q + 4 * step];
    return r * scale;
}

// nscbc.normal_flux_derivative (minus viscous_normal_flux_derivative when viscous) at the boundary
// point q of one side: term = (mass, normal momentum, tangential momentum, energy).
template <typename T, bool VISCOUS>
__device__ __forceinline__ void nagare_ns_characteristic(const T* U, const T* P, const T* p, const T* tau,
                                                         nagare_ns_i64 npts, nagare_ns_i64 q, nagare_ns_i64 step,
                                                         bool xside, bool max_side, T scale, T length,
                                                         const NagareNsConst<T>& k, T term[4])
{
    const T* rho_a = U;
    const T* un_a = xside ? P : P + npts;
    const T* ut_a = xside ? P + npts : P;
    const T rho = rho_a[q], un = un_a[q], ut = ut_a[q], pr = p[q];
    const T drho = nagare_ns_dn(rho_a, q, step, scale, k);
    const T dun = nagare_ns_dn(un_a, q, step, scale, k);
    const T dut = nagare_ns_dn(ut_a, q, step, scale, k);
    const T dp = nagare_ns_dn(p, q, step, scale, k);
    const T c = sqrt(k.gamma * pr / rho);
    const T rc = rho * c;
    const T lam1 = un - c, lam5 = un + c;
    T l1 = lam1 * (dp - rc * dun);
    T l2 = un * (c * c * drho - dp);
    T l3 = un * dut;
    T l5 = lam5 * (dp + rc * dun);
    const T m = un / c;
    const T mn2 = m * m;  // NumPy's (un / c) ** 2 squares exactly
    T room = T(1) - mn2;
    room = room < T(0) ? T(0) : room;  // xp.maximum(1 - M², 0) (a NaN passes, as there)
    const T relax = k.sigma * room * c / length * (pr - k.p_inf);
    if (max_side) {  // east / north: L1 travels inwards
        l1 = lam1 < T(0) ? relax : l1;
        l5 = lam5 < T(0) ? T(0) : l5;
    } else {  // west / south: L5 travels inwards
        l5 = lam5 > T(0) ? relax : l5;
        l1 = lam1 > T(0) ? T(0) : l1;
    }
    const bool entering = max_side ? un < T(0) : un > T(0);  // (s·u_n) < 0
    if (entering) {
        l2 = T(0);
        l3 = T(0);
    }
    const T d1 = (l2 + T(0.5) * (l5 + l1)) / (c * c);
    const T d2 = T(0.5) * (l5 + l1);
    const T d3 = (l5 - l1) / (T(2) * rc);
    const T d4 = l3;
    term[0] = d1;
    term[1] = un * d1 + rho * d3;
    term[2] = ut * d1 + rho * d4;
    term[3] = T(0.5) * (un * un + ut * ut) * d1 + d2 / k.gm1 + rho * un * d3 + rho * ut * d4;
    if (VISCOUS) {  // P&L's outflow conditions: (0, ∂τnn/∂n, 0, u_n ∂τnn/∂n + τnn ∂u_n/∂n + τnt ∂u_t/∂n)
        const T* tnn_a = xside ? tau : tau + npts;
        const T* tnt_a = tau + 2 * npts;
        const T dtnn = nagare_ns_dn(tnn_a, q, step, scale, k);
        const T zero = T(0) * un;  // the reference subtracts 0·u_n (its sign of zero included)
        term[0] = term[0] - zero;
        term[1] = term[1] - dtnn;
        term[2] = term[2] - zero;
        term[3] = term[3] - (un * dtnn + tnn_a[q] * dun + tnt_a[q] * dut);
    }
}

// One thread per point. Interior points: out = -(DF + DG). A point on the boundary line of a bounded
// side gets what navier_stokes._boundaries leaves there, computed from the inputs alone (no thread reads
// another's output, so one launch does every side):
//   1. hold sides are processed last and write 0: a point on a held line is 0;
//   2. extrapolate sides (west, east, south, north in that order) copy line 1 onto line 0, so the
//      value comes from the point reached by undoing those copies in reverse order (a corner of two
//      extrapolated sides takes the diagonal neighbour, as the sequential copies leave it);
//   3. there: -(DF + DG), plus, for each characteristic side whose line holds the point (x sides
//      first, corners get both), the compact ∂F_n/∂n minus Poinsot & Lele's.
// kinds: NAGARE_SIDE_* of west, east, south, north; scale_*: T(-s/h) of that side; lx, ly: domain lengths.
template <typename T, bool VISCOUS>
__global__ void ns_combine(const T* __restrict__ U, const T* __restrict__ P, const T* __restrict__ p,
                           const T* __restrict__ tau, const T* __restrict__ DF, const T* __restrict__ DG,
                           T* __restrict__ out, int nx, int ny, int kind_w, int kind_e, int kind_s, int kind_n,
                           T scale_w, T scale_e, T scale_s, T scale_n, T lx, T ly, T c0, T c1, T c2, T c3, T c4,
                           T gamma, T sigma, T p_inf, T gm1)
{
    const nagare_ns_i64 npts = (nagare_ns_i64)nx * ny;
    const nagare_ns_i64 k = (nagare_ns_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= npts) return;
    const int i = (int)(k % nx), j = (int)(k / nx);
    const bool w = kind_w && i == 0, e = kind_e && i == nx - 1;
    const bool s = kind_s && j == 0, n = kind_n && j == ny - 1;
    if (!(w || e || s || n)) {
        for (int c = 0; c < 4; ++c) out[c * npts + k] = -(DF[c * npts + k] + DG[c * npts + k]);
        return;
    }
    if ((w && kind_w == NAGARE_SIDE_HOLD) || (e && kind_e == NAGARE_SIDE_HOLD) ||
        (s && kind_s == NAGARE_SIDE_HOLD) || (n && kind_n == NAGARE_SIDE_HOLD)) {
        for (int c = 0; c < 4; ++c) out[c * npts + k] = T(0);
        return;
    }
    int si = i, sj = j;  // the point whose value this one ends up with (step 2, reverse order)
    if (kind_n == NAGARE_SIDE_EXTRAPOLATE && sj == ny - 1) sj = ny - 2;
    if (kind_s == NAGARE_SIDE_EXTRAPOLATE && sj == 0) sj = 1;
    if (kind_e == NAGARE_SIDE_EXTRAPOLATE && si == nx - 1) si = nx - 2;
    if (kind_w == NAGARE_SIDE_EXTRAPOLATE && si == 0) si = 1;
    const nagare_ns_i64 q = (nagare_ns_i64)sj * nx + si;
    T val[4];
    for (int c = 0; c < 4; ++c) val[c] = -(DF[c * npts + q] + DG[c * npts + q]);
    const NagareNsConst<T> kc = {c0, c1, c2, c3, c4, gamma, sigma, p_inf, gm1};
    T term[4];
    // (side on the line through q, its kind, x side?, max side?, step into the domain, -s/h, length)
    const bool on[4] = {kind_w && si == 0, kind_e && si == nx - 1, kind_s && sj == 0, kind_n && sj == ny - 1};
    const int kinds[4] = {kind_w, kind_e, kind_s, kind_n};
    const nagare_ns_i64 steps[4] = {1, -1, (nagare_ns_i64)nx, -(nagare_ns_i64)nx};
    const T scales[4] = {scale_w, scale_e, scale_s, scale_n};
    for (int side = 0; side < 4; ++side) {
        if (!on[side] || kinds[side] != NAGARE_SIDE_NSCBC) continue;
        const bool xside = side < 2;
        nagare_ns_characteristic<T, VISCOUS>(U, P, p, tau, npts, q, steps[side], xside, side & 1, scales[side],
                                             xside ? lx : ly, kc, term);
        // (mass, normal, tangential, energy) -> (ρ, ρu, ρv, ρE); out held -∂F_n/∂n (compact): now -P&L's
        const T* compact = xside ? DF : DG;
        const int comp[4] = {0, xside ? 1 : 2, xside ? 2 : 1, 3};
        for (int t = 0; t < 4; ++t) {
            const int c = comp[t];
            val[c] = val[c] + (compact[c * npts + q] - term[t]);
        }
    }
    for (int c = 0; c < 4; ++c) out[c * npts + k] = val[c];
}

// ---- (4) the RK4 stage arithmetic (ns_engine.py's phase `update`) -----------------------------------
// The array code's operations in its order, one thread per value of the (4, ny, nx) stacks (n = 4·npts):
// first stage acc = k, tmp = k·c + U; the middle ones acc = acc + two·k, tmp = k·c + U; the last
// U = U + (acc + k)·sixth (acc is scratch: the next step's first stage overwrites it, so it is not stored).
// Why: 14 element-wise launches a step become 4 (at 512² each launch is a few µs of GPU work).
template <typename T>
__global__ void rk4_first(const T* __restrict__ U, const T* __restrict__ k, T* __restrict__ acc,
                          T* __restrict__ tmp, T c, nagare_ns_i64 n)
{
    const nagare_ns_i64 i = (nagare_ns_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const T kk = k[i];
    acc[i] = kk;
    tmp[i] = kk * c + U[i];
}

template <typename T>
__global__ void rk4_middle(const T* __restrict__ U, const T* __restrict__ k, T* __restrict__ acc,
                           T* __restrict__ tmp, T two, T c, nagare_ns_i64 n)
{
    const nagare_ns_i64 i = (nagare_ns_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const T kk = k[i];
    acc[i] = acc[i] + kk * two;
    tmp[i] = kk * c + U[i];
}

template <typename T>
__global__ void rk4_last(T* __restrict__ U, const T* __restrict__ k, const T* __restrict__ acc, T sixth,
                         nagare_ns_i64 n)
{
    const nagare_ns_i64 i = (nagare_ns_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    U[i] = U[i] + (acc[i] + k[i]) * sixth;
}

#endif

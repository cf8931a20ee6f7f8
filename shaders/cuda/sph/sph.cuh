// Weakly-compressible SPH pair physics (DualSPHysics forms; see engine/sph/reference.py, which is
// the NumPy reference these functions must match to round-off).
#pragma once

// Layouts of the per-particle data the interaction reads (P3 §3.4).
#define SPH_SOA 0     // p = [x(n) | y(n) | z(n)], v = [vx(n) | vy(n) | vz(n) | rho(n) | press(n)]
#define SPH_AOS 1     // p = n records of 8: x y z vx vy vz rho press; v unused
#define SPH_PACKED 2  // fp32: p = float4 (x y z press), v = float4 (vx vy vz rho): two 16-byte loads per
                      // neighbour; fp64: p = double2 (x y) + z array (P3's double split), v as SoA

#define SPH_WENDLAND 0
#define SPH_CUBIC 1

// Parameters, read once per thread from a small device array (prm[]):
#define P_H 0
#define P_RC2 1
#define P_KNORM 2
#define P_RHO0 3
#define P_C0 4
#define P_CSEXP 5
#define P_ALPHA 6
#define P_ETA2 7
#define P_MASS 8
#define P_DELTAHC0 9
#define P_GRAVITY 10
#define P_RHO0G_B 11
#define P_INVGAMMA 12
#define P_FOURTAKAS 13
#define P_COUNT 14

template <typename T>
struct SphParams {
    T h, rc2, knorm, rho0, c0, csexp, alpha, eta2, mass, deltahc0, gravity, rho0g_b, invgamma;
    bool fourtakas;
};

template <typename T>
__device__ __forceinline__ SphParams<T> load_params(const T* __restrict__ prm)
{
    SphParams<T> s;
    s.h = prm[P_H]; s.rc2 = prm[P_RC2]; s.knorm = prm[P_KNORM]; s.rho0 = prm[P_RHO0]; s.c0 = prm[P_C0];
    s.csexp = prm[P_CSEXP]; s.alpha = prm[P_ALPHA]; s.eta2 = prm[P_ETA2]; s.mass = prm[P_MASS];
    s.deltahc0 = prm[P_DELTAHC0]; s.gravity = prm[P_GRAVITY]; s.rho0g_b = prm[P_RHO0G_B];
    s.invgamma = prm[P_INVGAMMA]; s.fourtakas = prm[P_FOURTAKAS] != T(0);
    return s;
}

// F(r) = (dW/dr)/r, so that grad_i W_ij = F * (r_i - r_j).
template <typename T, int KERNEL>
__device__ __forceinline__ T kernel_f(const T r, const SphParams<T>& s)
{
    const T q = r / s.h;
    if (KERNEL == SPH_WENDLAND) {
        const T t = T(1) - T(0.5) * q;
        return (T(-5) * s.knorm / (s.h * s.h)) * t * t * t;
    } else {
        if (q < T(1)) return s.knorm * (T(-3) + T(2.25) * q) / (s.h * s.h);
        const T t = T(2) - q;
        return s.knorm * (T(-0.75) * t * t) / (q * s.h * s.h);
    }
}

template <typename T, int LAYOUT, int DIM>
__device__ __forceinline__ void load_pos(const T* __restrict__ p, const T* __restrict__ pz, const int n,
                                         const int i, T& x, T& y, T& z)
{
    if (LAYOUT == SPH_AOS) {
        x = p[8 * i]; y = p[8 * i + 1]; z = DIM == 3 ? p[8 * i + 2] : T(0);
    } else if (LAYOUT == SPH_PACKED) {
        if constexpr (sizeof(T) == 4) {
            const float4 q = reinterpret_cast<const float4*>(p)[i];
            x = q.x; y = q.y; z = DIM == 3 ? q.z : T(0);
        } else {
            const double2 q = reinterpret_cast<const double2*>(p)[i];
            x = q.x; y = q.y; z = DIM == 3 ? pz[i] : T(0);
        }
    } else {
        x = p[i]; y = p[n + i]; z = DIM == 3 ? p[2 * n + i] : T(0);
    }
}

template <typename T, int LAYOUT, int DIM>
__device__ __forceinline__ void load_vel(const T* __restrict__ p, const T* __restrict__ v, const int n,
                                         const int i, T& vx, T& vy, T& vz, T& rho, T& press)
{
    if (LAYOUT == SPH_AOS) {
        vx = p[8 * i + 3]; vy = p[8 * i + 4]; vz = DIM == 3 ? p[8 * i + 5] : T(0);
        rho = p[8 * i + 6]; press = p[8 * i + 7];
    } else if (LAYOUT == SPH_PACKED && sizeof(T) == 4) {
        const float4 q = reinterpret_cast<const float4*>(v)[i];
        vx = q.x; vy = q.y; vz = DIM == 3 ? q.z : T(0); rho = q.w;
        press = reinterpret_cast<const float4*>(p)[i].w;  // the same 16 bytes as load_pos: one load
    } else {
        vx = v[i]; vy = v[n + i]; vz = DIM == 3 ? v[2 * n + i] : T(0); rho = v[3 * n + i]; press = v[4 * n + i];
    }
}

// Everything particle i accumulates over its neighbours.
template <typename T>
struct Accum {
    T ax, ay, az, drho, mumax;
};

template <typename T>
struct Self {
    T x, y, z, vx, vy, vz, rho, press, cs;
    bool fluid;
};

// One ordered pair (i receives from j); the sums match engine/sph/reference.py:interaction.
template <typename T, int KERNEL, int DIM>
__device__ __forceinline__ void pair(const Self<T>& a, const T dx, const T dy, const T dz, const T r2,
                                     const T vxj, const T vyj, const T vzj, const T rhoj, const T pressj,
                                     const T* __restrict__ cs, const int j, const bool fluidj,
                                     const SphParams<T>& s, Accum<T>& acc)
{
    const T r = sqrt(r2);
    const T F = kernel_f<T, KERNEL>(r, s);
    const T vx = a.vx - vxj, vy = a.vy - vyj, vz = a.vz - vzj;
    const T vr = vx * dx + vy * dy + (DIM == 3 ? vz * dz : T(0));
    const T mu = s.h * vr / (r2 + s.eta2);
    acc.mumax = fmax(acc.mumax, fabs(mu));
    if (a.fluid) {
        T visc = T(0);
        if (vr < T(0)) {
            const T csj = cs[j];  // c_j = c0 (rho_j/rho0)^((gamma-1)/2), once per particle in sph_gather
            visc = -s.alpha * T(0.5) * (a.cs + csj) * mu / (T(0.5) * (a.rho + rhoj));
        }
        const T coef = -s.mass * ((a.press + pressj) / (a.rho * rhoj) + visc) * F;
        acc.ax += coef * dx; acc.ay += coef * dy;
        if (DIM == 3) acc.az += coef * dz;
    }
    T drho = s.mass * vr * F;
    if (s.deltahc0 > T(0) && a.fluid && fluidj) {
        T psi = rhoj - a.rho;
        if (s.fourtakas) {
            const T dvert = DIM == 3 ? dz : dy;  // z_i - z_j along gravity's axis
            psi -= s.rho0 * (pow(T(1) + s.rho0g_b * dvert, s.invgamma) - T(1));
        }
        drho += s.deltahc0 * T(2) * psi * (-r2) * F / (r2 + s.eta2) * (s.mass / rhoj);
    }
    acc.drho += drho;
}

// ---- the fast pair (variant pair = fast) ---------------------------------------------------------
// The same sums as pair(), with the per-pair work cut to what depends on the pair: no IEEE
// divisions (one reciprocal of r² + η² shared by μ and the δ-term, one of ρ_j shared by the
// pressure and δ-terms, one of ρ_i + ρ_j for the viscosity), no pow (the Fourtakas term as
// exp2(log2(1 + k dz)/γ) − 1), the Wendland gradient from one precomputed constant. fp32 takes
// the SFU forms (rsqrt, rcp: ≤ 2 ulp, the same order as the IEEE forms' 0.5 ulp once summed over
// ~100 neighbours in another order); fp64 keeps sqrt and exact reciprocals.
// The wall flag of j travels in the sign of its stored density (sph_gather with mark_walls = 1;
// ρ > 0 always, the sanity bounds stop a run before it could not be), so no kind byte is gathered.
template <typename T> struct FastMath;
template <> struct FastMath<float> {
    static __device__ __forceinline__ float rcp(const float x) { return __fdividef(1.0f, x); }
    // r from r²: r2·rsqrt(r2), 0 at r2 = 0 (rsqrt(0) = inf), where the pair adds nothing anyway.
    static __device__ __forceinline__ float dist(const float r2) { return r2 > 0.0f ? r2 * rsqrtf(r2) : 0.0f; }
    // (1 + x)^a − 1 without powf's extended-precision log (the reference's pow differs by ~1 ulp of 1).
    static __device__ __forceinline__ float powm1(const float x, const float a)
    {
        return exp2f(a * log2f(1.0f + x)) - 1.0f;
    }
};
template <> struct FastMath<double> {
    static __device__ __forceinline__ double rcp(const double x) { return 1.0 / x; }
    static __device__ __forceinline__ double dist(const double r2) { return sqrt(r2); }
    static __device__ __forceinline__ double powm1(const double x, const double a) { return exp2(a * log2(1.0 + x)) - 1.0; }
};

// Constants of the fast pair, passed by value as kernel arguments (the constant bank: no registers
// held across the pair loop for them). cf: Wendland −5·knorm/h², cubic knorm/h²; dcoef: 2·δhc0·m
// (0 = no density diffusion); fourtakas: 0/1.
template <typename T>
struct FastParams {
    T h, invh, cf, eta2, rc2, mass, alpha, dcoef, rho0, kz, inva, gravity;
    int fourtakas;
};

template <typename T, int KERNEL>
__device__ __forceinline__ T kernel_f_fast(const T r, const FastParams<T>& s)
{
    const T q = r * s.invh;
    if (KERNEL == SPH_WENDLAND) {
        const T t = T(1) - T(0.5) * q;
        return s.cf * (t * t * t);
    } else {
        if (q < T(1)) return s.cf * (T(-3) + T(2.25) * q);
        const T t = T(2) - q;
        return s.cf * (T(-0.75) * t * t) * FastMath<T>::rcp(q);
    }
}

// i's own values for the fast pair: rho = |stored ρ|, invrho = 1/ρ_i once per particle.
template <typename T>
struct SelfFast {
    T x, y, z, vx, vy, vz, rho, invrho, press, cs;
    bool fluid;
};

// One ordered pair (i receives from j) within r_c; rhoj is |stored ρ_j|, fluidj its sign.
template <typename T, int KERNEL, int DIM>
__device__ __forceinline__ void pair_fast(const SelfFast<T>& a, const T dx, const T dy, const T dz, const T r2,
                                          const T vxj, const T vyj, const T vzj, const T rhoj, const T pressj,
                                          const T* __restrict__ cs, const int j, const bool fluidj,
                                          const FastParams<T>& s, Accum<T>& acc)
{
    const T F = kernel_f_fast<T, KERNEL>(FastMath<T>::dist(r2), s);
    const T vx = a.vx - vxj, vy = a.vy - vyj, vz = a.vz - vzj;
    const T vr = vx * dx + vy * dy + (DIM == 3 ? vz * dz : T(0));
    const T inv_d = FastMath<T>::rcp(r2 + s.eta2);
    const T invrhoj = FastMath<T>::rcp(rhoj);
    const T mu = s.h * vr * inv_d;
    acc.mumax = fmax(acc.mumax, fabs(mu));
    if (a.fluid) {
        // (p_i + p_j)/(ρ_i ρ_j) + Π_ij, Π_ij = −α ½(c_i + c_j) μ / ½(ρ_i + ρ_j) for approaching pairs
        T coef = (a.press + pressj) * (a.invrho * invrhoj);
        if (vr < T(0)) coef -= s.alpha * (a.cs + cs[j]) * mu * FastMath<T>::rcp(a.rho + rhoj);
        coef *= -s.mass * F;
        acc.ax += coef * dx; acc.ay += coef * dy;
        if (DIM == 3) acc.az += coef * dz;
    }
    T drho = s.mass * vr * F;
    if (s.dcoef > T(0) && a.fluid && fluidj) {
        T psi = rhoj - a.rho;
        if (s.fourtakas) psi -= s.rho0 * FastMath<T>::powm1(s.kz * (DIM == 3 ? dz : dy), s.inva);
        drho += s.dcoef * psi * (-r2) * F * inv_d * invrhoj;
    }
    acc.drho += drho;
}

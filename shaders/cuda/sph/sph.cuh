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

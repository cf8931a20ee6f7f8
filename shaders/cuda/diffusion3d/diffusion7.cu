// 3D diffusion, 7-point stencil, with P2's kernel shape: 2D thread blocks in the xy-plane, each
// thread marching over `zmarch` consecutive z-planes. Layout: f[(k*ny + j)*nx + i] (x fastest).
// PERIODIC wraps indices; otherwise the outermost points are fixed (Dirichlet) and copied.
#include "diffusion7.cuh"

template <typename T, bool PERIODIC>
__global__ void diffusion7(const T* __restrict__ f, T* __restrict__ fn,
                           const int nx, const int ny, const int nz, const T r, const int zmarch)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= nx || j >= ny) return;
    const int k0 = blockIdx.z * zmarch;
    const int k1 = min(k0 + zmarch, nz);
    const long long plane = (long long)nx * ny;
    const int im = PERIODIC ? (i == 0 ? nx - 1 : i - 1) : i - 1;
    const int ip = PERIODIC ? (i == nx - 1 ? 0 : i + 1) : i + 1;
    const int jm = PERIODIC ? (j == 0 ? ny - 1 : j - 1) : j - 1;
    const int jp = PERIODIC ? (j == ny - 1 ? 0 : j + 1) : j + 1;
    const bool xy_edge = !PERIODIC && (i == 0 || i == nx - 1 || j == 0 || j == ny - 1);
    for (int k = k0; k < k1; ++k) {
        const long long row = (long long)k * plane;
        const long long c = row + (long long)j * nx + i;
        if (!PERIODIC && (xy_edge || k == 0 || k == nz - 1)) {
            fn[c] = f[c];
            continue;
        }
        const int km = PERIODIC ? (k == 0 ? nz - 1 : k - 1) : k - 1;
        const int kp = PERIODIC ? (k == nz - 1 ? 0 : k + 1) : k + 1;
        fn[c] = diffusion7_point<T>(f[c],
                                    f[row + (long long)j * nx + im], f[row + (long long)j * nx + ip],
                                    f[row + (long long)jm * nx + i], f[row + (long long)jp * nx + i],
                                    f[(long long)km * plane + (long long)j * nx + i],
                                    f[(long long)kp * plane + (long long)j * nx + i], r);
    }
}

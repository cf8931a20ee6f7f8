// A tree's fields on its sampling lattice (engine/amr3d/sampled.py) in two launches, after the
// density's axis-0 sum (CuPy's reduction, kept: its summation order is the array code's):
//
//   amr3d_sample_moments<T>  per point the plan reads: the rows asked for (mask bit 0 rho, bits 1-3
//                            ux, uy, uz) into out (rows, n): the density copied, u_a = (0 + c f_q0 +
//                            c f_q1 + ...) / rho over the directions with c_a != 0 in q order, as
//                            leafgrid.macroscopic's generator sum takes them
//   amr3d_sample_corners<T>  per sample and row: w0 a[l0] + w1 a[l1] + ... in corner order; with
//                            `speed` (rows ux, uy, uz) the one row sqrt(ux ux + uy uy + uz uz) in
//                            the array code's order instead (the speed field)
//
// T: float / double. The array code rounds every product and sum on its own, so the module is
// compiled with --fmad=false (no product contracted into an FMA): the same bits as the ~100 CuPy
// launches it replaces (the host issue time of those launches, with the GIL the UI thread also
// wants, was most of a published frame's cost on the worker).

#ifndef AMR3D_SAMPLE_CX
#error "sample.cu needs the velocity set: compile through engine/amr3d/sampled.kernel_spec"
#endif

__device__ const int amr3d_sample_c[3][27] = {AMR3D_SAMPLE_CX, AMR3D_SAMPLE_CY, AMR3D_SAMPLE_CZ};

template <typename T>
__global__ void amr3d_sample_moments(const T* __restrict__ f, const T* __restrict__ rho, long long n, int mask,
                                     T* __restrict__ out)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int row = 0;
    if (mask & 1) {
        out[i] = rho[i];
        row = 1;
    }
    for (int a = 0; a < 3; ++a) {
        if (!(mask & (2 << a))) continue;
        T acc = T(0);
        bool first = true;
        for (int q = 0; q < 27; ++q) {
            int c = amr3d_sample_c[a][q];
            if (c == 0) continue;
            T v = f[(long long)q * n + i];
            T t = c > 0 ? v : -v;  // int(c) * f[q]: exact for c = +-1
            acc = first ? T(0) + t : acc + t;
            first = false;
        }
        out[(long long)row * n + i] = acc / rho[i];
        ++row;
    }
}

template <typename T>
__global__ void amr3d_sample_corners(const T* __restrict__ values, long long n, int rows,
                                     const int* __restrict__ local, const T* __restrict__ w, long long samples,
                                     int speed, T* __restrict__ out)
{
    long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= samples) return;
    T sq = T(0);
    for (int r = 0; r < rows; ++r) {
        const T* a = values + (long long)r * n;
        T v = w[s] * a[local[s]];
        for (int c = 1; c < 8; ++c) {
            long long k = (long long)c * samples + s;
            v = v + w[k] * a[local[k]];
        }
        if (!speed)
            out[(long long)r * samples + s] = v;
        else
            sq = r == 0 ? v * v : sq + v * v;
    }
    if (speed) out[s] = sqrt(sq);
}

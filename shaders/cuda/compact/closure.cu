// P4's boundary closure rows of the compact first derivative's explicit right-hand side
// (engine/compact/schemes.py closure_rows): rows 0, 1, n-2 and n-1 of every line, one thread per
// line, after the stencil framework's interior sweep (engine/compact/rhs.py).
//
// Why a kernel: the array form is ~25 CuPy operations on single columns a call, and the stencil
// path calls it once per variable and derivative — ~360 tiny launches a Navier–Stokes evaluation,
// most of a step's time at P4's 512² (docs/benchmarks/compact-pointwise-h100-2026-11-26).
//
// Lines: line l starts at (l / inner) * outer_stride + (l % inner) * inner_stride and its points are
// elem_stride apart (x-lines of a (nv, ny, nx) stack: inner = 1; y-lines: inner = nx, elem = nx).
// The sums are the reference's, in its order, rounded term by term (compiled with --fmad=false), so
// the result equals the NumPy code's bit for bit. The constants arrive cast to T as NumPy casts them.
typedef long long nagare_closure_i64;

template <typename T>
__global__ void compact_closure(const T* __restrict__ f, T* __restrict__ out, int n, nagare_closure_i64 lines,
                                nagare_closure_i64 inner, nagare_closure_i64 outer_stride,
                                nagare_closure_i64 inner_stride, nagare_closure_i64 elem_stride, T c0, T c1, T c2,
                                T c3, T pa, T ih)
{
    const nagare_closure_i64 l = (nagare_closure_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= lines) return;
    const nagare_closure_i64 at = (l / inner) * outer_stride + (l % inner) * inner_stride;
    const T* a = f + at;
    T* o = out + at;
    const nagare_closure_i64 s = elem_stride, e = (nagare_closure_i64)(n - 1) * elem_stride;
    const T f0 = a[0], f1 = a[s], f2 = a[2 * s], f3 = a[3 * s];
    const T g0 = a[e], g1 = a[e - s], g2 = a[e - 2 * s], g3 = a[e - 3 * s];
    o[0] = (((c0 * f0 + c1 * f1) + c2 * f2) + c3 * f3) * ih;
    o[s] = pa * (f2 - f0) * ih;
    o[e - s] = pa * (g0 - g2) * ih;
    o[e] = -((((c0 * g0 + c1 * g1) + c2 * g2) + c3 * g3)) * ih;
}

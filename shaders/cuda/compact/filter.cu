// The Gaitonde–Visbal filter's explicit side (engine/compact/filter.py rhs): one thread per point of
// every line, the centred sum of the point's order — the tenth-order one inside, order 2i at distance
// i = 1 … HALF-1 from a bounded end, the end points copied — or, on a periodic line, the tenth-order
// sum with wrapped neighbours. One launch per call where the array form is ~40 CuPy operations, most
// of them on single columns (the filter was a third of a Navier–Stokes step at P4's 512²:
// docs/benchmarks/compact-closure-h100-2026-11-26).
//
// ctab[r * (HALF + 1) + n]: the coefficients of the centred sum with r neighbours a side, already cast
// to T as NumPy casts them: n = 0 → a_0, n ≥ 1 → a_n / 2. The sum is the reference's, in its order
// (a_0 f_i, then + (a_n/2)(f_{i+n} + f_{i-n}) for n = 1 … r), rounded term by term (--fmad=false): the
// NumPy code's bits. Lines as compact_closure's (closure.cu). Threads walk the points of a line one
// after the other (lines_fastest = 0: x-lines, whose points are contiguous) or the lines one after the
// other at each point (lines_fastest = 1: y-lines, whose neighbouring lines are contiguous), so a warp's
// loads and stores are always consecutive addresses; walking a y-line's points put every thread of a
// warp on its own row (32 sectors a load), which made the y pass 4.5x the x pass at 512².
typedef long long nagare_filter_i64;

template <typename T, int HALF>
__global__ void compact_filter_rhs(const T* __restrict__ f, T* __restrict__ out, const T* __restrict__ ctab, int n,
                                   int periodic, nagare_filter_i64 lines, nagare_filter_i64 inner,
                                   nagare_filter_i64 outer_stride, nagare_filter_i64 inner_stride,
                                   nagare_filter_i64 elem_stride, int lines_fastest)
{
    const nagare_filter_i64 t = (nagare_filter_i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= lines * n) return;
    const nagare_filter_i64 l = lines_fastest ? t % lines : t / n;
    const int i = (int)(lines_fastest ? t / lines : t % n);
    const nagare_filter_i64 s = elem_stride;
    const T* a = f + (l / inner) * outer_stride + (l % inner) * inner_stride;
    T* o = out + (l / inner) * outer_stride + (l % inner) * inner_stride;
    int r = HALF;
    if (!periodic) {
        const int edge = i < n - 1 - i ? i : n - 1 - i;  // distance to the nearer end
        if (edge == 0) {
            o[i * s] = a[i * s];
            return;
        }
        if (edge < HALF) r = edge;
    }
    const T* c = ctab + r * (HALF + 1);
    T acc = c[0] * a[i * s];
    for (int k = 1; k <= r; ++k) {
        int up = i + k, dn = i - k;
        if (periodic) {
            if (up >= n) up -= n;
            if (dn < 0) dn += n;
        }
        acc = acc + c[k] * (a[up * s] + a[dn * s]);
    }
    o[i * s] = acc;
}

// Periodic pads of a decomposed slab (engine/decomp/stencil.py): the stencil families' periodic
// grids are split along their slowest axis and each slab is padded along its fast axes; after an
// update the pads of the updated rows are refilled from the wrapped interior points.
//
// One thread per pad point of the rows of up to two ranges [r0a, r0a + na), [r0b, r0b + nb) of a
// padded slab (rows, Y, X) (2D: Y = 1, py = 0). Sources are interior points only, so the threads
// need no order. W is an unsigned integer of the element's size: the copy moves bits, so one
// instantiation serves every dtype of that size (fp16 needs no half header).
template <typename W>
__global__ void nagare_decomp_wrap_pads(W* __restrict__ a, long long r0a, long long na, long long r0b,
                                        long long nb, int Y, int X, int py, int px, int my, int mx, int npad) {
    const long long P = (long long)npad;
    const long long total = (na + nb) * P;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // one thread per pad point
    if (i < total) {
        const long long r = i / P;
        const long long row = r < na ? r0a + r : r0b + (r - na);
        int k = (int)(i % P);
        const int top = py * X;
        int y, x;
        if (k < top) { y = k / X; x = k % X; }                                   // the y pad below
        else if (k < 2 * top) { k -= top; y = py + my + k / X; x = k % X; }      // the y pad above
        else { k -= 2 * top; y = py + k / (2 * px); const int c = k % (2 * px);  // the x pads of a row
               x = c < px ? c : mx + c; }
        const int ys = py + ((y - py) % my + my) % my;
        const int xs = px + ((x - px) % mx + mx) % mx;
        a[(row * Y + y) * X + x] = a[(row * Y + ys) * X + xs];
    }
}

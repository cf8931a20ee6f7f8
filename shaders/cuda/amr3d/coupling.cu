// Level coupling of the octree (docs/amr3d.md "Level coupling", engine/amr3d/interface.py): the
// kernels that join the per-level leaf grids of P0's ladder across 2:1 interfaces. Each level is
// its own leaf grid f_l[q][leaf][k][j][i] (a buffer pair per level: current and next/previous).
//
//   amr3d_rescale_points   values of a list of points of one level, time-interpolated between its
//                          previous and current buffer and rescaled to a neighbour level
//                          (engine/amr3d/levels.py rescale): the interface buffers
//   amr3d_restrict         coarse copies of fine-owned nodes take the rescaled fine value
//   amr3d_rescale_two      a finer level's first step: the coarse values at theta = 0 AND 1/2 (the
//                          coarse level is unchanged between its two steps) and the fine values, in
//                          one launch (tree_stepper.py, fused coupling)
//   amr3d_restrict_fine    the restriction l+1 -> l deferred to the start of level l's second step,
//                          with that step's fine values (both rescale level l+1 -> l)
//   amr3d_restrict_two     a second step's restriction l+1 -> l with the restriction l -> l-1 that
//                          follows it (and level l-1's fine values), where the second reads none of
//                          the nodes the first writes (tree_stepper.py)
//   amr3d_interpolate_rows<L> amr3d_interpolate from compact rows (nonzero weights only, and only the
//                          populations the fix-up reads: interp_rows.py), for one or both time
//                          levels' coarse buffers in one launch (the fused coupling's), L threads
//                          a position (27 / L populations each)
//   amr3d_rows_need,       the compact rows themselves (interp_rows.py build) from the dense rows and
//   amr3d_rows_build       the fix-up's descriptors: the entries of the interpolated buffer the
//                          descriptors read marked, then a thread per position compacts its row
//                          and gathers its mask (two launches a level, no 64-bit temporaries)
//   amr3d_interpolate<S>   all 27 populations at each distinct source position in a coarser leaf
//                          (S = 8 trilinear, 27 quadratic stencil points), a thread per position
//   amr3d_fixup            interface points (a pull source on another level or beyond a side):
//                          pull through their gather descriptors, then BGK — overwriting what the
//                          ladder kernel wrote there (it read its own leaf in those directions);
//                          walls (bounce-back) and free-slip sides (specular reflection) are only
//                          descriptors, built on the host (engine/amr3d/tables.py)
//   amr3d_csm_fix_velocity (Kobayashi's CSM only) the velocity of the same gather, for the pre-pass
//
// The operations follow engine/amr3d/levels.py and reference.py in the same order, in fp32.
//
// S, the level buffers' storage: float, or fp16::half_bits for fp16 storage (beyond P0; d3q27.cuh
// load_pop/store_pop: f − w in IEEE half, fp32 arithmetic). The interface buffers (rescaled fine and
// coarse values, interpolated values, link values) stay fp32: they are a few % of a level's points,
// written and read once a level step, and a rounding there would be one more than the reference's
// (reference.py rounds the level state only, as the level buffers store it).
#include "d3q27.cuh"
#include "fixgather.cuh"

using d3q27::idx_t;
using d3q27::Q;

namespace amr3d {

// Post-collision populations of level s expressed on level t (levels.rescale):
//   f_t = f^eq(rho, u + (a_s - a_t)/2) + F_t + alpha (f - F_s - f^eq(rho, u)),
// rho, u the moments of f - F_s. Without forces: f^eq(rho, u) + alpha (f - f^eq(rho, u)).
__device__ __forceinline__ void rescale(float f[Q], float alpha, float asx, float asy, float asz, float atx,
                                        float aty, float atz, bool forced)
{
    float rho = f[0];
#pragma unroll
    for (int q = 1; q < Q; ++q) rho += f[q];
    if (forced) {
#pragma unroll
        for (int q = 1; q < Q; ++q)
            f[q] -= 3.f * d3q27::w(q) * (d3q27::cx(q) * asx + d3q27::cy(q) * asy + d3q27::cz(q) * asz) * rho;
    }
    float r = 0.f, jx = 0.f, jy = 0.f, jz = 0.f;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        r += f[q];
        jx += d3q27::cx(q) * f[q];
        jy += d3q27::cy(q) * f[q];
        jz += d3q27::cz(q) * f[q];
    }
    const float inv = 1.f / r;
    const float ux = jx * inv, uy = jy * inv, uz = jz * inv;
    const float usq = ux * ux + uy * uy + uz * uz;
    const float vx = ux + 0.5f * (asx - atx), vy = uy + 0.5f * (asy - aty), vz = uz + 0.5f * (asz - atz);
    const float vsq = vx * vx + vy * vy + vz * vz;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const float cu = d3q27::cx(q) * ux + d3q27::cy(q) * uy + d3q27::cz(q) * uz;
        const float feq = d3q27::w(q) * r * (1.f + 3.f * cu + 4.5f * cu * cu - 1.5f * usq);
        const float neq = alpha * (f[q] - feq);
        if (forced) {
            const float cv = d3q27::cx(q) * vx + d3q27::cy(q) * vy + d3q27::cz(q) * vz;
            const float feq_t = d3q27::w(q) * r * (1.f + 3.f * cv + 4.5f * cv * cv - 1.5f * vsq);
            const float ft = 3.f * d3q27::w(q) * (d3q27::cx(q) * atx + d3q27::cy(q) * aty + d3q27::cz(q) * atz) * r;
            f[q] = feq_t + neq + ft;
        } else {
            f[q] = feq + neq;
        }
    }
}

}  // namespace amr3d

namespace amr3d {
// The populations of point p time-interpolated between prev and cur: theta == 0 reads prev only,
// theta == 1 cur only (the reference's three cases, same arithmetic).
template <typename S>
__device__ __forceinline__ void load_at_time(const S* __restrict__ cur, const S* __restrict__ prev, idx_t p,
                                             idx_t plane, float theta, float f[Q])
{
    if (theta == 0.f) {
#pragma unroll
        for (int q = 0; q < Q; ++q) f[q] = d3q27::load_pop(prev, q * plane + p, q);
    } else if (theta == 1.f) {
#pragma unroll
        for (int q = 0; q < Q; ++q) f[q] = d3q27::load_pop(cur, q * plane + p, q);
    } else {
        const float a = 1.f - theta;
#pragma unroll
        for (int q = 0; q < Q; ++q)
            f[q] = a * d3q27::load_pop(prev, q * plane + p, q) + theta * d3q27::load_pop(cur, q * plane + p, q);
    }
}

// out[q * n + r] = rescale(point pts[r] at theta)
template <typename S>
__device__ __forceinline__ void rescale_point(const S* __restrict__ cur, const S* __restrict__ prev,
                                              const long long* __restrict__ pts, int n, int r, idx_t plane,
                                              float theta, float alpha, float asx, float asy, float asz, float atx,
                                              float aty, float atz, bool forced, float* __restrict__ out)
{
    float f[Q];
    load_at_time(cur, prev, (idx_t)pts[r], plane, theta, f);
    rescale(f, alpha, asx, asy, asz, atx, aty, atz, forced);
#pragma unroll
    for (int q = 0; q < Q; ++q) out[(idx_t)q * n + r] = f[q];
}
}  // namespace amr3d

// out[q * n + r] = rescale((1 - theta) prev[pts[r]] + theta cur[pts[r]])
template <typename S = float>
__global__ void amr3d_rescale_points(const S* __restrict__ cur, const S* __restrict__ prev,
                                                const long long* __restrict__ pts, int n, long long plane,
                                                float theta, float alpha, float asx, float asy, float asz,
                                                float atx, float aty, float atz, int forced,
                                                float* __restrict__ out)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    amr3d::rescale_point(cur, prev, pts, n, r, (idx_t)plane, theta, alpha, asx, asy, asz, atx, aty, atz, forced != 0,
                         out);
}

// A finer level's first step (theta = 0): threads r < nc rescale coarse point cpts[r] at theta = 0
// into out0 and at theta = 1/2 into out_half (level l-1 does not change between level l's two
// steps, so the second step's coarse values are known now: one launch instead of two, and the
// second read of the point hits the cache); threads nc <= r < nc + nf rescale fine point
// fpts[r - nc] (level l+1's current buffer, theta = 1) into fout. Each value is
// amr3d_rescale_points' for the same point, bit for bit (the same device function).
template <typename S = float>
__global__ void amr3d_rescale_two(const S* __restrict__ ccur, const S* __restrict__ cprev,
                                  const long long* __restrict__ cpts, int nc, long long cplane, float calpha,
                                  float casx, float casy, float casz, float catx, float caty, float catz, int cforced,
                                  float* __restrict__ out0, float* __restrict__ out_half, const S* __restrict__ fcur,
                                  const long long* __restrict__ fpts, int nf, long long fplane, float falpha,
                                  float fasx, float fasy, float fasz, float fatx, float faty, float fatz, int fforced,
                                  float* __restrict__ fout)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < nc) {
        amr3d::rescale_point(ccur, cprev, cpts, nc, r, (idx_t)cplane, 0.f, calpha, casx, casy, casz, catx, caty, catz,
                             cforced != 0, out0);
        amr3d::rescale_point(ccur, cprev, cpts, nc, r, (idx_t)cplane, 0.5f, calpha, casx, casy, casz, catx, caty,
                             catz, cforced != 0, out_half);
    } else if (r < nc + nf) {
        amr3d::rescale_point(fcur, fcur, fpts, nf, r - nc, (idx_t)fplane, 1.f, falpha, fasx, fasy, fasz, fatx, faty,
                             fatz, fforced != 0, fout);
    }
}

// The restriction of one pair (amr3d_restrict): dst[q][dst_pts[r]] = rescale(src[q][src_pts[r]])
namespace amr3d {
template <typename S>
__device__ __forceinline__ void restrict_point(const S* __restrict__ src, S* __restrict__ dst,
                                               const long long* __restrict__ src_pts,
                                               const long long* __restrict__ dst_pts, int r, idx_t src_plane,
                                               idx_t dst_plane, float alpha, float asx, float asy, float asz,
                                               float atx, float aty, float atz, bool forced)
{
    const idx_t s = (idx_t)src_pts[r], d = (idx_t)dst_pts[r];
    float f[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) f[q] = d3q27::load_pop(src, q * src_plane + s, q);
    rescale(f, alpha, asx, asy, asz, atx, aty, atz, forced);
#pragma unroll
    for (int q = 0; q < Q; ++q) d3q27::store_pop(dst, q * dst_plane + d, q, f[q]);
}
}  // namespace amr3d

// Fine -> coarse, injection of coincident nodes: restrict_point for each of the n pairs.
template <typename S = float>
__global__ void amr3d_restrict(const S* __restrict__ src, S* __restrict__ dst,
                                          const long long* __restrict__ src_pts, const long long* __restrict__ dst_pts,
                                          int n, long long src_plane, long long dst_plane, float alpha, float asx,
                                          float asy, float asz, float atx, float aty, float atz, int forced)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    amr3d::restrict_point(src, dst, src_pts, dst_pts, r, (idx_t)src_plane, (idx_t)dst_plane, alpha, asx, asy, asz, atx,
                          aty, atz, forced != 0);
}

// The restriction l+1 -> l (threads r < nr: amr3d_restrict's pairs) and the fine values of level
// l's next step (threads nr <= r < nr + nf: fine point fpts[r - nr] of level l+1, theta = 1, into
// fout) in one launch: both rescale level l+1's current buffer to level l (one alpha, one pair of
// accelerations), and neither reads what the other writes (the restriction writes level l only).
template <typename S = float>
__global__ void amr3d_restrict_fine(const S* __restrict__ src, S* __restrict__ dst,
                                    const long long* __restrict__ src_pts, const long long* __restrict__ dst_pts,
                                    int nr, const long long* __restrict__ fpts, int nf, long long src_plane,
                                    long long dst_plane, float alpha, float asx, float asy, float asz, float atx,
                                    float aty, float atz, int forced, float* __restrict__ fout)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < nr) {
        amr3d::restrict_point(src, dst, src_pts, dst_pts, r, (idx_t)src_plane, (idx_t)dst_plane, alpha, asx, asy, asz,
                              atx, aty, atz, forced != 0);
    } else if (r < nr + nf) {
        amr3d::rescale_point(src, src, fpts, nf, r - nr, (idx_t)src_plane, 1.f, alpha, asx, asy, asz, atx, aty, atz,
                             forced != 0, fout);
    }
}

// Two restrictions in a row in one launch (the fused coupling: a second step's restriction
// l+1 -> l, held back, with the restriction l -> l-1 that follows it): threads r < na the first
// (level l+1 -> level l), na <= r < na + nb the second (level l -> level l-1), and with nf > 0
// na + nb <= r < na + nb + nf level l-1's fine values (fine point fpts[r - na - nb] of level l,
// theta = 1, into fout: amr3d_restrict_fine's). The second part reads level l where the first
// writes it, so the host pairs them only where the second's points (src_b, fpts) are none of the
// first's dst_a (tree_stepper.py, pairable restrictions): each value is then the separate
// launches', bit for bit (the same device functions, the same inputs).
template <typename S = float>
__global__ void amr3d_restrict_two(const S* __restrict__ src_a, S* __restrict__ mid,
                                   const long long* __restrict__ src_pts_a, const long long* __restrict__ dst_pts_a,
                                   int na, long long plane_a, long long plane_mid, float alpha_a, float asx_a,
                                   float asy_a, float asz_a, float atx_a, float aty_a, float atz_a, int forced_a,
                                   S* __restrict__ dst_b, const long long* __restrict__ src_pts_b,
                                   const long long* __restrict__ dst_pts_b, int nb,
                                   const long long* __restrict__ fpts, int nf, long long plane_b, float alpha_b,
                                   float asx_b, float asy_b, float asz_b, float atx_b, float aty_b, float atz_b,
                                   int forced_b, float* __restrict__ fout)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < na) {
        amr3d::restrict_point(src_a, mid, src_pts_a, dst_pts_a, r, (idx_t)plane_a, (idx_t)plane_mid, alpha_a, asx_a,
                              asy_a, asz_a, atx_a, aty_a, atz_a, forced_a != 0);
    } else if (r < na + nb) {
        amr3d::restrict_point((const S*)mid, dst_b, src_pts_b, dst_pts_b, r - na, (idx_t)plane_mid, (idx_t)plane_b,
                              alpha_b, asx_b, asy_b, asz_b, atx_b, aty_b, atz_b, forced_b != 0);
    } else if (r < na + nb + nf) {
        amr3d::rescale_point((const S*)mid, (const S*)mid, fpts, nf, r - na - nb, (idx_t)plane_mid, 1.f, alpha_b,
                             asx_b, asy_b, asz_b, atx_b, aty_b, atz_b, forced_b != 0, fout);
    }
}

// All 27 populations at each distinct source position inside a coarser leaf: out[q][u] =
// sum_s w[u][s] coarse[q][slot[u][s]] in the order s = 0..S-1 (the reference's order). The stencil
// row is read once for the 27 populations it serves (a thread per (population, position) reads it
// 27 times and is several times slower: docs/benchmarks/amr3d-design-figures/README.md).
namespace amr3d {
template <int S>
__device__ __forceinline__ void interpolate_at(const float* __restrict__ coarse, int ncoarse,
                                               const long long* __restrict__ slot, const float* __restrict__ w, int n,
                                               int u, float* __restrict__ out)
{
    float acc[Q];
    const idx_t row = (idx_t)u * S;
    {
        const float w0 = w[row];
        const idx_t s0 = (idx_t)slot[row];
#pragma unroll
        for (int q = 0; q < Q; ++q) acc[q] = w0 * coarse[(idx_t)q * ncoarse + s0];
    }
    for (int s = 1; s < S; ++s) {
        const float ws = w[row + s];
        const idx_t ss = (idx_t)slot[row + s];
#pragma unroll
        for (int q = 0; q < Q; ++q) acc[q] = acc[q] + ws * coarse[(idx_t)q * ncoarse + ss];
    }
#pragma unroll
    for (int q = 0; q < Q; ++q) out[(idx_t)q * n + u] = acc[q];
}
}  // namespace amr3d

template <int S>
__global__ void amr3d_interpolate(const float* __restrict__ coarse, int ncoarse, const long long* __restrict__ slot,
                                  const float* __restrict__ w, int n, float* __restrict__ out)
{
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n) return;
    amr3d::interpolate_at<S>(coarse, ncoarse, slot, w, n, u, out);
}

// The compact rows (engine/amr3d/interp_rows.py): position u's nonzero pairs, the first count[u] of
// its row of stride S in (slot, w), and only the populations of mask[u] (those the fix-up reads
// there) computed and written, for nbuf (1 or 2) coarse buffers with the same stencils: positions
// u < n the first, n <= u < 2n the second (a finer level's theta = 0 and theta = 1/2 values,
// amr3d_rescale_two). The values are amr3d_interpolate's, bit for bit (interp_rows.py says why);
// the rest of out is left as it was.
// L threads share a position (L = 1, 3 or 9; L consecutive threads, lane = t % L): lane k takes
// populations q = k, k + L, k + 2L, ... (27 / L accumulators instead of 27: fewer registers, L times
// the threads in flight for the latency-bound gathers; interleaved so that the ~9 populations the
// mask keeps, which stream in across one face, spread over the lanes). Each lane reads the row's
// (slot, w) pairs itself: the L lanes read the same addresses, one request for the warp. Each
// population's sum runs over the same pairs in the same order as with L = 1: the same bits.
template <int L>
__global__ void amr3d_interpolate_rows(const float* __restrict__ coarse0, const float* __restrict__ coarse1,
                                       int ncoarse, const int* __restrict__ count, const int* __restrict__ slot,
                                       const float* __restrict__ w, int stride, const unsigned int* __restrict__ mask,
                                       int n, int nbuf, float* __restrict__ out0, float* __restrict__ out1)
{
    static_assert(Q % L == 0, "L divides the 27 populations");
    constexpr int P = Q / L;  // populations a lane
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = (int)(t % L);
    int u = (int)(t / L);
    if (u >= nbuf * n) return;
    const bool second = u >= n;
    if (second) u -= n;
    const float* __restrict__ coarse = second ? coarse1 : coarse0;
    float* __restrict__ out = second ? out1 : out0;
    // bit i: population lane + i L wanted
    unsigned int need = 0u;
    {
        const unsigned int all = mask[u];
#pragma unroll
        for (int i = 0; i < P; ++i) need |= ((all >> (lane + i * L)) & 1u) << i;
    }
    const int len = count[u];
    if (need == 0u || len == 0) return;
    const idx_t a = (idx_t)u * stride, b = a + len;
    const float* __restrict__ c = coarse + (idx_t)lane * ncoarse;  // population lane's plane
    const idx_t step = (idx_t)L * ncoarse;                         // to population q + L
    float acc[P];
    {
        const float w0 = w[a];
        const idx_t s0 = (idx_t)slot[a];
#pragma unroll
        for (int i = 0; i < P; ++i)
            if ((need >> i) & 1u) acc[i] = w0 * c[i * step + s0];
    }
    for (idx_t k = a + 1; k < b; ++k) {
        const float ws = w[k];
        const idx_t ss = (idx_t)slot[k];
#pragma unroll
        for (int i = 0; i < P; ++i)
            if ((need >> i) & 1u) acc[i] = acc[i] + ws * c[i * step + ss];
    }
    float* __restrict__ o = out + (idx_t)lane * n + u;
#pragma unroll
    for (int i = 0; i < P; ++i)
        if ((need >> i) & 1u) o[(idx_t)i * L * n] = acc[i];
}

// The compact rows' build (engine/amr3d/interp_rows.py build, the same arrays bit for bit), in two
// launches a level. amr3d_rows_need: a thread per descriptor entry; an entry -1 - j with
// first <= j < first + size (first = Q * n_fine: past the fine buffer) reads entry j - first of the
// interpolated buffer (population (j - first) / n of position (j - first) % n), marked in need
// (zeroed before; several entries may mark one: they all store 1).
template <typename I>
__global__ void amr3d_rows_need(const I* __restrict__ desc, long long ndesc, long long first, long long size,
                                unsigned char* __restrict__ need)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= ndesc) return;
    const long long d = (long long)desc[i];
    const long long j = -1 - d - first;
    if (d < 0 && j >= 0 && j < size) need[j] = 1;
}

// amr3d_rows_build: a thread per position u of the dense rows (slot, w: n rows of stride entries);
// its nonzero pairs moved to the front of its row in their order, the zero ones behind in theirs,
// count[u] the nonzero ones, mask[u] bit q where need marks population q at u. The slots fit in 32
// bits: they index the coarse buffer's nodes (the caller checks that count).
__global__ void amr3d_rows_build(const long long* __restrict__ slot, const float* __restrict__ w, int n, int stride,
                                 const unsigned char* __restrict__ need, int* __restrict__ count,
                                 int* __restrict__ cslot, float* __restrict__ cw, unsigned int* __restrict__ mask)
{
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n) return;
    const idx_t a = (idx_t)u * stride;
    int k = 0;
    for (int s = 0; s < stride; ++s) {
        const float ws = w[a + s];
        if (ws != 0.f) {
            cslot[a + k] = (int)slot[a + s];
            cw[a + k] = ws;
            ++k;
        }
    }
    count[u] = k;
    for (int s = 0; s < stride; ++s) {
        const float ws = w[a + s];
        if (!(ws != 0.f)) {
            cslot[a + k] = (int)slot[a + s];
            cw[a + k] = ws;
            ++k;
        }
    }
    unsigned int bits = 0u;
    for (int q = 0; q < Q; ++q)
        if (need[(idx_t)q * n + u]) bits |= 1u << q;
    mask[u] = bits;
}

// Interface points: desc[q * n + r] >= 0 is an index into src (own leaf, same-level leaf or, for a
// wall, the own point's opposite population; at a free-slip side the reflected population of the
// mirrored node, which may also sit in the fine or interpolated buffer); < 0 is -1 - j: j < nfine
// an entry of the fine buffer (level l+1 rescaled), then ninterp entries of the interpolated buffer,
// then the link buffer (interpolated bounce-back at bodies, amr3d_links). Then BGK, written at
// pts[r] of dst. I: int where every index of the level fits (half the descriptor bytes), else
// long long.

template <typename I, typename S = float>
__global__ void amr3d_fixup(const S* __restrict__ src, S* __restrict__ dst, const I* __restrict__ pts,
                            const I* __restrict__ desc, int n, long long plane, const float* __restrict__ fine_buf,
                            long long nfine, const float* __restrict__ interp_buf, long long ninterp,
                            const float* __restrict__ link_buf, float omega, float ax, float ay, float az
                            NAGARE_CSM_PARAM)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    float f[Q];
    amr3d::fix_gather<I, S>(src, desc, n, r, fine_buf, nfine, interp_buf, ninterp, link_buf, f);
    const idx_t p = (idx_t)pts[r];
    d3q27::collide(f, omega, ax, ay, az NAGARE_CSM_AT(p));
#pragma unroll
    for (int q = 0; q < Q; ++q) d3q27::store_pop(dst, q * plane + p, q, f[q]);
}

#if NAGARE_CSM
// Kobayashi's CSM pre-pass at the interface points (after ladder.cu's amr3d_csm_velocity, before
// its amr3d_csm_coefficient): the velocity of the populations the fix-up will collide, written at
// pts[r] of u[3][plane] (the level's next buffer, as amr3d_csm_velocity's).
template <typename I>
__global__ void amr3d_csm_fix_velocity(const float* __restrict__ src, float* __restrict__ u, const I* __restrict__ pts,
                                       const I* __restrict__ desc, int n, long long plane,
                                       const float* __restrict__ fine_buf, long long nfine,
                                       const float* __restrict__ interp_buf, long long ninterp,
                                       const float* __restrict__ link_buf)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    float f[Q];
    amr3d::fix_gather<I>(src, desc, n, r, fine_buf, nfine, interp_buf, ninterp, link_buf, f);
    float rho, ux, uy, uz;
    d3q27::moments(f, rho, ux, uy, uz);
    const idx_t p = (idx_t)pts[r];
    u[p] = ux;
    u[plane + p] = uy;
    u[2 * plane + p] = uz;
}
#endif

// Flow boundaries (engine/amr3d/boundaries.py, applied after the fix-up of a level step, in this
// order): outflow nodes take all populations of the next node inwards scaled by 1/rho of that node
// (boundaries.outflow_values: the pressure held at the outlet, so the density level of the flow is
// fixed); inlet and solid nodes take a fixed population vector (the inflow equilibrium, or rest). A
// thread per point. The outflow's product is __fmul_rn (never contracted into the store's - w on
// fp16 storage), so fp16 gives the fp32 kernel's value rounded; a set stores values[q] as store_pop
// does.
template <typename S = float>
__global__ void amr3d_outflow_points(S* __restrict__ f, const long long* __restrict__ dst,
                                     const long long* __restrict__ src, int n, long long plane)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const idx_t d = (idx_t)dst[r], s = (idx_t)src[r];
    float v[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) v[q] = d3q27::load_pop(f, q * plane + s, q);
    float rho = v[0];
#pragma unroll
    for (int q = 1; q < Q; ++q) rho += v[q];
    const float inv = 1.f / rho;
#pragma unroll
    for (int q = 0; q < Q; ++q) d3q27::store_pop(f, q * plane + d, q, __fmul_rn(v[q], inv));
}

template <typename S = float>
__global__ void amr3d_set_points(S* __restrict__ f, const long long* __restrict__ pts, int n,
                                            long long plane, const float* __restrict__ values)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const idx_t p = (idx_t)pts[r];
#pragma unroll
    for (int q = 0; q < Q; ++q) d3q27::store_pop(f, q * plane + p, q, values[q]);
}

// Interpolated bounce-back (Bouzidi et al. 2001, linear; boundaries.py _weights): the value each
// body link pulls, from two post-collision values of the level's current buffer. Runs before the
// fix-up, which reads it through its descriptors. i1, i2 are flat indices q' * plane + p (the link
// buffer is fp32).
namespace amr3d {
__device__ __forceinline__ float load_flat(const float* p, idx_t i, idx_t) { return p[i]; }
// fp16 storage: the population's direction q' = i / plane gives the shift to add back
__device__ __forceinline__ float load_flat(const fp16::half_bits* p, idx_t i, idx_t plane)
{
    return d3q27::load_pop(p, i, (int)(i / plane));
}
}  // namespace amr3d

template <typename S = float>
__global__ void amr3d_links(const S* __restrict__ src, const long long* __restrict__ i1,
                            const long long* __restrict__ i2, const float* __restrict__ w1,
                            const float* __restrict__ w2, int n, long long plane, float* __restrict__ out)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    out[k] = w1[k] * amr3d::load_flat(src, (idx_t)i1[k], (idx_t)plane)
             + w2[k] * amr3d::load_flat(src, (idx_t)i2[k], (idx_t)plane);
}

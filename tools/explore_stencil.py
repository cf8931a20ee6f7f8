"""Hand-written 7-point diffusion kernels at 512³ on one GPU (CuPy): which z-march kernel shape can
reach 90 % of the copy bandwidth, measured before the shape went into the stencil generator.

    python tools/explore_stencil.py 512 [--compare]

zvec<V>: V x-consecutive points per thread (vector loads, x-neighbours by warp shuffle, z in
registers); zvec_smem<V>: the same with the y-neighbours from a shared-memory plane. Results:
hand-kernels-512.txt in the stencil-* folders of docs/benchmarks/. --compare: zvec<4> and three
variants of it against the generated vec4 kernel in one process, interleaved (compare-512-*.txt
there)."""
import sys

import cupy as cp
import numpy as np

SRC = r'''
template <int V> struct VecT;
template <> struct VecT<1> { typedef float t; };
template <> struct VecT<2> { typedef float2 t; };
template <> struct VecT<4> { typedef float4 t; };

template <int V> __device__ __forceinline__ void unpack(const typename VecT<V>::t& a, float* o);
template <> __device__ __forceinline__ void unpack<1>(const float& a, float* o) { o[0] = a; }
template <> __device__ __forceinline__ void unpack<2>(const float2& a, float* o) { o[0] = a.x; o[1] = a.y; }
template <> __device__ __forceinline__ void unpack<4>(const float4& a, float* o) {
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
}
template <int V> __device__ __forceinline__ typename VecT<V>::t pack(const float* o);
template <> __device__ __forceinline__ float pack<1>(const float* o) { return o[0]; }
template <> __device__ __forceinline__ float2 pack<2>(const float* o) { return make_float2(o[0], o[1]); }
template <> __device__ __forceinline__ float4 pack<4>(const float* o) { return make_float4(o[0], o[1], o[2], o[3]); }

__device__ __forceinline__ int wrapi(int v, int n) { return v < 0 ? v + n : (v >= n ? v - n : v); }

// z-march, V x-consecutive points per thread, vector loads, x halos by shuffle; periodic.
template <int V, bool CS>
__global__ void zvec(const float* __restrict__ in, float* __restrict__ out, float r, int nx, int ny, int nz, int zm) {
    typedef typename VecT<V>::t VT;
    const int lane = threadIdx.x & 31;
    const int x0 = V * (blockIdx.x * blockDim.x + threadIdx.x);
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * zm;
    const int k1 = min(k0 + zm, nz);
    const long long plane = (long long)nx * ny;
    const int jm = wrapi(j - 1, ny), jp = wrapi(j + 1, ny);
    const int xl = wrapi(x0 - 1, nx), xr = wrapi(x0 + V, nx);
    float prev[V], cur[V], nxt[V];
    unpack<V>(*reinterpret_cast<const VT*>(in + wrapi(k0 - 1, nz) * plane + (long long)j * nx + x0), prev);
    unpack<V>(*reinterpret_cast<const VT*>(in + k0 * plane + (long long)j * nx + x0), cur);
    for (int k = k0; k < k1; ++k) {
        const long long base = k * plane;
        const long long kn = (long long)wrapi(k + 1, nz) * plane;
        float ym[V], yp[V];
        unpack<V>(*reinterpret_cast<const VT*>(in + kn + (long long)j * nx + x0), nxt);
        unpack<V>(*reinterpret_cast<const VT*>(in + base + (long long)jm * nx + x0), ym);
        unpack<V>(*reinterpret_cast<const VT*>(in + base + (long long)jp * nx + x0), yp);
        float left = __shfl_up_sync(0xffffffffu, cur[V - 1], 1);
        float right = __shfl_down_sync(0xffffffffu, cur[0], 1);
        if (lane == 0) left = in[base + (long long)j * nx + xl];
        if (lane == 31) right = in[base + (long long)j * nx + xr];
        float o[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float l = v == 0 ? left : cur[v - 1];
            const float rr = v == V - 1 ? right : cur[v + 1];
            o[v] = cur[v] + r * (((l + rr) + (ym[v] + yp[v])) + (prev[v] + nxt[v]) - 6.0f * cur[v]);
        }
        VT* dst = reinterpret_cast<VT*>(out + base + (long long)j * nx + x0);
        if (CS) __stcs(dst, pack<V>(o)); else *dst = pack<V>(o);
#pragma unroll
        for (int v = 0; v < V; ++v) { prev[v] = cur[v]; cur[v] = nxt[v]; }
    }
}

// Same, but the y±1 rows come from a shared-memory copy of the current plane's block rows
// (each warp row loads its own centre row into smem; the block's top/bottom halo rows are loaded by
// the first/last thread row as extra rows). Tile: blockDim.x*V wide, blockDim.y + 2 rows.
template <int V>
__global__ void zvec_smem(const float* __restrict__ in, float* __restrict__ out, float r, int nx, int ny, int nz,
                          int zm) {
    typedef typename VecT<V>::t VT;
    extern __shared__ float sm[];  // [2][blockDim.y + 2][blockDim.x * V]
    const int W = blockDim.x * V, H = blockDim.y + 2;
    const int lane = threadIdx.x & 31;
    const int x0 = V * (blockIdx.x * blockDim.x + threadIdx.x);
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * zm;
    const int k1 = min(k0 + zm, nz);
    const long long plane = (long long)nx * ny;
    const int xl = wrapi(x0 - 1, nx), xr = wrapi(x0 + V, nx);
    const int ty = threadIdx.y + 1, tx = threadIdx.x * V;
    const bool top = threadIdx.y == 0, bot = threadIdx.y == blockDim.y - 1;
    const int jt = wrapi(j - 1, ny), jb = wrapi(j + 1, ny);
    float prev[V], cur[V], nxt[V];
    unpack<V>(*reinterpret_cast<const VT*>(in + wrapi(k0 - 1, nz) * plane + (long long)j * nx + x0), prev);
    unpack<V>(*reinterpret_cast<const VT*>(in + k0 * plane + (long long)j * nx + x0), cur);
    int buf = 0;
    for (int k = k0; k < k1; ++k) {
        const long long base = k * plane;
        const long long kn = (long long)wrapi(k + 1, nz) * plane;
        float* s = sm + buf * H * W;
        *reinterpret_cast<VT*>(s + ty * W + tx) = pack<V>(cur);
        if (top) *reinterpret_cast<VT*>(s + tx) = *reinterpret_cast<const VT*>(in + base + (long long)jt * nx + x0);
        if (bot) *reinterpret_cast<VT*>(s + (H - 1) * W + tx) =
            *reinterpret_cast<const VT*>(in + base + (long long)jb * nx + x0);
        unpack<V>(*reinterpret_cast<const VT*>(in + kn + (long long)j * nx + x0), nxt);
        __syncthreads();
        float ym[V], yp[V];
        unpack<V>(*reinterpret_cast<const VT*>(s + (ty - 1) * W + tx), ym);
        unpack<V>(*reinterpret_cast<const VT*>(s + (ty + 1) * W + tx), yp);
        float left = __shfl_up_sync(0xffffffffu, cur[V - 1], 1);
        float right = __shfl_down_sync(0xffffffffu, cur[0], 1);
        if (lane == 0) left = in[base + (long long)j * nx + xl];
        if (lane == 31) right = in[base + (long long)j * nx + xr];
        float o[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float l = v == 0 ? left : cur[v - 1];
            const float rr = v == V - 1 ? right : cur[v + 1];
            o[v] = cur[v] + r * (((l + rr) + (ym[v] + yp[v])) + (prev[v] + nxt[v]) - 6.0f * cur[v]);
        }
        *reinterpret_cast<VT*>(out + base + (long long)j * nx + x0) = pack<V>(o);
#pragma unroll
        for (int v = 0; v < V; ++v) { prev[v] = cur[v]; cur[v] = nxt[v]; }
        buf ^= 1;  // double buffer: one barrier per plane
    }
}

// zvec, two planes per loop iteration: both planes' loads are issued before either update, so
// two DRAM-fresh vectors (the z + 1 and z + 2 rows) are in flight per thread instead of one.
template <int V>
__global__ void zvec_z2(const float* __restrict__ in, float* __restrict__ out, float r, int nx, int ny, int nz,
                        int zm) {
    typedef typename VecT<V>::t VT;
    const int lane = threadIdx.x & 31;
    const int x0 = V * (blockIdx.x * blockDim.x + threadIdx.x);
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * zm;
    const int k1 = min(k0 + zm, nz);
    const long long plane = (long long)nx * ny;
    const int jm = wrapi(j - 1, ny), jp = wrapi(j + 1, ny);
    const int xl = wrapi(x0 - 1, nx), xr = wrapi(x0 + V, nx);
    float prev[V], cur[V], n1[V], n2[V];
    unpack<V>(*reinterpret_cast<const VT*>(in + wrapi(k0 - 1, nz) * plane + (long long)j * nx + x0), prev);
    unpack<V>(*reinterpret_cast<const VT*>(in + k0 * plane + (long long)j * nx + x0), cur);
    for (int k = k0; k < k1; k += 2) {  // zm even
        const long long b0 = k * plane, b1 = (k + 1) * plane;
        const long long kn1 = (long long)wrapi(k + 1, nz) * plane, kn2 = (long long)wrapi(k + 2, nz) * plane;
        float ym0[V], yp0[V], ym1[V], yp1[V];
        unpack<V>(*reinterpret_cast<const VT*>(in + kn1 + (long long)j * nx + x0), n1);
        unpack<V>(*reinterpret_cast<const VT*>(in + kn2 + (long long)j * nx + x0), n2);
        unpack<V>(*reinterpret_cast<const VT*>(in + b0 + (long long)jm * nx + x0), ym0);
        unpack<V>(*reinterpret_cast<const VT*>(in + b0 + (long long)jp * nx + x0), yp0);
        unpack<V>(*reinterpret_cast<const VT*>(in + b1 + (long long)jm * nx + x0), ym1);
        unpack<V>(*reinterpret_cast<const VT*>(in + b1 + (long long)jp * nx + x0), yp1);
        float l0 = __shfl_up_sync(0xffffffffu, cur[V - 1], 1), r0 = __shfl_down_sync(0xffffffffu, cur[0], 1);
        float l1 = __shfl_up_sync(0xffffffffu, n1[V - 1], 1), r1 = __shfl_down_sync(0xffffffffu, n1[0], 1);
        if (lane == 0) { l0 = in[b0 + (long long)j * nx + xl]; l1 = in[b1 + (long long)j * nx + xl]; }
        if (lane == 31) { r0 = in[b0 + (long long)j * nx + xr]; r1 = in[b1 + (long long)j * nx + xr]; }
        float o0[V], o1[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float l = v == 0 ? l0 : cur[v - 1], rr = v == V - 1 ? r0 : cur[v + 1];
            o0[v] = cur[v] + r * (((l + rr) + (ym0[v] + yp0[v])) + (prev[v] + n1[v]) - 6.0f * cur[v]);
            const float l_ = v == 0 ? l1 : n1[v - 1], r_ = v == V - 1 ? r1 : n1[v + 1];
            o1[v] = n1[v] + r * (((l_ + r_) + (ym1[v] + yp1[v])) + (cur[v] + n2[v]) - 6.0f * n1[v]);
        }
        *reinterpret_cast<VT*>(out + b0 + (long long)j * nx + x0) = pack<V>(o0);
        *reinterpret_cast<VT*>(out + b1 + (long long)j * nx + x0) = pack<V>(o1);
#pragma unroll
        for (int v = 0; v < V; ++v) { prev[v] = n1[v]; cur[v] = n2[v]; }
    }
}

// zvec with a deeper z queue: the row two planes ahead is loaded one iteration early (prefetch
// distance 2), so each thread has the next iteration's DRAM load in flight during this update.
template <int V>
__global__ void zvec_pf(const float* __restrict__ in, float* __restrict__ out, float r, int nx, int ny, int nz,
                        int zm) {
    typedef typename VecT<V>::t VT;
    const int lane = threadIdx.x & 31;
    const int x0 = V * (blockIdx.x * blockDim.x + threadIdx.x);
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * zm;
    const int k1 = min(k0 + zm, nz);
    const long long plane = (long long)nx * ny;
    const int jm = wrapi(j - 1, ny), jp = wrapi(j + 1, ny);
    const int xl = wrapi(x0 - 1, nx), xr = wrapi(x0 + V, nx);
    float prev[V], cur[V], nxt[V], nn[V];
    unpack<V>(*reinterpret_cast<const VT*>(in + wrapi(k0 - 1, nz) * plane + (long long)j * nx + x0), prev);
    unpack<V>(*reinterpret_cast<const VT*>(in + k0 * plane + (long long)j * nx + x0), cur);
    unpack<V>(*reinterpret_cast<const VT*>(in + (long long)wrapi(k0 + 1, nz) * plane + (long long)j * nx + x0), nxt);
    for (int k = k0; k < k1; ++k) {
        const long long base = k * plane;
        const long long kn2 = (long long)wrapi(k + 2, nz) * plane;
        float ym[V], yp[V];
        unpack<V>(*reinterpret_cast<const VT*>(in + kn2 + (long long)j * nx + x0), nn);
        unpack<V>(*reinterpret_cast<const VT*>(in + base + (long long)jm * nx + x0), ym);
        unpack<V>(*reinterpret_cast<const VT*>(in + base + (long long)jp * nx + x0), yp);
        float left = __shfl_up_sync(0xffffffffu, cur[V - 1], 1);
        float right = __shfl_down_sync(0xffffffffu, cur[0], 1);
        if (lane == 0) left = in[base + (long long)j * nx + xl];
        if (lane == 31) right = in[base + (long long)j * nx + xr];
        float o[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float l = v == 0 ? left : cur[v - 1];
            const float rr = v == V - 1 ? right : cur[v + 1];
            o[v] = cur[v] + r * (((l + rr) + (ym[v] + yp[v])) + (prev[v] + nxt[v]) - 6.0f * cur[v]);
        }
        *reinterpret_cast<VT*>(out + base + (long long)j * nx + x0) = pack<V>(o);
#pragma unroll
        for (int v = 0; v < V; ++v) { prev[v] = cur[v]; cur[v] = nxt[v]; nxt[v] = nn[v]; }
    }
}

// zvec with two rows per thread (j0 = 2·row, j0 + 1): per plane the thread loads rows j0 − 1 and
// j0 + 2 besides the two z-queue rows, 2 y-loads per output row instead of 2 — but one vector of
// L1 traffic fewer per pair (the middle rows come from the queues), and half the shuffles' setup.
template <int V>
__global__ void zvec_y2(const float* __restrict__ in, float* __restrict__ out, float r, int nx, int ny, int nz,
                        int zm) {
    typedef typename VecT<V>::t VT;
    const int lane = threadIdx.x & 31;
    const int x0 = V * (blockIdx.x * blockDim.x + threadIdx.x);
    const int j0 = 2 * (blockIdx.y * blockDim.y + threadIdx.y), j1 = j0 + 1;
    const int k0 = blockIdx.z * zm;
    const int k1 = min(k0 + zm, nz);
    const long long plane = (long long)nx * ny;
    const int jm = wrapi(j0 - 1, ny), jp = wrapi(j1 + 1, ny);
    const int xl = wrapi(x0 - 1, nx), xr = wrapi(x0 + V, nx);
    float pa[V], ca[V], na[V], pb[V], cb[V], nb[V];
    const long long km = (long long)wrapi(k0 - 1, nz) * plane, kc = (long long)k0 * plane;
    unpack<V>(*reinterpret_cast<const VT*>(in + km + (long long)j0 * nx + x0), pa);
    unpack<V>(*reinterpret_cast<const VT*>(in + kc + (long long)j0 * nx + x0), ca);
    unpack<V>(*reinterpret_cast<const VT*>(in + km + (long long)j1 * nx + x0), pb);
    unpack<V>(*reinterpret_cast<const VT*>(in + kc + (long long)j1 * nx + x0), cb);
    for (int k = k0; k < k1; ++k) {
        const long long base = k * plane;
        const long long kn = (long long)wrapi(k + 1, nz) * plane;
        float ym[V], yp[V];
        unpack<V>(*reinterpret_cast<const VT*>(in + kn + (long long)j0 * nx + x0), na);
        unpack<V>(*reinterpret_cast<const VT*>(in + kn + (long long)j1 * nx + x0), nb);
        unpack<V>(*reinterpret_cast<const VT*>(in + base + (long long)jm * nx + x0), ym);
        unpack<V>(*reinterpret_cast<const VT*>(in + base + (long long)jp * nx + x0), yp);
        float la = __shfl_up_sync(0xffffffffu, ca[V - 1], 1), ra = __shfl_down_sync(0xffffffffu, ca[0], 1);
        float lb = __shfl_up_sync(0xffffffffu, cb[V - 1], 1), rb = __shfl_down_sync(0xffffffffu, cb[0], 1);
        if (lane == 0) { la = in[base + (long long)j0 * nx + xl]; lb = in[base + (long long)j1 * nx + xl]; }
        if (lane == 31) { ra = in[base + (long long)j0 * nx + xr]; rb = in[base + (long long)j1 * nx + xr]; }
        float oa[V], ob[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const float l = v == 0 ? la : ca[v - 1], rr = v == V - 1 ? ra : ca[v + 1];
            oa[v] = ca[v] + r * (((l + rr) + (ym[v] + cb[v])) + (pa[v] + na[v]) - 6.0f * ca[v]);
            const float l_ = v == 0 ? lb : cb[v - 1], r_ = v == V - 1 ? rb : cb[v + 1];
            ob[v] = cb[v] + r * (((l_ + r_) + (ca[v] + yp[v])) + (pb[v] + nb[v]) - 6.0f * cb[v]);
        }
        *reinterpret_cast<VT*>(out + base + (long long)j0 * nx + x0) = pack<V>(oa);
        *reinterpret_cast<VT*>(out + base + (long long)j1 * nx + x0) = pack<V>(ob);
#pragma unroll
        for (int v = 0; v < V; ++v) { pa[v] = ca[v]; ca[v] = na[v]; pb[v] = cb[v]; cb[v] = nb[v]; }
    }
}

template <int V>
__global__ void vcopy(const float* __restrict__ in, float* __restrict__ out, long long n) {
    typedef typename VecT<V>::t VT;
    const long long i = (long long)(blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i < n) *reinterpret_cast<VT*>(out + i) = *reinterpret_cast<const VT*>(in + i);
}
'''

names = [f"zvec<{v},{c}>" for v in (1, 2, 4) for c in ("false", "true")] + ["zvec_smem<2>", "zvec_smem<4>",
         "vcopy<1>", "vcopy<4>", "zvec_z2<4>", "zvec_pf<4>", "zvec_y2<4>"]
mod = cp.RawModule(code=SRC, options=("--std=c++17",), name_expressions=names)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 512
COMPARE = "--compare" in sys.argv
nx = ny = nz = n
a = cp.random.random((nz, ny, nx), dtype=cp.float32)
b = cp.empty_like(a)
r = np.float32(0.1)
# reference (one step) for correctness
ref = a + r * (cp.roll(a, 1, 2) + cp.roll(a, -1, 2) + cp.roll(a, 1, 1) + cp.roll(a, -1, 1) + cp.roll(a, 1, 0)
               + cp.roll(a, -1, 0) - 6 * a)


def timeit(fn, reps=20):
    fn()
    cp.cuda.runtime.deviceSynchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    best = []
    for _ in range(5):
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        best.append(cp.cuda.get_elapsed_time(s, e) / reps)
    return sorted(best)[len(best) // 2]


N = nx * ny * nz
k = mod.get_function("vcopy<4>")
t = timeit(lambda: k(((N // 4 + 255) // 256,), (256,), (a, b, np.int64(N))))
copy_gbs = 8 * N / t / 1e6
print(f"copy float4: {t*1e3:.1f} us  {copy_gbs:.0f} GB/s", flush=True)
k = mod.get_function("vcopy<1>")
t = timeit(lambda: k(((N + 255) // 256,), (256,), (a, b, np.int64(N))))
print(f"copy float: {t*1e3:.1f} us  {8*N/t/1e6:.0f} GB/s", flush=True)
t = timeit(lambda: cp.copyto(b, a))
print(f"cupy copyto: {t*1e3:.1f} us  {8*N/t/1e6:.0f} GB/s", flush=True)
# fp16 copies
h = a.astype(cp.float16)
h2 = cp.empty_like(h)
t = timeit(lambda: cp.copyto(h2, h))
print(f"cupy copyto fp16: {t*1e3:.1f} us  {4*N/t/1e6:.0f} GB/s", flush=True)



def compare():
    """Same process, interleaved rounds: the hand-written zvec<4> and its variants (two planes per
    iteration, prefetch distance 2, two rows per thread) against the generated vec4 kernel
    (nagare's Loop) at the same launches, all timed by the same timeit."""
    from nagare.engine.autotune import EventTimer, measure
    from nagare.engine.stencil import Loop
    from nagare.engine.stencil.library import diffusion7

    loop = Loop(diffusion7, (nz, ny, nx), np.float32, engine="device", xp=cp)
    cfgs = [(32, 4, 4), (32, 4, 8), (32, 8, 4), (32, 8, 8), (64, 4, 4), (64, 4, 8), (32, 4, 16), (128, 2, 8),
            (32, 2, 8), (64, 2, 8)]
    args = (a, b, r, np.int32(nx), np.int32(ny), np.int32(nz))
    items = {}
    for bx, by, zm in cfgs:
        grid = (nx // (bx * 4), ny // by, nz // zm)
        for name in ("zvec<4,false>", "zvec_pf<4>", "zvec_z2<4>", "zvec_y2<4>"):
            if name == "zvec_y2<4>" and ny % (2 * by):
                continue
            g = (grid[0], ny // (2 * by), grid[2]) if name == "zvec_y2<4>" else grid
            kern = mod.get_function(name)
            items[(name, bx, by, zm)] = (lambda kern=kern, g=g, blk=(bx, by, 1), zm=zm:
                                         kern(g, blk, args + (np.int32(zm),)))
        items[("generated vec4", bx, by, zm)] = loop.prepared({"bx": bx, "by": by, "zmarch": zm, "shape": "vec4"},
                                                              f=a, fn=b, r=r)
    for key, fn in items.items():
        b.fill(0)
        fn()
        err = float(cp.abs(b - ref).max())
        if err > 1e-6:
            print(f"{key}: WRONG, max err {err:.2e}", flush=True)
    samples = {k: [] for k in items}
    for _ in range(3):
        for k, fn in items.items():
            samples[k].append(timeit(fn, reps=10))
    copy = mod.get_function("vcopy<4>")
    copy_t = timeit(lambda: copy(((N // 4 + 255) // 256,), (256,), (a, b, np.int64(N))))
    print(f"float4 copy after the rounds: {copy_t*1e3:.1f} us {8*N/copy_t/1e6:.0f} GB/s", flush=True)
    res = sorted((sorted(v)[1], k) for k, v in samples.items())
    for t, (name, bx, by, zm) in res:
        print(f"  {name:16s} {bx}x{by} zm{zm}: {t*1e3:.1f} us {8*N/t/1e6:.0f} GB/s "
              f"{100*8*N/t/1e6/copy_gbs:.1f}% of the first copy", flush=True)
    # The generated kernel's best and the hand kernel's best by the tuner's own measurement.
    timer = EventTimer(cp)
    for name in ("generated vec4", "zvec<4,false>", "zvec_pf<4>", "zvec_z2<4>", "zvec_y2<4>"):
        best = min((t, k) for t, k in res if k[0] == name)
        fn = items[best[1]]
        ms = sorted(measure.time_batches(fn, timer, batch=20, batches=5))[2]
        print(f"tuner measurement of {name} {best[1][1:]}: {ms*1e3:.1f} us", flush=True)


if COMPARE:
    compare()
    sys.exit(0)

rows = []
for name in names[:8]:
    kern = mod.get_function(name)
    V = int(name.split("<")[1].split(",")[0].split(">")[0])
    smem = name.startswith("zvec_smem")
    for bx, by in ((32, 1), (32, 2), (32, 4), (32, 8), (64, 1), (64, 2), (64, 4), (128, 1), (128, 2), (32, 16)):
        if bx * V > nx:
            continue
        for zm in (4, 8, 16, 32, 64, 128):
            grid = (nx // (bx * V), ny // by, (nz + zm - 1) // zm)
            sm = 2 * (by + 2) * bx * V * 4 if smem else 0
            args = (a, b, r, np.int32(nx), np.int32(ny), np.int32(nz), np.int32(zm))
            def fn(kern=kern, grid=grid, block=(bx, by, 1), args=args, sm=sm):
                kern(grid, block, args, shared_mem=sm)
            try:
                t = timeit(fn, reps=10)
            except Exception as exc:
                print(name, bx, by, zm, "fail", exc)
                continue
            rows.append((t, name, bx, by, zm))
    best = min(x for x in rows if x[1] == name)
    fn_best = best
    kern(((nx // (best[2] * V)), ny // best[3], (nz + best[4] - 1) // best[4]), (best[2], best[3], 1),
         (a, b, r, np.int32(nx), np.int32(ny), np.int32(nz), np.int32(best[4])),
         shared_mem=(2 * (best[3] + 2) * best[2] * V * 4 if smem else 0))
    err = float(cp.abs(b - ref).max())
    print(f"{name:16s} best {best[2]}x{best[3]} zm{best[4]}: {best[0]*1e3:.1f} us "
          f"{8*N/best[0]/1e6:.0f} GB/s = {100*8*N/best[0]/1e6/copy_gbs:.1f}% of float4 copy; max err {err:.1e}",
          flush=True)
rows.sort()
print("top 10:")
for t, name, bx, by, zm in rows[:10]:
    print(f"  {name:16s} {bx}x{by} zm{zm}: {t*1e3:.1f} us {8*N/t/1e6:.0f} GB/s")

// 3D particles as lit sphere sprites, rasterised by CUDA instead of OpenGL (app/gui/splat.py).
//
// Why: on a compute GPU of NVIDIA's Hopper generation only a few of the SMs can run OpenGL's vertex and
// pixel shaders, so a million point sprites take the GL side milliseconds a frame, and the GL
// context's time slices stop the simulation's CUDA work meanwhile. Splatting the sprites with
// every SM, in the simulation's own CUDA context, leaves GL one full-screen quad a frame.
// The technique is the compute rasteriser of point clouds (one 64-bit atomicMin per covered
// pixel, depth in the high word: Schütz, Kerbl & Wimmer 2021, "Rendering point clouds with compute
// shaders and vertex order optimization"); the sprite itself is the GL one of
// shaders/glsl/spheres.*: a square of the projected diameter, pixels whose centre lies inside the
// disc, shaded with the normal of a unit sphere, one depth (the centre's) for the whole sprite.
//
// The result is order independent (a minimum), so the image is the same whatever the launch
// order. Compiled with --fmad=false, every operation rounds once, in the order written, which
// the NumPy mirror (splat.splat_numpy) repeats in float32: the two images agree bit for bit.

#define SPLAT_EMPTY 0xFFFFFFFFFFFFFFFFull

struct SplatView {  // as splat.VIEW_FIELDS, float32 each
    float m[16];       // row-major 4×4: clip = m · (x, y, z, 1)
    float width, height;  // framebuffer pixels
    float size_ref, w_ref, min_size, max_size;  // sprite pixel size = max(size_ref·w_ref / w, min_size)
    float lo, inv_span;   // colour range: t = (value − lo)·inv_span, clamped to [0, 1]
};

__device__ __forceinline__ unsigned int splat_rgba8(float r, float g, float b) {
    // round to nearest, as a GL UNORM8 framebuffer stores a colour
    unsigned int R = (unsigned int)(fminf(fmaxf(r, 0.f), 1.f) * 255.f + 0.5f);
    unsigned int G = (unsigned int)(fminf(fmaxf(g, 0.f), 1.f) * 255.f + 0.5f);
    unsigned int B = (unsigned int)(fminf(fmaxf(b, 0.f), 1.f) * 255.f + 0.5f);
    return R | (G << 8) | (B << 16) | (255u << 24);
}

extern "C" __global__ void splat_spheres(const float* __restrict__ pos, const float* __restrict__ val, int n,
                                         const SplatView* __restrict__ view, const float* __restrict__ lut /* 256×3 */,
                                         unsigned long long* __restrict__ buf)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const SplatView v = *view;  // 24 floats, the same for every thread: served by the cache
    float value = val[i];
    if (!(value >= -1.0e37f)) return;  // hidden particles (and NaN) are not drawn
    float x = pos[3 * i], y = pos[3 * i + 1], z = pos[3 * i + 2];
    float cx = v.m[0] * x + v.m[1] * y + v.m[2] * z + v.m[3];
    float cy = v.m[4] * x + v.m[5] * y + v.m[6] * z + v.m[7];
    float cz = v.m[8] * x + v.m[9] * y + v.m[10] * z + v.m[11];
    float cw = v.m[12] * x + v.m[13] * y + v.m[14] * z + v.m[15];
    if (!(cw > 1e-6f)) return;  // at or behind the eye
    float inv_w = 1.f / cw;
    float zn = cz * inv_w;
    if (!(zn >= -1.f && zn <= 1.f)) return;  // outside the near/far planes (GL clips the point), or NaN
    float px = (cx * inv_w * 0.5f + 0.5f) * v.width;   // window coordinates, y up
    float py = (cy * inv_w * 0.5f + 0.5f) * v.height;
    float depth = zn * 0.5f + 0.5f;
    float s = fminf(fmaxf(v.size_ref * v.w_ref * inv_w, v.min_size), v.max_size);
    float h = 0.5f * s;
    // pixels whose centres (k + 0.5) lie in [p − h, p + h)
    int x0 = max((int)ceilf(px - h - 0.5f), 0), x1 = min((int)ceilf(px + h - 0.5f), (int)v.width);
    int y0 = max((int)ceilf(py - h - 0.5f), 0), y1 = min((int)ceilf(py + h - 0.5f), (int)v.height);
    if (x0 >= x1 || y0 >= y1) return;
    float t = fminf(fmaxf((value - v.lo) * v.inv_span, 0.f), 1.f) * 255.f;
    int k = min((int)t, 254);
    float f = t - (float)k;
    float r = lut[3 * k] + f * (lut[3 * k + 3] - lut[3 * k]);
    float g = lut[3 * k + 1] + f * (lut[3 * k + 4] - lut[3 * k + 1]);
    float b = lut[3 * k + 2] + f * (lut[3 * k + 5] - lut[3 * k + 2]);
    unsigned long long dbits = (unsigned long long)__float_as_uint(depth) << 32;  // depth ≥ 0: bits order as values
    const float lx = -0.4f * 0.97590007f, ly = 0.5f * 0.97590007f, lz = 0.8f * 0.97590007f;  // normalize(-0.4, 0.5, 0.8)
    float inv_s = 1.f / s;
    for (int yy = y0; yy < y1; ++yy) {
        // gl_PointCoord.y runs down the sprite (t = ½ − (y + ½ − py)/s) and the shader flips it: ny up
        float ny = 2.f * (((float)yy + 0.5f) - py) * inv_s;
        for (int xx = x0; xx < x1; ++xx) {
            float nx = 2.f * (((float)xx + 0.5f) - px) * inv_s;
            float r2 = nx * nx + ny * ny;
            if (r2 > 1.f) continue;
            float nz = sqrtf(1.f - r2);
            float diffuse = fmaxf(nx * lx + ny * ly + nz * lz, 0.f);
            // reflect(−L, N)·(0,0,1) = 2(N·L)N.z − L.z
            float sp = fmaxf(2.f * (nx * lx + ny * ly + nz * lz) * nz - lz, 0.f);
            float sp2 = sp * sp, sp4 = sp2 * sp2, sp8 = sp4 * sp4;  // sp^24 by squaring: the NumPy
            float spec = sp8 * sp8 * sp8;                              // mirror rounds the same way
            float shade = 0.35f + 0.65f * diffuse, hi = 0.25f * spec;
            unsigned long long key = dbits | splat_rgba8(r * shade + hi, g * shade + hi, b * shade + hi);
            unsigned long long* p = buf + (size_t)yy * (size_t)v.width + xx;
            if (key < *p) atomicMin(p, key);  // the plain read skips most atomics of hidden pixels
        }
    }
}

// buf → (height, width, 4) float32: r, g, b in 0–1 and the window depth (2 where nothing was
// drawn, which the quad's fragment shader discards); buf is cleared for the next frame.
extern "C" __global__ void splat_resolve(unsigned long long* __restrict__ buf, float4* __restrict__ out, int npix)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npix) return;
    unsigned long long key = buf[i];
    buf[i] = SPLAT_EMPTY;
    if (key == SPLAT_EMPTY) {
        out[i] = make_float4(0.f, 0.f, 0.f, 2.f);
        return;
    }
    unsigned int c = (unsigned int)key;
    out[i] = make_float4((c & 255u) * (1.f / 255.f), ((c >> 8) & 255u) * (1.f / 255.f),
                         ((c >> 16) & 255u) * (1.f / 255.f), __uint_as_float((unsigned int)(key >> 32)));
}

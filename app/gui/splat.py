"""3D particles rasterised by CUDA (shaders/cuda/view/splat_spheres.cu) and shown as one quad.

The GL path (view3d.SphereVisual: one point sprite a particle) asks the GPU's graphics units for
every sprite. A compute GPU of the Hopper generation has few of them, so a million sprites cost the GL
context milliseconds a frame — time the simulation's CUDA context does not get (the two share
the GPU by time slices). Here the sprites are splatted by a CUDA kernel on every SM, in the
simulation's context, into a 64-bit (depth, colour) buffer; a resolve kernel turns it into an
rgba32f image (colour and window depth) that goes into a GL texture through interop, and GL draws
one full-framebuffer quad that writes the depth back (``gl_FragDepth``), so the box outline, the
obstacles and the trails are depth tested against the particles as before.

The sprite is the GL one (same size rule, disc, lighting, colour map at the LUT's texel
centres): :func:`splat_numpy` is the kernel's float32 mirror, equal to it bit for bit (the
kernel is compiled without contractions), and the GL sprites themselves are compared with the
mirror pixel for pixel in tests/app/test_splat.py.

Used on the interop path (CuPy fields, an NVIDIA GL context); the host path keeps GL sprites, and
so does a canvas whose splat failed (logged once). Where the two differ on purpose: a sprite
stops growing at MAX_SPRITE_PX when one zooms in (GL's limit is the driver's); a NaN value hides
a particle (GL would colour it); a sprite whose centre lies outside the framebuffer is drawn in
part (GL clips a point by its centre); and sprites at nearly the same depth are ordered by their
float32 depth (GL by its 24-bit depth buffer, ties to the first drawn).
"""
from __future__ import annotations

import numpy as np
from nagare.app import colormaps
from nagare.engine.cuda import KernelSpec
from vispy import gloo, scene
from vispy.visuals import Visual

from .held_uniforms import HeldUniforms

EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
# struct SplatView of the kernel, in order
VIEW_FIELDS = tuple(f"m{i}" for i in range(16)) + ("width", "height", "size_ref", "w_ref", "min_size", "max_size",
                                                   "lo", "inv_span")
MAX_SPRITE_PX = 256.0  # a sprite wider than this is drawn this wide (the loop per particle is s²)
MIN_SPRITE_PX = 1.5  # the least sprite, px (SphereVisual: logical px, drawn at the framebuffer's scale)
_F = np.float32


def view_matrix(transform) -> np.ndarray:
    """The 4×4 matrix M (clip = M · (x, y, z, 1)) of a VisPy transform chain visual → render.

    Every transform of a scene's chain is projective (ST, matrix, perspective): mapping the four
    homogeneous unit vectors gives M's columns."""
    cols = np.asarray(transform.map(np.eye(4)), np.float64)
    return cols.T.copy()


def lut_table(name: str) -> np.ndarray:
    """(256, 3) float32: the colour map as the GL LUT texture stores it (8 bits a channel)."""
    lut8 = (colormaps.lut(name) * 255 + 0.5).astype(np.uint8)
    return (lut8.astype(np.float32) / _F(255)).astype(np.float32)


def view_params(matrix, width: int, height: int, size_ref: float, w_ref: float, clim) -> np.ndarray:
    """The kernel's SplatView as 24 float32 (VIEW_FIELDS)."""
    lo, hi = float(clim[0]), float(clim[1])
    span = hi - lo if hi > lo else 1.0
    span = max(span, 1e-30)  # 1/span stays a finite float32 (3e38 at most) however narrow the range
    p = np.empty(len(VIEW_FIELDS), np.float32)
    p[:16] = np.asarray(matrix, np.float64).reshape(16)
    p[16:] = (width, height, size_ref, w_ref, MIN_SPRITE_PX, MAX_SPRITE_PX, lo, 1.0 / span)
    return p


# ---- the float32 mirror of the kernels ---------------------------------------------------------------
def splat_numpy(positions, values, params, lut) -> np.ndarray:
    """(height, width, 4) float32 (r, g, b, depth; depth 2 where nothing was drawn), row 0 at the
    bottom as GL's window coordinates: splat_spheres + splat_resolve, operation for operation."""
    p = np.asarray(params, np.float32)
    m, (width, height, size_ref, w_ref, min_size, max_size, lo, inv_span) = p[:16], p[16:]
    W, H = int(width), int(height)
    pos = np.asarray(positions, np.float32).reshape(-1, 3)
    val = np.asarray(values, np.float32).reshape(-1)
    lut = np.asarray(lut, np.float32).reshape(-1)
    buf = np.full(W * H, EMPTY, np.uint64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        keep = val >= _F(-1.0e37)
        pos, val = pos[keep], val[keep]
        x, y, z = pos[:, 0], pos[:, 1], pos[:, 2]
        cx = m[0] * x + m[1] * y + m[2] * z + m[3]
        cy = m[4] * x + m[5] * y + m[6] * z + m[7]
        cz = m[8] * x + m[9] * y + m[10] * z + m[11]
        cw = m[12] * x + m[13] * y + m[14] * z + m[15]
        ok = cw > _F(1e-6)
        inv_w = np.where(ok, _F(1) / np.where(ok, cw, _F(1)), _F(0)).astype(np.float32)
        zn = cz * inv_w
        ok &= (zn >= _F(-1)) & (zn <= _F(1))
        px = (cx * inv_w * _F(0.5) + _F(0.5)) * width
        py = (cy * inv_w * _F(0.5) + _F(0.5)) * height
        depth = zn * _F(0.5) + _F(0.5)
        # np.fmax/fmin as CUDA's fmaxf/fminf: a NaN operand gives the other one
        s = np.fmin(np.fmax(size_ref * w_ref * inv_w, min_size), max_size)
        h = _F(0.5) * s
        x0 = np.maximum(np.ceil(px - h - _F(0.5)), 0)
        x1 = np.minimum(np.ceil(px + h - _F(0.5)), width)
        y0 = np.maximum(np.ceil(py - h - _F(0.5)), 0)
        y1 = np.minimum(np.ceil(py + h - _F(0.5)), height)
        ok &= (x0 < x1) & (y0 < y1)
        sel = np.flatnonzero(ok)
        if len(sel):
            t = np.fmin(np.fmax((val[sel] - lo) * inv_span, _F(0)), _F(1)) * _F(255)
            k = np.minimum(t.astype(np.int64), 254)
            f = t - k.astype(np.float32)
            rgb = [lut[3 * k + c] + f * (lut[3 * k + c + 3] - lut[3 * k + c]) for c in range(3)]
            dbits = depth[sel].view(np.uint32).astype(np.uint64) << np.uint64(32)
            lx, ly, lz = _F(-0.4) * _F(0.97590007), _F(0.5) * _F(0.97590007), _F(0.8) * _F(0.97590007)
            pxs, pys, inv_s = px[sel], py[sel], _F(1) / s[sel]
            x0s, x1s, y0s, y1s = (a[sel].astype(np.int64) for a in (x0, x1, y0, y1))
            for dy in range(int((y1s - y0s).max())):
                yy = y0s + dy
                row = yy < y1s
                ny = _F(2) * ((yy.astype(np.float32) + _F(0.5)) - pys) * inv_s
                for dx in range(int((x1s - x0s).max())):
                    xx = x0s + dx
                    nx = _F(2) * ((xx.astype(np.float32) + _F(0.5)) - pxs) * inv_s
                    r2 = nx * nx + ny * ny
                    cover = row & (xx < x1s) & (r2 <= _F(1))
                    if not cover.any():
                        continue
                    nz = np.sqrt(np.maximum(_F(1) - r2, _F(0)))
                    dot = nx * lx + ny * ly + nz * lz
                    diffuse = np.fmax(dot, _F(0))
                    sp = np.fmax(_F(2) * dot * nz - lz, _F(0))
                    sp2 = sp * sp
                    sp4 = sp2 * sp2
                    sp8 = sp4 * sp4
                    spec = sp8 * sp8 * sp8
                    shade, hi = _F(0.35) + _F(0.65) * diffuse, _F(0.25) * spec
                    key = dbits.copy()
                    for c in range(3):
                        v = np.fmin(np.fmax(rgb[c] * shade + hi, _F(0)), _F(1)) * _F(255) + _F(0.5)
                        key |= v.astype(np.uint32).astype(np.uint64) << np.uint64(8 * c)
                    key |= np.uint64(255 << 24)
                    np.minimum.at(buf, (yy * W + xx)[cover], key[cover])
    out = np.zeros((H * W, 4), np.float32)
    out[:, 3] = 2.0
    hit = buf != EMPTY
    c = (buf[hit] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    for ch in range(3):
        out[hit, ch] = ((c >> np.uint32(8 * ch)) & np.uint32(255)).astype(np.float32) * (_F(1) / _F(255))
    out[hit, 3] = (buf[hit] >> np.uint64(32)).astype(np.uint32).view(np.float32)
    return out.reshape(H, W, 4)


# ---- the CUDA side ----------------------------------------------------------------------------------
def kernel_spec():
    # no FMA contraction: the NumPy mirror rounds every operation once, in the written order
    return KernelSpec("cuda/view/splat_spheres.cu", options=("--fmad=false",))


class CudaSplatter:
    """The kernels' buffers for one framebuffer size: the 64-bit key buffer (kept clear between
    frames by the resolve) and the rgba32f image."""

    block = 256

    def __init__(self):
        import cupy  # optional dependency (CuPy): splatting runs on the interop path only

        self.cp = cupy
        spec = kernel_spec()
        self._splat = spec.function("splat_spheres")
        self._resolve = spec.function("splat_resolve")
        self.shape = None
        self.buf = self.image = None
        self._lut_name = None
        self._lut_host = None  # a colour map not uploaded yet
        self.lut = None
        self.launches = 0

    def set_colormap(self, name: str) -> None:
        """The colour map of the next render (uploaded there, on its stream)."""
        if name != self._lut_name:
            self._lut_host = lut_table(name)
            self._lut_name = name

    def render(self, positions, values, params: np.ndarray, stream):
        """Splat and resolve on ``stream``; returns the (height, width, 4) float32 image (valid once
        the stream has run it; reused by the next call) and the arrays the launches read."""
        cp = self.cp
        W, H = int(params[16]), int(params[17])
        with stream:
            if self.shape != (H, W):
                self.buf = cp.full(H * W, EMPTY, cp.uint64)
                self.image = cp.empty((H, W, 4), cp.float32)
                self.shape = (H, W)
            if self._lut_host is not None:  # on this stream: ordered with the splats that read it
                self.lut, self._lut_host = cp.asarray(self._lut_host), None
            view = cp.asarray(params)
            pos = cp.ascontiguousarray(positions, cp.float32)
            val = cp.ascontiguousarray(values, cp.float32)
            n = int(val.size)
            if n:
                self._splat(((n + self.block - 1) // self.block,), (self.block,),
                            (pos, val, np.int32(n), view, self.lut, self.buf))
            npix = H * W
            self._resolve(((npix + self.block - 1) // self.block,), (self.block,),
                          (self.buf, self.image, np.int32(npix)))
        self.launches += 1
        # what the launches read: the caller holds them until the stream has passed them (a new
        # colour map replaces self.lut, whose old array a queued splat may still read)
        return self.image, (pos, val, view, self.lut)


# ---- the GL side: one quad -------------------------------------------------------------------------
VERT = """
attribute vec2 a_position;
void main() { gl_Position = vec4(a_position, 0.0, 1.0); }
"""
FRAG = """
// The splatted image, texel for framebuffer pixel; its alpha is the window depth (2: empty).
uniform sampler2D u_image;
uniform vec2 u_origin;  // the viewport's corner and size in framebuffer pixels
uniform vec2 u_size;
void main() {
    vec4 c = texture2D(u_image, (gl_FragCoord.xy - u_origin) / u_size);
    if (c.a > 1.5) discard;
    gl_FragColor = vec4(c.rgb, 1.0);
    gl_FragDepth = c.a;
}
"""


class SplatQuadVisual(Visual):
    """The framebuffer-filling quad that shows the splatted particles. ``prepare`` (a callable
    ``(visual, view) → bool``) runs before each draw, with the transforms of that draw (screen or
    an export's framebuffer): it splats and writes ``texture``; False skips the draw."""

    def __init__(self):
        super().__init__(vcode=VERT, fcode=FRAG)
        self.texture = gloo.Texture2D(np.zeros((2, 2, 4), np.float32), internalformat="rgba32f",
                                      interpolation="nearest", wrapping="clamp_to_edge")
        quad = np.array([(-1, -1), (1, -1), (1, 1), (-1, -1), (1, 1), (-1, 1)], np.float32)
        self.shared_program["a_position"] = gloo.VertexBuffer(quad)
        self.shared_program["u_image"] = self.texture
        self._uniforms = HeldUniforms(self.shared_program)  # the origin is set before every draw
        self._uniforms.set("u_size", (2.0, 2.0))
        self._uniforms.set("u_origin", (0.0, 0.0))
        self._draw_mode = "triangles"
        self.prepare = None
        self.set_gl_state("opaque", depth_test=True, cull_face=False)

    def resize_texture(self, height: int, width: int) -> bool:
        """Give the texture this size (True if it changed: a registered texture must be registered again)."""
        if self.texture.shape[:2] == (height, width):
            return False
        self.texture.resize((height, width, 4))  # storage only: every frame writes all of it
        self._uniforms.set("u_size", (float(width), float(height)))
        return True

    def set_origin(self, x: int, y: int) -> None:
        self._uniforms.set("u_origin", (float(x), float(y)))

    def _prepare_transforms(self, view):
        pass

    def _prepare_draw(self, view):
        # False (nothing splatted into the texture this time) skips the quad's draw
        return None if self.prepare is None else self.prepare(self, view)

    def _compute_bounds(self, axis, view):
        return None


SplatQuad = scene.visuals.create_visual_node(SplatQuadVisual)


def current_viewport(canvas) -> tuple[int, int, int, int]:
    """(x, y, width, height) in pixels of the GL viewport the canvas draws into now: the one an
    export's framebuffer pushed (``SceneCanvas.render``), else the whole canvas. 'render'
    coordinates span it (VisPy's ViewBoxes clip by fragment, not by viewport)."""
    stack = getattr(canvas, "_vp_stack", None)
    if stack:
        x, y, w, h = (int(v) for v in stack[-1])
        return x, y, w, h
    w, h = canvas.physical_size
    return 0, 0, int(w), int(h)

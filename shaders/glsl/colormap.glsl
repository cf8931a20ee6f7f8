// Colour-map a scalar through nagare's LUT, app/colormaps.py: the same 256-entry table the
// headless PNG writer uses, stored as a 256 x 1 RGB texture sampled at texel centres.
uniform sampler2D u_lut;
uniform vec2 u_clim;  // lo, hi of the colour range

vec3 nagare_colormap(float value) {
    float t = clamp((value - u_clim.x) / (u_clim.y - u_clim.x), 0.0, 1.0);
    // texel centres: 0 maps to 0.5/256, 1 to 255.5/256, so nothing bleeds past the ends
    return texture2D(u_lut, vec2((t * 255.0 + 0.5) / 256.0, 0.5)).rgb;
}

// 3D particles as sprites shaded like spheres of a given world radius. The sprite's pixel size is
// the size of one diameter at a reference depth (u_size_ref pixels at clip w = u_w_ref, measured on
// the host from the camera each frame) scaled by perspective: size = u_size_ref * u_w_ref / w.
// Hidden particles (walls drawn as outlines) carry a value below -1e37 and are moved off screen.
#include "colormap.glsl"
attribute vec3 a_position;
attribute float a_value;
uniform float u_size_ref;
uniform float u_w_ref;
uniform float u_min_size;
varying vec3 v_color;

void main() {
    if (a_value < -1.0e37) {
        gl_Position = vec4(2.0, 2.0, 2.0, 1.0);
        gl_PointSize = 0.0;
        v_color = vec3(0.0);
        return;
    }
    gl_Position = $transform(vec4(a_position, 1.0));
    gl_PointSize = max(u_size_ref * u_w_ref / max(gl_Position.w, 1e-6), u_min_size);
    v_color = nagare_colormap(a_value);
}

// Particles as point sprites. Position through the VisPy transform chain; value to colour here,
// so an attribute change costs one float per particle on upload, not an RGB triple.
#include "colormap.glsl"
attribute vec3 a_position;
attribute float a_value;
uniform float u_size;  // sprite diameter in pixels
varying vec3 v_color;

void main() {
    if (a_position.x < -1e37) {  // device_draw.HIDDEN: room past the last particle (or a non-finite one)
        gl_Position = vec4(2.0, 2.0, 2.0, 1.0);
        gl_PointSize = 0.0;
        v_color = vec3(0.0);
        return;
    }
    gl_Position = $transform(vec4(a_position, 1.0));
    gl_PointSize = u_size;
    v_color = nagare_colormap(a_value);
}

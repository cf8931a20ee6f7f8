// A slice plane: the r32f 3D texture (nearest: one colour per cell) through nagare's LUT, as the
// 2D field texture; solid cells (the snapshot stores SOLID = -3e38 there) in the obstacle grey.
#include "colormap.glsl"
uniform sampler3D u_volume;
varying vec3 v_texcoord;

void main() {
    float v = texture3D(u_volume, v_texcoord).r;
    if (v < -1.0e37) {
        gl_FragColor = vec4(0.349, 0.349, 0.380, 1.0);
        return;
    }
    gl_FragColor = vec4(nagare_colormap(v), 1.0);
}

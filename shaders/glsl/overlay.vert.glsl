// Particles drawn over a 2D field (e.g. tracers): positions only, one colour, so an upload costs
// 8 bytes per particle and no per-point work on the host.
attribute vec2 a_position;
uniform float u_size;  // sprite diameter in pixels

void main() {
    if (a_position.x < -1e37) {  // device_draw.HIDDEN: a parked tracer, or room past the last one
        gl_Position = vec4(2.0, 2.0, 2.0, 1.0);
        gl_PointSize = 0.0;
        return;
    }
    gl_Position = $transform(vec4(a_position, 0.0, 1.0));
    gl_PointSize = u_size;
}

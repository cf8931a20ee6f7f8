// Points whose positions CUDA writes (app/gui/device_draw.py): one colour, a size in pixels.
// A point that is not drawn (a parked tracer, room past the end) arrives with x at HIDDEN
// (-3e38) and is moved out of the clip volume.
attribute vec3 a_position;
uniform float u_size;  // sprite diameter in logical pixels
uniform float u_px_scale;  // framebuffer pixels per logical pixel (as VisPy's Markers: HiDPI, exports)

void main() {
    if (a_position.x < -1e37) {
        gl_Position = vec4(2.0, 2.0, 2.0, 1.0);
        gl_PointSize = 0.0;
        return;
    }
    gl_Position = $transform(vec4(a_position, 1.0));
    gl_PointSize = u_size * u_px_scale;
}

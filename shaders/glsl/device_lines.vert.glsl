// Line segments whose end points and colours CUDA writes (app/gui/device_draw.py): the arrays
// have a fixed size, so a segment that is not drawn (an unwritten trail sample, a wrap across a
// periodic domain, room past the end) comes with alpha 0 and is moved out of the clip volume
// here; both of its ends are, so the clipper drops it whole.
attribute vec3 a_position;
attribute vec4 a_color;
varying vec4 v_color;

void main() {
    v_color = a_color;
    if (a_color.a <= 0.0) {
        gl_Position = vec4(2.0, 2.0, 2.0, 1.0);
        return;
    }
    gl_Position = $transform(vec4(a_position, 1.0));
}

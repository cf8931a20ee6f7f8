// A round sprite of one colour (fragments outside the disc are discarded).
uniform vec4 u_color;

void main() {
    vec2 p = 2.0 * gl_PointCoord - 1.0;
    if (dot(p, p) > 1.0) discard;
    gl_FragColor = u_color;
}

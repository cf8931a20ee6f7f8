// Round, lightly shaded sprite; fragments outside the disc are discarded.
varying vec3 v_color;

void main() {
    vec2 p = 2.0 * gl_PointCoord - 1.0;
    float r2 = dot(p, p);
    if (r2 > 1.0) discard;
    float shade = 0.75 + 0.25 * sqrt(1.0 - r2);  // a hint of a sphere
    gl_FragColor = vec4(v_color * shade, 1.0);
}

// Round sprite: a light core inside a dark ring, so a tracer shows on every colour map (white
// alone vanished on the white middle of a diverging map, black alone on a dark one); fragments
// outside the disc are discarded.
uniform vec4 u_color;  // the core
uniform vec4 u_halo;   // the ring around it
uniform float u_core;  // the core's radius, as a fraction of the sprite's

void main() {
    vec2 p = 2.0 * gl_PointCoord - 1.0;
    float r2 = dot(p, p);
    if (r2 > 1.0) discard;
    gl_FragColor = r2 <= u_core * u_core ? u_color : u_halo;
}

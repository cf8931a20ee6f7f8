// A sphere impostor: the sprite's disc with the normal of a unit sphere, lit by one light from the
// viewer's upper left (diffuse + ambient + a small specular highlight).
varying vec3 v_color;

void main() {
    vec2 p = 2.0 * gl_PointCoord - 1.0;
    float r2 = dot(p, p);
    if (r2 > 1.0) discard;
    vec3 n = vec3(p.x, -p.y, sqrt(1.0 - r2));
    vec3 light = normalize(vec3(-0.4, 0.5, 0.8));
    float diffuse = max(dot(n, light), 0.0);
    float spec = pow(max(dot(reflect(-light, n), vec3(0.0, 0.0, 1.0)), 0.0), 24.0);
    gl_FragColor = vec4(v_color * (0.35 + 0.65 * diffuse) + 0.25 * spec, 1.0);
}

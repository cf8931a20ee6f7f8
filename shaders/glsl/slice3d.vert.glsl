// Axis-aligned slice planes of a 3D field drawn in place: each vertex carries its position in the
// scene and its coordinate in the field's 3D texture; the fragment shader samples the texture.
attribute vec3 a_position;
attribute vec3 a_texcoord;
varying vec3 v_texcoord;

void main() {
    gl_Position = $transform(vec4(a_position, 1.0));
    v_texcoord = a_texcoord;
}

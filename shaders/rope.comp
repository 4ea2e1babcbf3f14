#version 450
// Rotary embedding, NeoX pairing (i, i + n_dims/2), of the first n_dims values of every row of
// x [head_dim, heads, tokens, n3]; the rest is copied. The angles: rope_angle.glsl.

#include "common.glsl"

layout(local_size_x = 256) in;

layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer Pos { int pos[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
#include "rope_fields.glsl"
} p;

#include "rope_angle.glsl"

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint half_dims = p.n_dims / 2u;
    // Work items: the half_dims pairs, then the copied tail, of every row.
    uint per_row = half_dims + (ne.x - p.n_dims);
    uint total = per_row * ne.y * ne.z * ne.w;
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint idx = gl_GlobalInvocationID.x; idx < total; idx += stride) {
        uint e = idx % per_row;
        uint r = idx / per_row;
        uvec3 i = uvec3(r % ne.y, (r / ne.y) % ne.z, r / (ne.y * ne.z));
        uint xr = p.x_off + i.x * p.x_nb.y + i.y * p.x_nb.z + i.z * p.x_nb.w;
        uint dr = p.d_off + i.x * p.d_nb.y + i.y * p.d_nb.z + i.z * p.d_nb.w;
        if (e >= half_dims) {
            uint k = p.n_dims + (e - half_dims);
            d[dr + k * p.d_nb.x] = x[xr + k * p.x_nb.x];
            continue;
        }
        uint j = e;
        vec2 cs = rope_cos_sin(j, i.y);
        float c = cs.x;
        float s = cs.y;
        float a = x[xr + j * p.x_nb.x];
        float b = x[xr + (j + half_dims) * p.x_nb.x];
        d[dr + j * p.d_nb.x] = a * c - b * s;
        d[dr + (j + half_dims) * p.d_nb.x] = b * c + a * s;
    }
}

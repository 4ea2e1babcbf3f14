#version 450
// Rotary embedding, NeoX pairing (i, i + n_dims/2), of the first n_dims values of every row of
// x [head_dim, heads, tokens, n3]; the rest is copied. Frequency j turns with position
// component comp(j) at inverse frequency theta^(-exponent(j)) (the CPU reference's
// rope_frequency): KIND 0 interleaved M-RoPE with sections (s_h, s_w), KIND 1 axial 2-D.
// Positions: component c of token t at p_off + c * p_nb1 + t * p_nb0 (ints).

#include "common.glsl"

layout(local_size_x = 256) in;

layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer Pos { int pos[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
    uvec4 ne;      // shape (maximal)
    uvec4 dyn;     // dynamic axis (common.glsl)
    uvec4 x_nb;    // strides in floats
    uvec4 d_nb;
    uint x_off;    // offsets in floats
    uint d_off;
    uint p_off;    // positions (ints)
    uint p_nb0;
    uint p_nb1;
    uint n_dims;
    uint kind;
    uint s_h;      // M-RoPE sections of the h and w components
    uint s_w;
    float log2_theta;
} p;

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
        uint comp = 0u;
        float expo;
        if (p.kind == 0u) {
            if (j % 3u == 1u && j < 3u * p.s_h) {
                comp = 1u;
            } else if (j % 3u == 2u && j < 3u * p.s_w) {
                comp = 2u;
            }
            expo = 2.0 * float(j) / float(p.n_dims);
        } else {
            uint quarter = p.n_dims / 4u;
            uint jj = j;
            if (j >= quarter) {
                comp = 1u;
                jj = j - quarter;
            }
            expo = 2.0 * float(jj) / float(half_dims);
        }
        float inv_freq = exp2(-expo * p.log2_theta);
        float angle = float(pos[p.p_off + comp * p.p_nb1 + i.y * p.p_nb0]) * inv_freq;
        // Reduce to [-pi, pi] (Cody-Waite, 2 pi = C1 + C2 with C1 exact in 8 bits), where
        // every driver's sin and cos are accurate; large positions give large angles.
        float k = round(angle * 0.15915494309189535);
        float reduced = (angle - k * 6.28125) - k * 1.9353071795864769e-3;
        float c = cos(reduced);
        float s = sin(reduced);
        float a = x[xr + j * p.x_nb.x];
        float b = x[xr + (j + half_dims) * p.x_nb.x];
        d[dr + j * p.d_nb.x] = a * c - b * s;
        d[dr + (j + half_dims) * p.d_nb.x] = b * c + a * s;
    }
}

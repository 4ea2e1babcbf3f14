#version 450
// RMSNorm with weight along ne0, then the rotary embedding of rope.comp, of every row of
// x [head_dim, heads, tokens, n3]: one dispatch for a per-head norm whose only consumer is a
// RoPE (Qwen3's q/k norms). One workgroup per row (grid-stride over rows): the sum of squares
// reduced in shared memory as in rms_norm.comp, then each thread turns pairs of the
// normalized row and copies its unrotated tail. With a fused SET_ROWS (p.d_rows > 0) token t
// goes to token slot ids[t] of the output (a KV cache; d_nb.z its row stride), and a token
// whose id is out of range is not written; with p.d_f16 that cache holds f16 values, written
// in pairs (a u32 word of two halves: rotation pairs j, j + 1 per thread; the launch checks
// that rows and rotated halves are whole, aligned pairs).

#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;

layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer Wt { float wt[]; };
layout(set = 0, binding = 3) readonly buffer Pos { int pos[]; };
layout(set = 0, binding = 4) readonly buffer Ids { int ids[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };
layout(set = 0, binding = 5) writeonly buffer DH { uint d_half2[]; };

layout(push_constant) uniform Params {
#include "rope_fields.glsl"
    uint w_off;    // norm weight offset (floats)
    float eps;
    uint i_off;    // fused SET_ROWS: ids offset and stride (ints), output rows; 0 rows: none
    uint i_nb0;
    uint d_rows;
    uint d_f16;    // 1: the output holds f16 values (offsets and strides in halves, unit element stride)
} p;

#include "rope_angle.glsl"

shared float partial[WG];

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint rows = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    uint half_dims = p.n_dims / 2u;
    for (uint r = gl_WorkGroupID.x; r < rows; r += gl_NumWorkGroups.x) {
        uvec3 i = uvec3(r % ne.y, (r / ne.y) % ne.z, r / (ne.y * ne.z));
        uint xr = p.x_off + i.x * p.x_nb.y + i.y * p.x_nb.z + i.z * p.x_nb.w;
        uint slot = i.y;
        if (p.d_rows > 0u) {
            int id = ids[p.i_off + i.y * p.i_nb0];
            if (id < 0 || uint(id) >= p.d_rows) {
                continue;
            }
            slot = uint(id);
        }
        uint dr = p.d_off + i.x * p.d_nb.y + slot * p.d_nb.z + i.z * p.d_nb.w;
        float ss = 0.0;
        for (uint k = tid; k < ne.x; k += WG) {
            float v = x[xr + k * p.x_nb.x];
            ss += v * v;
        }
        partial[tid] = ss;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1u) {
            if (tid < s) {
                partial[tid] += partial[tid + s];
            }
            barrier();
        }
        float scale = 1.0 / sqrt(partial[0] / float(ne.x) + p.eps);
        // Value k of the normalized row, and pair j of it rotated (outputs j, j + half_dims).
#define NORMED(k) (x[xr + (k) * p.x_nb.x] * scale * wt[p.w_off + (k)])
#define ROTATED(j, cs) vec2(NORMED(j) * cs.x - NORMED((j) + half_dims) * cs.y, \
                            NORMED((j) + half_dims) * cs.x + NORMED(j) * cs.y)
        if (p.d_f16 != 0u) {
            // Two pairs a thread: outputs j, j + 1 and j + half_dims, j + half_dims + 1.
            for (uint j = 2u * tid; j < half_dims; j += 2u * WG) {
                vec2 c0 = rope_cos_sin(j, i.y);
                vec2 c1 = rope_cos_sin(j + 1u, i.y);
                vec2 r0 = ROTATED(j, c0);
                vec2 r1 = ROTATED(j + 1u, c1);
                d_half2[(dr + j) >> 1u] = packHalf2x16(vec2(r0.x, r1.x));
                d_half2[(dr + j + half_dims) >> 1u] = packHalf2x16(vec2(r0.y, r1.y));
            }
            for (uint k = p.n_dims + 2u * tid; k < ne.x; k += 2u * WG) {
                d_half2[(dr + k) >> 1u] = packHalf2x16(vec2(NORMED(k), NORMED(k + 1u)));
            }
        } else {
            for (uint j = tid; j < half_dims; j += WG) {
                vec2 cs = rope_cos_sin(j, i.y);
                vec2 r = ROTATED(j, cs);
                d[dr + j * p.d_nb.x] = r.x;
                d[dr + (j + half_dims) * p.d_nb.x] = r.y;
            }
            for (uint k = p.n_dims + tid; k < ne.x; k += WG) {
                d[dr + k * p.d_nb.x] = NORMED(k);
            }
        }
        barrier();
    }
}

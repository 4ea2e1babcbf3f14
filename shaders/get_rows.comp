#version 450
// GET_ROWS and GET_ROWS_WEIGHTED (spec constant WEIGHTED): row p of the output is
// sum_k weights[k, p] * table[ids[k, p]] (one tap, weight 1, for GET_ROWS). The table is any
// weight type (wtype.glsl, read by bytes); ids out of range are clamped to the table. One
// workgroup per output row (grid-stride), threads over its values.

#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint WEIGHTED = 0u;

layout(set = 0, binding = 1) readonly buffer W { uint w[]; };
layout(set = 0, binding = 2) readonly buffer Ids { int ids[]; };
layout(set = 0, binding = 3) readonly buffer Wts { float wts[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
    uvec4 ne;      // output: row width, rows (maximal)
    uvec4 dyn;     // dynamic axis (common.glsl)
    uint t_off;    // table: byte offset, bytes per row, rows
    uint t_nb1;
    uint t_rows;
    uint taps;     // ids per output row
    uint i_off;    // ids: offset, stride along taps, stride along rows (ints)
    uint i_nb0;
    uint i_nb1;
    uint w_off;    // weights: offset, strides (floats)
    uint w_nb0;
    uint w_nb1;
    uint d_off;    // output: offset, row stride (floats)
    uint d_nb1;
} p;

// Values a row of the table holds (wtype.glsl: Q6_K rows of whole quads are stored by quads).
#define W_ROW_VALUES p.ne.x
#include "wtype.glsl"

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < ne.y; r += gl_NumWorkGroups.x) {
        for (uint i = tid; i < ne.x; i += 64u) {
            float acc = 0.0;
            for (uint k = 0u; k < p.taps; k++) {
                int id = ids[p.i_off + k * p.i_nb0 + r * p.i_nb1];
                uint row = uint(clamp(id, 0, int(p.t_rows) - 1));
                float v = load_w1(p.t_off + row * p.t_nb1, i);
                acc += WEIGHTED == 1u ? wts[p.w_off + k * p.w_nb0 + r * p.w_nb1] * v : v;
            }
            d[p.d_off + r * p.d_nb1 + i] = acc;
        }
    }
}

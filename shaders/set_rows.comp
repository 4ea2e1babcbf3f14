#version 450
// SET_ROWS: row r of src goes to row ids[r] of the output (the destination storage, e.g. a
// KV cache); rows whose id is out of range are not written. One workgroup per source row.

#include "common.glsl"

layout(local_size_x = 64) in;

layout(set = 0, binding = 2) readonly buffer S { float s[]; };
layout(set = 0, binding = 3) readonly buffer Ids { int ids[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
    uvec4 ne;      // source: row width, rows (maximal)
    uvec4 dyn;     // dynamic axis of the source (common.glsl)
    uint s_off;    // source: offset, element and row strides (floats)
    uint s_nb0;
    uint s_nb1;
    uint i_off;    // ids: offset and stride (ints)
    uint i_nb0;
    uint d_off;    // destination: offset, element and row strides (floats), rows
    uint d_nb0;
    uint d_nb1;
    uint d_rows;
} p;

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < ne.y; r += gl_NumWorkGroups.x) {
        int id = ids[p.i_off + r * p.i_nb0];
        if (id < 0 || uint(id) >= p.d_rows) {
            continue;
        }
        for (uint i = tid; i < ne.x; i += 64u) {
            d[p.d_off + uint(id) * p.d_nb1 + i * p.d_nb0] = s[p.s_off + r * p.s_nb1 + i * p.s_nb0];
        }
    }
}

#version 450
#extension GL_EXT_control_flow_attributes : require
// SET_ROWS: row r of src goes to row ids[r] of the output (the destination storage, e.g. a
// KV cache); rows whose id is out of range are not written. Rows and chunks of rows as in binary.comp
// (elementwise.glsl). With p.d_f16 the destination holds f16 values, written in pairs (a u32
// word of two halves per thread; the launch checks that rows are whole, aligned pairs).

#include "common.glsl"
#include "elementwise.glsl"

layout(local_size_x = 256) in;

layout(set = 0, binding = 2) readonly restrict buffer S { float s[]; };
layout(set = 0, binding = 3) readonly restrict buffer Ids { int ids[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };
layout(set = 0, binding = 5) writeonly buffer DH { uint d_half2[]; };

layout(push_constant) uniform Params {
    uvec4 ne;      // source: row width, rows (maximal)
    uvec4 dyn;     // dynamic axis of the source (common.glsl)
    uint s_off;    // source: offset, element and row strides (floats)
    uint s_nb0;
    uint s_nb1;
    uint i_off;    // ids: offset and stride (ints)
    uint i_nb0;
    uint d_off;    // destination: offset, element and row strides (values), rows
    uint d_nb0;
    uint d_nb1;
    uint d_rows;
    uint d_f16;    // 1: the destination holds f16 values (unit element stride)
} p;

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    // What a thread writes at a time: a value, or a pair of halves.
    uint width = p.d_f16 != 0u ? ne.x / 2u : ne.x;
    for (uint r = gl_WorkGroupID.y; r < ne.y; r += gl_NumWorkGroups.y) {
        int id = ids[p.i_off + r * p.i_nb0];
        if (id < 0 || uint(id) >= p.d_rows) {
            continue;
        }
        uint dr = p.d_off + uint(id) * p.d_nb1;
        uint sr = p.s_off + r * p.s_nb1;
        for (uint c = gl_WorkGroupID.x * ROW_CHUNK; c < width; c += gl_NumWorkGroups.x * ROW_CHUNK) {
            [[unroll]] for (uint e = 0u; e < ROW_CHUNK / 256u; e++) {
                uint k = c + e * 256u + gl_LocalInvocationID.x;
                if (k < width && p.d_f16 != 0u) {
                    uint at = sr + 2u * k * p.s_nb0;
                    d_half2[(dr >> 1u) + k] = packHalf2x16(vec2(s[at], s[at + p.s_nb0]));
                } else if (k < width) {
                    d[dr + k * p.d_nb0] = s[sr + k * p.s_nb0];
                }
            }
        }
    }
}

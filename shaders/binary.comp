#version 450
#extension GL_EXT_control_flow_attributes : require
// Elementwise a OP b over a 4-D strided shape, b broadcast by repetition (index modulo b's
// shape): OP = 0 add, 1 mul, 2 swiglu (silu(a) * b). Workgroups take ROW_CHUNK values of one
// row (x) of one of the ne1 * ne2 * ne3 rows (y), grid-stride both ways: a row's position is
// divided out once per row, not per value (integer division, not memory, bounded the flat
// form of this kernel). With p.d_f16 the output holds f16 values (activations kept in halves):
// a thread takes a pair of values of a contiguous row.

#include "common.glsl"
#include "elementwise.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;

layout(set = 0, binding = 1) readonly restrict buffer A { float a[]; };
layout(set = 0, binding = 2) readonly restrict buffer B { float b[]; };
layout(set = 0, binding = 5) writeonly restrict buffer D { float d[]; };
layout(set = 0, binding = 5) writeonly restrict buffer DH { uint d_half2[]; };

layout(push_constant) uniform Params {
    uvec4 ne;    // output shape (maximal)
    uvec4 dyn;   // dynamic axis (common.glsl)
    uvec4 a_nb;  // strides in floats
    uvec4 b_ne;  // b's shape (divides ne)
    uvec4 b_nb;
    uvec4 d_nb;  // in the output's values
    uint a_off;  // offsets in floats (the output's: in its values)
    uint b_off;
    uint d_off;
    uint d_f16;  // 1: the output holds f16 values (unit element stride, even offsets)
} p;

// Value k of the row of a at ar (and of b at br).
float value(uint ar, uint br, uint k, bool repeat_x) {
    float av = a[ar + k * p.a_nb.x];
    float bv = b[br + (repeat_x ? k % p.b_ne.x : k) * p.b_nb.x];
    if (OP == 0u) {
        return av + bv;
    } else if (OP == 1u) {
        return av * bv;
    }
    return av / (1.0 + exp(-av)) * bv;
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint rows = ne.y * ne.z * ne.w;
    for (uint r = gl_WorkGroupID.y; r < rows; r += gl_NumWorkGroups.y) {
        uvec3 i = row_index(r, ne);
        uvec3 j = i % p.b_ne.yzw;
        uint ar = p.a_off + dot_index(i, p.a_nb.yzw);
        uint br = p.b_off + dot_index(j, p.b_nb.yzw);
        uint dr = p.d_off + dot_index(i, p.d_nb.yzw);
        bool repeat_x = p.b_ne.x != ne.x;
        // What a thread writes at a time: a value, or a pair of halves.
        uint width = p.d_f16 != 0u ? ne.x / 2u : ne.x;
        for (uint c = gl_WorkGroupID.x * ROW_CHUNK; c < width; c += gl_NumWorkGroups.x * ROW_CHUNK) {
            [[unroll]] for (uint e = 0u; e < ROW_CHUNK / 256u; e++) {
                uint k = c + e * 256u + gl_LocalInvocationID.x;
                if (k < width && p.d_f16 != 0u) {
                    vec2 v = vec2(value(ar, br, 2u * k, repeat_x), value(ar, br, 2u * k + 1u, repeat_x));
                    d_half2[(dr >> 1u) + k] = packHalf2x16(v);
                } else if (k < width) {
                    d[dr + k * p.d_nb.x] = value(ar, br, k, repeat_x);
                }
            }
        }
    }
}

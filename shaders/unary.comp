#version 450
#extension GL_EXT_control_flow_attributes : require
// Elementwise y = f(x) over a 4-D strided shape: OP = 0 copy (CONT), 1 GELU (tanh form),
// 2 GELU (exact, erf). Rows as in binary.comp (elementwise.glsl). With p.d_f16 the output holds
// f16 values (activations kept in halves): a thread takes a pair of values of a contiguous row.

#include "common.glsl"
#include "elementwise.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;

layout(set = 0, binding = 1) readonly restrict buffer X { float x[]; };
layout(set = 0, binding = 5) writeonly restrict buffer D { float d[]; };
layout(set = 0, binding = 5) writeonly restrict buffer DH { uint d_half2[]; };

layout(push_constant) uniform Params {
    uvec4 ne;    // shape (maximal)
    uvec4 dyn;   // dynamic axis (common.glsl)
    uvec4 x_nb;  // strides in floats
    uvec4 d_nb;  // in the output's values
    uint x_off;  // offsets in floats (the output's: in its values)
    uint d_off;
    uint d_f16;  // 1: the output holds f16 values (unit element stride, even offsets)
} p;

// erf with |error| < 1.2e-7: Numerical Recipes' Chebyshev fit of erfc (as the CPU reference).
float erf_nr(float v) {
    float z = abs(v);
    float t = 1.0 / (1.0 + 0.5 * z);
    float poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    float erfc = t * exp(poly);
    return v >= 0.0 ? 1.0 - erfc : erfc - 1.0;
}

// tanh without overflow for large |u|: 1 - 2 / (exp(2u) + 1), odd-symmetric.
float tanh_safe(float u) {
    float a = min(abs(u), 20.0);
    float e = exp(-2.0 * a);
    float t = (1.0 - e) / (1.0 + e);
    return u < 0.0 ? -t : t;
}

float apply(float v) {
    if (OP == 0u) {
        return v;
    }
    if (OP == 1u) {
        return 0.5 * v * (1.0 + tanh_safe(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    }
    return 0.5 * v * (1.0 + erf_nr(v * 0.7071067811865476));
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint rows = ne.y * ne.z * ne.w;
    for (uint r = gl_WorkGroupID.y; r < rows; r += gl_NumWorkGroups.y) {
        uvec3 i = row_index(r, ne);
        uint xr = p.x_off + dot_index(i, p.x_nb.yzw);
        uint dr = p.d_off + dot_index(i, p.d_nb.yzw);
        // What a thread writes at a time: a value, or a pair of halves.
        uint width = p.d_f16 != 0u ? ne.x / 2u : ne.x;
        for (uint c = gl_WorkGroupID.x * ROW_CHUNK; c < width; c += gl_NumWorkGroups.x * ROW_CHUNK) {
            [[unroll]] for (uint e = 0u; e < ROW_CHUNK / 256u; e++) {
                uint k = c + e * 256u + gl_LocalInvocationID.x;
                if (k < width && p.d_f16 != 0u) {
                    vec2 v = vec2(apply(x[xr + 2u * k * p.x_nb.x]), apply(x[xr + (2u * k + 1u) * p.x_nb.x]));
                    d_half2[(dr >> 1u) + k] = packHalf2x16(v);
                } else if (k < width) {
                    d[dr + k * p.d_nb.x] = apply(x[xr + k * p.x_nb.x]);
                }
            }
        }
    }
}

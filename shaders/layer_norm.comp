#version 450
// LayerNorm along ne0: d = (x - mean) / sqrt(var + eps) * w + b. One workgroup per row
// (grid-stride over rows); the mean, then the variance around it, reduced in shared memory.
// With p.d_f16 the output holds f16 values (activations kept in halves), written in pairs
// along contiguous rows.

#include "common.glsl"

#define WG 256u
layout(local_size_x = 256) in;

layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer Wt { float wt[]; };
layout(set = 0, binding = 3) readonly buffer Bs { float bs[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };
layout(set = 0, binding = 5) writeonly buffer DH { uint d_half2[]; };

layout(push_constant) uniform Params {
    uvec4 ne;    // shape (maximal)
    uvec4 dyn;   // dynamic axis (common.glsl)
    uvec4 x_nb;  // strides in floats
    uvec4 d_nb;  // in the output's values
    uint x_off;  // offsets in floats (the output's: in its values)
    uint w_off;
    uint b_off;
    uint d_off;
    float eps;
    uint d_f16;  // 1: the output holds f16 values (unit element stride, even offsets)
} p;

// Value k of the normalized row at xr.
float normed(uint xr, uint k, float mean, float inv) {
    return (x[xr + k * p.x_nb.x] - mean) * inv * wt[p.w_off + k] + bs[p.b_off + k];
}

shared float partial[WG];

float reduce_sum(float v, uint tid) {
    partial[tid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            partial[tid] += partial[tid + s];
        }
        barrier();
    }
    float total = partial[0];
    barrier();
    return total;
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint rows = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < rows; r += gl_NumWorkGroups.x) {
        uvec3 i = uvec3(r % ne.y, (r / ne.y) % ne.z, r / (ne.y * ne.z));
        uint xr = p.x_off + i.x * p.x_nb.y + i.y * p.x_nb.z + i.z * p.x_nb.w;
        uint dr = p.d_off + i.x * p.d_nb.y + i.y * p.d_nb.z + i.z * p.d_nb.w;
        float s = 0.0;
        for (uint k = tid; k < ne.x; k += WG) {
            s += x[xr + k * p.x_nb.x];
        }
        float mean = reduce_sum(s, tid) / float(ne.x);
        float ss = 0.0;
        for (uint k = tid; k < ne.x; k += WG) {
            float v = x[xr + k * p.x_nb.x] - mean;
            ss += v * v;
        }
        float inv = 1.0 / sqrt(reduce_sum(ss, tid) / float(ne.x) + p.eps);
        if (p.d_f16 != 0u) {
            for (uint k = 2u * tid; k < ne.x; k += 2u * WG) {
                d_half2[(dr + k) >> 1u] = packHalf2x16(vec2(normed(xr, k, mean, inv), normed(xr, k + 1u, mean, inv)));
            }
        } else {
            for (uint k = tid; k < ne.x; k += WG) {
                d[dr + k * p.d_nb.x] = normed(xr, k, mean, inv);
            }
        }
    }
}

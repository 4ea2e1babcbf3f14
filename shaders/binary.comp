#version 450
// Elementwise a OP b over a 4-D strided shape, b broadcast by repetition (index modulo b's
// shape): OP = 0 add, 1 mul, 2 swiglu (silu(a) * b). Grid-stride over the flat index.

#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;

layout(set = 0, binding = 1) readonly buffer A { float a[]; };
layout(set = 0, binding = 2) readonly buffer B { float b[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
    uvec4 ne;    // output shape (maximal)
    uvec4 dyn;   // dynamic axis (common.glsl)
    uvec4 a_nb;  // strides in floats
    uvec4 b_ne;  // b's shape (divides ne)
    uvec4 b_nb;
    uvec4 d_nb;
    uint a_off;  // offsets in floats
    uint b_off;
    uint d_off;
} p;

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint total = ne.x * ne.y * ne.z * ne.w;
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint idx = gl_GlobalInvocationID.x; idx < total; idx += stride) {
        uvec4 i = uvec4(idx % ne.x, (idx / ne.x) % ne.y, (idx / (ne.x * ne.y)) % ne.z, idx / (ne.x * ne.y * ne.z));
        uvec4 j = i % p.b_ne;
        float av = a[p.a_off + i.x * p.a_nb.x + i.y * p.a_nb.y + i.z * p.a_nb.z + i.w * p.a_nb.w];
        float bv = b[p.b_off + j.x * p.b_nb.x + j.y * p.b_nb.y + j.z * p.b_nb.z + j.w * p.b_nb.w];
        float r;
        if (OP == 0u) {
            r = av + bv;
        } else if (OP == 1u) {
            r = av * bv;
        } else {
            r = av / (1.0 + exp(-av)) * bv;
        }
        d[p.d_off + i.x * p.d_nb.x + i.y * p.d_nb.y + i.z * p.d_nb.z + i.w * p.d_nb.w] = r;
    }
}

#version 450
// Elementwise y = f(x) over a 4-D strided shape: OP = 0 copy (CONT), 1 GELU (tanh form),
// 2 GELU (exact, erf). Grid-stride over the flat index.

#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;

layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
    uvec4 ne;    // shape (maximal)
    uvec4 dyn;   // dynamic axis (common.glsl)
    uvec4 x_nb;  // strides in floats
    uvec4 d_nb;
    uint x_off;  // offsets in floats
    uint d_off;
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

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint total = ne.x * ne.y * ne.z * ne.w;
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint idx = gl_GlobalInvocationID.x; idx < total; idx += stride) {
        uvec4 i = uvec4(idx % ne.x, (idx / ne.x) % ne.y, (idx / (ne.x * ne.y)) % ne.z, idx / (ne.x * ne.y * ne.z));
        float v = x[p.x_off + i.x * p.x_nb.x + i.y * p.x_nb.y + i.z * p.x_nb.z + i.w * p.x_nb.w];
        float r;
        if (OP == 0u) {
            r = v;
        } else if (OP == 1u) {
            r = 0.5 * v * (1.0 + tanh_safe(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        } else {
            r = 0.5 * v * (1.0 + erf_nr(v * 0.7071067811865476));
        }
        d[p.d_off + i.x * p.d_nb.x + i.y * p.d_nb.y + i.z * p.d_nb.z + i.w * p.d_nb.w] = r;
    }
}

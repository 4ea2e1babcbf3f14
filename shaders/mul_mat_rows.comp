#version 450
// Matrix product for short rows (small K): one invocation computes one output value, the
// whole dot product of a row of w with a column of x, with no shared memory and no barriers,
// 64 rows per workgroup. Grid-stride loops over row groups (x) and columns (y).

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"

#define WG 64u

layout(local_size_x = 64) in;

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint n_groups = (ne.x + WG - 1u) / WG;
    uint k4 = p.K & ~3u;
    for (uint c = gl_WorkGroupID.y; c < cols; c += gl_NumWorkGroups.y) {
        uvec2 off = column_offsets(c, ne);
        for (uint g = gl_WorkGroupID.x; g < n_groups; g += gl_NumWorkGroups.x) {
            uint n = g * WG + gl_LocalInvocationID.x;
            if (n >= ne.x) {
                continue;
            }
            uint row = p.w_off + n * p.w_nb1;
            float acc = 0.0;
            for (uint k = 0u; k < k4; k += 4u) {
                uint xi = off.x + k;
                acc += dot(load_w4(row, k), vec4(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]));
            }
            for (uint k = k4; k < p.K; k++) {
                acc += load_w1(row, k) * x[off.x + k];
            }
            d[off.y + n] = with_residual(acc, off.y + n, n);
        }
    }
}

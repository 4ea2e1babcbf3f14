#version 450
// Matrix-vector product for few columns: one workgroup computes ROWS rows of w against one
// column of x; its threads split K and reduce in shared memory. Grid-stride loops over row
// groups (x) and columns (y), so any shape fits in any grid.

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"

#define WG 64u
#define ROWS 4u

layout(local_size_x = 64) in;

shared float partial[ROWS][WG];

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    uint n_groups = (ne.x + ROWS - 1u) / ROWS;
    for (uint c = gl_WorkGroupID.y; c < cols; c += gl_NumWorkGroups.y) {
        uvec2 off = column_offsets(c, ne);
        for (uint g = gl_WorkGroupID.x; g < n_groups; g += gl_NumWorkGroups.x) {
            uint n0 = g * ROWS;
            float acc[ROWS];
            for (uint r = 0u; r < ROWS; r++) {
                acc[r] = 0.0;
            }
            uint k4 = p.K & ~3u;
            for (uint k = tid * 4u; k < k4; k += WG * 4u) {
                uint xi = off.x + k;
                vec4 xv = vec4(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]);
                for (uint r = 0u; r < ROWS; r++) {
                    if (n0 + r < ne.x) {
                        acc[r] += dot(load_w4(p.w_off + (n0 + r) * p.w_nb1, k), xv);
                    }
                }
            }
            for (uint k = k4 + tid; k < p.K; k += WG) {
                for (uint r = 0u; r < ROWS; r++) {
                    if (n0 + r < ne.x) {
                        acc[r] += load_w1(p.w_off + (n0 + r) * p.w_nb1, k) * x[off.x + k];
                    }
                }
            }
            for (uint r = 0u; r < ROWS; r++) {
                partial[r][tid] = acc[r];
            }
            barrier();
            for (uint s = WG / 2u; s > 0u; s >>= 1u) {
                if (tid < s) {
                    for (uint r = 0u; r < ROWS; r++) {
                        partial[r][tid] += partial[r][tid + s];
                    }
                }
                barrier();
            }
            if (tid < ROWS && n0 + tid < ne.x) {
                d[off.y + n0 + tid] = with_residual(partial[tid][0], off.y + n0 + tid, n0 + tid);
            }
            barrier();
        }
    }
}

#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// Matrix-vector product through subgroups, for devices with subgroup arithmetic in compute
// shaders: each subgroup of a workgroup computes one row of w against one column of x. Its
// lanes take consecutive 4-value pieces of the row (so a block is read once, by neighbouring
// lanes), accumulate in f32 and reduce with subgroupAdd: no shared memory, no barriers. A
// workgroup computes gl_NumSubgroups rows; grid-stride loops over row groups (x) and columns
// (y), so any shape fits in any grid, whatever the subgroup size (WG must be a multiple of it).

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"

#define WG 128u

layout(local_size_x = 128) in;

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint lane = gl_SubgroupInvocationID;
    uint step = gl_SubgroupSize;
    uint rows = gl_NumSubgroups;
    uint n_groups = (ne.x + rows - 1u) / rows;
    uint k4 = p.K & ~3u;
    for (uint c = gl_WorkGroupID.y; c < cols; c += gl_NumWorkGroups.y) {
        uvec2 off = column_offsets(c, ne);
        for (uint g = gl_WorkGroupID.x; g < n_groups; g += gl_NumWorkGroups.x) {
            uint n = g * rows + gl_SubgroupID;
            // Uniform in the subgroup: all its lanes reach subgroupAdd or none does.
            if (n < ne.x) {
                uint row = p.w_off + n * p.w_nb1;
                float acc = 0.0;
                for (uint k = lane * 4u; k < k4; k += step * 4u) {
                    uint xi = off.x + k;
                    acc += dot(load_w4(row, k), vec4(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]));
                }
                for (uint k = k4 + lane; k < p.K; k += step) {
                    acc += load_w1(row, k) * x[off.x + k];
                }
                acc = subgroupAdd(acc);
                if (lane == 0u) {
                    d[off.y + n] = acc;
                }
            }
        }
    }
}

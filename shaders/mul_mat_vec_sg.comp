#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// Matrix-vector product through subgroups, for devices with subgroup arithmetic in compute
// shaders: each subgroup of a workgroup computes one row of w against one column of x. Its
// lanes take consecutive pieces of the row (so a block is read once, by neighbouring lanes),
// accumulate in f32 and reduce with subgroupAdd: no shared memory, no barriers. Q4_K, Q6_K
// and Q8_0 lanes decode 8, 16 and 8 values per step under one read of a block's scales.
// A workgroup (128 threads, whole subgroups of any power-of-two size up to 128) computes
// gl_NumSubgroups rows; grid-stride loops over row groups (x) and columns (y), so any shape
// fits in any grid.

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"

layout(local_size_x = 128) in;

// x again, as vec4s: one load instead of four where a column's offset allows (it does for
// every arena value, whose slots are 256-byte aligned). Load instructions, not bytes, bound
// these kernels: a lane decodes a few bytes of weights per step.
layout(set = 0, binding = 2) readonly buffer X4 { vec4 x_vec4[]; };

vec4 x4(uint i) {
    if ((i & 3u) == 0u) {
        return x_vec4[i >> 2u];
    }
    return vec4(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}

// This lane's part of row `row` (byte offset) dot the column at float offset xo, lanes
// 0..step-1 of the subgroup together covering the row.
#if defined(W_Q4_K)
// 8 values per lane and step: the low and high nibbles of one word of qs (values l..l+3 of
// sub-blocks 2c and 2c+1), with the block's d, dmin and the two scales and mins.
float row_dot(uint row, uint xo, uint lane, uint step) {
    float acc = 0.0;
    uint units = (p.K / 256u) * 32u;
    // Blocks are 144 bytes: with a 4-byte aligned row every word below is aligned.
    bool aligned = (row & 3u) == 0u;
    for (uint u = lane; u < units; u += step) {
        uint b = u / 32u;
        uint c = (u % 32u) / 8u;
        uint l = (u % 8u) * 4u;
        uint blk = row + b * 144u;
        vec2 dm;
        vec2 s0;
        vec2 s1;
        uint q;
        if (aligned) {
            uint at = blk >> 2u;
            dm = unpackHalf2x16(w[at]);
            uvec3 s = uvec3(w[at + 1u], w[at + 2u], w[at + 3u]);
            s0 = q4_k_scale_min_words(s, 2u * c);
            s1 = q4_k_scale_min_words(s, 2u * c + 1u);
            q = w[at + 4u + 8u * c + l / 4u];
        } else {
            dm = unpackHalf2x16(load_u32(blk));
            s0 = q4_k_scale_min(blk, 2u * c);
            s1 = q4_k_scale_min(blk, 2u * c + 1u);
            q = load_u32(blk + 16u + 32u * c + l);
        }
        uint xi = xo + b * 256u + 64u * c + l;
        vec4 x0 = x4(xi);
        vec4 x1 = x4(xi + 32u);
        float scaled = s0.x * dot(u8x4(q & 0x0F0F0F0Fu), x0) + s1.x * dot(u8x4((q >> 4u) & 0x0F0F0F0Fu), x1);
        float mins = s0.y * dot(x0, vec4(1.0)) + s1.y * dot(x1, vec4(1.0));
        acc += dm.x * scaled - dm.y * mins;
    }
    return acc;
}
#elif defined(W_Q6_K)
// 16 values per lane and step: values l..l+3 of the four quarters t of half n, from two
// words of ql (low and high nibbles) and one of qh (2 bits per quarter).
float row_dot(uint row, uint xo, uint lane, uint step) {
    float acc = 0.0;
    uint units = (p.K / 256u) * 16u;
    for (uint u = lane; u < units; u += step) {
        uint b = u / 16u;
        uint n = (u % 16u) / 8u;
        uint l = (u % 8u) * 4u;
        uvec4 blk = q6_k_block(row, b);
        uint ql0 = load_u32(blk.x + 64u * n + l);
        uint ql1 = load_u32(blk.x + 64u * n + 32u + l);
        uint qh = load_u32(blk.y + 32u * n + l);
        uint lo[4] = uint[4](ql0, ql1, ql0 >> 4u, ql1 >> 4u);
        uint xi = xo + b * 256u + 128u * n + l;
        float sum = 0.0;
        for (uint t = 0u; t < 4u; t++) {
            uint q = (lo[t] & 0x0F0F0F0Fu) | (((qh >> (2u * t)) & 0x03030303u) << 4u);
            float sc = float(int(load_u8(blk.z + 8u * n + l / 16u + 2u * t) << 24) >> 24);
            sum += sc * dot(u8x4(q) - 32.0, x4(xi + 32u * t));
        }
        acc += load_f16(blk.w) * sum;
    }
    return acc;
}
#elif defined(W_Q8_0)
// 8 values per lane and step (a quarter of a block) under one read of the block's d.
float row_dot(uint row, uint xo, uint lane, uint step) {
    float acc = 0.0;
    uint units = (p.K / 32u) * 4u;
    for (uint u = lane; u < units; u += step) {
        uint j = (u % 4u) * 8u;
        uint blk = row + (u / 4u) * 34u;
        uint xi = xo + (u / 4u) * 32u + j;
        float sum = dot(i8x4(load_u32(blk + 2u + j)), x4(xi)) + dot(i8x4(load_u32(blk + 6u + j)), x4(xi + 4u));
        acc += load_f16(blk) * sum;
    }
    return acc;
}
#else
// 4 values per lane and step through the type's load_w4, then the values past K & ~3.
float row_dot(uint row, uint xo, uint lane, uint step) {
    float acc = 0.0;
    uint k4 = p.K & ~3u;
    for (uint k = lane * 4u; k < k4; k += step * 4u) {
        acc += dot(load_w4(row, k), x4(xo + k));
    }
    for (uint k = k4 + lane; k < p.K; k += step) {
        acc += load_w1(row, k) * x[xo + k];
    }
    return acc;
}
#endif

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint lane = gl_SubgroupInvocationID;
    uint step = gl_SubgroupSize;
    uint rows = gl_NumSubgroups;
    uint n_groups = (ne.x + rows - 1u) / rows;
    for (uint c = gl_WorkGroupID.y; c < cols; c += gl_NumWorkGroups.y) {
        uvec2 off = column_offsets(c, ne);
        for (uint g = gl_WorkGroupID.x; g < n_groups; g += gl_NumWorkGroups.x) {
            uint n = g * rows + gl_SubgroupID;
            // Uniform in the subgroup: all its lanes reach subgroupAdd or none does.
            if (n < ne.x) {
                float acc = row_dot(p.w_off + n * p.w_nb1, off.x, lane, step);
                acc = subgroupAdd(acc);
                if (lane == 0u) {
                    d[off.y + n] = with_residual(acc, off.y + n, n);
                }
            }
        }
    }
}

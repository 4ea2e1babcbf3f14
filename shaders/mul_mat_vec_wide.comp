#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// Matrix-vector product for decode, built for memory parallelism: a row of w is split over T
// threads (`p.tpr`, 64 or 128: several subgroups), each taking whole units of 32 values (a
// quarter-block slice of a K-quant, a Q8_0 block), so that every weight byte of the matrix is
// requested by some thread at once rather than walked by a few lanes in a loop; each thread
// does ROWS rows with one load of x per unit. Partial sums are reduced with subgroupAdd, then
// across the row's subgroups through shared memory. A workgroup of 128 threads computes
// 128 / T row groups of ROWS rows; grid-stride loops over row groups (x) and columns (y).
// Needs subgroups of at most T lanes whose size divides T (the registry checks).
//
// A producer may be folded in (p.pro_mode): x is then computed as it is loaded, from the
// producer's inputs (an RMS norm of the column, its scale reduced once per column by the whole
// workgroup; or silu(gate) * up), so the producer needs no dispatch of its own.

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"

#define WG 128u
#define ROWS 2u

layout(local_size_x = 128) in;

layout(set = 0, binding = 1) readonly buffer W4 { uvec4 w_vec4[]; };
layout(set = 0, binding = 2) readonly buffer X4 { vec4 x_vec4[]; };
// The folded producer's second input: the norm weight, or up.
layout(set = 0, binding = 4) readonly buffer P { float pv[]; };
layout(set = 0, binding = 4) readonly buffer P4 { vec4 pv_vec4[]; };

// One partial sum per subgroup and row (subgroups of at least 4 lanes).
shared float partial[WG / 4u][ROWS];

vec4 x4(uint i) {
    if ((i & 3u) == 0u) {
        return x_vec4[i >> 2u];
    }
    return vec4(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}

vec4 p4(uint i) {
    if ((i & 3u) == 0u) {
        return pv_vec4[i >> 2u];
    }
    return vec4(pv[i], pv[i + 1u], pv[i + 2u], pv[i + 3u]);
}

// The RMS norm's scale of the current column (PRO_RMS_NORM).
float col_scale = 1.0;

// x values k..k+3 of the column at float offset xo, its producer applied.
vec4 xk(uint xo, uint k) {
    vec4 v = x4(xo + k);
    if (p.pro_mode == PRO_RMS_NORM) {
        return v * col_scale * p4(p.pro_off + k);
    }
    if (p.pro_mode == PRO_SWIGLU) {
        return v / (1.0 + exp(-v)) * p4(p.pro_off + xo - p.x_nb.x + k);
    }
    return v;
}

// 1 / sqrt(mean(x^2) + eps) of the column at xo, by the whole workgroup (uniform control
// flow: every invocation calls it).
float rms_scale(uint xo) {
    float ss = 0.0;
    for (uint k = gl_LocalInvocationID.x * 4u; k < p.K; k += WG * 4u) {
        vec4 v = x4(xo + k);
        ss += dot(v, v);
    }
    ss = subgroupAdd(ss);
    if (gl_SubgroupInvocationID == 0u) {
        partial[gl_SubgroupID][0] = ss;
    }
    barrier();
    float total = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) {
        total += partial[i][0];
    }
    barrier();
    return inversesqrt(total / float(p.K) + p.pro_eps);
}

vec4 nibbles_lo(uint q) {
    return vec4(uvec4(q, q >> 8u, q >> 16u, q >> 24u) & 0xFu);
}

vec4 nibbles_hi(uint q) {
    return vec4(uvec4(q >> 4u, q >> 12u, q >> 20u, q >> 28u) & 0xFu);
}

#if defined(W_Q4_K)
// Unit u: qs bytes 16j..16j+15 of block b = u / 8 (j = u % 8): their low nibbles are values
// 64c + 16h .. +15 (c = j / 2, h = j % 2) of sub-block 2c, their high nibbles the same 16
// values 32 further, of sub-block 2c + 1. A block is 9 uvec4s: d/dmin and the scales, then qs.
#define UNIT_BLOCKS 8u

// Scale and min of sub-block s from the scale words: scales[0..3], [4..7], [8..11] (ggml's
// get_scale_min_k4).
vec2 scale_min(uvec3 sw, uint s) {
    uint i = 8u * (s % 4u);
    uint a = (sw[0] >> i) & 0xFFu;
    uint m = (sw[1] >> i) & 0xFFu;
    if (s < 4u) {
        return vec2(float(a & 63u), float(m & 63u));
    }
    uint b = (sw[2] >> i) & 0xFFu;
    return vec2(float((b & 15u) | ((a >> 6u) << 4u)), float((b >> 4u) | ((m >> 6u) << 4u)));
}

void unit_dot(uint row0, uint rows, uint u, uint xo, inout float acc[ROWS]) {
    uint b = u / 8u;
    uint j = u % 8u;
    uint c = j / 2u;
    uint ki = b * 256u + 64u * c + 16u * (j % 2u);
    vec4 xl[4];
    vec4 xh[4];
    float sum_l = 0.0;
    float sum_h = 0.0;
    for (uint i = 0u; i < 4u; i++) {
        xl[i] = xk(xo, ki + 4u * i);
        xh[i] = xk(xo, ki + 32u + 4u * i);
        sum_l += dot(xl[i], vec4(1.0));
        sum_h += dot(xh[i], vec4(1.0));
    }
    for (uint r = 0u; r < ROWS; r++) {
        uint row = p.w_off + min(row0 + r, rows - 1u) * p.w_nb1;
        uint blk = (row >> 4u) + b * 9u;
        uvec4 head = w_vec4[blk];
        uvec4 q = w_vec4[blk + 1u + j];
        vec2 dm = unpackHalf2x16(head.x);
        vec2 s0 = scale_min(head.yzw, 2u * c);
        vec2 s1 = scale_min(head.yzw, 2u * c + 1u);
        float dl = 0.0;
        float dh = 0.0;
        for (uint i = 0u; i < 4u; i++) {
            dl += dot(nibbles_lo(q[i]), xl[i]);
            dh += dot(nibbles_hi(q[i]), xh[i]);
        }
        acc[r] += dm.x * (s0.x * dl + s1.x * dh) - dm.y * (s0.y * sum_l + s1.y * sum_h);
    }
}
#elif defined(W_Q6_K)
// Unit u: values l0..l0+7 (l0 = 8 (u % 4)) of the four quarters t of half n = (u % 8) / 4 of
// block b = u / 8: 8 bytes of ql at 64n + l0, 8 at 64n + 32 + l0, 8 of qh at 32n + l0.
#define UNIT_BLOCKS 8u

void unit_dot(uint row0, uint rows, uint u, uint xo, inout float acc[ROWS]) {
    uint b = u / 8u;
    uint n = (u % 8u) / 4u;
    uint l0 = (u % 4u) * 8u;
    uint ki = b * 256u + 128u * n + l0;
    vec4 xv[8];
    for (uint t = 0u; t < 4u; t++) {
        xv[2u * t] = xk(xo, ki + 32u * t);
        xv[2u * t + 1u] = xk(xo, ki + 32u * t + 4u);
    }
    for (uint r = 0u; r < ROWS; r++) {
        uint blk = p.w_off + min(row0 + r, rows - 1u) * p.w_nb1 + b * 210u;
        uint qa0 = load_u32(blk + 64u * n + l0);
        uint qa1 = load_u32(blk + 64u * n + l0 + 4u);
        uint qb0 = load_u32(blk + 64u * n + 32u + l0);
        uint qb1 = load_u32(blk + 64u * n + 32u + l0 + 4u);
        uint qh0 = load_u32(blk + 128u + 32u * n + l0);
        uint qh1 = load_u32(blk + 128u + 32u * n + l0 + 4u);
        uint sc = load_u32(blk + 192u + 8u * n + l0 / 16u) & 0x00FF00FFu;
        uint sc2 = load_u32(blk + 196u + 8u * n + l0 / 16u) & 0x00FF00FFu;
        float scales[4] = float[4](float(int(sc << 24) >> 24), float(int(sc << 8) >> 24), float(int(sc2 << 24) >> 24), float(int(sc2 << 8) >> 24));
        uint lo[4] = uint[4](qa0, qb0, qa0 >> 4u, qb0 >> 4u);
        uint lo1[4] = uint[4](qa1, qb1, qa1 >> 4u, qb1 >> 4u);
        float sum = 0.0;
        for (uint t = 0u; t < 4u; t++) {
            uint q0 = (lo[t] & 0x0F0F0F0Fu) | (((qh0 >> (2u * t)) & 0x03030303u) << 4u);
            uint q1 = (lo1[t] & 0x0F0F0F0Fu) | (((qh1 >> (2u * t)) & 0x03030303u) << 4u);
            vec4 v0 = vec4(uvec4(q0, q0 >> 8u, q0 >> 16u, q0 >> 24u) & 0xFFu) - 32.0;
            vec4 v1 = vec4(uvec4(q1, q1 >> 8u, q1 >> 16u, q1 >> 24u) & 0xFFu) - 32.0;
            sum += scales[t] * (dot(v0, xv[2u * t]) + dot(v1, xv[2u * t + 1u]));
        }
        acc[r] += load_f16(blk + 208u) * sum;
    }
}
#elif defined(W_Q8_0)
// Unit u: block u (32 values).
#define UNIT_BLOCKS 1u

void unit_dot(uint row0, uint rows, uint u, uint xo, inout float acc[ROWS]) {
    vec4 xv[8];
    for (uint i = 0u; i < 8u; i++) {
        xv[i] = xk(xo, 32u * u + 4u * i);
    }
    for (uint r = 0u; r < ROWS; r++) {
        uint blk = p.w_off + min(row0 + r, rows - 1u) * p.w_nb1 + u * 34u;
        float sum = 0.0;
        for (uint i = 0u; i < 8u; i++) {
            sum += dot(i8x4(load_u32(blk + 2u + 4u * i)), xv[i]);
        }
        acc[r] += load_f16(blk) * sum;
    }
}
#else
// Unit u: values 32u..32u+31 through the type's load_w4 (K a multiple of 32: the registry
// checks).
#define UNIT_BLOCKS 1u

void unit_dot(uint row0, uint rows, uint u, uint xo, inout float acc[ROWS]) {
    vec4 xv[8];
    for (uint i = 0u; i < 8u; i++) {
        xv[i] = xk(xo, 32u * u + 4u * i);
    }
    for (uint r = 0u; r < ROWS; r++) {
        uint row = p.w_off + min(row0 + r, rows - 1u) * p.w_nb1;
        float sum = 0.0;
        for (uint i = 0u; i < 8u; i++) {
            sum += dot(load_w4(row, 32u * u + 4u * i), xv[i]);
        }
        acc[r] += sum;
    }
}
#endif

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    uint tpr = p.tpr;
    uint rg = tid / tpr;
    uint t = tid % tpr;
    uint rows_per_wg = (WG / tpr) * ROWS;
    uint n_groups = (ne.x + rows_per_wg - 1u) / rows_per_wg;
    uint units = p.K / 32u;
    // The subgroups of a row group: [first, first + count).
    uint sg_count = tpr / gl_SubgroupSize;
    uint sg_first = rg * sg_count;
    for (uint c = gl_WorkGroupID.y; c < cols; c += gl_NumWorkGroups.y) {
        uvec2 off = column_offsets(c, ne);
        if (p.pro_mode == PRO_RMS_NORM) {
            col_scale = rms_scale(off.x);
        }
        for (uint g = gl_WorkGroupID.x; g < n_groups; g += gl_NumWorkGroups.x) {
            uint row0 = g * rows_per_wg + rg * ROWS;
            float acc[ROWS];
            for (uint r = 0u; r < ROWS; r++) {
                acc[r] = 0.0;
            }
            for (uint u = t; u < units; u += tpr) {
                unit_dot(row0, ne.x, u, off.x, acc);
            }
            for (uint r = 0u; r < ROWS; r++) {
                float s = subgroupAdd(acc[r]);
                if (gl_SubgroupInvocationID == 0u) {
                    partial[gl_SubgroupID][r] = s;
                }
            }
            barrier();
            if (t < ROWS && row0 + t < ne.x) {
                float s = 0.0;
                for (uint i = 0u; i < sg_count; i++) {
                    s += partial[sg_first + i][t];
                }
                uint at = off.y + row0 + t;
                d[at] = with_residual(s, at);
            }
            barrier();
        }
    }
}

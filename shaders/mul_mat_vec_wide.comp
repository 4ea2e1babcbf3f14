#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
// Matrix-vector product for decode, built for memory parallelism: a row of w is split over T
// threads (`p.tpr`: one subgroup, or 64 or 128 threads of several), each taking whole units of
// 32 values (a quarter-block slice of a K-quant, a Q8_0 block), so that every weight byte of
// the matrix is requested by some thread at once rather than walked by a few lanes in a loop;
// each thread does ROWS rows with one load of x per unit (more rows: fewer loads of x per row
// of w, and fewer workgroups).
// Partial sums are reduced with subgroupAdd, then, where a row group is several subgroups,
// across them through shared memory. A workgroup of 128 threads computes
// 128 / T row groups of ROWS rows for COLS columns (specialization constant 0: a few
// sequences decoded together, each weight unit loaded and decoded once for all of them); grid-stride
// loops over row groups (x) and groups of COLS columns (y). Columns past the last are
// computed as the last one and not stored.
// Needs subgroups of at most T lanes whose size divides T, and x (and the producer's second
// input) at 16-byte aligned offsets (the launch checks both).
//
// A unit's loads (x, the producer's input, the weights) are all issued before anything is
// computed from them for one column; for more, x comes X_GROUPS groups at a time.
//
// A producer may be folded in (p.pro_mode): x is then computed as it is loaded, from the
// producer's inputs (an RMS norm of the column: x times the norm weight, the row's sum
// multiplied by the column's 1 / rms at the end, from the squares each thread summed of the x
// it loaded, reduced with the partial sums; or silu(gate) * up), so the producer needs no
// dispatch of its own.

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"

#define WG 128u
// Rows per thread: 2, or 4 and 8 in the families mul_mat_vec_wide4 / 8 (shaders/modules.txt).
#ifndef ROWS
#define ROWS 2u
#endif

layout(local_size_x = 128) in;
layout(constant_id = 0) const uint COLS = 1u;

layout(set = 0, binding = 1) readonly buffer W4 { uvec4 w_vec4[]; };
layout(set = 0, binding = 2) readonly buffer X4 { vec4 x_vec4[]; };
// The folded producer's second input: the norm weight, or up.
layout(set = 0, binding = 4) readonly buffer P4 { vec4 pv_vec4[]; };

// Per subgroup and column: a partial sum per row, then the sum of squares of x (PRO_RMS_NORM).
const uint SLOT = ROWS + 1u;
shared float partial[WG / 4u][COLS * SLOT];

// This thread's sums: row r of column c at c * ROWS + r; the squares of column c's x.
float acc[ROWS * COLS];
float ss[COLS];

vec4 nibbles_lo(uint q) {
    return vec4(uvec4(q, q >> 8u, q >> 16u, q >> 24u) & 0xFu);
}

vec4 nibbles_hi(uint q) {
    return vec4(uvec4(q >> 4u, q >> 12u, q >> 20u, q >> 28u) & 0xFu);
}

// The 8 bytes at byte `off` of w, 2-byte aligned, in three word loads and no branch (lanes
// of a subgroup read blocks of different alignment).
uvec2 load8_at2(uint off) {
    uint i = off >> 2u;
    bool odd = (off & 2u) != 0u;
    uint a = w[i];
    uint b = w[i + 1u];
    // The third word only where the bytes reach into it (never past the 8 bytes' word).
    uint c = w[i + (odd ? 2u : 1u)];
    return odd ? uvec2((a >> 16u) | (b << 16u), (b >> 16u) | (c << 16u)) : uvec2(a, b);
}

// Units of a K-quant laid across a block's 8 lanes instead (lane j taking values 32i + 4j..
// of every group i, so that the lanes' loads of x and w are consecutive; a scale per group)
// decoded slower on the H100 (2B shape, tg128 334-335 against 368-382 tok/s in one call, every
// product slower in the profile: each unit takes more load instructions and 8 scales, not 2).
// So did Q6_K laid across (its x loads consecutive, but 19 loads of a unit's weights where the
// mapping below takes 13, 5 stored by quads: H100, tg128 435-440 against 453-454, the head 176
// us against 152), and
// x staged in shared memory by the workgroup first (consecutive loads, then a barrier: 369-370
// against 441, every product slower).
//
// Each weight type gives: unit_k(u, i), the index along K of the i-th of the 8 groups of 4
// values of unit u; unit_fetch, the loads of unit u of ROWS rows into RAW uvec4s per row
// (nothing computed from them); unit_q, the 4 values of group i of one row from them before
// scaling; CLASSES runs of consecutive groups that share a scale, and class_scale(raw, u, j),
// the multiplier and bias of run j: its groups add multiplier * dot(q, x) - bias * sum(x).
// Scaling the sums, not the values, is one multiply per run and row instead of one per value.
#if defined(W_Q4_K)
// Unit u: qs bytes 16j..16j+15 of block b = u / 8 (j = u % 8): their low nibbles are values
// 64c + 16h .. +15 (c = j / 2, h = j % 2) of sub-block 2c (groups 0-3), their high nibbles
// the same 16 values 32 further, of sub-block 2c + 1 (groups 4-7). A block is 9 uvec4s:
// d/dmin and the scales, then qs. Raw: the block's head, the 16 bytes of qs.
#define RAW 2u

uint unit_k(uint u, uint i) {
    uint j = u % 8u;
    return (u / 8u) * 256u + 64u * (j / 2u) + 16u * (j % 2u) + 32u * (i / 4u) + 4u * (i % 4u);
}

void unit_fetch(uint row0, uint rows, uint u, out uvec4 raw[ROWS][RAW]) {
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        uint row = p.w_off + min(row0 + r, rows - 1u) * p.w_nb1;
        uint blk = (row >> 4u) + (u / 8u) * 9u;
        raw[r][0] = w_vec4[blk];
        raw[r][1] = w_vec4[blk + 1u + u % 8u];
    }
}

// Groups 0-3: low nibbles, sub-block 2c; 4-7: high nibbles, sub-block 2c + 1.
#define CLASSES 2u
#define HAS_BIAS

vec4 unit_q(uvec4 raw[RAW], uint row, uint u, uint i) {
    uint q = raw[1][i % 4u];
    return i < 4u ? nibbles_lo(q) : nibbles_hi(q);
}

vec2 class_scale(uvec4 raw[RAW], uint u, uint j) {
    return q4_k_scale_bias(raw[0], 2u * ((u % 8u) / 2u) + j);
}
#elif defined(W_Q6_K)
// Unit u: values l0..l0+7 (l0 = 8 (u % 4)) of the four quarters t of half n = (u % 8) / 4 of
// block b = u / 8 (groups 2t, 2t + 1): 8 bytes of ql at 64n + l0, 8 at 64n + 32 + l0, 8 of
// qh at 32n + l0, the scales and d. In the file's layout blocks are 210 bytes, so 2-byte
// aligned: load8_at2, three word loads a piece; stored by quads (rows of whole runs of four
// blocks, wtypes/q6_k.glsl) the pieces are 8-byte aligned (where w is): a load each.
// Raw: the two ql pieces; qh and the 8 scale bytes from 8n; d.
#define RAW 3u

layout(set = 0, binding = 1) readonly buffer W2 { uvec2 w_vec2[]; };

uint unit_k(uint u, uint i) {
    return (u / 8u) * 256u + 128u * ((u % 8u) / 4u) + (u % 4u) * 8u + 32u * (i / 2u) + 4u * (i % 2u);
}

void unit_fetch(uint row0, uint rows, uint u, out uvec4 raw[ROWS][RAW]) {
    uint n = (u % 8u) / 4u;
    uint l0 = (u % 4u) * 8u;
    bool aligned = q6_k_quads() && p.w_off % 8u == 0u;
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        uvec4 blk = q6_k_block(p.w_off + min(row0 + r, rows - 1u) * p.w_nb1, u / 8u);
        uvec4 at = uvec4(blk.x + 64u * n + l0, blk.x + 64u * n + 32u + l0, blk.y + 32u * n + l0, blk.z + 8u * n);
        if (aligned) {
            raw[r][0] = uvec4(w_vec2[at.x >> 3u], w_vec2[at.y >> 3u]);
            raw[r][1] = uvec4(w_vec2[at.z >> 3u], w_vec2[at.w >> 3u]);
        } else {
            raw[r][0] = uvec4(load8_at2(at.x), load8_at2(at.y));
            raw[r][1] = uvec4(load8_at2(at.z), load8_at2(at.w));
        }
        raw[r][2] = uvec4(load_u16(blk.w), 0u, 0u, 0u);
    }
}

// Quarter t = i / 2 of group i: its 16 values share a scale.
#define CLASSES 4u

vec4 unit_q(uvec4 raw[RAW], uint row, uint u, uint i) {
    // Word h = i % 2 of quarter t: ql low nibbles of the first or second piece for t = 0, 1,
    // their high nibbles for t = 2, 3; qh bits 2t, 2t + 1.
    uint t = i / 2u;
    uint h = i % 2u;
    uint lo = (t % 2u == 0u ? raw[0][h] : raw[0][2u + h]) >> (4u * (t / 2u));
    uint q = (lo & 0x0F0F0F0Fu) | (((raw[1][h] >> (2u * t)) & 0x03030303u) << 4u);
    return u8x4(q) - 32.0;
}

vec2 class_scale(uvec4 raw[RAW], uint u, uint t) {
    // Scale 8n + l0 / 16 + 2t of the 16 at 192: byte 2t (or 2t + 1) of the 8 loaded.
    uint sc = (raw[1][2u + t / 2u] >> (8u * ((u % 4u) / 2u) + 16u * (t % 2u))) & 0xFFu;
    return vec2(float(int(sc << 24) >> 24) * unpackHalf2x16(raw[2].x).x, 0.0);
}
#elif defined(W_Q8_0)
// Unit u: block u (32 values). Raw: the 32 quants, then d.
#define RAW 3u

uint unit_k(uint u, uint i) {
    return 32u * u + 4u * i;
}

void unit_fetch(uint row0, uint rows, uint u, out uvec4 raw[ROWS][RAW]) {
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        uint blk = p.w_off + min(row0 + r, rows - 1u) * p.w_nb1 + u * 34u;
        raw[r][0] = uvec4(load8_at2(blk + 2u), load8_at2(blk + 10u));
        raw[r][1] = uvec4(load8_at2(blk + 18u), load8_at2(blk + 26u));
        raw[r][2] = uvec4(load_u16(blk), 0u, 0u, 0u);
    }
}

#define CLASSES 1u

vec4 unit_q(uvec4 raw[RAW], uint row, uint u, uint i) {
    return i8x4(raw[i / 4u][i % 4u]);
}

vec2 class_scale(uvec4 raw[RAW], uint u, uint j) {
    return vec2(unpackHalf2x16(raw[2].x).x, 0.0);
}
#else
// Unit u: values 32u..32u+31 through the type's load_w4 (K a multiple of 32: the launch
// checks), which loads as it decodes: nothing fetched ahead.
#define RAW 1u

uint unit_k(uint u, uint i) {
    return 32u * u + 4u * i;
}

void unit_fetch(uint row0, uint rows, uint u, out uvec4 raw[ROWS][RAW]) {
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        raw[r][0] = uvec4(0u);
    }
}

#define CLASSES 1u

vec4 unit_q(uvec4 raw[RAW], uint row, uint u, uint i) {
    return load_w4(row, 32u * u + 4u * i);
}

vec2 class_scale(uvec4 raw[RAW], uint u, uint j) {
    return vec2(1.0, 0.0);
}
#endif

// Groups of x loaded at once per column: all 8 for one column (every load of the unit in
// flight before anything is computed), fewer for more, so that a thread holds 8 of x's vec4s.
const uint X_GROUPS = COLS >= 8u ? 1u : 8u / COLS;
const uint RUN = 8u / CLASSES;

// Unit u against rows row0.. for the COLS columns at float offsets xo: the weights loaded
// once; then X_GROUPS groups at a time, x and the producer's second input of every column,
// the producer applied to x, and each row's 4 values decoded once for all the columns
// (decoding them per column made 8 columns cost 4.9 times one); each run of groups sharing
// a scale summed apart and scaled at its end. ss gathers the squares of the x loaded
// (PRO_RMS_NORM).
void unit_dot(uint row0, uint rows, uint u, uint xo[COLS]) {
    uvec4 raw[ROWS][RAW];
    unit_fetch(row0, rows, u, raw);
    float dots[ROWS * COLS];
    float xsum[COLS];
    [[unroll]] for (uint h = 0u; h < 8u / X_GROUPS; h++) {
        vec4 xv[X_GROUPS][COLS];
        [[unroll]] for (uint g = 0u; g < X_GROUPS; g++) {
            [[unroll]] for (uint c = 0u; c < COLS; c++) {
                xv[g][c] = x_vec4[(xo[c] + unit_k(u, h * X_GROUPS + g)) >> 2u];
            }
        }
        if (p.pro_mode != PRO_NONE) {
            [[unroll]] for (uint g = 0u; g < X_GROUPS; g++) {
                [[unroll]] for (uint c = 0u; c < COLS; c++) {
                    // The norm weight, or up laid out as the gate.
                    uint pw_at = p.pro_mode == PRO_RMS_NORM ? p.pro_off : p.pro_off + xo[c] - p.x_nb.x;
                    vec4 pw = pv_vec4[(pw_at + unit_k(u, h * X_GROUPS + g)) >> 2u];
                    if (p.pro_mode == PRO_RMS_NORM) {
                        ss[c] += dot(xv[g][c], xv[g][c]);
                        xv[g][c] *= pw;
                    } else {
                        xv[g][c] = xv[g][c] / (1.0 + exp(-xv[g][c])) * pw;
                    }
                }
            }
        }
        [[unroll]] for (uint g = 0u; g < X_GROUPS; g++) {
            uint i = h * X_GROUPS + g;
            if (i % RUN == 0u) {
                [[unroll]] for (uint j = 0u; j < ROWS * COLS; j++) {
                    dots[j] = 0.0;
                }
                [[unroll]] for (uint c = 0u; c < COLS; c++) {
                    xsum[c] = 0.0;
                }
            }
#if defined(HAS_BIAS)
            [[unroll]] for (uint c = 0u; c < COLS; c++) {
                xsum[c] += dot(xv[g][c], vec4(1.0));
            }
#endif
            [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                vec4 q = unit_q(raw[r], p.w_off + min(row0 + r, rows - 1u) * p.w_nb1, u, i);
                [[unroll]] for (uint c = 0u; c < COLS; c++) {
                    dots[c * ROWS + r] += dot(q, xv[g][c]);
                }
            }
            if (i % RUN == RUN - 1u) {
                [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                    vec2 s = class_scale(raw[r], u, i / RUN);
                    [[unroll]] for (uint c = 0u; c < COLS; c++) {
                        acc[c * ROWS + r] += s.x * dots[c * ROWS + r] - s.y * xsum[c];
                    }
                }
            }
        }
    }
}

// Stores the sum s of row `row` of column `col` (if both exist), scaled by the column's
// 1 / rms from the sum of its squares where an RMS norm is folded in.
void store_sum(uint col, uint cols, uint row, uvec4 ne, float s, float squares) {
    if (col < cols && row < ne.x) {
        if (p.pro_mode == PRO_RMS_NORM) {
            s *= inversesqrt(squares / float(p.K) + p.pro_eps);
        }
        uint at = column_offsets(col, ne).y + row;
        d[at] = with_residual(s, at, row);
    }
}

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
    for (uint c0 = gl_WorkGroupID.y * COLS; c0 < cols; c0 += gl_NumWorkGroups.y * COLS) {
        uint xo[COLS];
        [[unroll]] for (uint c = 0u; c < COLS; c++) {
            xo[c] = column_offsets(min(c0 + c, cols - 1u), ne).x;
        }
        for (uint g = gl_WorkGroupID.x; g < n_groups; g += gl_NumWorkGroups.x) {
            uint row0 = g * rows_per_wg + rg * ROWS;
            [[unroll]] for (uint i = 0u; i < ROWS * COLS; i++) {
                acc[i] = 0.0;
            }
            [[unroll]] for (uint c = 0u; c < COLS; c++) {
                ss[c] = 0.0;
            }
            for (uint u = t; u < units; u += tpr) {
                unit_dot(row0, ne.x, u, xo);
            }
            if (sg_count == 1u) {
                // The row group is one subgroup: its sums are whole after subgroupAdd, with no
                // shared memory or barrier. Lane t stores sums t, t + tpr, ... (row r of column
                // c at c * ROWS + r).
                [[unroll]] for (uint i = 0u; i < ROWS * COLS; i++) {
                    acc[i] = subgroupAdd(acc[i]);
                }
                if (p.pro_mode == PRO_RMS_NORM) {
                    [[unroll]] for (uint c = 0u; c < COLS; c++) {
                        ss[c] = subgroupAdd(ss[c]);
                    }
                }
                for (uint i = t; i < ROWS * COLS; i += tpr) {
                    store_sum(c0 + i / ROWS, cols, row0 + i % ROWS, ne, acc[i], ss[i / ROWS]);
                }
                continue;
            }
            [[unroll]] for (uint c = 0u; c < COLS; c++) {
                [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                    float s = subgroupAdd(acc[c * ROWS + r]);
                    if (gl_SubgroupInvocationID == 0u) {
                        partial[gl_SubgroupID][c * SLOT + r] = s;
                    }
                }
                if (p.pro_mode == PRO_RMS_NORM) {
                    float squares = subgroupAdd(ss[c]);
                    if (gl_SubgroupInvocationID == 0u) {
                        partial[gl_SubgroupID][c * SLOT + ROWS] = squares;
                    }
                }
            }
            barrier();
            // Thread t of the row group stores row t % ROWS of column t / ROWS.
            uint c = t / ROWS;
            uint r = t % ROWS;
            if (c < COLS) {
                float s = 0.0;
                float squares = 0.0;
                for (uint i = 0u; i < sg_count; i++) {
                    s += partial[sg_first + i][c * SLOT + r];
                    squares += partial[sg_first + i][c * SLOT + ROWS];
                }
                store_sum(c0 + c, cols, row0 + r, ne, s, squares);
            }
            barrier();
        }
    }
}

#version 450
// Matrix-matrix product on the GPU's matrix units (VK_KHR_cooperative_matrix): f16 operands, f32
// accumulators, one product per block. The prefill and vision counterpart of mul_mat.comp, same
// bindings and push constants; hrx's default wherever the device offers cooperative matrices.
//
// Tiling (mul_mat_cm_tiles.glsl; sizes are specialization constants from the device's variant):
// a workgroup of four subgroups computes a WG_M (rows of w) x WG_N (columns of x) tile of d,
// each subgroup an SG_M x SG_N quarter as TM x TN accumulators. On a 16 x 16 x 16 device
// (NVIDIA, AMD) that is 128 x 128 per workgroup and 64 x 64 (4 x 4 accumulators) per subgroup;
// on lavapipe's 8 x 8 x 8, 64 x 64 and 32 x 32.
//
// Staging: BK-deep slices of w (dequantized) and x, converted to f16 on the way, go to shared
// memory in two buffers: while the subgroups multiply slice s from one buffer, each thread has
// already loaded slice s + 1 into registers and stores it to the other buffer afterwards, so
// the loads' latency hides behind the products and a slice costs one barrier. Consecutive
// threads read consecutive groups of 4 values of a row of w and of a column of x (16-byte
// loads of x where aligned). Rows and columns past the edges and k past K stage as zeros.
//
// Precision: each operand is rounded to f16 (11 significant bits), products are summed in
// f32. Against the f32 kernels that is a normalized error of about 1e-7 on random data (at
// most about 2 u^2 / 3 with u = 2^-11; 2e-8..9e-8 measured); mul_mat_cm_exact.comp keeps f32
// accuracy at three products per block. Values must stay within f16's range (|v| < 65504).

#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"
#include "mul_mat_cm_tiles.glsl"

// x again, as vec4s (see mul_mat_vec_sg.comp): one load instead of four where aligned.
layout(set = 0, binding = 2) readonly buffer X4 { vec4 x_vec4[]; };

// Two buffers of each operand's slice: rows of w (k contiguous), columns of x (k contiguous),
// as groups of 4 halves: a thread stores a group with one 8-byte store, and coopMatLoad reads
// them as halves (offsets and strides then count groups: LDS / 4 to a row).
const uint LDS4 = LDS / 4u;
shared f16vec4 w_tile[2u * WG_M * LDS4];
shared f16vec4 x_tile[2u * WG_N * LDS4];

// This thread's share of a slice: float offsets of its columns of x (NO_ROW past the edge;
// computed once per tile, as they take divisions), and the values loaded for the next slice.
uint x_cols[X_LOADS];
f16vec4 w_next[W_LOADS];
f16vec4 x_next[X_LOADS];

// Values k..k+3 of row `row` of w as f16 (k a multiple of 4, zeros from K on).
f16vec4 load_w_f16(uint row, uint k) {
    if (k + 4u <= p.K) {
#if defined(W_F16)
        // Already f16: the bits as they are.
        uint off = row + 2u * k;
        return f16vec4(unpackFloat2x16(load_u32(off)), unpackFloat2x16(load_u32(off + 4u)));
#else
        return f16vec4(load_w4(row, k));
#endif
    }
    f16vec4 v = f16vec4(0.0hf);
    for (uint i = 0u; i < 4u; i++) {
        if (k + i < p.K) {
            v[i] = float16_t(load_w1(row, k + i));
        }
    }
    return v;
}

// Values k..k+3 of the column of x at float offset `col`, as f16.
f16vec4 load_x_f16(uint col, uint k) {
    uint at = col + k;
    if (k + 4u <= p.K) {
        vec4 v = (at & 3u) == 0u ? x_vec4[at >> 2u] : vec4(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
        return f16vec4(v);
    }
    f16vec4 v = f16vec4(0.0hf);
    for (uint i = 0u; i < 4u; i++) {
        if (k + i < p.K) {
            v[i] = float16_t(x[at + i]);
        }
    }
    return v;
}

// Loads this thread's groups of the slice starting at k0 into w_next / x_next: rows
// n0 + i * (THREADS / GROUPS) of w (those below ne.x).
void load_slice(uint k0, uint kq, uint n0, uint rows) {
    uint k = k0 + kq;
    uint rows_per_pass = THREADS / GROUPS;
    for (uint i = 0u; i < W_LOADS; i++) {
        uint n = n0 + i * rows_per_pass;
        w_next[i] = n < rows ? load_w_f16(p.w_off + n * p.w_nb1, k) : f16vec4(0.0hf);
    }
    for (uint i = 0u; i < X_LOADS; i++) {
        x_next[i] = x_cols[i] == NO_ROW ? f16vec4(0.0hf) : load_x_f16(x_cols[i], k);
    }
}

// Stores what load_slice loaded into buffer `buf` (group g = kq / 4 of each row).
void store_slice(uint buf, uint r0, uint g) {
    uint rows_per_pass = THREADS / GROUPS;
    for (uint i = 0u; i < W_LOADS; i++) {
        w_tile[(buf * WG_M + r0 + i * rows_per_pass) * LDS4 + g] = w_next[i];
    }
    for (uint i = 0u; i < X_LOADS; i++) {
        x_tile[(buf * WG_N + r0 + i * rows_per_pass) * LDS4 + g] = x_next[i];
    }
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    // Staging: thread tid brings group tid % GROUPS of rows tid / GROUPS + i * (THREADS / GROUPS).
    uint r0 = tid / GROUPS;
    uint g = tid % GROUPS;
    uint kq = g * 4u;
    uint rows_per_pass = THREADS / GROUPS;
    // This subgroup's quarter of the tile.
    uint sg_m = (gl_SubgroupID & 1u) * SG_M;
    uint sg_n = (gl_SubgroupID >> 1u) * SG_N;
    uint m_tiles = (ne.x + WG_M - 1u) / WG_M;
    uint n_tiles = (cols + WG_N - 1u) / WG_N;
    uint slices = (p.K + BK - 1u) / BK;
    for (uint nt = gl_WorkGroupID.y; nt < n_tiles; nt += gl_NumWorkGroups.y) {
        for (uint i = 0u; i < X_LOADS; i++) {
            uint c = nt * WG_N + r0 + i * rows_per_pass;
            x_cols[i] = c < cols ? column_offsets(c, ne).x : NO_ROW;
        }
        for (uint mt = gl_WorkGroupID.x; mt < m_tiles; mt += gl_NumWorkGroups.x) {
            uint n0 = mt * WG_M + r0;
            coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator> acc[TM * TN];
            for (uint i = 0u; i < TM * TN; i++) {
                acc[i] = coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>(0.0);
            }
            load_slice(0u, kq, n0, ne.x);
            store_slice(0u, r0, g);
            barrier();
            for (uint s = 0u; s < slices; s++) {
                uint buf = s & 1u;
                bool more = s + 1u < slices;
                if (more) {
                    load_slice((s + 1u) * BK, kq, n0, ne.x);
                }
                uint a0 = (buf * WG_M + sg_m) * LDS4;
                uint b0 = (buf * WG_N + sg_n) * LDS4;
                for (uint kk = 0u; kk < BK; kk += CM_K) {
                    coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA> a[TM];
                    for (uint i = 0u; i < TM; i++) {
                        coopMatLoad(a[i], w_tile, a0 + i * CM_M * LDS4 + kk / 4u, LDS4, gl_CooperativeMatrixLayoutRowMajor);
                    }
                    for (uint j = 0u; j < TN; j++) {
                        coopmat<float16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB> b;
                        coopMatLoad(b, x_tile, b0 + j * CM_N * LDS4 + kk / 4u, LDS4, gl_CooperativeMatrixLayoutColumnMajor);
                        for (uint i = 0u; i < TM; i++) {
                            acc[i * TN + j] = coopMatMulAdd(a[i], b, acc[i * TN + j]);
                        }
                    }
                }
                if (more) {
                    // The other buffer: everyone finished reading it before the last barrier.
                    store_slice(buf ^ 1u, r0, g);
                }
                barrier();
            }
            // Every block, also those past the edges (store_block writes nothing there): the
            // subgroups of a workgroup then pass the same subgroup barriers, which lavapipe
            // needs (it runs them as barriers of the workgroup).
            for (uint i = 0u; i < TM; i++) {
                for (uint j = 0u; j < TN; j++) {
                    store_block(acc[i * TN + j], mt * WG_M + sg_m + i * CM_M, nt * WG_N + sg_n + j * CM_N, ne, cols);
                }
            }
        }
    }
}

#version 450
// Matrix-matrix product on cooperative matrices (VK_KHR_cooperative_matrix, 16 x 16 x 16,
// f16 inputs, f32 accumulators): the prefill and vision counterpart of mul_mat.comp, same
// bindings and push constants. A workgroup of 4 subgroups computes a 64 (rows of w) x 64
// (columns of x) tile of d; each subgroup a 32 x 32 quarter, as 2 x 2 accumulators.
//
// Precision: an f16 holds 11 significant bits, an f32 24. Each operand is staged in shared
// memory as the sum of two f16s, hi (v's top 11 bits) and lo = f16(v - hi), and the product is
// hi*hi + hi*lo + lo*hi (the lo*lo term is below f32's rounding): about 22 significant bits
// per operand, so the result matches the f32 kernels to f32-like accuracy, not f16's. F16
// weights are exact in one f16 (lo = 0) and skip their lo product. Values must stay within
// f16's range (|v| < 65504), as for any f16 kernel.

#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"

#define BN 64u
#define BM 64u
#define BK 32u
// Row strides in shared memory, padded against bank conflicts (multiples of 8 halves / 4
// floats keep every row 16-byte aligned, as coopMatLoad/Store prefer).
#define LDA (BK + 8u)
#define LDC (BN + 4u)

// Constant 0: the workgroup size, 4 subgroups (hrx asks the driver for exactly this subgroup
// size and full subgroups).
layout(local_size_x_id = 0) in;

shared float16_t w_hi[BN * LDA];
shared float16_t w_lo[BN * LDA];
shared float16_t x_hi[BM * LDA];
shared float16_t x_lo[BM * LDA];
shared float tile[BM * LDC];

#if defined(W_F16)
#define W_EXACT_IN_F16 1
#endif

void stage(uint at, vec4 v, bool weight) {
    // hi keeps the top 11 significant bits (exact in f16), lo the next 13 (rounded to 11).
    // Masking bits, not rounding through f16: a compiler may fold v - f32(f16(v)) to 0.
    vec4 top = uintBitsToFloat(floatBitsToUint(v) & 0xFFFFE000u);
    f16vec4 hi = f16vec4(top);
    f16vec4 lo = f16vec4(v - top);
    for (uint i = 0u; i < 4u; i++) {
        if (weight) {
            w_hi[at + i] = hi[i];
            w_lo[at + i] = lo[i];
        } else {
            x_hi[at + i] = hi[i];
            x_lo[at + i] = lo[i];
        }
    }
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    uint threads = gl_WorkGroupSize.x;
    uint sg = gl_SubgroupID;
    // This subgroup's 32 x 32 quarter of the tile.
    uint r0 = (sg & 1u) * 32u;
    uint c0 = (sg >> 1u) * 32u;
    uint n_tiles = (ne.x + BN - 1u) / BN;
    uint c_tiles = (cols + BM - 1u) / BM;
    for (uint ct = gl_WorkGroupID.y; ct < c_tiles; ct += gl_NumWorkGroups.y) {
        for (uint nt = gl_WorkGroupID.x; nt < n_tiles; nt += gl_NumWorkGroups.x) {
            coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[2][2];
            for (uint i = 0u; i < 2u; i++) {
                for (uint j = 0u; j < 2u; j++) {
                    acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
                }
            }
            for (uint k0 = 0u; k0 < p.K; k0 += BK) {
                // Stage 64 x 32 values of w and of x, 4 consecutive k at a time.
                for (uint e = tid; e < BN * BK / 4u; e += threads) {
                    uint r = e / (BK / 4u);
                    uint kq = (e % (BK / 4u)) * 4u;
                    uint k = k0 + kq;
                    uint n = nt * BN + r;
                    uint c = ct * BM + r;
                    vec4 wv = vec4(0.0);
                    vec4 xv = vec4(0.0);
                    uint w_row = p.w_off + n * p.w_nb1;
                    uint x_col = c < cols ? column_offsets(c, ne).x : 0u;
                    if (k + 4u <= p.K) {
                        if (n < ne.x) {
                            wv = load_w4(w_row, k);
                        }
                        if (c < cols) {
                            xv = vec4(x[x_col + k], x[x_col + k + 1u], x[x_col + k + 2u], x[x_col + k + 3u]);
                        }
                    } else {
                        for (uint i = 0u; i < 4u; i++) {
                            if (k + i < p.K) {
                                wv[i] = n < ne.x ? load_w1(w_row, k + i) : 0.0;
                                xv[i] = c < cols ? x[x_col + k + i] : 0.0;
                            }
                        }
                    }
                    stage(r * LDA + kq, wv, true);
                    stage(r * LDA + kq, xv, false);
                }
                barrier();
                for (uint kk = 0u; kk < BK; kk += 16u) {
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a_hi[2];
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a_lo[2];
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b_hi[2];
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b_lo[2];
                    for (uint i = 0u; i < 2u; i++) {
                        // A = w (rows n, k contiguous); B = x^T (k x columns, k contiguous).
                        uint a_at = (r0 + 16u * i) * LDA + kk;
                        uint b_at = (c0 + 16u * i) * LDA + kk;
                        coopMatLoad(a_hi[i], w_hi, a_at, LDA, gl_CooperativeMatrixLayoutRowMajor);
                        coopMatLoad(b_hi[i], x_hi, b_at, LDA, gl_CooperativeMatrixLayoutColumnMajor);
                        coopMatLoad(b_lo[i], x_lo, b_at, LDA, gl_CooperativeMatrixLayoutColumnMajor);
#ifndef W_EXACT_IN_F16
                        coopMatLoad(a_lo[i], w_lo, a_at, LDA, gl_CooperativeMatrixLayoutRowMajor);
#endif
                    }
                    for (uint i = 0u; i < 2u; i++) {
                        for (uint j = 0u; j < 2u; j++) {
#ifndef W_EXACT_IN_F16
                            acc[i][j] = coopMatMulAdd(a_lo[i], b_hi[j], acc[i][j]);
#endif
                            acc[i][j] = coopMatMulAdd(a_hi[i], b_lo[j], acc[i][j]);
                            acc[i][j] = coopMatMulAdd(a_hi[i], b_hi[j], acc[i][j]);
                        }
                    }
                }
                barrier();
            }
            // Through shared memory (tile[c * LDC + n]) to d, whose columns may be strided.
            for (uint i = 0u; i < 2u; i++) {
                for (uint j = 0u; j < 2u; j++) {
                    uint at = (c0 + 16u * j) * LDC + r0 + 16u * i;
                    coopMatStore(acc[i][j], tile, at, LDC, gl_CooperativeMatrixLayoutColumnMajor);
                }
            }
            barrier();
            for (uint e = tid; e < BN * BM; e += threads) {
                uint cl = e / BN;
                uint nl = e % BN;
                uint c = ct * BM + cl;
                uint n = nt * BN + nl;
                if (c < cols && n < ne.x) {
                    uint at = column_offsets(c, ne).y + n;
                    d[at] = with_residual(tile[cl * LDC + nl], at);
                }
            }
            barrier();
        }
    }
}

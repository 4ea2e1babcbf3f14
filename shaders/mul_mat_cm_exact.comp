#version 450
// Matrix-matrix product on cooperative matrices that keeps f32 accuracy (HRX_VK_EXACT=1 on a
// device with cooperative matrices): the same bindings, push constants, specialization
// constants and store as mul_mat_cm.comp (mul_mat_cm_tiles.glsl), with hrx's sizes for it: a
// workgroup of four subgroups computes a 64 (rows of w) x 64 (columns of x) tile of d, each
// subgroup a 32 x 32 quarter (2 x 2 accumulators of 16 x 16, 4 x 4 of 8 x 8), one BK-deep
// slice staged at a time.
//
// Precision: an f16 holds 11 significant bits, an f32 24. Each operand is staged in shared
// memory as the sum of two f16s, hi (v's top 11 bits) and lo = f16(v - hi), and the product is
// hi*hi + hi*lo + lo*hi (the lo*lo term is below f32's rounding): about 22 significant bits
// per operand, so the result matches the f32 kernels to f32-like accuracy, not f16's. F16
// weights are exact in one f16 (lo = 0) and skip their lo product. Three products per block
// make it slower than mul_mat_cm.comp; it is the reference the fast kernel is held to on a GPU.
// Values must stay within f16's range (|v| < 65504), as for any f16 kernel.

#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"
#include "mul_mat_cm_tiles.glsl"

shared float16_t w_hi[WG_M * LDS];
shared float16_t w_lo[WG_M * LDS];
shared float16_t x_hi[WG_N * LDS];
shared float16_t x_lo[WG_N * LDS];

#if defined(W_F16)
#define W_EXACT_IN_F16 1
#endif

// The hi and lo halves of v.
void split(vec4 v, out f16vec4 hi, out f16vec4 lo) {
    // hi keeps the top 11 significant bits (exact in f16), lo the next 13 (rounded to 11).
    // Masking bits, not rounding through f16: a compiler may fold v - f32(f16(v)) to 0.
    vec4 top = uintBitsToFloat(floatBitsToUint(v) & 0xFFFFE000u);
    hi = f16vec4(top);
    lo = f16vec4(v - top);
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    // This subgroup's quarter of the tile.
    uint sg_m = (gl_SubgroupID & 1u) * SG_M;
    uint sg_n = (gl_SubgroupID >> 1u) * SG_N;
    uint m_tiles = (ne.x + WG_M - 1u) / WG_M;
    uint n_tiles = (cols + WG_N - 1u) / WG_N;
    for (uint nt = gl_WorkGroupID.y; nt < n_tiles; nt += gl_NumWorkGroups.y) {
        for (uint mt = gl_WorkGroupID.x; mt < m_tiles; mt += gl_NumWorkGroups.x) {
            coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator> acc[TM * TN];
            for (uint i = 0u; i < TM * TN; i++) {
                acc[i] = coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>(0.0);
            }
            for (uint k0 = 0u; k0 < p.K; k0 += BK) {
                // Stage WG_M rows of w and WG_N columns of x, BK deep, 4 consecutive k at a time.
                for (uint e = tid; e < (WG_M + WG_N) * GROUPS; e += THREADS) {
                    bool weight = e < WG_M * GROUPS;
                    uint r = (weight ? e : e - WG_M * GROUPS) / GROUPS;
                    uint kq = (e % GROUPS) * 4u;
                    uint k = k0 + kq;
                    vec4 v = vec4(0.0);
                    uint n = mt * WG_M + r;
                    uint c = nt * WG_N + r;
                    bool inside = weight ? n < ne.x : c < cols;
                    uint w_row = p.w_off + n * p.w_nb1;
                    uint x_col = !weight && inside ? column_offsets(c, ne).x : 0u;
                    if (inside && k + 4u <= p.K) {
                        v = weight ? load_w4(w_row, k) : vec4(x[x_col + k], x[x_col + k + 1u], x[x_col + k + 2u], x[x_col + k + 3u]);
                    } else if (inside) {
                        for (uint i = 0u; i < 4u; i++) {
                            if (k + i < p.K) {
                                v[i] = weight ? load_w1(w_row, k + i) : x[x_col + k + i];
                            }
                        }
                    }
                    f16vec4 hi;
                    f16vec4 lo;
                    split(v, hi, lo);
                    uint at = r * LDS + kq;
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
                barrier();
                for (uint kk = 0u; kk < BK; kk += CM_K) {
                    coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA> a_hi[TM];
                    coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA> a_lo[TM];
                    for (uint i = 0u; i < TM; i++) {
                        // A = w (rows n, k contiguous); B = x (k x columns, k contiguous).
                        uint a_at = (sg_m + i * CM_M) * LDS + kk;
                        coopMatLoad(a_hi[i], w_hi, a_at, LDS, gl_CooperativeMatrixLayoutRowMajor);
#ifndef W_EXACT_IN_F16
                        coopMatLoad(a_lo[i], w_lo, a_at, LDS, gl_CooperativeMatrixLayoutRowMajor);
#endif
                    }
                    for (uint j = 0u; j < TN; j++) {
                        coopmat<float16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB> b_hi;
                        coopmat<float16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB> b_lo;
                        uint b_at = (sg_n + j * CM_N) * LDS + kk;
                        coopMatLoad(b_hi, x_hi, b_at, LDS, gl_CooperativeMatrixLayoutColumnMajor);
                        coopMatLoad(b_lo, x_lo, b_at, LDS, gl_CooperativeMatrixLayoutColumnMajor);
                        for (uint i = 0u; i < TM; i++) {
                            // Small terms first.
#ifndef W_EXACT_IN_F16
                            acc[i * TN + j] = coopMatMulAdd(a_lo[i], b_hi, acc[i * TN + j]);
#endif
                            acc[i * TN + j] = coopMatMulAdd(a_hi[i], b_lo, acc[i * TN + j]);
                            acc[i * TN + j] = coopMatMulAdd(a_hi[i], b_hi, acc[i * TN + j]);
                        }
                    }
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

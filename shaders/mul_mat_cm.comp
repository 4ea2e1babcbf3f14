#version 450
// Matrix-matrix product on the GPU's matrix units (VK_KHR_cooperative_matrix): f16 operands, f32
// accumulators, one product per block. The prefill and vision counterpart of mul_mat.comp, same
// bindings and push constants; hrx's default wherever the device offers cooperative matrices.
//
// Tiling (mul_mat_cm_tiles.glsl; sizes are specialization constants from the device's variant):
// a workgroup of four subgroups computes a WG_M (rows of w) x WG_N (columns of x) tile of d,
// each subgroup an SG_M x SG_N quarter as TM x TN accumulators. Built with -DNARROW
// (mul_mat_cm_narrow, for a few columns) the four subgroups split k instead: each takes the
// whole tile over a quarter of every slice, and the four sums are added as the tile is stored.
//
// Staging, built to hide memory latency behind the matrix units: BK-deep slices of w and x go
// to shared memory as f16, in two buffers, in chunks of 16 values of a row of w (the weight
// type's fetch16 / decode16, wtype.glsl) or of a column of x (four 16-byte loads, two with X_F16). Each slice's
// loads are issued DEPTH slices ahead of its products: at step s a thread issues the loads of
// slice s + DEPTH into register set s % DEPTH, runs the products of slice s from shared memory,
// then decodes slice s + 1 (loaded DEPTH - 1 steps earlier) from its set into the other
// buffer; one barrier per step. The sets are indexed by an unrolled loop's constant, so they
// stay in registers.
// Rows past the edge of w and columns past the edge of x are read as the last one (their sums
// are never stored); K must be whole slices and w aligned as its type's fetch16 needs (the
// launch checks both).
//
// Precision: each operand is rounded to f16 (11 significant bits), products are summed in
// f32. Against the f32 kernels that is a normalized error of about 1e-7 on random data (at
// most about 2 u^2 / 3 with u = 2^-11; 2e-8..9e-8 measured); mul_mat_cm_exact.comp keeps f32
// accuracy at three products per block. Values must stay within f16's range (|v| < 65504).

#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#define W16
#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"
#include "mul_mat_cm_tiles.glsl"

layout(set = 0, binding = 2) readonly buffer X4 { vec4 x_vec4[]; };
// X_F16: x holds f16 values (activations kept in halves, kernels/matmul.rs): a chunk's 16 are
// two 16-byte loads of halves, staged unconverted, where f32 values take four loads and a
// conversion. On the H100 (2B shapes, 512 columns) staging x as halves took the products from
// 158 to 102 us (2048 -> 6144), 130 to 91 (6144 -> 2048). x's offset and column strides are
// then whole 16-byte words (the launch checks).
layout(constant_id = 9) const bool X_F16 = false;
layout(set = 0, binding = 2) readonly buffer XH8 { uvec4 x_half8[]; };

// Two buffers of each operand's slice: rows of w (k contiguous), columns of x (k contiguous),
// as groups of 4 halves; coopMatLoad reads them as halves (offsets and strides count groups:
// LDS / 4 to a row).
const uint LDS4 = LDS / 4u;
shared f16vec4 w_tile[2u * WG_M * LDS4];
shared f16vec4 x_tile[2u * WG_N * LDS4];

// Chunks of 16 values per row (column) of a slice, and per thread and slice.
const uint CHUNKS = BK / 16u;
const uint W_CHUNKS = WG_M * CHUNKS / THREADS;
const uint X_CHUNKS = WG_N * CHUNKS / THREADS;

// This thread's chunk c of a slice: row (column) tid / CHUNKS + c * (THREADS / CHUNKS) of the
// tile, values 16 * (tid % CHUNKS) .. + 15 of the slice.
const uint PASS = THREADS / CHUNKS;

// A slice's loads as issued: the weight chunks' raw words, the x chunks' values as bits (four
// vec4s of floats, or with X_F16 two of halves).
struct Raw {
    uvec4 w[W_CHUNKS * W16_RAW];
    uvec4 x[X_CHUNKS * 4u];
};

// Byte offsets of this thread's rows of w and float offsets of its columns of x (the edge
// ones repeated), set per tile.
uint w_rows[W_CHUNKS];
uint x_cols[X_CHUNKS];
bool x_aligned;

void fetch(uint k, inout Raw r) {
    if (PROBE == 2u) {
        return;
    }
    [[unroll]] for (uint c = 0u; c < W_CHUNKS; c++) {
        uvec4 raw[W16_RAW];
        fetch16(w_rows[c], k, raw);
        [[unroll]] for (uint i = 0u; i < W16_RAW; i++) {
            r.w[c * W16_RAW + i] = raw[i];
        }
    }
    [[unroll]] for (uint c = 0u; c < X_CHUNKS; c++) {
        uint at = x_cols[c] + k;
        if (X_F16) {
            r.x[c * 4u] = x_half8[at >> 3u];
            r.x[c * 4u + 1u] = x_half8[(at >> 3u) + 1u];
            continue;
        }
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            uint e = at + 4u * i;
            if (x_aligned) {
                r.x[c * 4u + i] = floatBitsToUint(x_vec4[e >> 2u]);
            } else {
                r.x[c * 4u + i] = floatBitsToUint(vec4(x[e], x[e + 1u], x[e + 2u], x[e + 3u]));
            }
        }
    }
}

// Decodes what `fetch(k)` loaded into buffer `buf`.
void store(uint k, uint buf, uint tid, Raw r) {
    if (PROBE == 2u) {
        return;
    }
    uint g = (tid % CHUNKS) * 4u;
    [[unroll]] for (uint c = 0u; c < W_CHUNKS; c++) {
        uvec4 raw[W16_RAW];
        [[unroll]] for (uint i = 0u; i < W16_RAW; i++) {
            raw[i] = r.w[c * W16_RAW + i];
        }
        vec4 v[4];
        decode16(raw, w_rows[c], k, v);
        uint at = (buf * WG_M + tid / CHUNKS + c * PASS) * LDS4 + g;
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            w_tile[at + i] = f16vec4(v[i]);
        }
    }
    [[unroll]] for (uint c = 0u; c < X_CHUNKS; c++) {
        uint at = (buf * WG_N + tid / CHUNKS + c * PASS) * LDS4 + g;
        if (X_F16) {
            [[unroll]] for (uint i = 0u; i < 2u; i++) {
                uvec4 h = r.x[c * 4u + i];
                x_tile[at + 2u * i] = f16vec4(unpackFloat2x16(h.x), unpackFloat2x16(h.y));
                x_tile[at + 2u * i + 1u] = f16vec4(unpackFloat2x16(h.z), unpackFloat2x16(h.w));
            }
            continue;
        }
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            x_tile[at + i] = f16vec4(uintBitsToFloat(r.x[c * 4u + i]));
        }
    }
}

#define ACC coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
ACC acc[TM * TN];

// The products of the slice in buffer `buf` into this subgroup's accumulators.
void multiply(uint buf, uint sg_m, uint sg_n) {
    if (PROBE == 1u) {
        return;
    }
    uint a0 = (buf * WG_M + sg_m) * LDS4;
    uint b0 = (buf * WG_N + sg_n) * LDS4;
#ifdef NARROW
    // This subgroup's quarter of the slice.
    a0 += gl_SubgroupID * (BK / SPLIT / 4u);
    b0 += gl_SubgroupID * (BK / SPLIT / 4u);
    [[unroll]] for (uint kk = 0u; kk < BK / SPLIT; kk += CM_K) {
#else
    [[unroll]] for (uint kk = 0u; kk < BK; kk += CM_K) {
#endif
        coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA> a[TM];
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            coopMatLoad(a[i], w_tile, a0 + i * CM_M * LDS4 + kk / 4u, LDS4, gl_CooperativeMatrixLayoutRowMajor);
        }
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            coopmat<float16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB> b;
            coopMatLoad(b, x_tile, b0 + j * CM_N * LDS4 + kk / 4u, LDS4, gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                acc[i * TN + j] = coopMatMulAdd(a[i], b, acc[i * TN + j]);
            }
        }
    }
}

#ifdef NARROW
// Each subgroup's sums over its quarter of k, column-major tiles one after another. Built with
// -DFIRST_SUMS (mul_mat_cm_narrow2, tiles of two blocks) all but the first subgroup's: the
// first adds them to its own, so that four tiles of sums and both staging buffers need not fit
// at once.
#ifdef FIRST_SUMS
const uint SUM_TILES = SPLIT - 1u;
#else
const uint SUM_TILES = SPLIT;
#endif
shared float split_sums[SUM_TILES * WG_M * WG_N];

// Writes the tile at rows n0.., columns c0.. to d (within ne.x rows and `cols` columns): the
// subgroups' sums added in subgroup order, and the residual where one is fused.
void store_split(uint n0, uint c0, uvec4 ne, uint cols, uint tid) {
    // Subgroups from `first` store; subgroup s to tile s - first.
    const uint first = SPLIT - SUM_TILES;
    [[unroll]] for (uint i = 0u; i < TM; i++) {
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            uint at = j * CM_N * WG_M + i * CM_M;
            if (gl_SubgroupID >= first) {
                coopMatStore(acc[i * TN + j], split_sums, (gl_SubgroupID - first) * WG_M * WG_N + at, WG_M,
                             gl_CooperativeMatrixLayoutColumnMajor);
            }
        }
    }
    barrier();
#ifdef FIRST_SUMS
    if (gl_SubgroupID == 0u) {
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            [[unroll]] for (uint j = 0u; j < TN; j++) {
                uint at = j * CM_N * WG_M + i * CM_M;
                [[unroll]] for (uint s = 0u; s < SUM_TILES; s++) {
                    ACC part;
                    coopMatLoad(part, split_sums, s * WG_M * WG_N + at, WG_M, gl_CooperativeMatrixLayoutColumnMajor);
                    acc[i * TN + j] = acc[i * TN + j] + part;
                }
                coopMatStore(acc[i * TN + j], split_sums, at, WG_M, gl_CooperativeMatrixLayoutColumnMajor);
            }
        }
    }
    barrier();
#endif
    for (uint e = tid; e < WG_M * WG_N; e += THREADS) {
        uint n = n0 + e % WG_M;
        uint c = c0 + e / WG_M;
        if (n < ne.x && c < cols) {
            float v = split_sums[e];
#ifndef FIRST_SUMS
            [[unroll]] for (uint s = 1u; s < SPLIT; s++) {
                v += split_sums[s * WG_M * WG_N + e];
            }
#endif
            uint at = column_offsets(c, ne).y + n;
            d[at] = with_residual(v, at, n);
        }
    }
    // The sums are stored again by the next tile.
    barrier();
}
#endif

// Step s of the pipeline: slice s is in buffer s % 2, slice s + 1's loads are in `next`;
// `free` (slice s's, decoded a step ago) takes slice s + DEPTH's. kq: where this thread's
// chunks start in a slice.
void advance(uint s, uint slices, uint kq, uint tid, uint sg_m, uint sg_n, inout Raw free, Raw next) {
    if (s + DEPTH < slices) {
        fetch((s + DEPTH) * BK + kq, free);
    }
    multiply(s & 1u, sg_m, sg_n);
    if (s + 1u < slices) {
        // The other buffer: everyone finished reading it (slice s - 1) before the last barrier.
        // One set in flight: `next` is the copy of `free` made before this step's fetch.
        store((s + 1u) * BK + kq, (s + 1u) & 1u, tid, DEPTH == 1u ? free : next);
    }
    barrier();
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
#ifdef NARROW
    // Every subgroup covers the whole tile (over its quarter of k).
    uint sg_m = 0u;
    uint sg_n = 0u;
#else
    // This subgroup's quarter of the tile.
    uint sg_m = (gl_SubgroupID & 1u) * SG_M;
    uint sg_n = (gl_SubgroupID >> 1u) * SG_N;
#endif
    uint m_tiles = (ne.x + WG_M - 1u) / WG_M;
    uint n_tiles = (cols + WG_N - 1u) / WG_N;
    uint slices = p.K / BK;
    x_aligned = ((p.x_nb.x | p.x_nb.y | p.x_nb.z | p.x_nb.w) & 3u) == 0u;
    Raw sets[DEPTH];
    for (uint nt = gl_WorkGroupID.y; nt < n_tiles; nt += gl_NumWorkGroups.y) {
        [[unroll]] for (uint c = 0u; c < X_CHUNKS; c++) {
            uint col = min(nt * WG_N + tid / CHUNKS + c * PASS, cols - 1u);
            x_cols[c] = column_offsets(col, ne).x;
        }
        for (uint mt = gl_WorkGroupID.x; mt < m_tiles; mt += gl_NumWorkGroups.x) {
            [[unroll]] for (uint c = 0u; c < W_CHUNKS; c++) {
                uint row = min(mt * WG_M + tid / CHUNKS + c * PASS, ne.x - 1u);
                w_rows[c] = p.w_off + row * p.w_nb1;
            }
            uint kq = 16u * (tid % CHUNKS);
            [[unroll]] for (uint i = 0u; i < TM * TN; i++) {
                acc[i] = ACC(0.0);
            }
            [[unroll]] for (uint i = 0u; i < DEPTH; i++) {
                if (i < slices) {
                    fetch(i * BK + kq, sets[i]);
                }
            }
            store(kq, 0u, tid, sets[0]);
            barrier();
            for (uint s = 0u; s < slices; s += DEPTH) {
                [[unroll]] for (uint i = 0u; i < DEPTH; i++) {
                    if (s + i < slices) {
                        advance(s + i, slices, kq, tid, sg_m, sg_n, sets[i], sets[(i + 1u) % DEPTH]);
                    }
                }
            }
#ifdef NARROW
            store_split(mt * WG_M, nt * WG_N, ne, cols, tid);
#else
            // Every block, also those past the edges (store_block writes nothing there): the
            // subgroups of a workgroup then pass the same subgroup barriers, which lavapipe
            // needs (it runs them as barriers of the workgroup).
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                [[unroll]] for (uint j = 0u; j < TN; j++) {
                    store_block(acc[i * TN + j], mt * WG_M + sg_m + i * CM_M, nt * WG_N + sg_n + j * CM_N, ne, cols);
                }
            }
#endif
        }
    }
}

#version 450
// Fused attention for many queries on the matrix units (VK_KHR_cooperative_matrix): what
// flash_attn_tiled.comp computes, with Q K^T and P V as f16 cooperative-matrix products summed
// in f32. Causal with slots (query t sees kv rows 0..=slots[t]); otherwise every kv row (the
// run-time length). Push constants and bindings are flash_attn.comp's.
//
// A workgroup of four subgroups takes a tile of 4 x R queries (R = the matrix units' rows), each
// subgroup R of them: 4R queries of one head, or with grouped-query attention the same 2R or R
// queries of 2 or 4 heads that share a kv head; per step of BC kv rows, staged in shared memory
// as f16 (loaded into registers during the previous step):
//   S = Q K^T (R x BC per subgroup; Q, pre-scaled by scale * log2 e, held as A fragments for
//   the whole pass), stored to shared memory; the online softmax by rows, LPR lanes to a row,
//   each CPL neighbouring columns: the row maximum m, P = exp2(S - m) (f16, to shared memory),
//   the running sum; the rescale factor exp2(m_old - m) of each row as an R x R matrix of rows
//   of that factor, by which the O accumulators are multiplied element by element; O += P V.
// At the end O is scaled by 1 / sum the same way and written through a patch of shared memory,
// as f32 values or, with p.d_f16 (activations kept in halves), pairs of f16 ones.
// The tile sizes are specialization constants (kernels/attn.rs, AttnTileCm); head_dim may be
// below DM (zeros beyond it), a multiple of 4.

#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint THREADS = 128u; // four subgroups
layout(constant_id = 1) const uint R = 16u;        // the matrix-unit side (M = N = K)
layout(constant_id = 2) const uint BC = 32u;       // kv rows per step
layout(constant_id = 3) const uint DM = 128u;      // head_dim class: a multiple of R

const uint SUB = THREADS / 4u;
const uint BR = 4u * R;
const uint LPR = SUB / R;       // lanes per query row in the softmax
const uint LDK = DM + 8u;       // halves per staged K / V row (16-byte aligned rows, banks spread)
const uint LDK4 = LDK / 4u;
const uint LDS4 = BC / 4u + 1u; // vec4s per row of a subgroup's scores
const uint CPL = BC / LPR;      // columns of the softmax per lane, whole vec4s (AttnCoop::new)
const uint LDP = BC + 8u;       // halves per row of a subgroup's probabilities
const uint LDP4 = LDP / 4u;
const float NEG = -1.0e30;      // below any score, finite: exp2(NEG - NEG) must not be NaN
#define ATTN_TILE_ROWS BR

layout(set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1) readonly buffer Q4 { vec4 q4[]; };
layout(set = 0, binding = 4) readonly buffer Slots { int slots[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };
layout(set = 0, binding = 5) writeonly buffer DH { uint d_half2[]; };

#include "flash_attn_params.glsl"
#define KV_CONSTANT 4
#include "attn_kv.glsl"

shared f16vec4 k_tile[BC * LDK4];
shared f16vec4 v_tile[BC * LDK4];
shared vec4 s_buf[4u * R * LDS4];
// Each subgroup's probabilities; before the pass, its slices of Q on their way to fragments.
shared f16vec4 p_buf[4u * R * LDP4];
// Each subgroup's R x R matrix of per-row factors.
shared float f_buf[4u * R * R];

// Four values of a row at float offset `at` (`n` of them real, the rest 0), as vec4 loads
// where the operand is 16-byte aligned.
vec4 kv4(bool is_k, bool aligned, uint at, uint n) {
    if (n >= 4u && aligned) {
        return kv4_at(is_k, at);
    }
    vec4 r = vec4(0.0);
    for (uint i = 0u; i < min(n, 4u); i++) {
        r[i] = kv_at(is_k, at + i);
    }
    return r;
}

// Four halves of a row at value offset `at` as they are in memory (`n` of them real, the rest
// +0), as one 8-byte load where the operand is aligned: KV_F16 rows go to the tiles unconverted.
uvec2 kv4_bits(bool is_k, bool aligned, uint at, uint n) {
    if (n >= 4u && aligned) {
        return is_k ? k_half4[at >> 2u] : v_half4[at >> 2u];
    }
    uint h[4] = uint[4](0u, 0u, 0u, 0u);
    for (uint i = 0u; i < min(n, 4u); i++) {
        uint j = at + i;
        h[i] = ((is_k ? k_half2[j >> 1u] : v_half2[j >> 1u]) >> (16u * (j & 1u))) & 0xFFFFu;
    }
    return uvec2(h[0] | h[1] << 16u, h[2] | h[3] << 16u);
}

// Eight halves of a row at value offset `at` (`n` of them real, the rest +0): one 16-byte load
// where the operand is so aligned (`aligned8`), else two of kv4_bits.
uvec4 kv8_bits(bool is_k, bool aligned8, bool aligned, uint at, uint n) {
    if (n >= 8u && aligned8) {
        return is_k ? k_half8[at >> 3u] : v_half8[at >> 3u];
    }
    return uvec4(kv4_bits(is_k, aligned, at, n), kv4_bits(is_k, aligned, at + 4u, n > 4u ? n - 4u : 0u));
}

// A step's K and V rows as this thread loads them, eight values at a time: element
// e = tid + i * THREADS of the BC x DM tile is kv_k[2i], kv_k[2i + 1] / kv_v[..] (f32 values)
// or kv_kh[i] / kv_vh[i] (KV_F16: eight halves' bits, one 16-byte load; on the H200 a
// 2,048-token prefill's attention took 27.5 ms without its K and V loads, 42.6 with them as
// 8-byte ones).
// Loaded a step ahead and stored to the tiles as f16 only after that step's products: the
// loads' latency is hidden behind them, which decides the speed where a GPU has a workgroup or
// two per multiprocessor (a 512-token text chunk). Halves are copied as bits: on the H100 a
// 512-token chunk after 4,096 tokens took 651 us a layer with them converted to f32 and back,
// 336 us from an f32 cache (NVIDIA converts at an eighth of its f32 rate).
const uint KV_VEC8 = BC * DM / 8u;
const uint KV_LOADS = (KV_VEC8 + THREADS - 1u) / THREADS;
vec4 kv_k[2u * KV_LOADS];
vec4 kv_v[2u * KV_LOADS];
uvec4 kv_kh[KV_LOADS];
uvec4 kv_vh[KV_LOADS];

// Issues the loads of kv rows j0.. of the head's K and V: zeros past `rows` and past hd.
void fetch_kv(uint kb, uint vb, uint j0, uint rows, uint hd, bool aligned8, bool aligned) {
    [[unroll]] for (uint i = 0u; i < KV_LOADS; i++) {
        uint e = gl_LocalInvocationID.x + i * THREADS;
        uint r = e / (DM / 8u);
        uint c = 8u * (e % (DM / 8u));
        bool real = e < KV_VEC8 && r < rows && c < hd;
        uint n = real ? hd - c : 0u;
        uint ka = kb + (j0 + r) * p.k_nb2 + c;
        uint va = vb + (j0 + r) * p.v_nb2 + c;
        if (KV_F16) {
            kv_kh[i] = real ? kv8_bits(true, aligned8, aligned, ka, n) : uvec4(0u);
            kv_vh[i] = real ? kv8_bits(false, aligned8, aligned, va, n) : uvec4(0u);
        } else {
            uint n4 = n > 4u ? n - 4u : 0u;
            kv_k[2u * i] = real ? kv4(true, aligned, ka, n) : vec4(0.0);
            kv_k[2u * i + 1u] = n4 > 0u ? kv4(true, aligned, ka + 4u, n4) : vec4(0.0);
            kv_v[2u * i] = real ? kv4(false, aligned, va, n) : vec4(0.0);
            kv_v[2u * i + 1u] = n4 > 0u ? kv4(false, aligned, va + 4u, n4) : vec4(0.0);
        }
    }
}

// The fetched rows into the tiles as f16.
void store_kv() {
    [[unroll]] for (uint i = 0u; i < KV_LOADS; i++) {
        uint e = gl_LocalInvocationID.x + i * THREADS;
        if (e < KV_VEC8) {
            uint at = (e / (DM / 8u)) * LDK4 + 2u * (e % (DM / 8u));
            if (KV_F16) {
                k_tile[at] = f16vec4(unpackFloat2x16(kv_kh[i].x), unpackFloat2x16(kv_kh[i].y));
                k_tile[at + 1u] = f16vec4(unpackFloat2x16(kv_kh[i].z), unpackFloat2x16(kv_kh[i].w));
                v_tile[at] = f16vec4(unpackFloat2x16(kv_vh[i].x), unpackFloat2x16(kv_vh[i].y));
                v_tile[at + 1u] = f16vec4(unpackFloat2x16(kv_vh[i].z), unpackFloat2x16(kv_vh[i].w));
            } else {
                k_tile[at] = f16vec4(kv_k[2u * i]);
                k_tile[at + 1u] = f16vec4(kv_k[2u * i + 1u]);
                v_tile[at] = f16vec4(kv_v[2u * i]);
                v_tile[at + 1u] = f16vec4(kv_v[2u * i + 1u]);
            }
        }
    }
}

// Sets this subgroup's factor matrix to rows of `f` (this lane's row's factor) and returns it.
coopmat<float, gl_ScopeSubgroup, R, R, gl_MatrixUseAccumulator> row_factors(float f, uint row, uint part) {
    uint base = gl_SubgroupID * R * R;
    for (uint c = part; c < R; c += LPR) {
        f_buf[base + row * R + c] = f;
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    coopmat<float, gl_ScopeSubgroup, R, R, gl_MatrixUseAccumulator> m;
    coopMatLoad(m, f_buf, base, R, gl_CooperativeMatrixLayoutRowMajor);
    subgroupBarrier();
    return m;
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint hd = ne.x;
    uint heads = ne.y;
    uint n_q = ne.z;
    uint group = heads / p.kv_heads;
    uint n_kv_all = kv_rows();
    float qscale = p.scale * 1.4426950408889634; // log2(e): the softmax runs on exp2
    bool q_aligned = ((p.q_off | p.q_nb1 | p.q_nb2 | hd) & 3u) == 0u;
    uint kv_strides = p.k_off | p.k_nb1 | p.k_nb2 | p.v_off | p.v_nb1 | p.v_nb2 | hd;
    bool kv_aligned = (kv_strides & 3u) == 0u;
    bool kv_aligned8 = (kv_strides & 7u) == 0u;
    uint sg = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
    uint row = lane / LPR;
    uint part = lane % LPR;
    uint s_base = sg * R * LDS4;
    uint p_base = sg * R * LDP4;
    // Heads sharing a kv head (grouped-query attention) share a tile's K and V steps: its
    // subgroups take hp heads of BR / hp queries, so each kv row staged serves hp times the
    // queries (the grid, heads x query tiles of BR, holds heads / hp x tiles of BR / hp).
    uint hp = group % 4u == 0u ? 4u : group % 2u == 0u ? 2u : 1u;
    uint tile_queries = BR / hp;
    uint tiles = (n_q + tile_queries - 1u) / tile_queries;
    uint head_sets = heads / hp;
    uint sg_head = sg / (4u / hp);
    uint sg_query = (sg % (4u / hp)) * R;
    // Head sets vary fastest: neighbouring workgroups read the same queries.
    for (uint wi = gl_WorkGroupID.x; wi < head_sets * tiles; wi += gl_NumWorkGroups.x) {
        uint h0 = (wi % head_sets) * hp;
        uint h = h0 + sg_head;
        uint t0 = (wi / head_sets) * tile_queries;
        uint kb = p.k_off + (h0 / group) * p.k_nb1;
        uint vb = p.v_off + (h0 / group) * p.v_nb1;
        uint qb = p.q_off + h * p.q_nb1;
        uint t_row = t0 + sg_query + row;
        uint lim = limit(t_row, n_q, n_kv_all);
        uint fst = first(t_row, n_q, n_kv_all);
        tile_spans(t0, tile_queries, n_q, n_kv_all);

        // This subgroup's queries as A fragments, R x R of Q at a time through p_buf.
        coopmat<float16_t, gl_ScopeSubgroup, R, R, gl_MatrixUseA> qf[DM / R];
        [[unroll]] for (uint dd = 0u; dd < DM / R; dd++) {
            for (uint e = lane; e < R * R / 4u; e += SUB) {
                uint r = e / (R / 4u);
                uint c = dd * R + 4u * (e % (R / 4u));
                uint t = t0 + sg_query + r;
                vec4 qv = vec4(0.0);
                if (t < n_q && c < hd) {
                    uint at = qb + t * p.q_nb2 + c;
                    if (q_aligned) {
                        qv = q4[at >> 2u];
                    } else {
                        for (uint i = 0u; i < min(hd - c, 4u); i++) {
                            qv[i] = q[at + i];
                        }
                    }
                }
                p_buf[p_base + r * LDP4 + e % (R / 4u)] = f16vec4(qv * qscale);
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            coopMatLoad(qf[dd], p_buf, p_base, LDP4, gl_CooperativeMatrixLayoutRowMajor);
            subgroupBarrier();
        }

        coopmat<float, gl_ScopeSubgroup, R, R, gl_MatrixUseAccumulator> o[DM / R];
        [[unroll]] for (uint j = 0u; j < DM / R; j++) {
            o[j] = coopmat<float, gl_ScopeSubgroup, R, R, gl_MatrixUseAccumulator>(0.0);
        }
        float m = NEG;
        float l = 0.0; // this lane's part of its row's sum
        // The tile's chunks of kv rows (alike in every thread, so the loop is uniform across
        // the workgroup), each one's loads issued during the previous one's products.
        uvec2 chunk = next_chunk(0u, BC);
        if (chunk.y > 0u) {
            fetch_kv(kb, vb, chunk.x, chunk.y, hd, kv_aligned8, kv_aligned);
        }
        while (chunk.y > 0u) {
            uint j0 = chunk.x;
            // This query's columns of the chunk: the chunk's own rows (its tail of BC may hold
            // rows of the next span, which the next chunk takes) that the query sees.
            uint lo = max(fst, j0);
            uint hi = min(lim, j0 + chunk.y);
            // Everyone is past the previous step's reads of the tiles.
            barrier();
            store_kv();
            barrier();
            chunk = next_chunk(j0 + chunk.y, BC);
            if (chunk.y > 0u) {
                fetch_kv(kb, vb, chunk.x, chunk.y, hd, kv_aligned8, kv_aligned);
            }
            // S = Q K^T, to shared memory.
            [[unroll]] for (uint j = 0u; j < BC / R; j++) {
                coopmat<float, gl_ScopeSubgroup, R, R, gl_MatrixUseAccumulator> s =
                    coopmat<float, gl_ScopeSubgroup, R, R, gl_MatrixUseAccumulator>(0.0);
                [[unroll]] for (uint dd = 0u; dd < DM / R; dd++) {
                    coopmat<float16_t, gl_ScopeSubgroup, R, R, gl_MatrixUseB> kf;
                    coopMatLoad(kf, k_tile, j * R * LDK4 + dd * R / 4u, LDK4, gl_CooperativeMatrixLayoutColumnMajor);
                    s = coopMatMulAdd(qf[dd], kf, s);
                }
                coopMatStore(s, s_buf, s_base + j * R / 4u, LDS4, gl_CooperativeMatrixLayoutRowMajor);
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            // The online softmax of this lane's row over its CPL columns from c0, read and
            // written a vec4 at a time.
            uint c0 = part * CPL;
            vec4 sv[CPL / 4u];
            float mx = m;
            [[unroll]] for (uint i = 0u; i < CPL / 4u; i++) {
                sv[i] = s_buf[s_base + row * LDS4 + c0 / 4u + i];
                [[unroll]] for (uint k = 0u; k < 4u; k++) {
                    uint col = j0 + c0 + 4u * i + k;
                    mx = col >= lo && col < hi ? max(mx, sv[i][k]) : mx;
                }
            }
            for (uint o_ = 1u; o_ < LPR; o_ <<= 1u) {
                mx = max(mx, subgroupShuffleXor(mx, o_));
            }
            float alpha = exp2(m - mx);
            m = mx;
            float sum = 0.0;
            [[unroll]] for (uint i = 0u; i < CPL / 4u; i++) {
                vec4 pv;
                [[unroll]] for (uint k = 0u; k < 4u; k++) {
                    // Masked entries are zero outright: their scores are not below m.
                    uint col = j0 + c0 + 4u * i + k;
                    pv[k] = col >= lo && col < hi ? exp2(sv[i][k] - mx) : 0.0;
                }
                p_buf[p_base + row * LDP4 + c0 / 4u + i] = f16vec4(pv);
                sum += pv.x + pv.y + pv.z + pv.w;
            }
            l = l * alpha + sum;
            // O = O * alpha + P V.
            coopmat<float, gl_ScopeSubgroup, R, R, gl_MatrixUseAccumulator> fa = row_factors(alpha, row, part);
            [[unroll]] for (uint j = 0u; j < DM / R; j++) {
                o[j] = o[j] * fa;
            }
            [[unroll]] for (uint kk = 0u; kk < BC / R; kk++) {
                coopmat<float16_t, gl_ScopeSubgroup, R, R, gl_MatrixUseA> pa;
                coopMatLoad(pa, p_buf, p_base + kk * R / 4u, LDP4, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint j = 0u; j < DM / R; j++) {
                    coopmat<float16_t, gl_ScopeSubgroup, R, R, gl_MatrixUseB> vf;
                    coopMatLoad(vf, v_tile, kk * R * LDK4 + j * R / 4u, LDK4, gl_CooperativeMatrixLayoutRowMajor);
                    o[j] = coopMatMulAdd(pa, vf, o[j]);
                }
            }
        }
        // The row's sum over its lanes, then O / sum through the shared patch.
        for (uint o_ = 1u; o_ < LPR; o_ <<= 1u) {
            l += subgroupShuffleXor(l, o_);
        }
        coopmat<float, gl_ScopeSubgroup, R, R, gl_MatrixUseAccumulator> fi = row_factors(l > 0.0 ? 1.0 / l : 0.0, row, part);
        uint db = p.d_off + h * p.d_nb1;
        [[unroll]] for (uint j = 0u; j < DM / R; j++) {
            coopMatStore(o[j] * fi, s_buf, s_base, LDS4, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            // A value, or a pair of values (R and hd are even), per lane at a time.
            uint per = p.d_f16 != 0u ? 2u : 1u;
            for (uint e = lane * per; e < R * R; e += SUB * per) {
                uint r = e / R;
                uint c = j * R + e % R;
                uint t = t0 + sg_query + r;
                vec4 quad = s_buf[s_base + r * LDS4 + (e % R) / 4u];
                uint k = e % 4u; // even with pairs: the pair is in the same quad
                if (t < n_q && c < hd && per == 2u) {
                    d_half2[(db + t * p.d_nb2 + c) >> 1u] = packHalf2x16(vec2(quad[k], quad[k + 1u]));
                } else if (t < n_q && c < hd) {
                    d[db + t * p.d_nb2 + c] = quad[k];
                }
            }
            subgroupBarrier();
        }
    }
}

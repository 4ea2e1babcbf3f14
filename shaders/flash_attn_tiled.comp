#version 450
// Fused attention for many queries: out[:, h, t] = softmax(q[:, h, t] . k[:, kh, j] * scale
// over j) v[:, kh, j], kh = h / (heads / kv_heads), as flash_attn.comp computes it, but one
// workgroup per tile of BR queries of one head: each K and V row is read once per query tile
// instead of once per query. Causal with slots (query t sees kv rows 0..=slots[t], each query
// its own limit); otherwise every kv row (the run-time length). Push constants and bindings are
// flash_attn.comp's.
//
// Per tile of BC kv rows, through shared memory:
//   S = Q K^T (BR x BC), each of the 64 threads an RM x CN block of it in registers;
//   the online softmax per query row: the tile's row maximum from the threads' partial ones
//   (red), p = exp2(s - m) (Q is pre-scaled by scale * log2 e), O and the running sum rescaled
//   by exp2(m_old - m_new); P goes to shared memory;
//   O += P V, each thread an RM x (4 DV) block of O in registers.
// Two barriers per kv tile: K and V have buffers of their own, so the next K tile and this V
// tile load while P is written, between the two. The running sum stays a per-thread partial
// (over the thread's own columns) until the end, where one reduction finishes it.
// All arithmetic is f32. The tile sizes are specialization constants, chosen per head_dim
// class on the host (kernels/attn.rs, AttnTile) to fit 32 KiB of shared memory.

#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint BR = 32u; // queries per tile
layout(constant_id = 1) const uint BC = 32u; // kv rows per tile
layout(constant_id = 2) const uint DM = 64u; // head_dim class: head_dim <= DM, DM % 32 == 0

// Threads as TY rows by TX columns: thread (ty, tx) owns query rows ty * RM .. + RM, the S
// columns tx + TX * c and the O columns (vec4s) tx + TX * v. Neighbouring threads read
// neighbouring K rows (padded: no bank conflicts) and neighbouring V vec4s.
const uint TX = 8u;
const uint TY = 8u;
const uint RM = BR / TY;
const uint CN = BC / TX;
const uint DM4 = DM / 4u;
const uint DV = DM4 / TX;
const uint KROW = DM4 + 1u; // vec4s per K row in shared memory (one of padding)
const uint PROW = BC + 1u;  // floats per P row
const float NEG = -1.0e30;  // below any score, finite: exp2(NEG - NEG) must not be NaN
#define ATTN_TILE_ROWS BR

layout(set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(set = 0, binding = 4) readonly buffer Slots { int slots[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };

#include "flash_attn_params.glsl"
#define KV_CONSTANT 3
#include "attn_kv.glsl"

shared vec4 qs[BR * DM4];
shared vec4 ks[BC * KROW];
shared vec4 vs[BC * DM4];
shared float ps[BR * PROW];
shared float red[BR * TX];

// BC rows of K (or V) from kv row `row0` into ks (vs), zeros past `rows` rows and past head_dim
// (the loops below run over whole tiles and vec4s); neighbouring threads read neighbouring
// floats of a row.
void load_k(uint base, uint row0, uint rows, uint hd) {
    for (uint e = gl_LocalInvocationID.x; e < BC * DM; e += 64u) {
        uint r = e / DM;
        uint i = e % DM;
        ks[r * KROW + i / 4u][i % 4u] = r < rows && i < hd ? kv_at(true, base + (row0 + r) * p.k_nb2 + i) : 0.0;
    }
}

void load_v(uint base, uint row0, uint rows, uint hd) {
    for (uint e = gl_LocalInvocationID.x; e < BC * DM; e += 64u) {
        uint r = e / DM;
        uint i = e % DM;
        vs[r * DM4 + i / 4u][i % 4u] = r < rows && i < hd ? kv_at(false, base + (row0 + r) * p.v_nb2 + i) : 0.0;
    }
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint tid = gl_LocalInvocationID.x;
    uint tx = tid % TX;
    uint ty = tid / TX;
    uint hd = ne.x;
    uint hd4 = (hd + 3u) / 4u;
    uint heads = ne.y;
    uint n_q = ne.z;
    uint group = heads / p.kv_heads;
    uint n_kv_all = kv_rows();
    float qscale = p.scale * 1.4426950408889634; // log2(e): the softmax runs on exp2
    uint tiles = (n_q + BR - 1u) / BR;
    // Heads vary fastest: the heads sharing a kv head run side by side and share its K and V
    // in the caches.
    for (uint wi = gl_WorkGroupID.x; wi < heads * tiles; wi += gl_NumWorkGroups.x) {
        uint h = wi % heads;
        uint t0 = (wi / heads) * BR;
        uint kb = p.k_off + (h / group) * p.k_nb1;
        uint vb = p.v_off + (h / group) * p.v_nb1;
        // The tile's first chunk of kv rows (every thread finds it alike, so the loop below
        // is uniform across the workgroup).
        tile_spans(t0, BR, n_q, n_kv_all);
        uvec2 chunk = next_chunk(0u, BC);
        uint lim[RM];
        uint fst[RM];
        for (uint i = 0u; i < RM; i++) {
            lim[i] = limit(t0 + ty * RM + i, n_q, n_kv_all);
            fst[i] = first(t0 + ty * RM + i, n_q, n_kv_all);
        }
        uint qb = p.q_off + h * p.q_nb1;
        for (uint e = tid; e < BR * DM; e += 64u) {
            uint r = e / DM;
            uint i = e % DM;
            uint t = t0 + r;
            qs[r * DM4 + i / 4u][i % 4u] = t < n_q && i < hd ? q[qb + t * p.q_nb2 + i] * qscale : 0.0;
        }
        load_k(kb, chunk.x, chunk.y, hd);
        barrier();

        float m[RM];
        float l[RM];
        vec4 acc[RM * DV];
        for (uint i = 0u; i < RM; i++) {
            m[i] = NEG;
            l[i] = 0.0;
            for (uint c = 0u; c < DV; c++) {
                acc[i * DV + c] = vec4(0.0);
            }
        }
        while (chunk.y > 0u) {
            uint j0 = chunk.x;
            // The chunk's own rows: its tail of BC may hold rows of the next span, which the
            // next chunk takes.
            uint j_end = j0 + chunk.y;
            // S = Q K^T for this thread's block.
            float s[RM * CN];
            for (uint x = 0u; x < RM * CN; x++) {
                s[x] = 0.0;
            }
            for (uint i4 = 0u; i4 < hd4; i4++) {
                vec4 qv[RM];
                for (uint i = 0u; i < RM; i++) {
                    qv[i] = qs[(ty * RM + i) * DM4 + i4];
                }
                for (uint c = 0u; c < CN; c++) {
                    vec4 kv = ks[(tx + TX * c) * KROW + i4];
                    for (uint i = 0u; i < RM; i++) {
                        s[i * CN + c] += dot(qv[i], kv);
                    }
                }
            }
            // Each thread's maximum over its own columns, then the row's over the TX threads.
            for (uint i = 0u; i < RM; i++) {
                float mx = NEG;
                for (uint c = 0u; c < CN; c++) {
                    uint j = j0 + tx + TX * c;
                    if (j >= fst[i] && j < min(lim[i], j_end)) {
                        mx = max(mx, s[i * CN + c]);
                    }
                }
                red[(ty * RM + i) * TX + tx] = mx;
            }
            barrier();
            float alpha[RM];
            for (uint i = 0u; i < RM; i++) {
                uint row = ty * RM + i;
                float mx = m[i];
                for (uint x = 0u; x < TX; x++) {
                    mx = max(mx, red[row * TX + x]);
                }
                alpha[i] = exp2(m[i] - mx);
                m[i] = mx;
                float sum = 0.0;
                for (uint c = 0u; c < CN; c++) {
                    uint col = tx + TX * c;
                    // Masked entries are zero outright: their scores are not below m.
                    float pj = j0 + col >= fst[i] && j0 + col < min(lim[i], j_end) ? exp2(s[i * CN + c] - mx) : 0.0;
                    ps[row * PROW + col] = pj;
                    sum += pj;
                }
                l[i] = l[i] * alpha[i] + sum;
            }
            // Every thread is past its S (K read) and its previous O += P V (V and P read).
            load_v(vb, j0, chunk.y, hd);
            chunk = next_chunk(j0 + chunk.y, BC);
            if (chunk.y > 0u) {
                load_k(kb, chunk.x, chunk.y, hd);
            }
            barrier();
            // O = O * alpha + P V (P is zero past the tile's rows and V zero-filled there).
            for (uint i = 0u; i < RM; i++) {
                for (uint c = 0u; c < DV; c++) {
                    acc[i * DV + c] *= alpha[i];
                }
            }
            for (uint j = 0u; j < BC; j++) {
                vec4 vv[DV];
                for (uint c = 0u; c < DV; c++) {
                    vv[c] = vs[j * DM4 + tx + TX * c];
                }
                for (uint i = 0u; i < RM; i++) {
                    float pj = ps[(ty * RM + i) * PROW + j];
                    for (uint c = 0u; c < DV; c++) {
                        acc[i * DV + c] += pj * vv[c];
                    }
                }
            }
        }
        // The rows' sums over the TX threads' partial ones. red was last read before the
        // last barrier (or, with no kv tile, before this work item's first one).
        for (uint i = 0u; i < RM; i++) {
            red[(ty * RM + i) * TX + tx] = l[i];
        }
        barrier();
        for (uint i = 0u; i < RM; i++) {
            uint row = ty * RM + i;
            uint t = t0 + row;
            float total = 0.0;
            for (uint x = 0u; x < TX; x++) {
                total += red[row * TX + x];
            }
            if (t < n_q) {
                uint db = p.d_off + h * p.d_nb1 + t * p.d_nb2;
                float inv = total > 0.0 ? 1.0 / total : 0.0;
                for (uint c = 0u; c < DV; c++) {
                    uint i0 = 4u * (tx + TX * c);
                    vec4 o = acc[i * DV + c] * inv;
                    for (uint e = 0u; e < 4u; e++) {
                        if (i0 + e < hd) {
                            d[db + i0 + e] = o[e];
                        }
                    }
                }
            }
        }
    }
}

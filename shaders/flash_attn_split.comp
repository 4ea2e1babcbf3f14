#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
// Attention for a few queries over a long context (decode steps): the kv rows of each (head,
// query) are split over up to `splits` workgroups, so that a long cache streams through the
// whole GPU instead of one workgroup per (head, query). Each workgroup runs an online softmax
// over its range (a subgroup per row at a time, lanes along head_dim, rows strided over the
// workgroup's subgroups), combines its subgroups, and writes (max, sum, unnormalized output)
// to scratch; the last workgroup of a (head, query) to finish (an atomic counter) combines the
// splits into the output and resets the counter for the next run. Same inputs and push
// constants as flash_attn.comp, plus the split count; head_dim <= 256, a multiple of 4, and K
// and V in whole vec4s (offsets and strides multiples of 4 values, as a cache's are): a lane's
// values of a row are one load. A fallback for other rows (four loads) cost registers: the f16
// module took 71 on the H100 against the f32 one's 64: 7 workgroups a multiprocessor instead of
// 8, too few to hold the 1,024 of a decode step after 4,096 tokens at once (51 us a layer
// against 40).
// A subgroup takes AT_ONCE rows per step, the loads of their k (then v) rows issued together, and the
// combine weighs each split once (a thread per split): a decode step waits on chains of
// loads, not on bytes.

#include "common.glsl"

#define WG 128u
// vec4s of head_dim per lane: by default head_dim <= 256 over subgroups of at least 8 lanes;
// the narrow module (-DMAXV=2u) takes heads of up to 8 x the subgroup size in far fewer
// registers, so that more workgroups stay resident to hide the loads (a decode step over 4,096
// rows on the H200: 57 -> 37 us per layer).
#ifndef MAXV
#define MAXV 8u
#endif
// Subgroups per workgroup: at most WG / 8.
#define MAXSG (WG / 8u)
// Fewest kv rows a split takes: shorter contexts use fewer splits.
#define MIN_CHUNK 16u
// Rows a subgroup takes per step. On the H200 (2B shape, decode after 4,096 tokens) 8, 16 or 32
// rows with the v rows' loads issued beside the k rows', in a module of one vec4 a lane, were
// no faster (8: 281.7 against 283.6 tok/s) or slower (16: 237.1, 32: 201.3): resident
// workgroups, not loads in flight per lane, set this kernel's pace. Nor do the grouped heads'
// repeated reads of the same rows: a workgroup taking both heads of a kv head (each row read
// once for them, 100 registers against fewer) was slower there at every depth (tg128 381 against
// 399, tg64 after 1,024 tokens 317.5 against 328.5, after 4,096 277.5 against 282.2).
#define AT_ONCE 4u
// Most splits (kernels/attn.rs MAX_SPLITS; the launch gives at most 32 by default, DEFAULT_SPLITS):
// one combine weight each, at most one per thread.
// 128 (splits of 32 rows after 4,096 tokens) measured slower on the H200: 272.6 against 286.8
// tok/s.
#define MAX_SPLITS 64u
// Workgroups with rows to take that fill the GPU: a step of many queries (sequences decoded
// together) gives each (head, query) fewer, longer splits, one query all `splits` (the H200 at
// 32 sequences: 4 splits take a step of 10.9 ms in 10.3 ms; one sequence: 64 are 9 % faster than 4).
#define BUSY_ITEMS 2048u

layout(local_size_x = 128) in;

layout(set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(set = 0, binding = 4) readonly buffer Slots { int slots[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };
// Partial results of every split, then a counter per (query, head): see the push constants.
layout(set = 0, binding = 6) coherent buffer S { float scratch[]; };
layout(set = 0, binding = 6) coherent buffer SU { uint scratch_u[]; };

#define ATTN_SPLITS
#include "flash_attn_params.glsl"
#define KV_CONSTANT 0
#include "attn_kv.glsl"

shared float sh_o[MAXSG * 256u];
shared float sh_m[MAXSG];
shared float sh_l[MAXSG];
shared float sh_w[MAX_SPLITS];
shared bool sh_last;

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint tid = gl_LocalInvocationID.x;
    uint lane = gl_SubgroupInvocationID;
    uint sg = gl_SubgroupID;
    uint nsg = gl_NumSubgroups;
    uint hd = ne.x;
    uint group = ne.y / p.kv_heads;
    // One record per (query, head, split): max, sum, head_dim output values; then the counters.
    uint rs = 2u + p.ne.x;
    uint counters = p.ne.y * p.ne.z * p.splits * rs;
    uint n_kv_all = kv_rows();
    uint items = ne.y * ne.z * p.splits;
    for (uint wi = gl_WorkGroupID.x; wi < items; wi += gl_NumWorkGroups.x) {
        uint s = wi % p.splits;
        uint hq = wi / p.splits;
        uint h = hq % ne.y;
        uint t = hq / ne.y;
        uint kh = h / group;
        uint n_kv = limit(t, ne.z, n_kv_all);
        // The query's own rows (its sequence's) are split.
        uint j_first = first(t, ne.z, n_kv_all);
        uint len = n_kv - j_first;
        // Splits of at least MIN_CHUNK rows: a short context takes fewer (the others skip).
        uint wanted = clamp(BUSY_ITEMS / (ne.y * ne.z), 1u, p.splits);
        uint chunk = max(MIN_CHUNK, (len + wanted - 1u) / wanted);
        uint n_splits = max(1u, (len + chunk - 1u) / chunk);
        if (s >= n_splits) {
            continue;
        }
        uint j0 = j_first + s * chunk;
        uint j1 = min(j0 + chunk, n_kv);
        uint qb = p.q_off + h * p.q_nb1 + t * p.q_nb2;
        vec4 qv[MAXV];
        vec4 o[MAXV];
        for (uint i = 0u; i < MAXV; i++) {
            uint c = 4u * (lane + i * gl_SubgroupSize);
            qv[i] = c < hd ? vec4(q[qb + c], q[qb + c + 1u], q[qb + c + 2u], q[qb + c + 3u]) * p.scale : vec4(0.0);
            o[i] = vec4(0.0);
        }
        float m = -1.0e30;
        float l = 0.0;
        uint kb = p.k_off + kh * p.k_nb1;
        uint vb = p.v_off + kh * p.v_nb1;
        for (uint j = j0 + sg; j < j1; j += AT_ONCE * nsg) {
            // Rows j, j + nsg, ...: the ones past j1 repeat row j and weigh nothing.
            uint jr[AT_ONCE];
            float sc[AT_ONCE];
            [[unroll]] for (uint r = 0u; r < AT_ONCE; r++) {
                jr[r] = j + r * nsg < j1 ? j + r * nsg : j;
                sc[r] = 0.0;
            }
            [[unroll]] for (uint i = 0u; i < MAXV; i++) {
                uint c = 4u * (lane + i * gl_SubgroupSize);
                if (c < hd) {
                    [[unroll]] for (uint r = 0u; r < AT_ONCE; r++) {
                        sc[r] += dot(qv[i], kv4_at(true, kb + jr[r] * p.k_nb2 + c));
                    }
                }
            }
            [[unroll]] for (uint r = 0u; r < AT_ONCE; r++) {
                sc[r] = subgroupAdd(sc[r]);
            }
            float m_new = m;
            [[unroll]] for (uint r = 0u; r < AT_ONCE; r++) {
                if (j + r * nsg < j1) {
                    m_new = max(m_new, sc[r]);
                }
            }
            float alpha = exp(m - m_new);
            float pj[AT_ONCE];
            l *= alpha;
            [[unroll]] for (uint r = 0u; r < AT_ONCE; r++) {
                pj[r] = j + r * nsg < j1 ? exp(sc[r] - m_new) : 0.0;
                l += pj[r];
            }
            [[unroll]] for (uint i = 0u; i < MAXV; i++) {
                uint c = 4u * (lane + i * gl_SubgroupSize);
                if (c < hd) {
                    vec4 acc = o[i] * alpha;
                    [[unroll]] for (uint r = 0u; r < AT_ONCE; r++) {
                        acc += pj[r] * kv4_at(false, vb + jr[r] * p.v_nb2 + c);
                    }
                    o[i] = acc;
                }
            }
            m = m_new;
        }
        // This workgroup's subgroups combined into its split's record.
        if (lane == 0u) {
            sh_m[sg] = m;
            sh_l[sg] = l;
        }
        for (uint i = 0u; i < MAXV; i++) {
            uint c = 4u * (lane + i * gl_SubgroupSize);
            if (c < hd) {
                for (uint e = 0u; e < 4u; e++) {
                    sh_o[sg * 256u + c + e] = o[i][e];
                }
            }
        }
        barrier();
        float mw = -1.0e30;
        for (uint i = 0u; i < nsg; i++) {
            mw = max(mw, sh_m[i]);
        }
        uint rec = ((t * p.ne.y + h) * p.splits + s) * rs;
        if (tid == 0u) {
            float lw = 0.0;
            for (uint i = 0u; i < nsg; i++) {
                lw += sh_l[i] * exp(sh_m[i] - mw);
            }
            scratch[rec] = mw;
            scratch[rec + 1u] = lw;
        }
        for (uint c = tid; c < hd; c += WG) {
            float ow = 0.0;
            for (uint i = 0u; i < nsg; i++) {
                ow += sh_o[i * 256u + c] * exp(sh_m[i] - mw);
            }
            scratch[rec + 2u + c] = ow;
        }
        // Publish the record, then count it; the last of the (head, query) combines them all.
        memoryBarrierBuffer();
        barrier();
        uint counter = counters + t * p.ne.y + h;
        if (tid == 0u) {
            sh_last = atomicAdd(scratch_u[counter], 1u) == n_splits - 1u;
        }
        barrier();
        if (sh_last) {
            memoryBarrierBuffer();
            uint base = (t * p.ne.y + h) * p.splits * rs;
            // Each split's weight exp(m_i - max) / sum, a thread per split (n_splits <= WG).
            float mi = tid < n_splits ? scratch[base + tid * rs] : -1.0e30;
            float mt = subgroupMax(mi);
            if (lane == 0u) {
                sh_m[sg] = mt;
            }
            barrier();
            for (uint i = 0u; i < nsg; i++) {
                mt = max(mt, sh_m[i]);
            }
            float li = tid < n_splits ? scratch[base + tid * rs + 1u] * exp(mi - mt) : 0.0;
            float lt = subgroupAdd(li);
            if (lane == 0u) {
                sh_l[sg] = lt;
            }
            barrier();
            lt = 0.0;
            for (uint i = 0u; i < nsg; i++) {
                lt += sh_l[i];
            }
            if (tid < n_splits) {
                sh_w[tid] = lt > 0.0 ? exp(mi - mt) / lt : 0.0;
            }
            barrier();
            uint db = p.d_off + h * p.d_nb1 + t * p.d_nb2;
            for (uint c = tid; c < hd; c += WG) {
                // Four splits' loads at a time.
                float ot = 0.0;
                uint i = 0u;
                for (; i + 4u <= n_splits; i += 4u) {
                    uint at = base + i * rs + 2u + c;
                    ot += scratch[at] * sh_w[i] + scratch[at + rs] * sh_w[i + 1u] + scratch[at + 2u * rs] * sh_w[i + 2u]
                        + scratch[at + 3u * rs] * sh_w[i + 3u];
                }
                for (; i < n_splits; i++) {
                    ot += scratch[base + i * rs + 2u + c] * sh_w[i];
                }
                d[db + c] = ot;
            }
            if (tid == 0u) {
                scratch_u[counter] = 0u;
            }
        }
        barrier();
    }
}

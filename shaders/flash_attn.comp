#version 450
// Fused attention: out[:, h, t] = softmax(q[:, h, t] . k[:, kh, j] * scale over j) v[:, kh, j],
// kh = h / (heads / kv_heads) (grouped K/V heads). Causal with slots: query t sees kv rows
// first(t)..=slots[t] (its sequence's); otherwise every kv row (the run-time length). One workgroup per (head, query),
// kv rows in chunks of WG with an online softmax (running max and sum), head_dim <= 256.

#include "common.glsl"

#define WG 128u
#define PER (256u / WG)
layout(local_size_x = 128) in;

layout(set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(set = 0, binding = 4) readonly buffer Slots { int slots[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };

#include "flash_attn_params.glsl"
#define KV_CONSTANT 0
#include "attn_kv.glsl"

// K rows are staged through shared memory KS dimensions at a time, read by neighbouring
// threads from neighbouring addresses (a thread per key reading its own row directly would
// touch a different cache line per thread); rows padded by one float against bank conflicts.
#define KS 32u
shared float ks[WG * (KS + 1u)];
shared float qs[256];
shared float ps[WG];
shared float red[WG];

float reduce(float x, uint tid, bool is_max) {
    red[tid] = x;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red[tid] = is_max ? max(red[tid], red[tid + s]) : red[tid] + red[tid + s];
        }
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint tid = gl_LocalInvocationID.x;
    uint hd = ne.x;
    uint group = ne.y / p.kv_heads;
    uint n_kv_all = kv_rows();
    for (uint wi = gl_WorkGroupID.x; wi < ne.y * ne.z; wi += gl_NumWorkGroups.x) {
        uint h = wi % ne.y;
        uint t = wi / ne.y;
        uint kh = h / group;
        uint n_kv = limit(t, ne.z, n_kv_all);
        uint j_first = first(t, ne.z, n_kv_all);
        uint qb = p.q_off + h * p.q_nb1 + t * p.q_nb2;
        for (uint i = tid; i < hd; i += WG) {
            qs[i] = q[qb + i];
        }
        barrier();
        uint kb = p.k_off + kh * p.k_nb1;
        uint vb = p.v_off + kh * p.v_nb1;
        float m = -1.0e30;
        float l = 0.0;
        float acc[PER];
        for (uint c = 0u; c < PER; c++) {
            acc[c] = 0.0;
        }
        for (uint j0 = j_first; j0 < n_kv; j0 += WG) {
            uint j = j0 + tid;
            uint rows = min(WG, n_kv - j0);
            float dot_qk = 0.0;
            for (uint i0 = 0u; i0 < hd; i0 += KS) {
                for (uint e = tid; e < WG * KS; e += WG) {
                    uint r = e / KS;
                    uint i = i0 + e % KS;
                    ks[r * (KS + 1u) + e % KS] = r < rows && i < hd ? kv_at(true, kb + (j0 + r) * p.k_nb2 + i) : 0.0;
                }
                barrier();
                uint width = min(KS, hd - i0);
                for (uint i = 0u; i < width; i++) {
                    dot_qk += qs[i0 + i] * ks[tid * (KS + 1u) + i];
                }
                barrier();
            }
            float s = j < n_kv ? dot_qk * p.scale : -1.0e30;
            float m_new = max(m, reduce(s, tid, true));
            float pj = j < n_kv ? exp(s - m_new) : 0.0;
            ps[tid] = pj;
            float alpha = exp(m - m_new);
            l = l * alpha + reduce(pj, tid, false);
            for (uint c = 0u; c < PER; c++) {
                uint i = tid + c * WG;
                if (i < hd) {
                    float a = acc[c] * alpha;
                    for (uint jj = 0u; jj < rows; jj++) {
                        a += ps[jj] * kv_at(false, vb + (j0 + jj) * p.v_nb2 + i);
                    }
                    acc[c] = a;
                }
            }
            m = m_new;
            barrier();
        }
        uint db = p.d_off + h * p.d_nb1 + t * p.d_nb2;
        for (uint c = 0u; c < PER; c++) {
            uint i = tid + c * WG;
            if (i < hd) {
                d[db + i] = l > 0.0 ? acc[c] / l : 0.0;
            }
        }
        barrier();
    }
}

// Shared by the attention kernels (flash_attn*.comp): their push constants, and which kv rows a
// query sees. A kernel declares the slots (binding 4) before including this; flash_attn_split
// defines ATTN_SPLITS for its extra field.

layout(push_constant) uniform Params {
    uvec4 ne;       // output (= q) shape: head_dim, heads, queries, 1 (maximal)
    uvec4 dyn;      // dynamic axis of the output (common.glsl)
    uint q_off;     // q: offset, head stride, query stride (floats); unit stride along head_dim
    uint q_nb1;
    uint q_nb2;
    uint k_off;     // k: offset, head stride, row stride
    uint k_nb1;
    uint k_nb2;
    uint v_off;
    uint v_nb1;
    uint v_nb2;
    uint d_off;
    uint d_nb1;
    uint d_nb2;
    uint kv_heads;
    uint n_kv;      // kv rows (maximal)
    uint kv_sym;    // the kv rows' run-time length: syms[kv_sym] * kv_num / kv_den;
    uint kv_num;    // kv_sym 0xFFFFFFFF: static
    uint kv_den;
    uint s_off;     // slots offset (ints); 0xFFFFFFFF: no slots (not causal)
    float scale;
    uint segment;   // kv rows per sequence: a causal query sees its own sequence's rows;
                    // 0: the slots are spans, each query's first kv row and end
    uint d_f16;     // 1: the output holds f16 values, in pairs (flash_attn_cm only)
#if defined(ATTN_SPLITS)
    uint splits;    // most workgroups per (head, query)
#endif
} p;

// The kv rows there are at run time.
uint kv_rows() {
    if (p.kv_sym == 0xFFFFFFFFu) {
        return p.n_kv;
    }
    return min(p.n_kv, syms[p.kv_sym] * p.kv_num / p.kv_den);
}

// The first kv row query t sees: its sequence's first, or its span's (0 past the run-time query
// count n_q).
uint first(uint t, uint n_q, uint n_kv) {
    if (t >= n_q || p.s_off == 0xFFFFFFFFu) {
        return 0u;
    }
    if (p.segment == 0u) {
        return uint(clamp(slots[p.s_off + 2u * t], 0, int(n_kv)));
    }
    int s = slots[p.s_off + t];
    if (s < 0) {
        return 0u;
    }
    uint f = uint(s) - uint(s) % p.segment;
    return min(f, n_kv);
}

// The end of the kv rows query t sees of n_kv (0 past the run-time query count n_q).
uint limit(uint t, uint n_q, uint n_kv) {
    if (t >= n_q) {
        return 0u;
    }
    if (p.s_off == 0xFFFFFFFFu) {
        return n_kv;
    }
    if (p.segment == 0u) {
        return uint(clamp(slots[p.s_off + 2u * t + 1u], 0, int(n_kv)));
    }
    return uint(clamp(slots[p.s_off + t] + 1, 0, int(n_kv)));
}

#if defined(ATTN_TILE_ROWS)
// The kv rows a tile of ATTN_TILE_ROWS queries needs are spans, one per sequence of its queries
// (a sequence's queries come together, in slot order): from the sequence's first row to the most
// any of its queries sees. tile_spans finds them once per tile, into shared memory; next_chunk
// walks them. A chunk never reaches past its span, so a tile straddling two sequences reads
// neither the rows between their spans (unwritten, perhaps not even finite) nor any row twice.
shared uint span_first[ATTN_TILE_ROWS];
shared uint span_end[ATTN_TILE_ROWS];
shared uint span_count;

// The spans of queries t0 .. t0 + rows - 1 (of n_q; rows <= ATTN_TILE_ROWS): every query's first
// row and end, then (one thread) queries that see nothing dropped and runs with the same first
// row merged. Every thread of the workgroup calls it, past the previous tile's last next_chunk.
void tile_spans(uint t0, uint rows, uint n_q, uint n_kv) {
    barrier();
    for (uint r = gl_LocalInvocationIndex; r < rows; r += gl_WorkGroupSize.x) {
        span_first[r] = first(t0 + r, n_q, n_kv);
        span_end[r] = limit(t0 + r, n_q, n_kv);
    }
    barrier();
    if (gl_LocalInvocationIndex == 0u) {
        // In place: entry n is written only after entry r >= n was read.
        uint n = 0u;
        for (uint r = 0u; r < rows; r++) {
            uint f = span_first[r];
            uint e = span_end[r];
            if (f >= e) {
                continue;
            }
            if (n > 0u && span_first[n - 1u] == f) {
                span_end[n - 1u] = max(span_end[n - 1u], e);
            } else {
                span_first[n] = f;
                span_end[n] = e;
                n++;
            }
        }
        span_count = n;
    }
    barrier();
}

// The next chunk of at most `bc` kv rows of the tile's spans from row j on: its first row and
// its rows (0 rows: none left). Alike in every thread.
uvec2 next_chunk(uint j, uint bc) {
    uint start = 0xFFFFFFFFu;
    uint end = 0u;
    for (uint i = 0u; i < span_count; i++) {
        uint e = span_end[i];
        if (e > j) {
            uint s = max(span_first[i], j);
            if (s < start) {
                start = s;
                end = e;
            } else if (s == start) {
                end = max(end, e);
            }
        }
    }
    return start < end ? uvec2(start, min(bc, end - start)) : uvec2(0u);
}
#endif

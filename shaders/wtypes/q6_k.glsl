// Q6_K (210 bytes per 256 values): ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16]
// (i8), d (f16). Value v: half n = v / 128, quarter t = (v % 128) / 32, l = v % 32;
// low bits: nibble (t >= 2 ? high : low) of ql[64n + 32(t & 1) + l]; high bits: bits 2t..2t+1
// of qh[32n + l]; scale scales[8n + l / 16 + 2t]; value = d * scale * (q - 32)
// (ggml's dequantize_row_q6_K).
// Rows of a multiple of 1,024 values (W_ROW_VALUES, which the kernel defines) are stored by
// quads on the device (src/backend/vulkan/weight_layout.rs): each run of four blocks as their
// ql (4 x 128 bytes), qh (4 x 64), scales (4 x 16) and d (4 x 2).
#define W_BLOCK 256u

// Whether rows are stored by quads.
bool q6_k_quads() {
    return W_ROW_VALUES % 1024u == 0u;
}

// The byte offsets of block b's ql, qh, scales and d in the row at byte `row`.
uvec4 q6_k_block(uint row, uint b) {
    if (q6_k_quads()) {
        uint quad = row + (b / 4u) * 840u;
        uint q = b % 4u;
        return uvec4(quad + 128u * q, quad + 512u + 64u * q, quad + 768u + 16u * q, quad + 832u + 2u * q);
    }
    uint blk = row + b * 210u;
    return uvec4(blk, blk + 128u, blk + 192u, blk + 208u);
}

vec4 load_w4(uint row, uint k) {
    uvec4 blk = q6_k_block(row, k / 256u);
    uint v = k % 256u;
    uint n = v / 128u;
    uint t = (v % 128u) / 32u;
    uint l = v % 32u;
    uint lo = load_u32(blk.x + 64u * n + 32u * (t & 1u) + l);
    if (t >= 2u) {
        lo >>= 4u;
    }
    lo &= 0x0F0F0F0Fu;
    uint hi = (load_u32(blk.y + 32u * n + l) >> (2u * t)) & 0x03030303u;
    uint q = lo | (hi << 4u);
    vec4 qf = u8x4(q) - 32.0;
    float d = load_f16(blk.w);
    float sc = float(int(load_u8(blk.z + 8u * n + l / 16u + 2u * t) << 24) >> 24);
    return (d * sc) * qf;
}

float load_w1(uint row, uint k) {
    return load_w4(row, k & ~3u)[k & 3u];
}

#if defined(W16)
// A chunk (half n, quarter t, values l0..l0+15 of it): 16 bytes of ql and 16 of qh, each read
// as the five words around them (blocks are 210 bytes: 2-byte aligned; the fifth word is still
// inside the block), and the words holding its scale and d.
#define W16_RAW 3u

void q6_k_chunk(uint row, uint k, out uint ql, out uint qh, out uint sc, out uint d) {
    uvec4 blk = q6_k_block(row, k / 256u);
    uint v = k % 256u;
    uint n = v / 128u;
    uint t = (v % 128u) / 32u;
    uint l0 = v % 32u;
    ql = blk.x + 64u * n + 32u * (t & 1u) + l0;
    qh = blk.y + 32u * n + l0;
    sc = blk.z + 8u * n + l0 / 16u + 2u * t;
    d = blk.w;
}

void fetch16(uint row, uint k, out uvec4 raw[W16_RAW]) {
    uint ql, qh, sc, d;
    q6_k_chunk(row, k, ql, qh, sc, d);
    uint a = ql >> 2u;
    uint b = qh >> 2u;
    raw[0] = uvec4(w[a], w[a + 1u], w[a + 2u], w[a + 3u]);
    raw[1] = uvec4(w[b], w[b + 1u], w[b + 2u], w[b + 3u]);
    raw[2] = uvec4(w[a + 4u], w[b + 4u], w[sc >> 2u], w[d >> 2u]);
}

void decode16(uvec4 raw[W16_RAW], uint row, uint k, out vec4 v[4]) {
    uint ql, qh, sc, d;
    q6_k_chunk(row, k, ql, qh, sc, d);
    uint t = ((k % 256u) % 128u) / 32u;
    uvec4 lo = shift_words(raw[0], raw[2].x, 8u * (ql & 3u));
    uvec4 hi = shift_words(raw[1], raw[2].y, 8u * (qh & 3u));
    float scale = float(int(raw[2].z << (24u - 8u * (sc & 3u))) >> 24);
    float dv = unpackHalf2x16(raw[2].w >> (8u * (d & 3u))).x * scale;
    uint lsh = t >= 2u ? 4u : 0u;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        uint q = ((lo[i] >> lsh) & 0x0F0F0F0Fu) | (((hi[i] >> (2u * t)) & 0x03030303u) << 4u);
        v[i] = dv * (u8x4(q) - 32.0);
    }
}
#endif

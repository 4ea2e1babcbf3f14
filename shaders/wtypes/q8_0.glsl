// Q8_0 (34 bytes per 32 values): d (f16), qs[32] (i8); value = d * q.
#define W_BLOCK 32u

vec4 load_w4(uint row, uint k) {
    uint blk = row + (k / 32u) * 34u;
    float d = load_f16(blk);
    return d * i8x4(load_u32(blk + 2u + (k % 32u)));
}

float load_w1(uint row, uint k) {
    uint blk = row + (k / 32u) * 34u;
    return load_f16(blk) * float(int(load_u8(blk + 2u + (k % 32u)) << 24) >> 24);
}

#if defined(W16)
// A chunk (half of a 34-byte block): its 16 quants read as the five words around them (the
// fifth clamped to the buffer: past the last block it may lie outside), and the word holding d.
#define W16_RAW 2u

void fetch16(uint row, uint k, out uvec4 raw[W16_RAW]) {
    uint blk = row + (k / 32u) * 34u;
    uint a = (blk + 2u + k % 32u) >> 2u;
    uint last = uint(w.length()) - 1u;
    raw[0] = uvec4(w[a], w[a + 1u], w[a + 2u], w[a + 3u]);
    raw[1] = uvec4(w[min(a + 4u, last)], w[blk >> 2u], 0u, 0u);
}

void decode16(uvec4 raw[W16_RAW], uint row, uint k, out vec4 v[4]) {
    uint blk = row + (k / 32u) * 34u;
    uvec4 q = shift_words(raw[0], raw[1].x, 8u * ((blk + 2u + k % 32u) & 3u));
    float d = unpackHalf2x16(raw[1].y >> (8u * (blk & 3u))).x;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        v[i] = d * i8x4(q[i]);
    }
}
#endif

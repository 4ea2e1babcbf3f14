// The 6-bit scales and mins of Q4_K and Q5_K blocks: 12 bytes at block offset 4.
// Scale and min of sub-block s (ggml's get_scale_min_k4).
vec2 q4_k_scale_min(uint blk, uint s) {
    if (s < 4u) {
        return vec2(float(load_u8(blk + 4u + s) & 63u), float(load_u8(blk + 8u + s) & 63u));
    }
    uint lo = load_u8(blk + 8u + s);
    uint sc = (lo & 15u) | ((load_u8(blk + s) >> 6u) << 4u);
    uint m = (lo >> 4u) | ((load_u8(blk + 4u + s) >> 6u) << 4u);
    return vec2(float(sc), float(m));
}

// The same from the 12 scale bytes held as three words (scales[0..3], [4..7], [8..11]).
vec2 q4_k_scale_min_words(uvec3 sw, uint s) {
    uint i = 8u * (s % 4u);
    uint a = (sw[0] >> i) & 0xFFu;
    uint m = (sw[1] >> i) & 0xFFu;
    if (s < 4u) {
        return vec2(float(a & 63u), float(m & 63u));
    }
    uint b = (sw[2] >> i) & 0xFFu;
    return vec2(float((b & 15u) | ((a >> 6u) << 4u)), float((b >> 4u) | ((m >> 6u) << 4u)));
}

// d * scale and dmin * min of sub-block s, from a block's first 16 bytes (d, dmin, the scales).
vec2 q4_k_scale_bias(uvec4 head, uint s) {
    vec2 dm = unpackHalf2x16(head.x);
    vec2 sm = q4_k_scale_min_words(head.yzw, s);
    return vec2(dm.x * sm.x, dm.y * sm.y);
}

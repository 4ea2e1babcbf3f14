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

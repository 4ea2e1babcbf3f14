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

// F16 weights: value k of a row at byte row + 2k (rows may start 2-byte aligned).
#define W_BLOCK 1u

float load_w1(uint row, uint k) {
    return load_f16(row + 2u * k);
}

vec4 load_w4(uint row, uint k) {
    uint off = row + 2u * k;
    return vec4(unpackHalf2x16(load_u32(off)), unpackHalf2x16(load_u32(off + 4u)));
}

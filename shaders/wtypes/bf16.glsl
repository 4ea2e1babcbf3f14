// BF16 weights: value k of a row at byte row + 2k (rows may start 2-byte aligned); a bf16 is
// the top half of an f32.
#define W_BLOCK 1u

float load_w1(uint row, uint k) {
    return uintBitsToFloat(load_u16(row + 2u * k) << 16u);
}

vec4 load_w4(uint row, uint k) {
    uint off = row + 2u * k;
    uint a = load_u32(off);
    uint b = load_u32(off + 4u);
    return uintBitsToFloat(uvec4(a << 16u, a & 0xFFFF0000u, b << 16u, b & 0xFFFF0000u));
}

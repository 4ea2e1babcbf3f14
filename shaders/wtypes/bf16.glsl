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

#if defined(W16)
// A chunk: 32 bytes, two 16-byte words (fetch_halves16).
#define W16_RAW 2u

void fetch16(uint row, uint k, out uvec4 raw[W16_RAW]) {
    fetch_halves16(row, k, raw);
}

void decode16(uvec4 raw[W16_RAW], uint row, uint k, out vec4 v[4]) {
    [[unroll]] for (uint i = 0u; i < 2u; i++) {
        uvec4 a = raw[i];
        v[2u * i] = uintBitsToFloat(uvec4(a.x << 16u, a.x & 0xFFFF0000u, a.y << 16u, a.y & 0xFFFF0000u));
        v[2u * i + 1u] = uintBitsToFloat(uvec4(a.z << 16u, a.z & 0xFFFF0000u, a.w << 16u, a.w & 0xFFFF0000u));
    }
}
#endif
